"""An admitted gang whose release keeps failing, against an API server in memory (issue 33: on
a cluster without Volcano a Job was admitted, held its quota and stayed suspended for good,
with nothing said): the Workload and a Warning Event say why, and after --release-timeout the
gang is evicted, its quota given back, and requeued after a backoff."""

from __future__ import annotations

from typing import Any

from controller.api import kinds
from controller.api.times import parse_time
from hack.objects import condition, pending_reason
from tests.unit.controller_world import NOW, World, held_job, start

JSON = dict[str, Any]
NOT_RELEASED = (
    "Admitted but not released: creating its PodGroup job-train (scheduling.volcano.sh/v1beta1)"
    ' failed: HTTP 404: {"reason": "Injected"}'
)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


async def passes(world: World, n: int = 2) -> None:
    for _ in range(n):
        await world.reconciler.reconcile_once()
        await world.api.settle()


def warnings(world: World, reason: str) -> list[str]:
    return [
        e["message"]
        for e in world.api.all(kinds.EVENTS)
        if e["reason"] == reason and e["type"] == "Warning"
    ]


def cpu_used(world: World) -> str:
    cq = world.api.read_back(kinds.CLUSTER_QUEUES, "cq")
    assert cq is not None
    return str(cq["status"]["flavorsUsage"][0]["resources"][0]["total"])


async def without_podgroups(started: list[World], clock: Clock, **settings: float | None) -> World:
    """A Job of 2 pods on a cluster whose API server does not serve Volcano's PodGroups."""
    world = World((kinds.JOBS, held_job("train", 2)), clock=clock, **settings)
    world.api.failing[("create", "podgroups")] = 404
    return await start(started, world)


async def test_a_release_that_keeps_failing_is_visible_on_the_workload_and_in_a_warning_event(
    started: list[World],
) -> None:
    clock = Clock()
    world = await without_podgroups(started, clock)

    await passes(world, 3)

    wl = world.workload("job-train")
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "True"  # admitted
    assert world.suspended("train") is True  # and not released
    reason = pending_reason(wl)
    assert reason.startswith(NOT_RELEASED), reason
    evict_at = "2027-01-15T08:02:00Z"  # its first failure, NOW, and --release-timeout 120
    assert reason.endswith(
        f"; tried again every pass: if it still fails at {evict_at} the gang is evicted"
        " (its quota given back) and requeued"
    )
    assert warnings(world, "ReleaseFailed") == [reason]  # once, while it says the same
    assert cpu_used(world) == "2"


async def test_a_release_that_keeps_failing_gives_the_quota_back_after_the_release_timeout(
    started: list[World],
) -> None:
    clock = Clock()
    world = await without_podgroups(started, clock)
    await passes(world, 3)

    clock.now = NOW + 119
    await passes(world)
    assert (condition(world.workload("job-train"), "QuotaReserved") or {}).get("status") == "True"

    clock.now = NOW + 121
    await passes(world)

    wl = world.workload("job-train")
    evicted = condition(wl, "Evicted") or {}
    assert evicted.get("status") == "True" and evicted.get("reason") == "ReleaseFailed"
    assert evicted["message"].startswith("its release kept failing for 121s (")
    assert evicted["message"].endswith(
        "creating its PodGroup job-train (scheduling.volcano.sh/v1beta1) failed: HTTP 404:"
        ' {"reason": "Injected"}'
    )
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "False"
    assert wl is not None and wl["status"].get("admission") is None
    requeue = wl["status"]["requeueState"]
    assert (requeue["count"], requeue["releaseFailures"], requeue["podsReadyTimeouts"]) == (1, 1, 0)
    back = parse_time(requeue["requeueAt"])
    assert back is not None and NOW + 121 + 10 <= back <= NOW + 121 + 12  # --requeue-base
    assert pending_reason(wl).startswith("Requeued after eviction; back in the queue at")
    assert "(evicted: its release kept failing for 121s" in pending_reason(wl)
    [told] = warnings(world, "ReleaseFailed")[-1:]
    assert told.startswith("Evicted: its release kept failing") and "back in the queue in 1" in told
    assert world.suspended("train") is True
    assert cpu_used(world) == "0"
    labels = {"cluster_queue": "cq", "reason": "ReleaseFailed"}
    assert world.metrics.registry.get_sample_value("kohort_evicted_workloads_total", labels) == 1

    # Readmitted after the backoff; a second eviction for it would wait twice as long.
    clock.now = back + 1
    await passes(world)
    assert (condition(world.workload("job-train"), "QuotaReserved") or {}).get("status") == "True"


async def test_a_release_that_fails_then_goes_through_is_released_and_never_evicted_for_it(
    started: list[World],
) -> None:
    clock = Clock()
    world = await without_podgroups(started, clock)
    await passes(world, 3)
    assert pending_reason(world.workload("job-train")).startswith(NOT_RELEASED)

    del world.api.failing[("create", "podgroups")]  # Volcano installed
    await passes(world)

    assert world.suspended("train") is False
    assert world.api.read_back(kinds.VOLCANO_PODGROUPS, "job-train", "ns") is not None
    assert pending_reason(world.workload("job-train")) == ""
    clock.now = NOW + 600
    await passes(world)
    wl = world.workload("job-train")
    assert (condition(wl, "Evicted") or {}).get("status") != "True"
    assert world.suspended("train") is False


async def test_a_release_failing_past_the_pods_ready_deadline_is_evicted_for_its_release(
    started: list[World],
) -> None:
    """The pods-ready timeout counts from the admission: a gang past it while its release
    fails is evicted for what kept it from starting."""
    clock = Clock()
    world = await without_podgroups(started, clock, pods_ready_timeout=30.0, release_timeout=None)
    await passes(world, 3)
    assert "(--release-timeout 0: it is never evicted for it)" in pending_reason(
        world.workload("job-train")
    )

    clock.now = NOW + 31
    await passes(world)

    evicted = condition(world.workload("job-train"), "Evicted") or {}
    assert evicted.get("reason") == "ReleaseFailed"


async def test_with_no_release_timeout_a_failing_release_keeps_its_quota_and_is_tried_again(
    started: list[World],
) -> None:
    clock = Clock()
    world = await without_podgroups(started, clock, release_timeout=None)
    await passes(world, 3)

    clock.now = NOW + 3600
    await passes(world)

    wl = world.workload("job-train")
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "True"
    assert pending_reason(wl).startswith(NOT_RELEASED)
    assert world.api.writes[("create", "podgroups")] == 0  # (refused before it is counted)


async def test_a_refused_unsuspend_is_a_failing_release_too(started: list[World]) -> None:
    clock = Clock()
    world = await start(started, World((kinds.JOBS, held_job("train", 2)), clock=clock))
    world.api.failing[("patch", "jobs")] = 403
    await passes(world, 3)

    assert pending_reason(world.workload("job-train")).startswith(
        'Admitted but not released: patching Job train failed: HTTP 403: {"reason": "Injected"}'
    )
    clock.now = NOW + 121
    await passes(world)
    evicted = condition(world.workload("job-train"), "Evicted") or {}
    assert evicted.get("reason") == "ReleaseFailed"
