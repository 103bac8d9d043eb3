"""Fairness over time in the controller: a ClusterQueue's status shows what fair order
remembers of its borrowing, and a controller that starts again goes on from it."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import kinds
from controller.api.queues import ClusterQueueStatus, RecentUsage
from controller.api.times import format_time
from controller.state.objects import queue_status_differs
from hack.objects import cluster_queue
from tests.unit.controller_world import NOW, World, held_job, start

HOUR = 3600.0
JSON = dict[str, Any]


def remembered(share: float, at: float) -> JSON:
    """The ClusterQueue `cq` as a controller that ran before left it: recent usage kept."""
    cq = cluster_queue("cq", {"cpu": "4"})
    cq["status"] = {"recentUsage": {"share": share, "lastUpdate": format_time(at)}}
    return cq


def recent_usage(world: World) -> JSON | None:
    cq = world.api.read_back(kinds.CLUSTER_QUEUES, "cq")
    assert cq is not None
    found: JSON | None = (cq.get("status") or {}).get("recentUsage")
    return found


async def test_a_restarted_controller_goes_on_from_the_recent_usage_the_status_kept(
    started: list[World],
) -> None:
    """The status kept a recent share of 300 an hour ago; the queue borrows nothing since
    (it has no cohort), so one half-life later it is 150, in the engine and in the status."""
    world = World(
        (kinds.CLUSTER_QUEUES, remembered(300.0, NOW - HOUR)),
        (kinds.JOBS, held_job("a", 1)),
        usage_half_life=HOUR,
    )
    await start(started, world)
    for _ in range(2):
        await world.reconciler.reconcile_once()
        await world.api.settle()

    recent = world.state.engine.recent(("queue", "cq"))
    assert recent is not None and recent.share == pytest.approx(150.0)
    shown = recent_usage(world)
    assert shown is not None
    assert (shown["weightedShare"], shown["lastUpdate"]) == (150, format_time(NOW))


async def test_without_a_half_life_the_status_shows_no_recent_usage_and_none_is_taken(
    started: list[World],
) -> None:
    world = World(
        (kinds.CLUSTER_QUEUES, remembered(300.0, NOW - HOUR)), (kinds.JOBS, held_job("a", 1))
    )
    await start(started, world)
    for _ in range(2):
        await world.reconciler.reconcile_once()
        await world.api.settle()

    assert world.state.engine.recent(("queue", "cq")) is None
    assert world.state.engine.recent_usage() == {}
    shown = recent_usage(world)
    assert shown is None


def test_a_status_is_written_again_when_the_recent_share_it_shows_moves_not_its_clock() -> None:
    def status(weighted: int, share: float, at: float) -> ClusterQueueStatus:
        usage = RecentUsage(weighted_share=weighted, share=share, last_update=format_time(at))
        return ClusterQueueStatus(recent_usage=usage)

    old = status(150, 150.2, NOW)
    assert not queue_status_differs(old, status(150, 149.9, NOW + 60))
    assert queue_status_differs(old, status(149, 148.7, NOW + 120))
    assert queue_status_differs(old, ClusterQueueStatus())
