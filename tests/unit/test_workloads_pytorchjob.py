"""PyTorchJob: one gang of its master and workers, held by spec.runPolicy.suspend; its pods,
made by the training operator, are gated until it runs."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from controller.api import kube, names
from controller.workloads.base import Denied, Finished, Mutation, Patch, PodSetFlavors
from controller.workloads.edits import Editor
from controller.workloads.pod import PodAdapter
from controller.workloads.pytorchjob import PyTorchJobAdapter
from controller.workloads.registry import REGISTRY
from controller.workloads.suspended import TEMPLATES_BEFORE_FLAVORS
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_pod, make_pytorchjob
from tests.unit import suspended_kinds as support
from webhook.mutation import mutate
from webhook.reviews import patch_of

ADAPTER = REGISTRY.instance(PyTorchJobAdapter)
SUSPEND = ("spec", "runPolicy", "suspend")


def test_a_pytorchjob_is_one_gang_of_its_master_and_workers() -> None:
    [gang] = ADAPTER.gangs(support.view(ADAPTER, support.stored(make_pytorchjob(workers=3))))

    assert (gang.name, gang.min_member) == ("pytorchjob-mnist", 4)
    assert [(p.name, p.count) for p in gang.pod_sets] == [("master", 1), ("worker", 3)]


def test_a_replica_spec_without_replicas_runs_one_pod() -> None:
    [gang] = ADAPTER.gangs(support.view(ADAPTER, support.stored(make_pytorchjob(workers=None))))
    assert [(p.name, p.count) for p in gang.pod_sets] == [("master", 1), ("worker", 1)]


def test_a_new_pytorchjob_is_suspended_and_its_replica_templates_join_its_gang_gated() -> None:
    ops = patch_of(mutate(make_review(make_pytorchjob()), support.SETTINGS))

    assert {"op": "add", "path": "/spec/runPolicy/suspend", "value": True} in ops
    assert "/spec/pytorchReplicaSpecs/Worker/template/spec/schedulingGates" in {
        op["path"] for op in ops
    }
    job = support.mutated(make_pytorchjob())
    for template in support.templates(ADAPTER, job):
        assert support.decorated(template, "pytorchjob-mnist")
        assert support.gated(template)


def test_a_finished_pytorchjob_cleans_up_its_running_pods_unless_its_user_says_otherwise() -> None:
    unset = make_pytorchjob()
    del unset["spec"]["runPolicy"]
    assert support.mutated(unset)["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"

    kept = make_pytorchjob()
    assert kept["spec"]["runPolicy"] == {"cleanPodPolicy": "None"}
    assert support.mutated(kept)["spec"]["runPolicy"]["cleanPodPolicy"] == "None"


def test_a_pytorchjob_must_be_created_suspended_and_only_kohort_releases_it() -> None:
    unheld = make_pytorchjob()
    unheld["spec"]["runPolicy"]["suspend"] = False
    assert "spec.runPolicy.suspend: true" in (ADAPTER.unheld(unheld) or "")
    held = support.mutated(make_pytorchjob())
    assert support.allowed(held)

    assert not support.allowed(support.unsuspended(held, SUSPEND), old=held)
    assert support.allowed(support.unsuspended(held, SUSPEND), old=held, user=support.CONTROLLER)
    ungated = json.loads(json.dumps(held))
    ungated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulingGates"] = []
    assert not support.allowed(ungated, old=held)


@pytest.mark.parametrize(
    ("elastic", "fixed"),
    [
        ({"minReplicas": 1, "maxReplicas": 4}, False),
        ({"maxReplicas": 5}, False),
        ({"minReplicas": 3, "maxReplicas": 3}, True),
        ({"rdzvBackend": "c10d"}, True),
    ],
    ids=["between 1 and 4", "up to 5", "exactly the workers", "bounds left to the workers"],
)
def test_an_elastic_pytorchjob_is_admitted_only_at_a_fixed_size(
    elastic: dict[str, Any], fixed: bool
) -> None:
    job = make_pytorchjob(workers=3)
    job["spec"]["elasticPolicy"] = elastic
    if fixed:
        [gang] = ADAPTER.gangs(support.view(ADAPTER, support.stored(job)))
        assert gang.min_member == 4
    else:
        assert "spec.elasticPolicy" in support.denial(job)
        assert ADAPTER.gangs(support.view(ADAPTER, job)) == []


def test_a_replica_type_a_pytorchjob_does_not_have_is_denied() -> None:
    job = make_pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Launcher"] = {"template": {"spec": {}}}
    with pytest.raises(Denied, match="unknown replica type 'Launcher'"):
        ADAPTER.default(Editor(job), Mutation("research"))


def test_releasing_a_pytorchjob_on_a_flavor_puts_it_in_both_templates_and_hold_takes_it_back() -> (
    None
):
    held = support.stored(make_pytorchjob())

    released, held_again = support.released_and_held(ADAPTER, held)

    assert released["spec"]["runPolicy"]["suspend"] is False
    assert [t["spec"]["nodeSelector"] for t in support.templates(ADAPTER, released)] == [
        {"gpu": "h100"}
    ] * 2
    assert json.loads(released["metadata"]["annotations"][TEMPLATES_BEFORE_FLAVORS]) == {
        "master": {},
        "worker": {},
    }
    assert held_again["spec"]["runPolicy"] == held["spec"]["runPolicy"]
    assert support.templates(ADAPTER, held_again) == support.templates(ADAPTER, held)


def pod_of(job: dict[str, Any], role: str, index: int, *, uid: str = "uid-mnist") -> kube.Pod:
    """A pod the training operator made from `job`'s template of `role`."""
    template = job["spec"]["pytorchReplicaSpecs"][role.title()]["template"]
    raw = make_pod(
        f"mnist-{role}-{index}",
        owner_kind="PyTorchJob",
        labels={**template["metadata"]["labels"], names.KUBEFLOW_REPLICA_TYPE_LABEL: role},
        gates=(names.ADMISSION_GATE,),
    )
    raw["metadata"]["ownerReferences"][0]["uid"] = uid
    raw["metadata"]["resourceVersion"] = "3"
    return msgspec.convert(raw, kube.Pod)


