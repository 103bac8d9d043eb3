"""Workloads their creators submit themselves (no Job, no kind adapter): kohort admits them on
quota, records it in their status, and gives the quota back when their creator says Finished."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import kinds, names
from controller.api.workload import Workload, WorkloadStatus
from controller.cluster.clients import ApiError, decoder
from controller.cluster.deferred import DeferredWrites
from controller.cluster.informers import Informer
from controller.cluster.writers import Writers
from controller.quota.outcomes import (
    Admission,
    Decisions,
    Eviction,
    EvictionCause,
    Pending,
    PendingCause,
)
from controller.state.gangs import GangIndex, ManagedGang
from controller.state.objects import pending_status, status_write
from controller.workloads.standalone import STANDALONE
from hack.objects import condition, reserved
from tests.fakes.memory_api import MemoryApi
from tests.unit.controller_world import NOW, World, held_job, start

JSON = dict[str, Any]


def submitted(name: str, cpu: int, *, priority: int = 0, created: int = 0) -> JSON:
    """A Workload as a framework or a load generator creates it: no owner, no kohort label."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": "Workload",
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": f"2027-01-15T08:00:{created:02d}Z",
        },
        "spec": {
            "queueName": "lq",
            "priority": priority,
            "podSets": [{"name": "main", "count": cpu, "requests": {"cpu": "1"}}],
        },
    }


def mark_finished(world: World, name: str, reason: str = "Succeeded") -> None:
    """What the creator writes when its work is done: Finished, beside kohort's conditions."""
    wl = world.workload(name)
    assert wl is not None
    wl.setdefault("status", {}).setdefault("conditions", []).append(
        {"type": "Finished", "status": "True", "reason": reason, "message": "done"}
    )
    world.api.put(kinds.WORKLOADS, wl)


async def first_admitted_second_waiting(started: list[World]) -> World:
    """Two submitted Workloads of 3 CPU in a queue of 4, after one pass."""
    world = await start(
        started,
        World(
            (kinds.WORKLOADS, submitted("first", 3, created=1)),
            (kinds.WORKLOADS, submitted("second", 3, created=2)),
        ),
    )
    await world.reconciler.reconcile_once()
    await world.api.settle()
    return world


async def test_a_submitted_workload_that_fits_is_admitted_in_its_status_and_nothing_is_created(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.WORKLOADS, submitted("batch-1", 2))))

    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 1
    wl = world.workload("batch-1")
    assert reserved(wl)
    admitted = condition(wl, "Admitted")
    assert admitted is not None and admitted["status"] == "True"
    assert wl is not None and wl["status"]["admission"]["clusterQueue"] == "cq"
    writes = {(verb, what) for verb, what, _ in world.api.log}
    assert ("create", "workloads") not in writes
    assert not any(what == "jobs" for _, what in writes)


async def test_a_submitted_workload_waits_for_quota_until_its_creator_marks_the_first_finished(
    started: list[World],
) -> None:
    world = await first_admitted_second_waiting(started)
    assert reserved(world.workload("first"))
    assert not reserved(world.workload("second"))

    mark_finished(world, "first")
    await world.api.settle()
    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 1
    assert reserved(world.workload("second"))
    first = world.workload("first")
    finished = condition(first, "Finished")
    # The creator's record stands: kohort neither rewrites nor deletes it.
    assert finished is not None and finished["reason"] == "Succeeded"
    assert first is not None


async def test_a_submitted_workload_states_its_own_priority(started: list[World]) -> None:
    world = await start(
        started,
        World(
            (kinds.WORKLOADS, submitted("older-low", 3, priority=50, created=1)),
            (kinds.WORKLOADS, submitted("newer-high", 3, priority=200, created=2)),
        ),
    )

    await world.reconciler.reconcile_once()

    assert reserved(world.workload("newer-high"))
    assert not reserved(world.workload("older-low"))


async def test_a_job_whose_gang_name_a_submitted_workload_holds_waits_and_says_why(
    started: list[World],
) -> None:
    job = held_job("train", 2)
    taken = submitted("job-train", 4)
    world = await start(started, World((kinds.JOBS, job), (kinds.WORKLOADS, taken)))

    await world.reconciler.reconcile_once()

    # Neither runs on the other's record: the Job stays held, the Workload is not admitted.
    assert world.suspended("train") is True
    assert not reserved(world.workload("job-train"))
    events = [e for e in world.api.all(kinds.EVENTS) if e["involvedObject"]["kind"] == "Job"]
    assert [e["reason"] for e in events] == ["Inadmissible"]
    assert "is taken by a Workload kohort did not make" in events[0]["message"]


