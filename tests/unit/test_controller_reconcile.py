"""Reconcile passes against an API server in memory, with every write recorded.

These cover what a controller killed at any point leaves behind: the next pass completes a half
done admission, takes back a release that has no quota behind it, and never admits beyond quota.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from controller.api import kinds
from controller.api.times import parse_time
from controller.cluster.clients import plain
from controller.quota.outcomes import Eviction, EvictionCause
from controller.reconciler import LostLeadership
from hack.objects import cluster_queue, condition, local_queue
from tests.unit.controller_world import NOW, World, held_job, start, workload


def hold(world: World, held: Callable[[str, str, Any], bool]) -> asyncio.Event:
    """Requests to the API server in memory that `held(method, path, body)` picks wait until
    the event returned is set (a slow API server)."""
    may_land = asyncio.Event()
    fetch = world.api.fetch

    async def slow(method: str, path: str, **request: Any) -> bytes:
        if held(method, path, plain(request.get("body"))):
            await may_land.wait()
        return await fetch(method, path, **request)

    world.api.fetch = slow  # type: ignore[method-assign]
    return may_land


def hold_record(world: World, workload: str, condition: str) -> asyncio.Event:
    """As `hold`, for the writes of `workload`'s status that carry `condition`."""
    return hold(
        world,
        lambda method, path, body: (
            path.endswith(f"/workloads/{workload}/status") and condition in json.dumps(body)
        ),
    )


async def soon(condition: Callable[[], bool], tries: int = 200) -> None:
    """Until `condition` holds, or `tries` turns of 10 ms went by (the caller asserts it)."""
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0.01)


async def test_a_new_held_job_gets_a_workload_and_is_admitted_in_one_pass(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("train", 2))))

    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 1
    order = [(verb, kind) for verb, kind, _ in world.api.log]
    # The quota reservation comes before the PodGroup, which comes before the release.
    reserve = order.index(("patch", "workloads/status"))
    assert order.index(("create", "workloads")) < reserve
    assert reserve < order.index(("create", "podgroups")) < order.index(("patch", "jobs"))
    assert world.suspended("train") is False


async def test_an_admission_cut_short_after_the_reservation_is_completed_on_restart(
    started: list[World],
) -> None:
    job = held_job("train", 2)
    world = await start(
        started, World((kinds.JOBS, job), (kinds.WORKLOADS, workload(job, reserved=True)))
    )

    await world.reconciler.reconcile_once()

    assert ("create", "podgroups", "job-train") in world.api.log
    assert world.suspended("train") is False


async def test_a_running_job_without_quota_is_held_again(started: list[World]) -> None:
    job = held_job("rogue", 2)
    job["spec"]["suspend"] = False
    world = await start(
        started,
        World(
            (kinds.JOBS, job),
            (kinds.WORKLOADS, workload(job, reserved=False)),
            cpu_quota="1",  # too little to admit it again in the same pass
        ),
    )

    await world.reconciler.reconcile_once()

    assert world.suspended("rogue") is True


async def test_reservations_already_recorded_count_against_quota_after_a_restart(
    started: list[World],
) -> None:
    first, second = held_job("first", 3), held_job("second", 3)
    world = await start(
        started,
        World(
            (kinds.JOBS, first),
            (kinds.JOBS, second),
            (kinds.WORKLOADS, workload(first, reserved=True)),
            (kinds.WORKLOADS, workload(second, reserved=False)),
            cpu_quota="4",
        ),
    )

    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 0
    assert world.suspended("second") is True
    waiting = world.workload("job-second")
    assert waiting is not None
    assert waiting["status"]["pendingReason"].startswith("Waiting for quota: needs 3 cpu")
    assert (condition(waiting, "QuotaReserved") or {}).get("reason") == "Pending"


async def test_a_gang_whose_writes_fail_does_not_hold_up_the_others(started: list[World]) -> None:
    world = await start(
        started,
        World(
            (kinds.JOBS, held_job("doomed", 1, namespace="dying")),
            (kinds.JOBS, held_job("train", 2)),
            (kinds.LOCAL_QUEUES, local_queue("dying", "lq", "cq")),
        ),
    )
    world.api.terminating.add("dying")

    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 1
    assert world.suspended("train") is False
    assert stats.failed == 1


async def test_a_replica_that_lost_the_lease_mid_pass_admits_nothing(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("train", 2))))
    world.reconciler._leading = lambda: False

    with pytest.raises(LostLeadership):
        await world.reconciler.reconcile_once()

    assert not [w for w in world.api.log if w[1] in ("workloads/status", "podgroups", "jobs")]
    assert world.suspended("train") is True


