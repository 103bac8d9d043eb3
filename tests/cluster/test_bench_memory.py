"""bench/bench_memory.py at a tiny size, on a control plane of its own: 20 plain Nodes and 50
one-pod Jobs through kohort's webhook and controller processes; and its in-process breakdown
of the controller's memory on the in-memory API.

Checks only that the bench runs and counts: every Node and Job created, one Workload per Job,
each admitted or waiting, processes sampled. Its figures are printed, never asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import load_bench

pytestmark = pytest.mark.cluster


async def test_the_memory_bench_runs_and_counts_every_object(tmp_path: Path) -> None:
    bench = load_bench("bench_memory")
    result = await bench.run_cluster(50, 20, tmp_path, concurrency=8, quiet=3.0, time_limit=300)
    print()
    print(bench.cluster_report(result))
    assert result.errors == []
    assert result.settled
    assert result.nodes_created == 20
    assert result.jobs_created == 50
    assert result.with_workload == 50
    assert result.workload_objects == 50
    assert result.duplicates == 0, "one Workload per Job"
    # 600 cpu of quota: every 1-cpu Job fits, and the controller's own counts agree.
    assert result.admitted == 50
    assert result.admitted_metric + result.pending_metric == 50
    for step in ("started", "nodes", "created", "settled"):
        for process in ("controller", "webhook"):
            assert result.at(step, process).rss_mib > 0
    assert result.steady("controller") > 0
    assert result.peak("webhook") > 0


async def test_the_memory_breakdown_counts_the_controllers_cache() -> None:
    bench = load_bench("bench_memory")
    result = await bench.run_where(40, 5, frames=4)
    print()
    print(bench.where_report(result, 5))
    assert result.counts["jobs"] == 40
    assert result.counts["workloads"] == 40
    assert result.counts["nodes"] == 5
    assert result.counts["gangs"] == 40
    assert result.traced > 0
    assert any(name.startswith("informer store: workloads") for name, _, _ in result.census)
    assert result.by_project_file
