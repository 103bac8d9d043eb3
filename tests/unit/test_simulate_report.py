"""The simulator's report: plots comparing policies, the series behind them, and its index page.

A tiny trace, two 8-GPU nodes and two queues of equal weight: queue a submits two 8-GPU jobs
at t=0 that fill the cluster for an hour; queue b submits one 8-GPU job a minute later.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from controller.simulate.loop import Result, simulate
from controller.simulate.main import _jsonable
from controller.simulate.metrics import max_min_fair
from controller.simulate.policies import make_policy
from controller.simulate.report import result_from_json, write_report
from controller.simulate.traces import Job, gpu_node, philly_queues

POLICIES = ("gang-fifo", "quota-drf", "kohort")
WEIGHTS = {"a": 1.0, "b": 1.0}


def run(policy: str) -> Result:
    jobs = [
        Job("a1", "a", 0.0, 3600.0, 1, 8),
        Job("a2", "a", 0.0, 3600.0, 1, 8),
        Job("b1", "b", 60.0, 1800.0, 1, 8),
    ]
    nodes = [gpu_node("n1", 8), gpu_node("n2", 8)]
    queues = philly_queues({"a": 1, "b": 1}, 16)
    return simulate(
        jobs, make_policy(policy, queues, nodes), total_gpus=16, weights=WEIGHTS, progress=None
    )


@pytest.fixture(scope="module")
def results() -> list[Result]:
    return [run(p) for p in POLICIES]


@pytest.fixture(scope="module")
def report(results: list[Result], tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("report")
    setup = {"trace": "tiny", "jobs": 3, "queues": WEIGHTS}
    return write_report(directory, results, setup, title="Tiny", command="kohort simulate tiny")


def figures(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.png"))


def test_the_report_has_a_wait_plot_an_allocation_plot_and_one_share_plot_per_policy(
    report: Path,
) -> None:
    names = {p.name for p in figures(report.parent)}
    assert names == {
        "waits.png",
        "gpu-allocation.png",
        *(f"queue-shares-{policy}.png" for policy in POLICIES),
    }


def colored_share(image: Image.Image) -> float:
    """The share of pixels in color: the data (axes, text and grid are black or grey)."""
    saturation = image.convert("RGB").convert("HSV").getchannel("S").histogram()
    return sum(saturation[60:]) / sum(saturation)


def test_every_figure_is_a_real_png_with_something_drawn(report: Path) -> None:
    for path in figures(report.parent):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path.name
        assert path.stat().st_size > 5_000, path.name
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.width >= 600 and image.height >= 250, path.name
            assert colored_share(image) > 0.001, path.name


def test_report_md_embeds_each_figure_by_relative_path_and_summarises_each_policy(
    report: Path,
) -> None:
    text = report.read_text()
    embedded = set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text))
    assert embedded == {p.name for p in figures(report.parent)}
    assert "kohort simulate tiny" in text
    for policy in POLICIES:
        assert re.search(rf"^\| {re.escape(policy)} \|", text, re.MULTILINE), policy
    assert "unfinished" in text


def test_the_share_series_has_one_point_per_sample_for_every_queue(results: list[Result]) -> None:
    for r in results:
        shares = r.queue_shares
        # Samples every 15 simulated minutes, the same instants as the allocation series.
        assert shares.hours == [h for h, _ in r.gpu_allocation_series]
        assert shares.hours[:3] == [0.0, 0.25, 0.5]
        assert set(shares.allocated) == set(shares.fair) == set(WEIGHTS)
        for queue in WEIGHTS:
            assert len(shares.allocated[queue]) == len(shares.fair[queue]) == len(shares.hours)


def test_the_fair_share_is_the_weighted_max_min_share_of_what_the_queues_hold_and_wait_for(
    results: list[Result],
) -> None:
    # At 15 minutes queue a holds or waits for 16 GPUs and b for 8: each is owed 8 of the 16,
    # whichever policy runs; at t=0 nothing had been submitted yet.
    expected = max_min_fair(16.0, {"a": 16.0, "b": 8.0}, WEIGHTS)
    assert expected == {"a": 8.0, "b": 8.0}
    for r in results:
        fair = r.queue_shares.fair
        assert (fair["a"][0], fair["b"][0]) == (0.0, 0.0)
        assert (fair["a"][1], fair["b"][1]) == (expected["a"], expected["b"]), r.policy
    # gang-fifo lets a keep both nodes while b waits: a holds twice its share, b nothing.
    fifo = results[POLICIES.index("gang-fifo")].queue_shares.allocated
    assert (fifo["a"][1], fifo["b"][1]) == (16, 0)


def test_the_result_keeps_the_wait_of_every_finished_job(results: list[Result]) -> None:
    fifo = results[POLICIES.index("gang-fifo")]
    # b1 waits from its submit at 60 s until a's jobs end at 3600 s.
    assert sorted(fifo.waits) == [0.0, 0.0, 3540.0]
    assert fifo.censored_waits == []


def test_json_keeps_the_plot_data_compact_and_a_report_can_be_drawn_from_it(
    results: list[Result], tmp_path: Path
) -> None:
    data = _jsonable(results[0])
    assert "waits" not in data and "queue_shares" not in data
    back = result_from_json(data)
    assert (back.policy, back.finished, back.wait_p95) == (
        results[0].policy,
        results[0].finished,
        results[0].wait_p95,
    )
    assert min(back.waits) == 0.0 and max(back.waits) == 3540.0
    assert back.queue_shares.hours == results[0].queue_shares.hours
    assert back.queue_shares.fair == results[0].queue_shares.fair
    index = write_report(tmp_path, [back], {"trace": "tiny"})
    assert (tmp_path / "waits.png").stat().st_size > 10_000
    assert "waits.png" in index.read_text()


def test_importing_the_simulator_and_its_report_does_not_import_matplotlib() -> None:
    code = (
        "import sys, controller.simulate.main, controller.simulate.report;"
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_without_matplotlib_a_report_run_says_to_install_kohort_report_and_simulates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.simulate import main as simulate_main

    real_find_spec = importlib.util.find_spec

    def no_matplotlib(name: str, package: str | None = None) -> Any:
        return None if name == "matplotlib" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", no_matplotlib)
    parser = argparse.ArgumentParser()
    simulate_main.add_arguments(parser)
    args = parser.parse_args(["--traces", str(tmp_path / "none"), "philly", "--report", "out"])
    assert simulate_main.run(args) == 2
    assert "pip install 'kohort[report]'" in capsys.readouterr().err
