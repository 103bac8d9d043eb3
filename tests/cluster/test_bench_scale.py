"""bench/bench_scale.py's kohort side at a tiny size, on a control plane of its own: Kueue's
baseline scenario (read from the sigs.k8s.io/kueue module) cut to its first cohort and a sliver
of every workload set, as one-pod Jobs through kohort's webhook and controller processes,
released to Volcano on kwok nodes. Kueue itself is not run here (`make test` builds no Kueue).

Checks only that the bench runs and counts: every Job (or submitted Workload, in the harness
setup) created, admitted and finished, each with one Workload. Its figures are printed, never
asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hack import scale

pytestmark = pytest.mark.volcano


def test_the_baseline_scenario_is_read_from_kueue_and_scaled() -> None:
    full = scale.baseline()
    assert full.total == 15_000
    assert len(full.queues()) == 30
    assert full.scaled(0.1).total == 1_500
    assert full.nominal_cpu() == 600
    config = full.scaled(0.1).generator_config()
    assert scale.parse_generator_config(config).total == 1_500


async def test_the_scale_bench_admits_and_counts_every_workload_once(tmp_path: Path) -> None:
    scenario = scale.baseline().limited(1).scaled(0.008)
    assert scenario.total == 30
    result = await scale.run_kohort_jobs(scenario, scale.RunOptions(tmp_path, time_limit=300))
    print()
    print(scale.results_table([result]))
    print(scale.classes_table([result]))
    assert result.errors == []
    assert result.created == result.workloads == 30
    assert result.admitted == 30
    assert result.finished == 30
    assert result.duplicates == 0, "one Workload per Job"
    assert result.complete
    assert {name: c.count for name, c in result.classes.items()} == {
        "small": 18,
        "medium": 6,
        "large": 6,
    }
    assert all(c.admitted == c.count for c in result.classes.values())
    assert result.wall is not None and result.wall > 0
    for name in ("controller", "webhook"):
        assert result.processes[name].cpu_seconds > 0
        assert result.processes[name].peak_rss_mib > 0


async def test_the_harness_setup_submits_workloads_that_kohort_admits_and_the_runner_finishes(
    tmp_path: Path,
) -> None:
    """Kueue's harness shape on kohort: Workloads submitted with no owner, admitted on quota
    alone (no pods, no nodes), marked Finished by the bench after their runtime; each once."""
    scenario = scale.baseline().limited(1).scaled(0.008)
    result = await scale.run_kohort_workloads(scenario, scale.RunOptions(tmp_path, time_limit=300))
    print()
    print(scale.results_table([result]))
    assert result.errors == []
    assert result.setup == "harness"
    assert result.created == result.workloads == 30
    assert result.admitted == result.finished == 30
    assert result.duplicates == 0, "the submitted Workload is the only one per job"
    assert result.complete
    assert result.processes["controller"].cpu_seconds > 0
    assert "webhook" not in result.processes