async def test_a_submitted_workload_is_its_own_gang_again_once_the_job_that_held_it_is_gone(
    started: list[World],
) -> None:
    job = held_job("train", 2)
    world = await start(
        started, World((kinds.JOBS, job), (kinds.WORKLOADS, submitted("job-train", 4)))
    )
    await world.reconciler.reconcile_once()

    await world.api.delete(kinds.JOBS, "train", "ns")
    await world.api.settle()
    await world.reconciler.reconcile_once()
    await world.api.settle()
    world.api.put(kinds.WORKLOADS, submitted("other", 1))
    await world.api.settle()
    await world.reconciler.reconcile_once()

    assert reserved(world.workload("job-train"))
    # Its 4 CPU are charged: the queue of 4 has no room left.
    assert not reserved(world.workload("other"))


async def test_a_submitted_workload_kohort_later_labels_as_its_own_stops_being_a_gang_of_its_own(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.WORKLOADS, submitted("batch-1", 2))))
    relabelled = submitted("batch-1", 2)
    relabelled["metadata"]["labels"] = {names.MANAGED_LABEL: names.MANAGED_VALUE}

    world.api.put(kinds.WORKLOADS, relabelled)
    await world.api.settle()
    await world.reconciler.reconcile_once()

    # A Workload of kohort's with no owner is an orphan: deleted, not made again.
    assert world.workload("batch-1") is None
    await world.api.settle()
    await world.reconciler.reconcile_once()
    assert ("create", "workloads", "batch-1") not in world.api.log
    assert world.state.index.get(("ns", "batch-1")) is None


async def test_a_submitted_workload_gets_no_podgroup(started: list[World]) -> None:
    world = await start(started, World((kinds.WORKLOADS, submitted("batch-1", 2))))

    await world.reconciler.reconcile_once()

    assert reserved(world.workload("batch-1"))
    assert not any(what == "podgroups" for _, what, _ in world.api.log)


async def test_a_deleted_submitted_workload_gives_its_quota_back(started: list[World]) -> None:
    world = await first_admitted_second_waiting(started)

    await world.api.delete(kinds.WORKLOADS, "first", "ns")
    await world.api.settle()
    await world.reconciler.reconcile_once()

    assert reserved(world.workload("second"))


class Race:
    """kohort's writers and their Workload store over an API server in memory, and a gang's
    view of one submitted Workload as a pass computed its steps from it."""

    def __init__(self, wl: JSON) -> None:
        self.api = MemoryApi(clock=lambda: NOW)
        self.api.put(kinds.WORKLOADS, wl)
        self.store: Informer[Workload] = Informer(self.api, kinds.WORKLOADS, decoder(Workload))
        self.writers = Writers(self.api, {kinds.WORKLOADS: self.store})
        self.seen = self.read()
        self.store.put(self.seen)

    def read(self) -> Workload:
        return Workload.model_validate(self.api.read_back(kinds.WORKLOADS, "batch-1", "ns"))

    def gang(self) -> ManagedGang:
        index = GangIndex(STANDALONE)
        index.workload_changed(None, self.seen)
        gang = index.get(("ns", "batch-1"))
        assert gang is not None
        return gang

    def creator_finishes(self) -> None:
        wl = self.api.read_back(kinds.WORKLOADS, "batch-1", "ns")
        assert wl is not None
        finished = {"type": "Finished", "status": "True", "reason": "Succeeded"}
        wl["status"] = {"conditions": [*wl.get("status", {}).get("conditions", []), finished]}
        self.api.put(kinds.WORKLOADS, wl)

    def finished_reason(self) -> str | None:
        found = condition(self.api.read_back(kinds.WORKLOADS, "batch-1", "ns"), "Finished")
        return None if found is None else str(found["reason"])


async def test_kohort_never_writes_a_submitted_workloads_status_over_its_creators_change() -> None:
    race = Race(submitted("batch-1", 1))
    step = status_write(race.gang(), pending_status(race.gang(), "waiting", NOW))
    race.creator_finishes()  # kohort's store has not seen it yet

    with pytest.raises(ApiError) as refused:
        await race.writers.perform(step)

    assert refused.value.status == 409
    assert race.finished_reason() == "Succeeded"


