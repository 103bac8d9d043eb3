"""Reports a pass does not wait for (pending reasons, Events, queue status) go out beside the
next pass, and never land after a newer record of the same object."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from controller.api import kinds, kube
from controller.api.conditions import Reason
from controller.api.queues import ClusterQueueStatus
from controller.api.workload import WorkloadStatus
from controller.cluster.clients import ApiError, Fenced
from controller.cluster.deferred import DeferredWrites
from controller.state.steps import RecordEvent, Step, WriteQueueStatus, WriteWorkloadStatus
from tests.unit.controller_world import World, held_job, start, started

__all__ = ["started"]


class SlowWriters:
    """Records each write; a write of a name in `blocked` waits until that name is released."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.blocked: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.refuse: dict[str, Exception] = {}

    async def perform(self, step: Step) -> None:
        name = label(step)
        self.started.setdefault(name, asyncio.Event()).set()
        if name in self.blocked:
            await self.blocked[name].wait()
        if name in self.refuse:
            raise self.refuse[name]
        self.written.append(name)


def label(step: Step) -> str:
    match step:
        case WriteWorkloadStatus(name=name, status=status):
            return f"{name}:{status.pending_reason}"
        case RecordEvent(about=about, message=message):
            return f"event {about.name}:{message}"
        case WriteQueueStatus(name=name):
            return f"queue {name}"
    raise AssertionError(step)


def reason(name: str, text: str) -> WriteWorkloadStatus:
    return WriteWorkloadStatus("ns", name, WorkloadStatus(pendingReason=text))


def event(name: str, text: str) -> RecordEvent:
    about = kube.ObjectReference(
        api_version=kinds.WORKLOADS.api_version, kind="Workload", name=name, namespace="ns", uid="u"
    )
    return RecordEvent("ns", about, Reason.PENDING, text)


def deferred() -> tuple[DeferredWrites, SlowWriters]:
    writers = SlowWriters()
    return DeferredWrites(writers), writers  # type: ignore[arg-type]


def never() -> None:
    raise AssertionError("no write was refused")


async def test_a_newer_reason_replaces_the_one_still_waiting_to_be_written() -> None:
    writes, writers = deferred()
    writes.defer(("ns", "a"), [reason("a", "needs 3 cpu")], never)
    writes.defer(("ns", "a"), [reason("a", "needs 2 cpu")], never)
    writes.defer(("ns", "b"), [reason("b", "needs 1 cpu")], never)

    await writes.drain()

    assert writers.written == ["a:needs 2 cpu", "b:needs 1 cpu"]
    assert len(writes) == 0


async def test_a_gang_written_by_a_pass_first_waits_for_its_report_in_flight_and_drops_the_queued_one() -> (  # noqa: E501
    None
):
    writes, writers = deferred()
    writers.blocked["a:needs 3 cpu"] = asyncio.Event()
    writes.defer(("ns", "a"), [reason("a", "needs 3 cpu")], never)
    worker = asyncio.create_task(writes.work())
    try:
        await writers.started.setdefault("a:needs 3 cpu", asyncio.Event()).wait()
        # Queued behind the one in flight; the pass then admits the gang and claims it.
        writes.defer(("ns", "a"), [reason("a", "needs 2 cpu")], never)
        claim = asyncio.create_task(writes.claim(("ns", "a")))
        await asyncio.sleep(0.05)
        assert not claim.done()

        writers.blocked["a:needs 3 cpu"].set()
        await claim
        writers.written.append("a:admitted")  # the pass's own write, after the claim
        await writes.drain()

        assert writers.written == ["a:needs 3 cpu", "a:admitted"]
    finally:
        worker.cancel()


async def test_events_are_all_written_in_order_and_never_replaced() -> None:
    writes, writers = deferred()
    for text in ("one", "two", "three"):
        writes.event(event("a", text))

    await writes.drain()

    assert writers.written == ["event a:one", "event a:two", "event a:three"]


async def test_a_refused_report_tells_its_owner_and_skips_the_rest_of_its_steps() -> None:
    writes, writers = deferred()
    writers.refuse["a:needs 3 cpu"] = ApiError(422, "PATCH", "/x", "invalid")
    failed: list[str] = []
    writes.defer(
        ("ns", "a"), [reason("a", "needs 3 cpu"), event("a", "why")], lambda: failed.append("a")
    )
    writes.defer(("ns", "b"), [reason("b", "needs 1 cpu")], never)

    await writes.drain()

    assert failed == ["a"]
    assert writers.written == ["b:needs 1 cpu"]


