"""The Volcano-without-enqueue baselines start every job when an independent simulator does.

bench/greedy_gang_fifo.py is written apart from the project (it reads the trace itself and
imports nothing of it) and states its rules; `gang-fifo-no-enqueue` must start each job of a
slice of Philly at the very second it does, spreading, and `gang-fifo-no-enqueue-binpack`
packing. The full month's agreement is printed by bench/bench_sim_baseline.py.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

from controller.simulate.loop import simulate
from controller.simulate.policies import Step, make_policy
from controller.simulate.traces import DEFAULT_TRACES, Job, gpu_node, load_philly, philly_queues
from tests.support import load_bench

# One day of October at 8x on 64 nodes (512 GPUs): 1,715 jobs, hundreds of which wait, and
# the two node orders start some 280 of them at different times.
WINDOW = {"start": "2017-10-26", "end": "2017-10-27", "compression": 8.0}
NODES = 64

needs_traces = pytest.mark.skipif(
    not (DEFAULT_TRACES / "philly").exists(), reason="no shared traces"
)


@pytest.fixture(scope="module")
def greedy() -> ModuleType:
    return load_bench("greedy_gang_fifo")


def synthetic_philly(root: Path, jobs: int = 700, seed: int = 5) -> Path:
    """A day of jobs in Philly's format (philly.csv, philly_vc.csv) under `root`/philly, seeded:
    GPU counts from 1 to 32 (some larger than a node and not a multiple of it), runtimes of
    minutes to hours, some submitted in the same second; the clean clones CI runs have no
    shared traces, and this keeps the two simulators compared there too."""
    rng = random.Random(seed)
    folder = root / "philly"
    folder.mkdir(parents=True)
    with (folder / "philly_vc.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerows([("vc", "node num"), ("vc-a", 10), ("vc-b", 6)])
    with (folder / "philly.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(("timestamp", "duration", "num_gpus", "gpu_time", "cluster"))
        second = 0
        for _ in range(jobs):
            second += rng.choice((0, 0, 5, 30, 60, 120, 300))
            stamp = (
                f"2017-10-26 {second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
            )
            gpus = rng.choice((1, 1, 1, 2, 4, 8, 8, 12, 16, 24, 32))
            duration = float(rng.choice((60, 600, 1800, 3600, 7200, 14400)))
            out.writerow((stamp, duration, gpus, duration * gpus, rng.choice(("vc-a", "vc-b"))))
    return root


def project_starts(
    policy_name: str, root: Path = DEFAULT_TRACES, nodes_count: int = NODES
) -> tuple[list[Job], list[float | None]]:
    trace = load_philly(root, **WINDOW)  # type: ignore[arg-type]
    nodes = [gpu_node(f"node-{i:04d}", 8) for i in range(nodes_count)]
    queues = philly_queues(trace.vc_nodes, nodes_count * 8)
    policy = make_policy(policy_name, queues, nodes)
    starts: dict[str, float] = {}
    step = policy.step

    def recording(now: float) -> Step:
        done = step(now)
        assert not done.evicted
        starts.update((name, now) for name in done.started)
        return done

    policy.step = recording  # type: ignore[method-assign]
    weights = {q.name: 1.0 for q in queues}
    simulate(trace.jobs, policy, total_gpus=nodes_count * 8, weights=weights, progress=None)
    return list(trace.jobs), [starts.get(j.name) for j in trace.jobs]


def independent_starts(
    greedy: ModuleType, order: str, root: Path = DEFAULT_TRACES, nodes_count: int = NODES
) -> tuple[list[object], list[float | None]]:
    jobs = greedy.read_philly(root / "philly", **WINDOW)
    return jobs, greedy.simulate(jobs, nodes=nodes_count, order=order)


def waited(jobs: Sequence[object], starts: Sequence[float | None]) -> int:
    return sum(1 for j, s in zip(jobs, starts, strict=True) if s is None or s > j.submit)  # type: ignore[attr-defined]


@needs_traces
@pytest.mark.parametrize(
    ("policy", "order"),
    [("gang-fifo-no-enqueue", "spread"), ("gang-fifo-no-enqueue-binpack", "binpack")],
)
def test_a_day_of_philly_on_64_nodes_starts_every_job_when_the_independent_simulator_does(
    greedy: ModuleType, policy: str, order: str
) -> None:
    theirs_jobs, theirs = independent_starts(greedy, order)
    ours_jobs, ours = project_starts(policy)
    assert [j.gpus for j in ours_jobs] == [j.gpus for j in theirs_jobs]  # type: ignore[attr-defined]
    assert waited(theirs_jobs, theirs) > 90  # a slice where the queue matters
    assert None not in ours
    assert ours == theirs


@pytest.mark.parametrize(
    ("policy", "order"),
    [("gang-fifo-no-enqueue", "spread"), ("gang-fifo-no-enqueue-binpack", "binpack")],
)
def test_a_seeded_day_in_phillys_format_starts_every_job_when_the_independent_simulator_does(
    greedy: ModuleType, policy: str, order: str, tmp_path: Path
) -> None:
    root = synthetic_philly(tmp_path)
    theirs_jobs, theirs = independent_starts(greedy, order, root, nodes_count=16)
    ours_jobs, ours = project_starts(policy, root, nodes_count=16)
    assert [j.gpus for j in ours_jobs] == [j.gpus for j in theirs_jobs]  # type: ignore[attr-defined]
    assert waited(theirs_jobs, theirs) > 100  # the queue matters on those 128 GPUs
    assert None not in ours
    assert ours == theirs


@needs_traces
def test_on_that_day_the_node_order_changes_when_hundreds_of_jobs_start(
    greedy: ModuleType,
) -> None:
    jobs, spread = independent_starts(greedy, "spread")
    _, binpack = independent_starts(greedy, "binpack")
    assert sum(a != b for a, b in zip(spread, binpack, strict=True)) > 200
    assert waited(jobs, binpack) > waited(jobs, spread)


def test_a_gang_that_does_not_fit_blocks_no_smaller_job_behind_it(greedy: ModuleType) -> None:
    job = greedy.TraceJob
    running = job(0, 0.0, 100.0, 4, (4,))
    gang = job(1, 1.0, 10.0, 16, (8, 8))  # needs two empty nodes; one is half taken
    small = job(2, 2.0, 10.0, 4, (4,))
    starts = greedy.simulate([running, gang, small], nodes=2, order="spread")
    assert starts == [0.0, 100.0, 2.0]


@pytest.mark.parametrize(("order", "node"), [("spread", 1), ("binpack", 0)])
def test_spread_takes_the_emptiest_node_and_binpack_the_fullest_that_holds_the_pod(
    greedy: ModuleType, order: str, node: int
) -> None:
    nodes = greedy._Nodes(2, 8, order, "last")
    nodes.take(0, 5)
    assert nodes.place([2]) == [(node, 2)]


def test_a_12_gpu_job_on_8_gpu_nodes_is_a_pod_of_8_and_a_pod_of_4(greedy: ModuleType) -> None:
    assert greedy.split_gpus(12, 8) == (8, 4)
    assert greedy.split_gpus(16, 8) == (8, 8)
    assert greedy.split_gpus(3, 8) == (3,)
