"""JobSet: one gang of every pod of its replicated jobs, held by spec.suspend; the Jobs it makes
are no gangs of their own."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import orjson
import pytest

from controller.api import kinds, kube, names
from controller.settings import Settings as ControllerSettings
from controller.state.cluster import ClusterState
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Finished, Mutation
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.jobset import JobSetAdapter
from controller.workloads.pod import PodAdapter
from controller.workloads.registry import REGISTRY
from controller.workloads.suspended import TEMPLATES_BEFORE_FLAVORS
from hack.objects import flavored_cluster_queue, resource_flavor
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_job, make_jobset, make_pod
from tests.unit import suspended_kinds as support
from tests.unit.controller_world import World, start
from webhook.mutation import mutate
from webhook.reviews import patch_of
from webhook.server import decode_for_mutation

ADAPTER = REGISTRY.instance(JobSetAdapter)
JOBSET_CONTROLLER = "system:serviceaccount:jobset-system:jobset-controller-manager"


def test_a_jobset_of_two_replicated_jobs_is_one_gang_of_all_their_pods() -> None:
    jobset = support.view(
        ADAPTER, support.stored(make_jobset(jobs={"driver": (1, 1), "workers": (2, 4)}))
    )

    [gang] = ADAPTER.gangs(jobset)

    assert (gang.name, gang.min_member) == ("jobset-trainer", 1 + 2 * 4)
    assert [(p.name, p.count) for p in gang.pod_sets] == [("driver", 1), ("workers", 8)]


def test_a_replicated_job_counts_the_pods_each_of_its_jobs_runs_at_once() -> None:
    raw = make_jobset(jobs={"workers": (3, 4)})
    spec = raw["spec"]["replicatedJobs"][0]["template"]["spec"]
    spec["completions"] = 2  # min(parallelism, completions) run at once
    [gang] = ADAPTER.gangs(support.view(ADAPTER, support.stored(raw)))
    assert [(p.name, p.count) for p in gang.pod_sets] == [("workers", 6)]

    del spec["parallelism"], spec["completions"]  # both default to 1
    [gang] = ADAPTER.gangs(support.view(ADAPTER, support.stored(raw)))
    assert gang.min_member == 3


def test_a_replicated_job_of_no_pods_is_no_pod_set_of_its_gang() -> None:
    jobset = support.stored(make_jobset(jobs={"driver": (1, 1), "idle": (0, 4)}))
    [gang] = ADAPTER.gangs(support.view(ADAPTER, jobset))
    assert [p.name for p in gang.pod_sets] == ["driver"]


def test_a_new_jobset_is_suspended_and_every_replicated_jobs_pod_template_joins_its_gang() -> None:
    review = make_review(make_jobset())
    assert review["request"]["resource"]["resource"] == "jobsets"

    ops = patch_of(mutate(review, support.SETTINGS))

    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops
    paths = {op["path"] for op in ops}
    for i in (0, 1):
        assert f"/spec/replicatedJobs/{i}/template/spec/template/metadata" in paths
        assert f"/spec/replicatedJobs/{i}/template/spec/template/spec/schedulerName" in paths
    jobset = support.mutated(make_jobset())
    assert jobset["metadata"]["labels"][names.QUEUE_LABEL] == "research"
    for template in support.templates(ADAPTER, jobset):
        assert support.decorated(template, "jobset-trainer")
        assert not support.gated(template)  # its pods are a Job's: made only once it is released


def test_a_jobset_must_be_created_suspended_and_only_kohort_unsuspends_it() -> None:
    assert not support.allowed(make_jobset(suspend=False))
    held = support.mutated(make_jobset())
    assert support.allowed(held)

    assert not support.allowed(support.unsuspended(held), old=held)
    assert support.allowed(support.unsuspended(held), old=held, user=support.CONTROLLER)


@pytest.mark.parametrize(
    ("change", "want"),
    [
        (
            lambda js: js["spec"].update(startupPolicy={"startupPolicyOrder": "InOrder"}),
            "spec.startupPolicy.startupPolicyOrder: InOrder",
        ),
        (
            lambda js: js["spec"]["replicatedJobs"][1].update(dependsOn=[{"name": "driver"}]),
            "spec.replicatedJobs[1].dependsOn",
        ),
        (
            lambda js: js["spec"]["replicatedJobs"][0].update(replicas=-1),
            "spec.replicatedJobs[0].replicas must be a non-negative integer",
        ),
        (
            lambda js: js["spec"].update(
                replicatedJobs=[
                    dict(js["spec"]["replicatedJobs"][0], name=f"j{i}") for i in range(9)
                ]
            ),
            "at most 8 pod sets",
        ),
        (
            lambda js: js["metadata"].update(
                annotations={"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}
            ),
            "alpha.jobset.sigs.k8s.io/exclusive-topology without"
            " alpha.jobset.sigs.k8s.io/node-selector",
        ),
        (
            lambda js: js["spec"]["replicatedJobs"][1]["template"].update(
                metadata={"annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}}
            ),
            "each of workers's Jobs wait for its first one to be scheduled",
        ),
        (
            lambda js: js["spec"]["replicatedJobs"][1].update(name="driver", replicas=0),
            "pod set 'driver'",
        ),
    ],
    ids=[
        "in order",
        "depends on",
        "negative replicas",
        "nine replicated jobs",
        "exclusive placement by the pod webhook",
        "a replicated job placed exclusively by the pod webhook",
        "a replicated job of no pods named like another",
    ],
)
def test_a_jobset_that_cannot_start_as_one_gang_is_denied(change: Any, want: str) -> None:
    jobset = make_jobset()
    change(jobset)
    assert want in support.denial(jobset)
    assert not support.allowed(jobset)


def test_a_jobset_placed_exclusively_with_the_node_selector_strategy_is_one_gang() -> None:
    jobset = make_jobset()
    jobset["metadata"]["annotations"] = {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack",
        "alpha.jobset.sigs.k8s.io/node-selector": "true",
    }
    [gang] = ADAPTER.gangs(support.view(ADAPTER, support.stored(jobset)))
    assert gang.min_member == 1 + 2 * 4


def test_a_new_jobsets_patch_puts_the_queue_label_on_every_replicated_jobs_job_template() -> None:
    ops = patch_of(mutate(make_review(make_jobset()), support.SETTINGS))
    assert {op["path"] for op in ops} >= {
        "/spec/replicatedJobs/0/template/metadata",
        "/spec/replicatedJobs/1/template/metadata",
    }

    jobset = support.mutated(make_jobset())

    for job in jobset["spec"]["replicatedJobs"]:
        assert job["template"]["metadata"]["labels"] == {names.QUEUE_LABEL: "research"}


def test_an_update_keeps_the_queue_label_a_jobs_template_was_created_with() -> None:
    held = support.stored(make_jobset())
    moved = json.loads(json.dumps(held))
    moved["metadata"]["labels"][names.QUEUE_LABEL] = "other"
    del moved["spec"]["replicatedJobs"][0]["template"]["metadata"]
    before_kohort = json.loads(json.dumps(held))
    for job in before_kohort["spec"]["replicatedJobs"]:
        del job["template"]["metadata"]

    kept = support.updated(moved, old=held)
    left = support.updated(before_kohort, old=before_kohort)

    for job in kept["spec"]["replicatedJobs"]:  # the JobSet webhook refuses any change there
        assert job["template"]["metadata"]["labels"] == {names.QUEUE_LABEL: "research"}
    assert left == before_kohort


def test_releasing_a_jobset_admitted_on_a_flavor_puts_the_flavors_selector_into_every_replicated_jobs_template_and_hold_puts_the_originals_back() -> (  # noqa: E501
    None
):
    raw = make_jobset()
    raw["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {
        "zone": "a"
    }
    held = support.stored(raw)

    released, held_again = support.released_and_held(ADAPTER, held)

    assert released["spec"]["suspend"] is False
    driver, workers = support.templates(ADAPTER, released)
    assert driver["spec"]["nodeSelector"] == {"gpu": "h100"}
    assert workers["spec"]["nodeSelector"] == {"zone": "a", "gpu": "h100"}
    assert (
        driver["spec"]["tolerations"] == workers["spec"]["tolerations"] == [support.GPU_TOLERATION]
    )
    kept = json.loads(released["metadata"]["annotations"][TEMPLATES_BEFORE_FLAVORS])
    assert kept == {"driver": {}, "workers": {"nodeSelector": {"zone": "a"}}}
    # Released once: nothing more to write.
    assert ADAPTER.release(support.view(ADAPTER, released), []) == []

    assert held_again["spec"]["suspend"] is True
    assert support.templates(ADAPTER, held_again) == support.templates(ADAPTER, held)
    assert TEMPLATES_BEFORE_FLAVORS not in held_again["metadata"].get("annotations", {})
    assert ADAPTER.hold(support.view(ADAPTER, held_again), []) == []


def test_a_released_jobsets_gang_is_the_one_its_user_asked_for_not_its_flavors() -> None:
    held = support.stored(make_jobset())
    [before] = ADAPTER.gangs(support.view(ADAPTER, held))

    released, _ = support.released_and_held(ADAPTER, held)

    [after] = ADAPTER.gangs(support.view(ADAPTER, released))
    assert after == before
    assert all(not p.node_selector for p in after.pod_sets)


def test_a_release_is_computed_from_one_version_of_the_jobset() -> None:
    held = support.stored(make_jobset())
    [release] = ADAPTER.release(support.view(ADAPTER, held), [])
    assert release.body[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "1"}
    assert support.applied(held, release)["spec"]["suspend"] is False


def test_a_jobset_is_finished_by_its_terminal_state() -> None:
    jobset = support.view(ADAPTER, support.stored(make_jobset()))
    assert ADAPTER.finished(jobset) is None
    jobset.status.terminal_state = "Completed"
    assert ADAPTER.finished(jobset) is Finished.SUCCEEDED
    jobset.status.terminal_state = ""
    jobset.status.conditions.append(kube.Condition(type="Failed", status="True"))
    assert ADAPTER.finished(jobset) is Finished.FAILED


# -- the Jobs a JobSet makes -----------------------------------------------------------------


def job_of(jobset: dict[str, Any], index: int = 1, *, suspend: bool = True) -> dict[str, Any]:
    """The Job the JobSet controller makes from a replicated job of `jobset`."""
    replicated = jobset["spec"]["replicatedJobs"][index]
    job = make_job(f"trainer-{replicated['name']}-0", queue=None, suspend=suspend)
    job["spec"] = dict(replicated["template"]["spec"], suspend=suspend)
    job["metadata"]["labels"] = {names.JOBSET_REPLICATED_JOB_LABEL: replicated["name"]}
    job["metadata"]["ownerReferences"] = [
        {
            "apiVersion": kinds.JOBSETS.api_version,
            "kind": "JobSet",
            "name": jobset["metadata"]["name"],
            "uid": jobset["metadata"]["uid"],
            "controller": True,
        }
    ]
    return job


def test_a_job_made_by_a_jobset_is_not_a_gang_of_its_own() -> None:
    job = job_of(support.stored(make_jobset()))
    job["metadata"]["labels"][names.QUEUE_LABEL] = "research"

    assert REGISTRY.instance(JobAdapter).gangs(msgspec.convert(job, kube.Job)) == []
    assert patch_of(mutate(make_review(job), support.SETTINGS)) == []


@pytest.mark.parametrize("default_queue", [None, "default"])
def test_the_webhook_leaves_a_jobsets_jobs_to_the_jobset_controller(
    default_queue: str | None,
) -> None:
    created = job_of(support.stored(make_jobset()))
    if default_queue is None:
        created["metadata"]["labels"][names.QUEUE_LABEL] = "research"
    body = orjson.dumps(make_review(created))
    for decode in (orjson.loads, decode_for_mutation):  # the whole review, and the pruned one
        response = mutate(decode(body), support.SETTINGS, default_queue=default_queue)
        assert response["response"]["allowed"] is True
        assert patch_of(response) == []
    # Neither its creation nor its unsuspension by the JobSet controller is a bypass.
    assert support.allowed(created, user=JOBSET_CONTROLLER)
    assert support.allowed(support.unsuspended(created), old=created, user=JOBSET_CONTROLLER)


def test_a_jobsets_job_is_made_and_unsuspended_only_by_the_jobset_controller() -> None:
    created = job_of(support.stored(make_jobset()))
    created["metadata"]["labels"][names.QUEUE_LABEL] = "research"
    assert not support.allowed(created), "a Job of a user's own that claims a JobSet owner"
    assert not support.allowed(support.unsuspended(created), old=created)
    detached = dict(created, metadata={**created["metadata"], "ownerReferences": []})
    assert not support.allowed(detached, old=created), "taking it away from its JobSet"
    labels = {**created["metadata"]["labels"], "team": "x"}
    relabelled = dict(created, metadata={**created["metadata"], "labels": labels})
    assert support.allowed(relabelled, old=created), "its labels are the user's to change"


def test_a_managed_job_cannot_be_handed_to_a_jobset() -> None:
    held = support.mutated(make_job())
    claimed = job_of(support.stored(make_jobset()))
    claimed["metadata"] = dict(
        held["metadata"], ownerReferences=claimed["metadata"]["ownerReferences"]
    )
    claimed["spec"] = held["spec"]
    assert not support.allowed(claimed, old=held)


def test_the_pods_of_a_jobsets_jobs_join_the_jobsets_gang() -> None:
    jobset = support.stored(make_jobset())
    job = job_of(jobset, suspend=False)
    template = job["spec"]["template"]
    pod = make_pod(
        "trainer-workers-0-0-abcde", owner_kind="Job", labels=template["metadata"]["labels"]
    )
    pod["metadata"]["labels"][names.JOBSET_REPLICATED_JOB_LABEL] = "workers"
    editor = Editor(pod)
    REGISTRY.instance(PodAdapter).default(editor, Mutation("research"))
    assert not support.gated(editor.doc)  # a Job's pod: its Job was released with the JobSet
    assert editor.doc["metadata"]["labels"][names.POD_GROUP_LABEL] == "jobset-trainer"

    job["metadata"]["labels"][names.QUEUE_LABEL] = "research"  # copied from its template
    state = ClusterState(ControllerSettings(), PodGroupSettings())
    for kind, obj, model in (
        (kinds.JOBS, job, kube.Job),
        (kinds.JOBSETS, jobset, kube.JobSet),
        (kinds.PODS, editor.doc, kube.Pod),
    ):
        state.observe(kind, None, msgspec.convert(obj, model))

    [gang] = list(state.index)
    assert gang.key == ("team-a", "jobset-trainer")
    assert gang.owner is not None and gang.owner.kind == kinds.JOBSETS
    assert list(gang.pods) == ["trainer-workers-0-0-abcde"]
    assert ADAPTER.pod_set_of(gang.pods["trainer-workers-0-0-abcde"]) == "workers"


def test_a_jobset_made_by_a_controller_kohort_does_not_manage_is_a_gang_of_its_own() -> None:
    jobset = make_jobset()
    jobset["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": "t",
            "controller": True,
        }
    ]
    held = support.stored(jobset)
    assert held["spec"]["suspend"] is True
    assert not support.allowed(jobset)  # unheld, it would run outside its queue
    [gang] = ADAPTER.gangs(support.view(ADAPTER, held))
    assert (gang.name, gang.min_member) == ("jobset-trainer", 1 + 2 * 4)


# -- through the controller, on an API server in memory --------------------------------------


async def test_a_jobset_admitted_on_a_flavor_is_unsuspended_with_it_in_one_write(
    started: list[World],
) -> None:
    h100 = resource_flavor("h100", node_labels={"gpu": "h100"})
    jobset = support.stored(
        make_jobset(namespace="ns", queue="lq", memory=None, jobs={"a": (1, 1), "b": (1, 2)})
    )
    world = await start(
        started,
        World(
            (kinds.RESOURCE_FLAVORS, h100),
            (kinds.CLUSTER_QUEUES, flavored_cluster_queue("cq", {"h100": {"cpu": "4"}})),
            (kinds.JOBSETS, jobset),
        ),
    )

    await world.reconciler.reconcile_once()

    now = world.api.read_back(kinds.JOBSETS, "trainer", "ns")
    assert now is not None and now["spec"]["suspend"] is False
    assert [t["spec"]["nodeSelector"] for t in support.templates(ADAPTER, now)] == [
        {"gpu": "h100"}
    ] * 2
    assert [w for w in world.api.log if w[1] == "jobsets"] == [("patch", "jobsets", "trainer")]
    wl = world.workload("jobset-trainer")
    assert wl is not None
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("a", 1), ("b", 2)]
