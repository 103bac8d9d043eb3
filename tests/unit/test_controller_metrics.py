"""The controller's metrics a Grafana user reads per ClusterQueue and LocalQueue (named after
Kueue's): quota, usage, what is borrowed, pending and admitted gangs, their wait."""

from __future__ import annotations

from typing import Any

from controller.api import kinds
from controller.workloads.base import Mutation
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.registry import REGISTRY
from hack.objects import cluster_queue
from tests.fakes.workloads import make_job
from tests.unit.controller_world import World, held_job, start
from tests.unit.test_controller_state_mirrors_records import pod_of


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
    quota = {"cohort": "org", "cluster_queue": "cq", "flavor": "default", "resource": "cpu"}
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
    pending = [
        sample(world, "kohort_local_queue_pending_workloads", {**local, "status": status})
        for status in ("active", "inadmissible")
    ]
    assert sum(p or 0 for p in pending) == 1
    assert sample(world, "kohort_local_queue_admitted_workloads_total", local) == 1
    assert sample(world, "kohort_local_queue_admission_wait_time_seconds_count", local) == 1
    usage = {**local, "flavor": "default", "resource": "cpu"}
    assert sample(world, "kohort_local_queue_resource_usage", usage) == 3


async def test_a_deleted_queues_series_go_with_it(started: list[World]) -> None:
    world = World((kinds.JOBS, held_job("train", 3)))
    await start(started, world)
    await world.reconciler.reconcile_once()
    quota = {"cohort": "", "cluster_queue": "cq", "flavor": "default", "resource": "cpu"}
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
    for status in ("active", "inadmissible"):
        waiting = {**local, "status": status}
        assert sample(world, "kohort_local_queue_pending_workloads", waiting) is None


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


async def test_a_gang_told_why_it_waits_counts_as_inadmissible_in_its_queues(
    started: list[World],
) -> None:
    """cq has 4 cpu: a gang of 3 is admitted, one of 5 never fits and is told why."""
    world = World((kinds.JOBS, held_job("train", 3)), (kinds.JOBS, held_job("later", 5)))
    await start(started, world)

    for _ in range(3):  # the reason written, then seen
        await world.reconciler.reconcile_once()

    local = {"name": "lq", "namespace": "ns"}
    lq_series = "kohort_local_queue_pending_workloads"
    assert sample(world, lq_series, {**local, "status": "inadmissible"}) == 1
    assert sample(world, lq_series, {**local, "status": "active"}) == 0
    cq_series = "kohort_pending_workloads"
    assert sample(world, cq_series, {"cluster_queue": "cq", "status": "inadmissible"}) == 1
    assert sample(world, cq_series, {"cluster_queue": "cq", "status": "active"}) == 0


async def test_a_queue_moved_to_another_cohort_reports_under_the_new_one_only(
    started: list[World],
) -> None:
    world = World(
        (kinds.CLUSTER_QUEUES, cluster_queue("cq", {"cpu": "4"}, cohort="old")),
        (kinds.JOBS, held_job("train", 3)),
    )
    await start(started, world)
    await world.reconciler.reconcile_once()
    usage = {"cluster_queue": "cq", "flavor": "default", "resource": "cpu"}
    assert sample(world, "kohort_cluster_queue_resource_usage", {**usage, "cohort": "old"}) == 3
    share = {"cluster_queue": "cq", "cohort": "old"}
    assert sample(world, "kohort_cluster_queue_weighted_share", share) is not None

    world.api.put(kinds.CLUSTER_QUEUES, cluster_queue("cq", {"cpu": "4"}, cohort="new"))
    await world.api.settle()
    await world.reconciler.reconcile_once()

    assert sample(world, "kohort_cluster_queue_resource_usage", {**usage, "cohort": "new"}) == 3
    assert sample(world, "kohort_cluster_queue_resource_usage", {**usage, "cohort": "old"}) is None
    assert sample(world, "kohort_cluster_queue_nominal_quota", {**usage, "cohort": "old"}) is None
    assert sample(world, "kohort_cluster_queue_weighted_share", share) is None
    assert sample(world, "kohort_admitted_workloads_total", {"cluster_queue": "cq"}) == 1


GPU = "nvidia.com/gpu"


def gpu_job(name: str, pods: int, gpus: int) -> dict[str, Any]:
    """A Job of `pods` pods of `gpus` GPUs each, as kohort's webhook stores it."""
    job = make_job(name, namespace="ns", queue="lq", parallelism=pods, completions=pods, gpus=gpus)
    editor = Editor(job)
    REGISTRY.instance(JobAdapter).default(editor, Mutation("lq"))
    return editor.doc


def gpu_node(name: str, gpus: int, *, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def gpus(world: World) -> dict[str, float | None]:
    return {
        state: sample(world, "kohort_gpus", {"state": state})
        for state in ("allocated", "held", "idle")
    }


async def test_the_controller_counts_gpus_held_by_a_gang_until_all_its_pods_run(
    started: list[World],
) -> None:
    """A gang of 2 pods of 2 GPUs is admitted on a node of 8 GPUs (a NotReady one of 8 counts
    for nothing): its 4 GPUs are held while none or one of its pods runs, allocated once both
    do."""
    job = gpu_job("train", 2, 2)
    world = World(
        (kinds.CLUSTER_QUEUES, cluster_queue("cq", {"cpu": "8", "memory": "64Gi", GPU: "8"})),
        (kinds.NODES, gpu_node("n0", 8)),
        (kinds.NODES, gpu_node("down", 8, ready=False)),
        (kinds.JOBS, job),
    )
    await start(started, world)
    assert gpus(world) == {"allocated": 0, "held": 0, "idle": 8}

    stats = await world.reconciler.reconcile_once()
    assert stats.admitted == 1
    assert gpus(world) == {"allocated": 0, "held": 4, "idle": 4}

    world.api.put(kinds.PODS, pod_of(job, "n0", 0))
    await world.api.settle()
    assert gpus(world) == {"allocated": 0, "held": 4, "idle": 4}

    world.api.put(kinds.PODS, pod_of(job, "n0", 1))
    await world.api.settle()
    assert gpus(world) == {"allocated": 4, "held": 0, "idle": 4}