def test_once_it_runs_the_pods_the_operator_made_are_ungated_on_their_pod_sets_flavors() -> None:
    held = support.stored(make_pytorchjob(workers=2))
    running = support.view(ADAPTER, support.unsuspended(held, SUSPEND))
    pods = [pod_of(held, "master", 0), pod_of(held, "worker", 0), pod_of(held, "worker", 1)]
    stranger = pod_of(held, "worker", 9, uid="uid-other")
    flavors = {"worker": PodSetFlavors((support.H100,))}

    [unsuspend] = ADAPTER.release(support.view(ADAPTER, held), pods, flavors)
    assert unsuspend.name == "mnist"  # while it is suspended, no pod is ungated
    writes = ADAPTER.release(running, [*pods, stranger], flavors)

    assert {w.name for w in writes} == {"mnist-master-0", "mnist-worker-0", "mnist-worker-1"}
    selectors = {
        w.name: [op["value"] for op in w.body if op["path"] == "/spec/nodeSelector"]
        for w in writes
        if isinstance(w, Patch)
    }
    assert selectors["mnist-master-0"] == []
    assert selectors["mnist-worker-0"] == [{"gpu": "h100"}]
    assert ADAPTER.pod_set_of(pods[1]) == "worker"


def test_a_pod_the_operator_made_joins_its_pytorchjobs_gang_gated() -> None:
    held = support.stored(make_pytorchjob())
    template = held["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    pod = make_pod("mnist-worker-0", owner_kind="PyTorchJob", labels=template["metadata"]["labels"])

    editor = Editor(pod)
    REGISTRY.instance(PodAdapter).default(editor, Mutation("research"))

    assert support.gated(editor.doc)
    assert editor.doc["metadata"]["labels"][names.POD_GROUP_LABEL] == "pytorchjob-mnist"
    assert REGISTRY.instance(PodAdapter).gangs(msgspec.convert(editor.doc, kube.Pod)) == []
    assert "scheduling gate" in (REGISTRY.instance(PodAdapter).unheld(pod) or "")


def test_a_pytorchjob_is_finished_by_its_succeeded_or_failed_condition() -> None:
    job = support.view(ADAPTER, support.stored(make_pytorchjob()))
    job.status.conditions.append(kube.Condition(type="Running", status="True"))
    assert ADAPTER.finished(job) is None
    job.status.conditions.append(kube.Condition(type="Succeeded", status="True"))
    assert ADAPTER.finished(job) is Finished.SUCCEEDED
    job.status.conditions[-1] = kube.Condition(type="Failed", status="True")
    assert ADAPTER.finished(job) is Finished.FAILED


def test_a_held_pytorchjob_is_released_in_one_guarded_write() -> None:
    held = support.stored(make_pytorchjob())
    [release] = ADAPTER.release(support.view(ADAPTER, held), [])
    assert release.body == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
        {"op": "add", "path": "/spec/runPolicy/suspend", "value": False},
    ]
    assert support.applied(held, release)["spec"]["runPolicy"]["cleanPodPolicy"] == "None"


def test_a_replica_type_added_by_an_update_must_carry_the_gate_and_join_the_gang() -> None:
    alone = make_pytorchjob()
    del alone["spec"]["pytorchReplicaSpecs"]["Worker"]
    held = support.mutated(alone)
    worker = make_pytorchjob()["spec"]["pytorchReplicaSpecs"]["Worker"]
    grown = json.loads(json.dumps(held))
    grown["spec"]["pytorchReplicaSpecs"]["Worker"] = worker

    assert not support.allowed(grown, old=held)
    assert support.allowed(support.updated(grown, old=held), old=held)
