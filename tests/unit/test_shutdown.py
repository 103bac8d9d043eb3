"""Stopping: a controller asked to stop stops, whatever its loops were doing at that moment.

On Python 3.11, `asyncio.wait_for` returns the awaited result when a cancellation arrives just as
the awaitable finishes: a loop cancelled as an event wakes it would run on, and `stop()` would
wait for it forever (seen as a test's teardown hanging for 600 s). kohort waits with
`asyncio.timeout`, and ruff bans `asyncio.wait_for` (pyproject.toml).
"""

from __future__ import annotations

import asyncio

import pytest

from controller import main as controller_main
from controller.api import kinds
from controller.settings import Settings
from controller.state.objects import PodGroupSettings
from tests.fakes.memory_api import MemoryApi

FAST = Settings(resync_period=0.05, debounce=0.0)


@pytest.mark.parametrize("ticks_after_the_change", [0, 1, 2, 3])
async def test_a_controller_stopped_as_a_change_wakes_its_loop_stops(
    ticks_after_the_change: int,
) -> None:
    controller = await controller_main.start(MemoryApi(), FAST, PodGroupSettings())
    async with asyncio.timeout(5):
        await controller.cache.wait_synced()
    await asyncio.sleep(0.2)  # the first passes are done: the loop waits for a change

    controller.reconciler.notify(kinds.EVENTS, None, None)
    for _ in range(ticks_after_the_change):
        await asyncio.sleep(0)
    stopping = asyncio.create_task(controller.stop())
    # Waited for, not cancelled: a cancellation would end a loop that ignored the first one.
    done, _ = await asyncio.wait({stopping}, timeout=5)

    assert stopping in done, "stop() still waits for a loop that did not end"
    assert all(task.done() for task in controller.tasks)
