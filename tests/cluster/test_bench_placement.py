"""bench/bench_placement.py at its smoke size (20 gangs, one a second, 5 s runtime), on a
control plane of its own per gang backend: Volcano, and kube-scheduler's own gangs.

Checks only that the bench runs and that its counts agree: every gang created and deleted,
each release all bound within the window, later or never, and the report printing its figures.
Whether every release was bound within the window (the goal) is reported, never asserted.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from controller.workloads.base import Backend
from tests.support import GangSetup, load_bench

pytestmark = pytest.mark.cluster


def test_the_plan_mixes_every_shape_and_its_manifests_carry_the_shape() -> None:
    bench = load_bench("bench_placement")
    gangs = bench.plan_gangs(40, 7, bench.Layout(), jobsets=True)
    assert gangs == bench.plan_gangs(40, 7, bench.Layout(), jobsets=True), "seeded"
    assert {g.shape for g in gangs} == set(bench.SHAPE_NAMES)
    assert {g.kind for g in gangs} == {"Job", "JobSet", "StatefulSet"}
    sliced = next(g for g in gangs if g.shape == "slices")
    template = bench.manifest(sliced)["spec"]["template"]
    assert template["metadata"]["annotations"][bench.SLICE_SIZE] == str(sliced.slice_size)
    assert sliced.pods % sliced.slice_size == 0
    spread = next(g for g in gangs if g.shape == "zone-spread" and g.kind == "Job")
    (constraint,) = bench.manifest(spread)["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert constraint["whenUnsatisfiable"] == "DoNotSchedule"


def test_a_rack_is_judged_per_pod_set_so_a_jobsets_leader_and_workers_may_differ() -> None:
    bench = load_bench("bench_placement")
    layout = bench.Layout()
    gang = bench.PlannedGang(1, "team-a", "JobSet", "rack-required", pods=4, gpus=8)
    leader, workers = ("b0-r1-0",), ("b1-r2-0", "b1-r2-1", "b1-r2-2")
    nodes = (*leader, *workers)
    assert bench.placed_as_asked(gang, nodes, layout, (leader, workers)) is True
    split = (("b0-r1-0",), ("b1-r2-0", "b1-r3-0", "b1-r2-2"))
    assert bench.placed_as_asked(gang, nodes, layout, split) is False
    job = replace(gang, kind="Job")
    assert bench.placed_as_asked(job, nodes, layout, (nodes,)) is False


@pytest.mark.parametrize(
    "backend",
    [pytest.param(Backend.VOLCANO, marks=pytest.mark.volcano), Backend.KUBERNETES],
    ids=str,
)
async def test_the_placement_bench_runs_and_accounts_for_every_release(
    backend: Backend, tmp_path: Path
) -> None:
    bench = load_bench("bench_placement")
    options = replace(bench.smoke(bench.BenchOptions()), work_dir=tmp_path)
    result = await bench.run_backend(GangSetup(backend), options)
    text = bench.report(result)
    print()
    print(text)
    assert result.errors == []
    assert len(result.records) == result.created == 20
    assert result.deleted == 20
    assert result.wall is not None and result.wall > 0
    releases = result.releases
    assert all(r.releases or r.abandoned for r in result.records), "released, or given up"
    assert len(releases) >= result.released
    assert len(result.within_window()) + len(result.late()) + len(result.never_bound()) == len(
        releases
    )
    for record, release in releases:
        assert release.end in ("runtime", "given up", "held")
        assert release.ended_at is not None and release.ended_at >= release.at
        if release.bound_at is not None:
            assert release.bound_at >= release.at
            assert len(release.nodes) >= record.plan.pods
    for figure in ("releases all bound within 10s:", "p50", "p95", "max", "wall time:"):
        assert figure in text
    assert "gangs that waited in kohort" in text
