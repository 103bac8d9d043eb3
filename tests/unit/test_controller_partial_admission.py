"""Partial admission of a Job, as its user sees it: a Job that declares a minimum starts with
the most pods its queue has room for, and gets back the size it asked for when it is held."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from controller.api import kinds, kube, names
from controller.workloads.base import Mutation, Patch, PodSetFlavors
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.registry import REGISTRY
from hack.objects import condition
from tests.fakes.workloads import make_job
from tests.unit.controller_world import World, held_job, passes, queue_used, start

JOB = REGISTRY.instance(JobAdapter)


def elastic_job(
    name: str, pods: int, minimum: int, key: str = names.MIN_PARALLELISM_ANNOTATION
) -> dict[str, Any]:
    job = held_job(name, pods)
    job["metadata"].setdefault("annotations", {})[key] = str(minimum)
    return job


def view(obj: dict[str, Any]) -> kube.Job:
    return msgspec.convert(obj, kube.Job)


def job_spec(world: World, name: str) -> dict[str, Any]:
    job = world.api.read_back(kinds.JOBS, name, "ns")
    assert job is not None
    return dict(job["spec"])


async def test_a_job_of_8_with_a_minimum_of_4_on_a_queue_with_room_for_6_runs_6_at_once(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, elastic_job("train", 8, 4)), cpu_quota="6"))
    await passes(world)

    spec = job_spec(world, "train")
    assert spec["suspend"] is False
    assert spec["parallelism"] == 6
    assert spec["completions"] == 8  # a work queue of 8 completions, run 6 at a time
    wl = world.workload("job-train")
    assert wl is not None
    assert wl["spec"]["podSets"][0]["count"] == 8
    assert wl["spec"]["podSets"][0]["minCount"] == 4
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 6
    [group] = world.api.all(kinds.VOLCANO_PODGROUPS)
    assert group["spec"]["minMember"] == 6
    assert queue_used(world, "cpu") == "6"


async def test_lowering_parallelism_for_a_partial_admission_is_no_resize(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, elastic_job("train", 8, 4)), cpu_quota="6"))
    await passes(world, 4)

    assert job_spec(world, "train")["suspend"] is False
    assert not any(e["reason"] == "Resized" for e in world.api.all(kinds.EVENTS))
    wl = world.workload("job-train")
    assert wl is not None and condition(wl, "Evicted") is None


async def test_kueues_min_parallelism_annotation_is_honoured_alike(started: list[World]) -> None:
    job = elastic_job("train", 8, 4, key=names.KUEUE_MIN_PARALLELISM_ANNOTATION)
    world = await start(started, World((kinds.JOBS, job), cpu_quota="5"))
    await passes(world)

    assert job_spec(world, "train")["parallelism"] == 5


async def test_a_job_whose_minimum_does_not_fit_stays_suspended_whole(started: list[World]) -> None:
    world = await start(started, World((kinds.JOBS, elastic_job("train", 8, 4)), cpu_quota="3"))
    await passes(world)

    spec = job_spec(world, "train")
    assert spec["suspend"] is True
    assert spec["parallelism"] == 8


async def test_a_job_that_fits_whole_runs_whole(started: list[World]) -> None:
    world = await start(started, World((kinds.JOBS, elastic_job("train", 8, 4)), cpu_quota="8"))
    await passes(world)

    spec = job_spec(world, "train")
    assert (spec["suspend"], spec["parallelism"]) == (False, 8)
    job = world.api.read_back(kinds.JOBS, "train", "ns")
    assert job is not None
    assert names.PARTIALLY_ADMITTED_ANNOTATION not in job["metadata"].get("annotations", {})


def partially_released(job: dict[str, Any], count: int) -> kube.Job:
    """`job` as its release with `count` pods wrote it."""
    [release] = JOB.release(view(job), [], {"main": PodSetFlavors((), count=count)})
    assert isinstance(release, Patch)
    job["spec"].update(release.body["spec"])
    job["metadata"].setdefault("annotations", {}).update(release.body["metadata"]["annotations"])
    return view(job)


def indexed(pods: int, minimum: int) -> dict[str, Any]:
    job = make_job(parallelism=pods, completions=pods)
    job["spec"]["completionMode"] = "Indexed"
    job["metadata"]["annotations"] = {names.MIN_PARALLELISM_ANNOTATION: str(minimum)}
    editor = Editor(job)
    JOB.default(editor, Mutation("research"))
    return editor.doc


def test_an_indexed_job_with_completions_equal_to_parallelism_has_both_lowered() -> None:
    released = partially_released(indexed(8, 4), 6)
    assert (released.spec.parallelism, released.spec.completions) == (6, 6)


def test_a_partially_released_job_still_asks_for_its_full_size_with_its_minimum() -> None:
    released = partially_released(indexed(8, 4), 6)
    [gang] = JOB.gangs(released)
    [pod_set] = gang.pod_sets
    assert (pod_set.count, pod_set.min_count, gang.min_member) == (8, 4, 8)


def test_a_held_job_gets_back_the_size_its_user_asked_for() -> None:
    released = partially_released(indexed(8, 4), 6)
    released.spec.suspend = False
    writes = JOB.hold(released, [])
    restore = [
        w for w in writes if isinstance(w, Patch) and "parallelism" in w.body.get("spec", {})
    ]
    assert [w.body for w in restore] == [
        {
            "metadata": {"annotations": {names.PARTIALLY_ADMITTED_ANNOTATION: None}},
            "spec": {"parallelism": 8, "completions": 8},
        }
    ]


def test_a_job_its_user_resized_after_a_partial_release_keeps_the_users_size_when_held() -> None:
    released = partially_released(indexed(8, 4), 6)
    released.spec.parallelism = released.spec.completions = 10
    [gang] = JOB.gangs(released)
    # A resize: evicted and requeued with it (no smaller count stands for it meanwhile).
    assert (gang.pod_sets[0].count, gang.pod_sets[0].min_count) == (10, None)
    writes = JOB.hold(released, [])
    bodies = [w.body for w in writes if isinstance(w, Patch)]
    assert {"metadata": {"annotations": {names.PARTIALLY_ADMITTED_ANNOTATION: None}}} in bodies
    assert not any("parallelism" in b.get("spec", {}) for b in bodies)


def test_the_partial_release_record_is_readable_json() -> None:
    released = partially_released(indexed(8, 4), 6)
    kept = json.loads(released.metadata.annotations[names.PARTIALLY_ADMITTED_ANNOTATION])
    assert kept == {"parallelism": 8, "completions": 8, "released": 6}


async def scaled_down(world: World, name: str, parallelism: int) -> None:
    job = world.api.read_back(kinds.JOBS, name, "ns")
    assert job is not None
    job["spec"]["parallelism"] = parallelism
    world.api.put(kinds.JOBS, job)
    await world.api.settle()


async def test_a_job_scaled_down_gives_its_quota_back_in_the_next_pass_without_eviction(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("train", 4)), cpu_quota="4"))
    await passes(world)
    assert queue_used(world, "cpu") == "4"

    await scaled_down(world, "train", 2)
    await passes(world, 1)

    assert queue_used(world, "cpu") == "2"
    assert job_spec(world, "train")["suspend"] is False
    wl = world.workload("job-train")
    assert wl is not None and condition(wl, "Evicted") is None
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 2
    [group] = world.api.all(kinds.VOLCANO_PODGROUPS)
    assert group["spec"]["minMember"] == 2
    reasons = [e["reason"] for e in world.api.all(kinds.EVENTS)]
    assert "ScaledDown" in reasons and "Resized" not in reasons


async def test_the_quota_a_scaled_down_job_gives_back_admits_the_next_job(
    started: list[World],
) -> None:
    world = await start(
        started,
        World((kinds.JOBS, held_job("first", 4)), (kinds.JOBS, held_job("next", 2)), cpu_quota="4"),
    )
    await passes(world)
    assert [job_spec(world, n)["suspend"] for n in ("first", "next")] == [False, True]

    await scaled_down(world, "first", 2)
    await passes(world, 2)

    assert [job_spec(world, n)["suspend"] for n in ("first", "next")] == [False, False]
    assert queue_used(world, "cpu") == "4"


async def test_a_partially_admitted_job_scaled_down_below_its_admission_runs_on(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, elastic_job("train", 8, 4)), cpu_quota="6"))
    await passes(world)
    await scaled_down(world, "train", 5)
    await passes(world, 2)

    assert queue_used(world, "cpu") == "5"
    wl = world.workload("job-train")
    assert wl is not None and condition(wl, "Evicted") is None
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 5


async def test_a_job_scaled_up_after_a_partial_admission_is_requeued_with_its_new_size(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, elastic_job("train", 8, 4)), cpu_quota="6"))
    await passes(world)
    await scaled_down(world, "train", 7)  # (up: more than the 6 admitted)
    await passes(world, 2)

    # Evicted for it, then admitted again at what its queue can take of the new size.
    assert [e for e in world.api.all(kinds.EVENTS) if e["reason"] == "Resized"]
    wl = world.workload("job-train")
    assert wl is not None
    assert wl["status"]["requeueState"]["count"] == 1
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 6
    assert queue_used(world, "cpu") == "6"


async def test_a_partially_admitted_job_raised_back_to_its_full_size_is_requeued_not_run_whole(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, elastic_job("train", 8, 4)), cpu_quota="6"))
    await passes(world)
    await scaled_down(world, "train", 8)  # (up, to what it first asked for)
    await passes(world, 3)

    # Evicted for the resize, then admitted again with the 6 pods there is room for.
    assert "Resized" in [e["reason"] for e in world.api.all(kinds.EVENTS)]
    spec = job_spec(world, "train")
    assert (spec["suspend"], spec["parallelism"]) == (False, 6)
    assert queue_used(world, "cpu") == "6"


def test_a_job_that_is_not_indexed_keeps_its_completions_even_when_kueue_asks_otherwise() -> None:
    job = make_job(parallelism=8, completions=8)
    job["metadata"]["annotations"] = {
        names.MIN_PARALLELISM_ANNOTATION: "4",
        names.KUEUE_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION: "true",
    }
    editor = Editor(job)
    JOB.default(editor, Mutation("research"))
    released = partially_released(editor.doc, 6)
    assert (released.spec.parallelism, released.spec.completions) == (6, 8)


def test_an_indexed_job_of_more_completions_than_parallelism_keeps_them_even_when_asked() -> None:
    job = indexed(8, 4)
    job["spec"]["completions"] = 16
    assert partially_released(json.loads(json.dumps(job)), 6).spec.completions == 16
    # Kubernetes would refuse to give such a Job back 8 of 16 (an Indexed Job's completions
    # change only to its new parallelism): Kueue's annotation is honoured only where they match.
    job["metadata"]["annotations"][names.KUEUE_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION] = "true"
    assert partially_released(job, 6).spec.completions == 16


async def never_runs_beyond_its_admission(world: World, name: str, passes_: int = 4) -> None:
    """Pass after pass, the Job runs no more pods at once than its admission charges."""
    for _ in range(passes_):
        await passes(world, 1)
        running, charged = running_within_quota(world, name)
        assert running <= charged


def running_within_quota(world: World, name: str) -> tuple[int, int]:
    """(pods the Job runs at once, pods its admission charges); (0, ...) while it is held."""
    spec = job_spec(world, name)
    wl = world.workload(f"job-{name}")
    assert wl is not None
    admission = wl["status"].get("admission")
    charged = admission["podSetAssignments"][0]["count"] if admission else 0
    return (0 if spec.get("suspend") else spec["parallelism"]), charged


async def test_a_job_scaled_down_and_back_up_never_runs_more_pods_than_its_admission_charges(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, elastic_job("train", 8, 4)), cpu_quota="8"))
    await passes(world)
    await scaled_down(world, "train", 6)
    await passes(world, 2)
    assert queue_used(world, "cpu") == "6"

    await scaled_down(world, "train", 8)
    await never_runs_beyond_its_admission(world, "train")
    assert [e for e in world.api.all(kinds.EVENTS) if e["reason"] == "Resized"]


async def test_a_partial_job_scaled_down_and_back_to_its_release_is_charged_what_it_runs(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, elastic_job("train", 8, 4)), cpu_quota="6"))
    await passes(world)
    await scaled_down(world, "train", 5)
    await passes(world, 2)
    assert queue_used(world, "cpu") == "5"

    await scaled_down(world, "train", 6)
    await never_runs_beyond_its_admission(world, "train")


async def test_a_waiting_elastic_job_resized_before_it_is_admitted_runs_without_a_resize_loop(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, held_job("blocker", 6)), cpu_quota="6"))
    await passes(world)
    world.api.put(kinds.JOBS, elastic_job("train", 8, 4))
    await world.api.settle()
    await passes(world)
    await scaled_down(world, "train", 10)  # while it waits
    await passes(world)
    await scaled_down(world, "blocker", 1)
    await passes(world, 6)

    assert not [e for e in world.api.all(kinds.EVENTS) if e["reason"] == "Resized"]
    assert running_within_quota(world, "train") == (5, 5)
