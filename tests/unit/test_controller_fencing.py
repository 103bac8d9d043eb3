"""A leader's writes are fenced at the last moment: a replica paused after it decided to write,
and resumed after losing its Lease, sends nothing."""

from __future__ import annotations

import pytest

from controller.api import kinds
from controller.cluster.clients import Fenced
from controller.cluster.writers import Writers
from controller.reconciler import LostLeadership
from tests.fakes.memory_api import MemoryApi
from tests.unit.controller_world import World, held_job, start, started

__all__ = ["started"]


async def test_a_fenced_client_refuses_a_request_and_sends_nothing_once_the_lease_is_lost() -> None:
    api = MemoryApi()
    leading = [True]
    fenced = api.fenced(lambda: leading[0])
    await fenced.create(kinds.EVENTS, {"metadata": {"name": "a"}}, "ns")
    leading[0] = False
    with pytest.raises(Fenced):
        await fenced.create(kinds.EVENTS, {"metadata": {"name": "b"}}, "ns")
    assert [name for _, _, name in api.log] == ["a"]


async def test_a_pass_whose_writes_meet_a_lost_lease_ends_as_lost_leadership_and_writes_nothing(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("j", 2))))
    # The pass's own check still says "leading" (it ran before the pause); the Lease was lost
    # while the replica was stopped, and the fence asks again as each request leaves.
    world.reconciler.writers = Writers(world.api.fenced(lambda: False), world.cache.informers)
    before = list(world.api.log)

    with pytest.raises(LostLeadership):
        await world.reconciler.reconcile_once()

    assert world.api.log == before
    assert world.suspended("j") is True