async def test_a_job_scaled_up_after_admission_is_evicted_and_requeued_with_its_new_size(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("train", 2)), cpu_quota="4"))
    await world.reconciler.reconcile_once()
    assert world.suspended("train") is False

    job = world.api.read_back(kinds.JOBS, "train", "ns")
    assert job is not None
    job["spec"]["parallelism"] = job["spec"]["completions"] = 6
    world.api.put(kinds.JOBS, job)
    await world.api.settle()
    await world.reconciler.reconcile_once()
    await world.api.settle()
    await world.reconciler.reconcile_once()

    assert world.suspended("train") is True
    wl = world.workload("job-train")
    assert wl is not None
    evicted = condition(wl, "Evicted")
    assert evicted is not None and evicted["reason"] == "Resized"
    assert "pod set main from 2 to 6 pods" in evicted["message"]
    assert condition(wl, "QuotaReserved")["status"] == "False"  # type: ignore[index]
    events = world.api.all(kinds.EVENTS)
    assert any(e["reason"] == "Resized" for e in events)


async def test_a_job_resized_within_its_admission_keeps_running(started: list[World]) -> None:
    world = await start(started, World((kinds.JOBS, held_job("train", 2)), cpu_quota="4"))
    await world.reconciler.reconcile_once()
    job = world.api.read_back(kinds.JOBS, "train", "ns")
    assert job is not None
    job["metadata"]["labels"]["team"] = "a"  # not a change of shape
    world.api.put(kinds.JOBS, job)
    await world.api.settle()
    await world.reconciler.reconcile_once()

    assert world.suspended("train") is False
    assert not any(e["reason"] == "Resized" for e in world.api.all(kinds.EVENTS))


async def test_a_namespace_its_cluster_queue_does_not_select_gets_nothing_until_it_matches(
    started: list[World],
) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}
    namespace["metadata"]["labels"] = {"team": "b"}  # type: ignore[index]
    world = World((kinds.NAMESPACES, namespace), (kinds.JOBS, held_job("train", 1)))
    cq = world.api.read_back(kinds.CLUSTER_QUEUES, "cq")
    assert cq is not None
    cq["spec"]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    world.api.put(kinds.CLUSTER_QUEUES, cq)
    await start(started, world)
    for _ in range(2):
        await world.reconciler.reconcile_once()
        await world.api.settle()

    assert world.suspended("train") is True
    wl = world.workload("job-train")
    assert wl is not None
    assert wl["status"]["pendingReason"] == (
        "Inadmissible: ClusterQueue cq does not admit workloads from namespace ns (its"
        " namespaceSelector is team=a); use a LocalQueue of another ClusterQueue, or label the"
        " namespace to match"
    )

    namespace["metadata"]["labels"] = {"team": "a"}  # type: ignore[index]
    world.api.put(kinds.NAMESPACES, namespace)
    await world.api.settle()
    await world.reconciler.reconcile_once()

    assert world.suspended("train") is False


def _reasons_on_job(world: World, name: str) -> list[str]:
    events = world.api.objects.get(("", "v1", "events"), {}).values()
    found = [json.loads(text) for text in events]
    return [e["reason"] for e in found if e["involvedObject"]["name"] == name]


@pytest.mark.parametrize(
    ("job_condition", "event_expected"), [("Complete", False), ("Failed", True)]
)
async def test_a_finished_job_gives_its_quota_back_with_an_event_only_when_it_failed(
    started: list[World], job_condition: str, event_expected: bool
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("train", 2))))
    await world.reconciler.reconcile_once()
    job = world.api.read_back(kinds.JOBS, "train", "ns")
    assert job is not None
    job["status"] = {"conditions": [{"type": job_condition, "status": "True"}]}
    world.api.put(kinds.JOBS, job)
    await world.api.settle()

    await world.reconciler.reconcile_once()

    finished = condition(world.workload("job-train"), "Finished")
    assert finished is not None and finished["status"] == "True"
    # A Job that succeeded has the Job controller's own Completed Event; kohort adds none.
    assert ("Finished" in _reasons_on_job(world, "train")) is event_expected
    assert "Admitted" in _reasons_on_job(world, "train")


