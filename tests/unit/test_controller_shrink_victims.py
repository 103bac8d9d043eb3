"""A lender's Job reclaiming quota from a borrowing elastic Job, as their users see it: the
borrower is shrunk in place to what it may keep (its parallelism lowered, never below its
minimum) instead of being evicted, and the lender's Job runs."""

from __future__ import annotations

from typing import Any

from controller.api import kinds
from controller.workloads.base import Mutation
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.registry import REGISTRY, Registry
from hack.objects import cluster_queue, condition, local_queue
from tests.fakes.workloads import make_job
from tests.unit.controller_world import World, passes, queue_used, start
from tests.unit.test_controller_partial_admission import elastic_job, job_spec


def lender_job(name: str, pods: int) -> dict[str, Any]:
    """A Job of the lending queue's LocalQueue, as kohort's webhook stores it."""
    job = make_job(name, namespace="ns", queue="lender-lq", parallelism=pods, completions=pods)
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    editor = Editor(job)
    REGISTRY.instance(JobAdapter).default(editor, Mutation("lender-lq"))
    return editor.doc


def cohort_world(borrower: dict[str, Any], registry: Registry = REGISTRY, *, own: int = 4) -> World:
    """cq (`own` CPUs) borrows from lender (8 - `own` CPUs, reclaims what it lent) in one
    cohort."""
    lender = cluster_queue("lender", {"cpu": str(8 - own)}, cohort="all", reclaim="Any")
    return World(
        (kinds.CLUSTER_QUEUES, cluster_queue("cq", {"cpu": str(own)}, cohort="all")),
        (kinds.CLUSTER_QUEUES, lender),
        (kinds.LOCAL_QUEUES, local_queue("ns", "lender-lq", "lender")),
        (kinds.JOBS, borrower),
        registry=registry,
    )


async def lender_comes(world: World, pods: int, passes_after: int) -> None:
    """The lender's Job `mine` of `pods` pods is created; then some passes."""
    world.api.put(kinds.JOBS, lender_job("mine", pods))
    await world.api.settle()
    await passes(world, passes_after)


async def test_a_borrowing_job_of_8_min_4_is_shrunk_to_4_when_the_lenders_job_comes(
    started: list[World],
) -> None:
    world = await start(started, cohort_world(elastic_job("wide", 8, 4)))
    await passes(world)
    assert (job_spec(world, "wide")["suspend"], job_spec(world, "wide")["parallelism"]) == (
        False,
        8,
    )

    await lender_comes(world, 4, 3)

    spec = job_spec(world, "wide")
    assert (spec["suspend"], spec["parallelism"]) == (False, 4)
    assert job_spec(world, "mine")["suspend"] is False
    wl = world.workload("job-wide")
    assert wl is not None
    assert condition(wl, "Evicted") is None
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 4
    shrunk = condition(wl, "Shrunk")
    assert shrunk is not None and shrunk["status"] == "True"
    assert shrunk["reason"] == "InCohortReclamation"
    assert "job-mine" in shrunk["message"] and "shrunk to 4 pods" in shrunk["message"]
    events = [e for e in world.api.all(kinds.EVENTS) if e["reason"] == "Shrunk"]
    assert [e["involvedObject"]["name"] for e in events] == ["wide"]
    assert not [e for e in world.api.all(kinds.EVENTS) if e["reason"] == "Resized"]
    assert queue_used(world, "cpu") == "4"
    assert queue_used(world, "cpu", "lender") == "4"


async def test_a_shrink_keeps_the_borrowers_own_quota_where_evicting_it_whole_may_not(
    started: list[World],
) -> None:
    # Evicting wide whole would push cq below its nominal 4 CPUs: only the shrink may reclaim.
    world = await start(started, cohort_world(elastic_job("wide", 8, 4)))
    await passes(world)
    await lender_comes(world, 2, 3)

    assert job_spec(world, "wide")["parallelism"] == 6
    assert job_spec(world, "mine")["suspend"] is False
    await passes(world, 2)  # (and stays so: no resize, no second shrink)
    assert job_spec(world, "wide")["parallelism"] == 6
    wl = world.workload("job-wide")
    assert wl is not None and condition(wl, "Evicted") is None


async def test_a_borrowing_job_at_its_minimum_is_evicted_whole(started: list[World]) -> None:
    # (cq has no quota of its own: evicting wide leaves it at its nominal quota)
    world = await start(started, cohort_world(elastic_job("wide", 8, 8), own=0))
    await passes(world)
    await lender_comes(world, 4, 3)

    assert job_spec(world, "wide")["suspend"] is True
    assert job_spec(world, "mine")["suspend"] is False
    wl = world.workload("job-wide")
    assert wl is not None and condition(wl, "Shrunk") is None


class RigidJobAdapter(JobAdapter):
    """Jobs that say they may not shrink while running."""

    def shrinks_in_place(self, owner: Any) -> bool:
        return False


async def test_a_gang_whose_kind_cannot_shrink_in_place_is_evicted_not_shrunk(
    started: list[World],
) -> None:
    registry = Registry([RigidJobAdapter()])
    world = await start(started, cohort_world(elastic_job("wide", 8, 4), registry, own=0))
    await passes(world)
    assert job_spec(world, "wide")["parallelism"] == 8
    await lender_comes(world, 4, 3)

    assert job_spec(world, "mine")["suspend"] is False
    reasons = [(e["involvedObject"]["name"], e["reason"]) for e in world.api.all(kinds.EVENTS)]
    assert ("wide", "Preempted") in reasons
    assert not [r for r in reasons if r[1] == "Shrunk"]


async def test_a_shrunk_job_seen_at_its_old_parallelism_is_lowered_again_not_evicted_as_resized(
    started: list[World],
) -> None:
    # The record of the shrink reached the controller, the Job's lowered parallelism not (or
    # the write was lost): moments after the shrink, that is no resize.
    world = await start(started, cohort_world(elastic_job("wide", 8, 4)))
    await passes(world)
    await lender_comes(world, 4, 2)
    job = world.api.read_back(kinds.JOBS, "wide", "ns")
    assert job is not None and job["spec"]["parallelism"] == 4
    job["spec"]["parallelism"] = 8
    world.api.put(kinds.JOBS, job)
    await world.api.settle()
    await passes(world, 2)

    assert job_spec(world, "wide")["parallelism"] == 4
    assert job_spec(world, "wide")["suspend"] is False
    assert not [e for e in world.api.all(kinds.EVENTS) if e["reason"] == "Resized"]
    assert queue_used(world, "cpu") == "4"
