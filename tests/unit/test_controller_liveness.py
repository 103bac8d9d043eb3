"""The controller's /healthz: the kubelet restarts a controller that has stopped admitting.

It fails (HTTP 500, with the reason in plain text) when the reconcile loop has died or one pass
has been running for longer than --stuck-after; it answers ok while the loop waits for events,
and while a standby waits for the Lease.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from controller import main as controller_main
from controller.api import kinds
from controller.main import Controller, health_app
from controller.settings import Settings
from controller.state.objects import PodGroupSettings
from tests.fakes.memory_api import MemoryApi
from tests.unit.test_controller_main import parse

FAST = Settings(resync_period=0.05, debounce=0.0)
STUCK_AFTER = 0.3


async def started(api: MemoryApi, **options: Any) -> Controller:
    controller = await controller_main.start(
        api, FAST, PodGroupSettings(), stuck_after=STUCK_AFTER, **options
    )
    async with asyncio.timeout(5):
        await controller.cache.wait_synced()
    return controller


@pytest.fixture
async def probe() -> AsyncIterator[Callable[[Controller], Any]]:
    clients: list[TestClient[Any, Any]] = []

    async def get(controller: Controller) -> tuple[int, str]:
        client: TestClient[Any, Any] = TestClient(TestServer(health_app(controller)))
        await client.start_server()
        clients.append(client)
        response = await client.get("/healthz")
        return response.status, await response.text()

    yield get
    for client in clients:
        await client.close()


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        await asyncio.sleep(0.01)


@pytest.fixture
async def controller() -> AsyncIterator[Controller]:
    """A leader (no election) on an API server in memory, its caches synced."""
    running = await started(MemoryApi())
    yield running
    running.reconciler.pass_started = None
    await running.stop()


async def test_a_loop_waiting_for_events_is_healthy(controller: Controller, probe: Any) -> None:
    await asyncio.sleep(STUCK_AFTER * 2)  # several idle resync periods, no pass under way
    assert controller.reconciler.pass_started is None
    assert await probe(controller) == (200, "ok\n")


async def test_a_pass_that_hangs_makes_healthz_fail_with_a_reason(
    controller: Controller, probe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    never = asyncio.Event()

    async def hang(*, wait: bool = True) -> None:
        await never.wait()  # e.g. a write that never returns

    monkeypatch.setattr(controller.reconciler, "reconcile_once", hang)
    await until(lambda: controller.reconciler.pass_started is not None)
    assert await probe(controller) == (200, "ok\n"), "a pass may take its time"
    await asyncio.sleep(STUCK_AFTER + 0.1)
    status, reason = await probe(controller)
    assert status == 500
    assert reason.startswith("a reconcile pass has been running for ")
    assert reason.endswith("s (--stuck-after 0.3s)\n")


async def test_passes_that_end_in_time_leave_the_controller_healthy(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    passes = 0

    async def slow_but_done(*, wait: bool = True) -> None:
        nonlocal passes
        passes += 1
        await asyncio.sleep(STUCK_AFTER / 3)

    monkeypatch.setattr(controller.reconciler, "reconcile_once", slow_but_done)
    problems = set()
    deadline = time.monotonic() + 5
    while passes < 4 and time.monotonic() < deadline:
        problems.add(controller.liveness_problem())
        await asyncio.sleep(0.02)
    assert passes >= 4
    assert problems == {None}


async def test_a_dead_reconcile_loop_is_unhealthy(
    controller: Controller, probe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> float:
        raise RuntimeError("timer heap corrupted")

    # Outside a pass (where errors are caught and retried), the loop itself dies.
    monkeypatch.setattr(controller.reconciler.state, "next_timer", broken)
    await until(lambda: controller.tasks[-1].done())
    assert await probe(controller) == (
        500,
        "the reconciler loop has stopped: RuntimeError: timer heap corrupted\n",
    )


async def test_a_failing_pass_is_retried_and_is_no_reason_to_restart(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = 0

    async def fail(*, wait: bool = True) -> None:
        nonlocal failures
        failures += 1
        raise RuntimeError("the API server said 500")

    monkeypatch.setattr(controller.reconciler, "reconcile_once", fail)
    await until(lambda: failures >= 2)
    assert controller.liveness_problem() is None
    assert controller.reconciler.pass_started is None, "the backoff is no part of a pass"


async def test_a_standby_waiting_for_the_lease_is_healthy(probe: Any) -> None:
    api = MemoryApi()
    api.put(
        kinds.LEASES,
        {
            "apiVersion": kinds.LEASES.api_version,
            "kind": kinds.LEASES.kind,
            "metadata": {"name": "kohort-controller", "namespace": "kohort-system"},
            "spec": {
                "holderIdentity": "the-leader",
                "leaseDurationSeconds": 3600,
                "renewTime": "2030-01-01T00:00:00.000000Z",
            },
        },
    )
    lease = {"namespace": "kohort-system", "name": "kohort-controller", "retry_period": 0.05}
    controller = await started(api, elector_args=lease, identity="standby")
    try:
        await asyncio.sleep(STUCK_AFTER * 2)
        assert not controller.is_leader()
        assert await probe(controller) == (200, "ok\n")
    finally:
        await controller.stop()


async def test_a_stuck_pass_is_judged_against_the_threshold(controller: Controller) -> None:
    controller.reconciler.pass_started = 1000.0
    assert controller.liveness_problem(now=1000.0 + STUCK_AFTER) is None
    assert "running for 301s" in str(controller.liveness_problem(now=1301.0))
    controller.stuck_after = 0  # --stuck-after 0: never
    assert controller.liveness_problem(now=1_000_000.0) is None


def test_the_threshold_is_five_minutes_unless_a_flag_says_otherwise() -> None:
    assert parse().stuck_after == 300.0
    assert parse("--stuck-after", "900").stuck_after == 900.0