async def test_quota_a_finished_job_gives_back_admits_the_next_before_its_finished_record_lands(
    started: list[World],
) -> None:
    world = await start(
        started,
        World((kinds.JOBS, held_job("first", 4)), (kinds.JOBS, held_job("second", 4))),
    )
    await world.reconciler.reconcile_once()
    await world.api.settle()
    assert world.suspended("second") is True  # 4 CPU of quota: one at a time
    done = world.api.read_back(kinds.JOBS, "first", "ns")
    assert done is not None
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    world.api.put(kinds.JOBS, done)
    await world.api.settle()
    # The API server is slow to take the first Job's Finished record.
    record_may_land = hold_record(world, "job-first", "Finished")
    passing = asyncio.create_task(world.reconciler.reconcile_once())
    await soon(lambda: world.suspended("second") is False)

    assert world.suspended("second") is False
    assert condition(world.workload("job-first"), "Finished") is None
    record_may_land.set()
    await passing
    finished = condition(world.workload("job-first"), "Finished")
    assert finished is not None and finished["status"] == "True"


async def test_changes_that_come_while_a_pass_runs_are_taken_up_without_the_debounce_wait(
    started: list[World],
) -> None:
    world = World((kinds.JOBS, held_job("first", 4)), (kinds.JOBS, held_job("second", 4)))
    debounced: list[float] = []

    async def debounce(seconds: float) -> None:
        debounced.append(seconds)

    world.reconciler._debounce = debounce
    await start(started, world)
    loop = asyncio.create_task(world.reconciler.run(lambda: True, lambda: True))
    try:
        # The caches' first events, then the admission of `first` (it changes the picture),
        # each come while the loop is busy: no wait before the passes that follow.
        await soon(lambda: world.suspended("first") is False, tries=300)
        assert world.suspended("first") is False and world.suspended("second") is True
        await asyncio.sleep(0.2)  # idle now
        assert debounced == []

        # A Job that finishes into the idle loop is debounced once; the pass that follows
        # admits `second`, and the pass after that (its own admission woke it) is not.
        done = world.api.read_back(kinds.JOBS, "first", "ns")
        assert done is not None
        done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
        world.api.put(kinds.JOBS, done)
        await soon(lambda: world.suspended("second") is False, tries=300)
        await asyncio.sleep(0.2)
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop

    assert world.suspended("second") is False
    assert debounced == [world.reconciler.settings.debounce]


async def test_every_admission_of_a_pass_is_recorded_before_any_of_its_gangs_is_released(
    started: list[World],
) -> None:
    world = await start(
        started, World((kinds.JOBS, held_job("one", 2)), (kinds.JOBS, held_job("two", 2)))
    )

    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 2
    writes = [(verb, kind) for verb, kind, _ in world.api.log]
    last_record = max(i for i, w in enumerate(writes) if w == ("patch", "workloads/status"))
    first_release = min(i for i, w in enumerate(writes) if w == ("patch", "jobs"))
    assert last_record < first_release
    assert world.suspended("one") is False and world.suspended("two") is False


async def test_a_burst_of_new_jobs_does_not_hold_up_the_admission_of_a_job_already_waiting(
    started: list[World],
) -> None:
    waiting = held_job("waiting", 2)
    burst = [held_job(f"new-{i}", 1, cpu="100") for i in range(40)]  # more than 32 at once
    world = await start(
        started,
        World(
            (kinds.JOBS, waiting),
            (kinds.WORKLOADS, workload(waiting, reserved=False)),
            *((kinds.JOBS, job) for job in burst),
        ),
    )
    # The API server is slow to create Workloads.
    creates_may_land = hold(
        world, lambda method, path, body: method == "POST" and path.endswith("/workloads")
    )
    passing = asyncio.create_task(world.reconciler.reconcile_once())
    await soon(lambda: world.suspended("waiting") is False)

    assert world.suspended("waiting") is False
    assert world.workload("job-new-0") is None
    creates_may_land.set()
    await passing
    assert all(world.workload(f"job-new-{i}") is not None for i in range(40))


async def test_a_gang_whose_release_fails_is_admitted_and_released_by_the_next_pass(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("train", 2))))
    world.api.failing[("patch", "jobs")] = 500

    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 1 and stats.failed >= 1  # (tried again in the same pass)
    reserved = condition(world.workload("job-train"), "QuotaReserved")
    assert reserved is not None and reserved["status"] == "True"
    assert world.suspended("train") is True
    del world.api.failing[("patch", "jobs")]
    await world.api.settle()
    await world.reconciler.reconcile_once()
    assert world.suspended("train") is False


async def test_a_slow_record_does_not_hold_up_the_release_of_a_gang_already_recorded(
    started: list[World],
) -> None:
    world = await start(
        started, World((kinds.JOBS, held_job("slow", 2)), (kinds.JOBS, held_job("quick", 2)))
    )
    record_may_land = hold_record(world, "job-slow", "QuotaReserved")
    passing = asyncio.create_task(world.reconciler.reconcile_once())
    await soon(lambda: world.suspended("quick") is False)

    assert world.suspended("quick") is False
    assert world.suspended("slow") is True  # its release waits for its own record
    record_may_land.set()
    stats = await passing
    assert stats.admitted == 2
    assert world.suspended("slow") is False


