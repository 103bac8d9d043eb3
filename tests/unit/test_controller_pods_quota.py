"""A `pods` quota in the controller, against an API server in memory: admissions are limited by
it, the Workload's record charges its pods, and the ClusterQueue's status shows them used."""

from __future__ import annotations

from typing import Any

from controller.api import kinds
from hack.objects import cluster_queue, condition, pending_reason
from tests.unit.controller_world import World, held_job, passes, queue_used, start, workload

JSON = dict[str, Any]


def pods_used(world: World) -> str | None:
    return queue_used(world, "pods")


async def test_a_pods_quota_admits_one_5_pod_job_of_two_and_shows_its_5_pods_used(
    started: list[World],
) -> None:
    queue = cluster_queue("cq", {"cpu": "16", "pods": "7"})
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, queue),
            (kinds.JOBS, held_job("first", 5)),
            (kinds.JOBS, held_job("second", 5)),
        ),
    )

    await passes(world)

    assert world.suspended("first") is False
    assert world.suspended("second") is True
    admitted = world.workload("job-first")
    assigned = admitted["status"]["admission"]["podSetAssignments"][0] if admitted else {}
    assert assigned["resourceUsage"] == {"cpu": "5", "pods": "5"}
    assert assigned["flavors"] == {"cpu": "default", "pods": "default"}
    waiting = world.workload("job-second")
    assert (condition(waiting, "QuotaReserved") or {}).get("status") != "True"
    assert "needs 5 pods, queue can take 2 more (nominal 7" in pending_reason(waiting)
    assert pods_used(world) == "5"


async def test_an_admission_recorded_without_pods_is_charged_its_pods_and_not_resized(
    started: list[World],
) -> None:
    """A gang admitted before its queue counted pods (its record charges none) counts its pods
    all the same, and keeps running: its shape did not change."""
    running = held_job("running", 5)
    running["spec"]["suspend"] = False
    record = workload(running, reserved=True)
    record["status"]["admission"]["podSetAssignments"] = [
        {"name": "main", "count": 5, "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "5"}}
    ]
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, cluster_queue("cq", {"cpu": "16", "pods": "7"})),
            (kinds.JOBS, running),
            (kinds.WORKLOADS, record),
            (kinds.JOBS, held_job("next", 5)),
        ),
    )

    await passes(world)

    assert world.suspended("running") is False
    assert (condition(world.workload("job-running"), "Evicted") or {}).get("status") != "True"
    assert world.suspended("next") is True
    assert "needs 5 pods, queue can take 2 more" in pending_reason(world.workload("job-next"))
    assert pods_used(world) == "5"


async def test_a_queue_without_a_pods_quota_shows_no_pods_and_admits_by_its_other_quotas(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("wide", 4)), cpu_quota="4"))

    await passes(world)

    assert world.suspended("wide") is False
    admitted = world.workload("job-wide")
    assigned = admitted["status"]["admission"]["podSetAssignments"][0] if admitted else {}
    assert assigned["resourceUsage"] == {"cpu": "4"}
    assert pods_used(world) is None