async def test_a_status_computed_before_the_store_saw_the_creators_change_is_refused_too() -> None:
    race = Race(submitted("batch-1", 1))
    step = status_write(race.gang(), pending_status(race.gang(), "waiting", NOW))
    race.creator_finishes()
    race.store.put(race.read())  # the watch delivers it between the pass's plan and its write

    with pytest.raises(ApiError):
        await race.writers.perform(step)

    assert race.finished_reason() == "Succeeded"


async def test_the_status_writes_of_one_pass_land_one_after_the_other() -> None:
    race = Race(submitted("batch-1", 1))
    gang = race.gang()
    first = status_write(gang, pending_status(gang, "waiting", NOW))
    then = status_write(gang, pending_status(gang, "still waiting", NOW))

    await race.writers.perform(first)
    await race.writers.perform(then)

    status = race.read().status
    assert status is not None and status.pending_reason == "still waiting"


async def test_kohorts_own_workloads_are_written_without_a_version_precondition() -> None:
    own = submitted("batch-1", 1)
    own["metadata"]["labels"] = {names.MANAGED_LABEL: names.MANAGED_VALUE}
    race = Race(own)
    step = status_write(race.gang(), WorkloadStatus(pending_reason="x"))
    race.api.put(kinds.WORKLOADS, race.api.read_back(kinds.WORKLOADS, "batch-1", "ns"))

    await race.writers.perform(step)

    assert step.based_on == ""
    assert race.read().status == WorkloadStatus(pending_reason="x")


async def test_a_gang_its_creator_finished_after_the_pass_decided_gets_no_stale_writes(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.WORKLOADS, submitted("batch-1", 2))))
    world.state.sync(NOW)
    mark_finished(world, "batch-1")  # after the pass decided, before it wrote
    await world.api.settle()
    gang_id = "ns/batch-1"
    waiting = Pending(PendingCause.NOT_CONSIDERED)
    admission = Admission(gang_id, "cq", ())

    assert world.state.plan_reasons({gang_id: waiting}, NOW) == {("ns", "batch-1"): []}
    plan = world.state.plan_admissions([admission], NOW)
    assert (plan.records, plan.releases) == ({("ns", "batch-1"): []}, {("ns", "batch-1"): []})


async def test_a_report_its_creator_overtook_is_dropped_and_told_again_not_counted_an_error() -> (
    None
):
    race = Race(submitted("batch-1", 1))
    step = status_write(race.gang(), pending_status(race.gang(), "waiting", NOW))
    race.creator_finishes()
    outcomes: list[str] = []
    deferred = DeferredWrites(race.writers)
    deferred.defer(
        ("ns", "batch-1"),
        [step],
        failed=lambda: outcomes.append("failed"),
        dropped=lambda: outcomes.append("dropped"),
    )

    await deferred.drain()

    assert outcomes == ["dropped"]
    assert race.finished_reason() == "Succeeded"


async def test_admissions_go_on_when_the_victim_of_an_eviction_was_finished_by_its_creator(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.WORKLOADS, submitted("low", 4, created=1))))
    await world.reconciler.reconcile_once()
    world.api.put(kinds.WORKLOADS, submitted("high", 4, priority=100, created=2))
    await world.api.settle()
    assert reserved(world.workload("low"))
    # The engine's next cycle evicts `low` for `high`; `low`'s creator finishes it just before
    # kohort's eviction record lands.
    decide = world.state.decide

    def preempting(now: float) -> Decisions:
        decide(now)
        evict = Eviction("ns/low", "cq", "ns/high", EvictionCause.PREEMPTED)
        return Decisions(admissions=(Admission("ns/high", "cq", ()),), evictions=(evict,))

    world.state.decide = preempting  # type: ignore[method-assign]
    fetch = world.api.fetch

    async def creator_first(method: str, path: str, **kwargs: Any) -> bytes:
        if method == "PATCH" and path.endswith("/workloads/low/status"):
            world.api.fetch = fetch  # type: ignore[method-assign]
            mark_finished(world, "low")
        return await fetch(method, path, **kwargs)

    world.api.fetch = creator_first  # type: ignore[method-assign]

    stats = await world.reconciler.reconcile_once()

    # The eviction was overtaken (no error), and the admission that counted on it went on.
    assert finished_of(world, "low") == "Succeeded"
    assert stats.admitted == 1 and stats.evicted == 0 and stats.failed == 0
    assert reserved(world.workload("high"))


def finished_of(world: World, name: str) -> str | None:
    found = condition(world.workload(name), "Finished")
    return None if found is None else str(found["reason"])