async def preempt_train(world: World) -> None:
    """Write the eviction of job `train`'s gang for a higher-priority one, as a pass would."""
    preempted = Eviction("ns/job-train", "cq", "ns/job-urgent", EvictionCause.PREEMPTED)
    for steps in world.state.plan_evictions([preempted], NOW).values():
        for step in steps:
            await world.reconciler.writers.perform(step)
    await world.api.settle()


async def test_a_preempted_job_is_back_in_its_queue_at_once_and_readmitted_when_room_is_free(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("train", 2))))
    await world.reconciler.reconcile_once()
    assert world.suspended("train") is False

    await preempt_train(world)
    evicted = world.workload("job-train")
    assert evicted is not None and world.suspended("train") is True
    assert evicted["status"]["requeueState"]["count"] == 1
    assert parse_time(evicted["status"]["requeueState"]["requeueAt"]) <= NOW
    told = [e["message"] for e in world.api.all(kinds.EVENTS) if e["reason"] == "Preempted"]
    assert any(m.endswith("requeued (attempt 1), back in the queue at once") for m in told), told

    await world.reconciler.reconcile_once()  # the clock has not moved

    assert world.suspended("train") is False


async def test_a_job_whose_pods_do_not_start_in_time_waits_out_a_backoff_before_readmission(
    started: list[World],
) -> None:
    clock = [NOW]
    world = World(
        (kinds.JOBS, held_job("train", 2)), pods_ready_timeout=5.0, clock=lambda: clock[0]
    )
    await start(started, world)
    await world.reconciler.reconcile_once()
    assert world.suspended("train") is False
    # A preemption before does not lengthen the backoff: it doubles with each timeout only.
    await preempt_train(world)
    await world.reconciler.reconcile_once()
    assert world.suspended("train") is False

    clock[0] = NOW + 6  # no pod of it runs
    for _ in range(2):
        await world.reconciler.reconcile_once()
        await world.api.settle()

    evicted = world.workload("job-train")
    assert evicted is not None and world.suspended("train") is True
    assert (condition(evicted, "Evicted") or {}).get("reason") == "PodsReadyTimeout"
    requeue = evicted["status"]["requeueState"]
    assert (requeue["count"], requeue["podsReadyTimeouts"]) == (2, 1)
    back = parse_time(requeue["requeueAt"])
    assert back is not None and NOW + 6 + 10 <= back <= NOW + 6 + 12  # --requeue-base, jitter
    assert evicted["status"]["pendingReason"].startswith("Requeued after eviction; back in the")

    clock[0] = back - 1
    await world.reconciler.reconcile_once()
    assert world.suspended("train") is True

    clock[0] = back + 1
    await world.reconciler.reconcile_once()
    assert world.suspended("train") is False


async def test_a_victim_whose_job_goes_between_the_decision_and_its_writes_is_not_counted(
    started: list[World],
) -> None:
    urgent = held_job("urgent", 4)
    record = workload(urgent, reserved=False)
    record["spec"]["priority"] = 100
    world = await start(
        started,
        World(
            (kinds.JOBS, held_job("train", 2)),
            (kinds.CLUSTER_QUEUES, cluster_queue("cq", {"cpu": "4"}, within_queue="LowerPriority")),
        ),
    )
    await world.reconciler.reconcile_once()
    assert world.suspended("train") is False
    world.api.put(kinds.JOBS, urgent)
    world.api.put(kinds.WORKLOADS, record)
    await world.api.settle()
    state = world.state
    state.begin_pass()
    state.sync(NOW)
    decisions = state.decide(NOW)
    assert [e.gang for e in decisions.evictions] == ["ns/job-train"]
    await world.api.delete(kinds.JOBS, "train", "ns")  # before the pass plans its writes
    await world.api.settle()

    assert state.plan_evictions(decisions.evictions, NOW) == {("ns", "job-train"): []}
    state.retry([("ns", "job-urgent")])  # its admission is not written: the pass skips it
    for _ in range(3):
        await world.reconciler.reconcile_once()
        await world.api.settle()

    assert world.suspended("urgent") is False
    assert world.workload("job-train") is None
    status = world.api.read_back(kinds.CLUSTER_QUEUES, "cq")["status"]
    assert (status["admittedWorkloads"], status.get("pendingWorkloads", 0)) == (1, 0)