async def test_a_replica_that_lost_its_lease_drops_every_report_still_queued() -> None:
    writes, writers = deferred()
    writers.refuse["a:needs 3 cpu"] = Fenced("lost the Lease")
    writes.defer(("ns", "a"), [reason("a", "needs 3 cpu")], never)
    writes.defer(("ns", "b"), [reason("b", "needs 1 cpu")], never)
    writes.event(event("c", "why"))

    await writes.drain(concurrency=1)

    assert writers.written == ["event c:why"]  # events go first; then the fence stops the rest
    assert len(writes) == 0


async def test_a_pass_run_by_the_loop_returns_before_its_pending_reason_is_written(
    started: list[World],
) -> None:
    world = await start(
        started,
        World((kinds.JOBS, held_job("first", 3)), (kinds.JOBS, held_job("second", 3))),
    )

    stats = await world.reconciler.reconcile_once(wait=False)

    assert stats.admitted == 1
    waiting: Any = world.workload("job-second")
    assert waiting is not None and not (waiting.get("status") or {}).get("pendingReason")
    await world.reconciler.deferred.drain()
    waiting = world.workload("job-second")
    assert waiting["status"]["pendingReason"].startswith("Waiting for quota")


async def test_while_a_pass_writes_only_a_few_reports_are_in_flight() -> None:
    writes, writers = deferred()
    for name in "abcdef":
        writers.blocked[f"{name}:waiting"] = asyncio.Event()
        writes.defer(("ns", name), [reason(name, "waiting")], never)
    workers = [asyncio.create_task(writes.work()) for _ in range(6)]
    try:
        with writes.foreground():
            await asyncio.sleep(0.05)
            assert sum(e.is_set() for e in writers.started.values()) == writes.while_passes_write
        await asyncio.sleep(0.05)
        assert sum(e.is_set() for e in writers.started.values()) == 6  # the pass is done
        for gate in writers.blocked.values():
            gate.set()
        await writes.drain()
        assert sorted(writers.written) == [f"{name}:waiting" for name in "abcdef"]
    finally:
        for worker in workers:
            worker.cancel()


async def test_a_burst_of_new_gangs_beyond_a_pass_budget_does_not_hold_up_admissions(
    started: list[World],
) -> None:
    world = await start(started, World(*((kinds.JOBS, held_job(f"j{i:02}", 1)) for i in range(40))))
    # A budget of 8 gangs' writes per settle.
    world.reconciler.settings = replace(world.reconciler.settings, concurrent_writes=1)

    await world.reconciler.reconcile_once()  # a burst: its Workloads go out beside it
    await world.api.settle()
    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 4  # as much as the quota holds, without waiting for all 40
    made = [name for verb, kind, name in world.api.log if (verb, kind) == ("create", "workloads")]
    assert 8 <= len(made) < 40
    for _ in range(5):
        await world.reconciler.reconcile_once()
    made = [name for verb, kind, name in world.api.log if (verb, kind) == ("create", "workloads")]
    assert len(made) == 40


async def test_a_report_a_pass_claims_unwritten_is_told_again_and_draining_ends() -> None:
    writes, writers = deferred()
    again: list[str] = []
    writes.defer(("ns", "a"), [reason("a", "waiting")], never, dropped=lambda: again.append("a"))

    await writes.claim(("ns", "a"))
    async with asyncio.timeout(5):
        await writes.drain()

    assert again == ["a"]
    assert writers.written == []


async def test_a_report_the_fence_refuses_tells_the_reconciler_to_start_afresh() -> None:
    writers = SlowWriters()
    lost: list[bool] = []
    writes = DeferredWrites(writers, fenced=lambda: lost.append(True))  # type: ignore[arg-type]
    writers.refuse["a:waiting"] = Fenced("lost the Lease")
    writes.defer(("ns", "a"), [reason("a", "waiting")], never)
    writes.defer(("ns", "b"), [reason("b", "waiting")], never)

    await writes.drain(concurrency=1)

    assert lost == [True]
    assert writers.written == []


async def test_a_written_report_says_so_so_that_its_queue_is_compared_again() -> None:
    writes, writers = deferred()
    done: list[str] = []
    status = WriteQueueStatus("cq", ClusterQueueStatus())
    writes.defer(("ClusterQueue", "cq"), [status], never, written=lambda: done.append("cq"))

    await writes.drain()

    assert writers.written == ["queue cq"] and done == ["cq"]
