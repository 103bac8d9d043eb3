"""docs/tour.md as a new user runs it: its sh block, as written, by bash from the repository
root, on each gang backend; its output holds what the tour says you should see, and its own
clean-up leaves no process behind.

Only the tour's own variables are set from outside: BACKEND, a free PORT (the suite runs other
webhooks), and a WORK dir of the test's (not the checkout's .kohort/dev). PYTHONPATH names this
checkout, so `.venv/bin/kohort` runs this checkout's code even where .venv belongs to another
checkout (a git worktree); in a plain checkout it is the path the editable install already has.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hack import processes
from hack.localcluster import free_port

ROOT = Path(__file__).resolve().parents[2]
TOUR = ROOT / "docs" / "tour.md"
KOHORT = ROOT / ".venv" / "bin" / "kohort"
# Each backend's run took about a minute on a loaded 2-core machine.
WITHIN_SECONDS = 240


def tour_block() -> str:
    blocks = re.findall(r"^```sh\n(.*?)^```$", TOUR.read_text(), re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1, "the tour has one sh block to run"
    return str(blocks[0])


def quoted_inadmissible_reason() -> str:
    """The reason the tour quotes for too-big, as one line."""
    quoted = re.findall(r'"(Inadmissible: [^"]+)"', TOUR.read_text())
    assert len(quoted) == 1
    return " ".join(quoted[0].split())


@dataclass(frozen=True)
class TourRun:
    backend: str
    returncode: int
    output: str
    survivors: list[str]  # processes of the block still running once it ended
    control_plane_left: list[str]  # processes of `dev up` still running once it ended

    def lines(self, pattern: str) -> list[re.Match[str]]:
        return [m for line in self.output.splitlines() if (m := re.fullmatch(pattern, line))]


def _group_members(pgid: int) -> list[str]:
    """The live processes of a process group (an exited one not yet reaped is not running)."""
    members = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            # /proc/PID/stat: "PID (COMM) STATE PPID PGRP ...", COMM may hold spaces
            stat = (proc / "stat").read_text()
            state, _, group = stat[stat.rindex(")") + 2 :].split()[:3]
            if int(group) == pgid and state != "Z":
                members.append((proc / "cmdline").read_text().replace("\0", " ")[:160])
    return members


def _still_running(work: Path) -> list[str]:
    state = work / "state.json"
    if not state.exists():
        return []
    pids: dict[str, int] = json.loads(state.read_text()).get("pids", {})
    return [name for name, pid in pids.items() if processes.pid_alive(pid)]


def run_tour(backend: str, scratch: Path, block: str | None = None) -> TourRun:
    """Runs the tour's block (or `block`, the same block with some commands swapped)."""
    work = scratch / "dev"
    env = {
        **os.environ,
        "BACKEND": backend,
        "PORT": str(free_port()),
        "WORK": str(work),
        "PYTHONPATH": str(ROOT),
    }
    env.pop("KUBECONFIG", None)
    log = scratch / "tour.out"
    with log.open("w") as out:
        # A process group of its own: the block's `&` jobs are in it, and go with it.
        shell = subprocess.Popen(
            ["bash", "-c", tour_block() if block is None else block],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        returncode = shell.wait(timeout=WITHIN_SECONDS)
        time.sleep(1)  # what `kill %1 %2` signalled has had time to exit
        survivors = _group_members(shell.pid)
        control_plane_left = _still_running(work)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()
        subprocess.run(
            [str(KOHORT), "dev", "down", "--work-dir", str(work)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            check=False,
            timeout=60,
        )
    return TourRun(backend, returncode, log.read_text(), survivors, control_plane_left)


@pytest.fixture(scope="module", params=["volcano", "kubernetes"])
def tour(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TourRun:
    if not KOHORT.exists():
        pytest.skip(f"the tour runs {KOHORT.relative_to(ROOT)}, which `make` installs")
    backend: str = request.param
    return run_tour(backend, tmp_path_factory.mktemp(f"tour-{backend}"))


@pytest.fixture
def output_on_failure(tour: TourRun) -> Iterator[None]:
    """The whole run in the report of a failed check."""
    yield
    print(tour.output)


pytestmark = pytest.mark.usefixtures("output_on_failure")


def test_the_tour_runs_to_its_end_and_leaves_no_process_behind(tour: TourRun) -> None:
    assert tour.returncode == 0
    assert tour.survivors == []
    assert tour.control_plane_left == []
    assert tour.lines(r"stopped: .*kube-apiserver.*"), "`dev down` stopped the plane it started"


def test_the_gang_is_admitted_by_team_a_and_its_4_pods_bound_on_the_planned_node(
    tour: TourRun,
) -> None:
    admitted = tour.lines(r"job-train-resnet\s+team-a\s+(\S+)\s+<none>")
    assert len(admitted) == 1
    planned = admitted[0][1].split(",")
    pods = tour.lines(r"(train-resnet-\S+)\s+(\S+)\s+(\S+)\s+(\S+)")
    assert len(pods) == 4
    assert {pod[2] for pod in pods} == set(planned), "bound where planned"
    assert len(planned) == 1, "the plan puts all 4 on one node"
    assert {pod[4] for pod in pods} == {"Running"}
    if tour.backend == "volcano":
        assert {pod[3] for pod in pods} == {"volcano"}
    assert not tour.lines(r"too-big-\S+\s+.*"), "none of too-big's pods"


def test_too_big_is_told_the_quoted_reason_on_its_workload_and_in_a_warning(
    tour: TourRun,
) -> None:
    reason = re.escape(quoted_inadmissible_reason())
    assert len(tour.lines(rf"job-too-big\s+<none>\s+<none>\s+{reason}")) == 1
    assert len(tour.lines(rf"\s*Warning\s+Inadmissible\s+\S+\s+kohort-controller\s+{reason}")) == 1


def test_team_a_has_1_admitted_and_1_pending(tour: TourRun) -> None:
    assert tour.lines(r"team-a\s+1\s+1")
    assert tour.lines(r"team-b\s+0\s+0")


def test_the_charts_pods_show_running_on_a_kwok_node(tour: TourRun) -> None:
    chart = tour.lines(r"(kohort-(?:controller|webhook)-\S+)\s+1/1\s+(\S+)\s+.*")
    assert sorted(m[1].split("-")[1] for m in chart) == ["controller", "webhook", "webhook"]
    assert {m[2] for m in chart} == {"Running"}
