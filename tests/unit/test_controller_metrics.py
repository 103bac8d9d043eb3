"""The controller's metrics a Grafana user reads per ClusterQueue and LocalQueue (named after
Kueue's): quota, usage, what is borrowed, pending and admitted gangs, their wait."""

from __future__ import annotations

from controller.api import kinds
from hack.objects import cluster_queue
from tests.unit.controller_world import World, held_job, start


def sample(world: World, series: str, labels: dict[str, str]) -> float | None:
    return world.metrics.registry.get_sample_value(series, labels)


async def test_a_queue_reports_its_quota_usage_and_what_it_borrows(started: list[World]) -> None:
    """cq (2 cpu, may borrow 2) shares a cohort with idle (4 cpu): a gang of 3 cpu borrows 1."""
    world = World(
        (
            kinds.CLUSTER_QUEUES,
            cluster_queue("cq", {"cpu": "2"}, cohort="org", borrowing_limits={"cpu": "2"}),
        ),
        (kinds.CLUSTER_QUEUES, cluster_queue("idle", {"cpu": "4"}, cohort="org")),
        (kinds.JOBS, held_job("train", 3)),
        (kinds.JOBS, held_job("later", 5)),
    )
    await start(started, world)

    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 1
    quota = {"cluster_queue": "cq", "flavor": "default", "resource": "cpu"}
    assert sample(world, "kohort_cluster_queue_nominal_quota", quota) == 2
    assert sample(world, "kohort_cluster_queue_borrowing_limit", quota) == 2
    assert sample(world, "kohort_cluster_queue_lending_limit", quota) is None
    assert sample(world, "kohort_cluster_queue_resource_usage", quota) == 3
    assert sample(world, "kohort_cluster_queue_resource_borrowed", quota) == 1
    idle = {**quota, "cluster_queue": "idle"}
    assert sample(world, "kohort_cluster_queue_resource_borrowed", idle) == 0


async def test_a_local_queue_reports_its_pending_and_admitted_gangs_and_their_wait(
    started: list[World],
) -> None:
    world = World((kinds.JOBS, held_job("train", 3)), (kinds.JOBS, held_job("later", 5)))
    await start(started, world)

    await world.reconciler.reconcile_once()

    local = {"name": "lq", "namespace": "ns"}
    assert sample(world, "kohort_local_queue_admitted_active_workloads", local) == 1
    assert sample(world, "kohort_local_queue_pending_workloads", local) == 1
    assert sample(world, "kohort_local_queue_admitted_workloads_total", local) == 1
    assert sample(world, "kohort_local_queue_admission_wait_time_seconds_count", local) == 1
    usage = {**local, "flavor": "default", "resource": "cpu"}
    assert sample(world, "kohort_local_queue_resource_usage", usage) == 3


async def test_a_deleted_queues_series_go_with_it(started: list[World]) -> None:
    world = World((kinds.JOBS, held_job("train", 3)))
    await start(started, world)
    await world.reconciler.reconcile_once()
    quota = {"cluster_queue": "cq", "flavor": "default", "resource": "cpu"}
    local = {"name": "lq", "namespace": "ns"}
    assert sample(world, "kohort_cluster_queue_nominal_quota", quota) == 4
    assert sample(world, "kohort_local_queue_admitted_workloads_total", local) == 1

    await world.api.delete(kinds.LOCAL_QUEUES, "lq", "ns")
    await world.api.delete(kinds.CLUSTER_QUEUES, "cq")
    await world.api.settle()
    await world.reconciler.reconcile_once()

    assert sample(world, "kohort_cluster_queue_nominal_quota", quota) is None
    assert sample(world, "kohort_admitted_workloads_total", {"cluster_queue": "cq"}) is None
    assert sample(world, "kohort_local_queue_admitted_workloads_total", local) is None
    assert sample(world, "kohort_local_queue_pending_workloads", local) is None


async def test_a_local_queue_whose_gangs_have_all_finished_reports_no_usage(
    started: list[World],
) -> None:
    world = World((kinds.JOBS, held_job("train", 3)))
    await start(started, world)
    await world.reconciler.reconcile_once()
    usage = {"name": "lq", "namespace": "ns", "flavor": "default", "resource": "cpu"}
    assert sample(world, "kohort_local_queue_resource_usage", usage) == 3

    done = world.api.read_back(kinds.JOBS, "train", "ns")
    assert done is not None
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    world.api.put(kinds.JOBS, done)
    await world.api.settle()
    await world.reconciler.reconcile_once()
    await world.reconciler.reconcile_once()

    assert sample(world, "kohort_local_queue_resource_usage", usage) == 0
