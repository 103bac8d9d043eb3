"""A LocalQueue's status tells its team how many of its gangs wait and run, what the running
ones hold, and why the first one in line waits; it is written only when that changes."""

from __future__ import annotations

from typing import Any

from controller.api import kinds
from hack.objects import local_queue
from tests.unit.controller_world import World, held_job, start

JSON = dict[str, Any]


def lq_status(world: World, name: str = "lq") -> JSON:
    lq = world.api.read_back(kinds.LOCAL_QUEUES, name, "ns")
    assert lq is not None
    status: JSON = lq.get("status") or {}
    return status


async def test_a_local_queue_counts_its_gangs_their_usage_and_why_its_first_gang_waits(
    started: list[World],
) -> None:
    world = await start(
        started,
        World(
            (kinds.JOBS, held_job("a", 2)),
            (kinds.JOBS, held_job("b", 2)),
            (kinds.JOBS, held_job("c", 2)),
            cpu_quota="4",
        ),
    )

    for _ in range(2):
        await world.reconciler.reconcile_once()
        await world.api.settle()

    status = lq_status(world)
    assert (status["pendingWorkloads"], status["admittedWorkloads"]) == (1, 2)
    assert status["flavorsUsage"] == [
        {"name": "default", "resources": [{"name": "cpu", "total": "4"}]}
    ]
    assert status["pendingReason"].startswith("Waiting for quota: needs 2 cpu")
    [active] = status["conditions"]
    assert (active["type"], active["status"]) == ("Active", "True")


async def test_a_local_queue_whose_cluster_queue_does_not_exist_says_so(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.LOCAL_QUEUES, local_queue("ns", "lost", "nowhere"))))

    await world.reconciler.reconcile_once()
    await world.api.settle()

    [active] = lq_status(world, "lost")["conditions"]
    assert (active["status"], active["reason"]) == ("False", "ClusterQueueNotFound")
    assert "ClusterQueue nowhere does not exist" in active["message"]


async def test_a_local_queues_status_is_written_again_only_when_it_changes(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("a", 2)), cpu_quota="4"))
    for _ in range(2):
        await world.reconciler.reconcile_once()
        await world.api.settle()
    before = world.api.read_back(kinds.LOCAL_QUEUES, "lq", "ns")
    assert before is not None

    for _ in range(3):
        await world.reconciler.reconcile_once()
        await world.api.settle()

    after = world.api.read_back(kinds.LOCAL_QUEUES, "lq", "ns")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
