"""bench/bench_forecast.py runs end to end on a small slice and prints its figures (no timings
are judged here)."""

from __future__ import annotations

import sys

import pytest

from controller.simulate.traces import DEFAULT_TRACES
from tests.support import load_bench


@pytest.mark.skipif(not (DEFAULT_TRACES / "philly").exists(), reason="no shared traces")
def test_the_forecast_bench_prints_its_accuracy_and_the_cpu_of_a_refresh(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("bench_forecast")
    argv = ["bench_forecast.py", "--compressions", "8", "--limit", "150", "--every", "5"]
    argv += ["--pending", "60", "--passes", "2", "--refreshes", "1", "--budgets", "0,10"]
    argv += ["--spread-passes", "3", "--budget-ms", "0.01"]
    monkeypatch.setattr(sys, "argv", argv)

    bench.main()

    out = capsys.readouterr().out
    assert "150 jobs, 8x" in out
    for variant in ("learned", "declared"):
        row = next(line.split() for line in out.splitlines() if line.strip().startswith(variant))
        forecast, started = int(row[1]), int(row[2])
        assert forecast == 30 and 0 < started <= forecast
        assert row[4].endswith("%")
    assert "forecasts off: median" in out
    assert "forecasts on, at most any number of admissions a forward run" in out
    assert "forecasts on, at most 10 admissions a forward run" in out
    assert "Workloads show a forecast" in out
    spread = next(line for line in out.splitlines() if "spread over passes" in line)
    assert "at most 0.01 ms of CPU a pass" in spread and "of 3 passes on" in spread


def test_a_gang_counts_as_within_its_p90_when_it_starts_no_later() -> None:
    bench = load_bench("bench_forecast")
    made = {
        "on-time": bench.Made(0.0, 3600.0, 7200.0),
        "late": bench.Made(0.0, 3600.0, 7200.0),
        "never": bench.Made(0.0, 60.0, 60.0),
        "unknown": bench.Made(0.0, None, None),
    }
    starts = {"on-time": 7200.0, "late": 10800.0, "unknown": 50.0}

    result = bench.accuracy(made, starts)

    assert (result.forecast, result.started, result.no_forecast) == (4, 3, 1)
    assert result.within_p90 == 0.5
    assert result.error_median_h == pytest.approx(1.5)
