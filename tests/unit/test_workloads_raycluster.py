"""RayCluster: one gang of its head and every worker, held by spec.suspend; its pods, made by
KubeRay, are gated until it runs. An autoscaling cluster has no fixed size and is denied."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest

from controller.api import kinds, kube, names
from controller.workloads.base import is_gated
from controller.workloads.raycluster import RayClusterAdapter
from controller.workloads.registry import REGISTRY
from controller.workloads.suspended import TEMPLATES_BEFORE_FLAVORS
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_raycluster
from tests.unit import suspended_kinds as support
from tests.unit.controller_world import World, start
from webhook.mutation import mutate
from webhook.reviews import patch_of

ADAPTER = REGISTRY.instance(RayClusterAdapter)


def test_a_raycluster_is_one_gang_of_its_head_and_all_its_workers() -> None:
    cluster = support.stored(make_raycluster(groups={"cpu": 2, "gpu": 1}, hosts=2))

    [gang] = ADAPTER.gangs(support.view(ADAPTER, cluster))

    assert (gang.name, gang.min_member) == ("raycluster-ray", 1 + 2 * 2 + 1 * 2)
    assert [(p.name, p.count) for p in gang.pod_sets] == [("head", 1), ("cpu", 4), ("gpu", 2)]
    assert gang.pod_sets[0].requests["cpu"] == 2000  # the head's own template


@pytest.mark.parametrize(
    ("group", "want"),
    [
        ({"replicas": 20, "maxReplicas": 10}, 10),
        ({"replicas": None, "minReplicas": 3}, 3),
        ({"replicas": 1, "minReplicas": 2}, 2),
        ({"replicas": 2, "numOfHosts": None}, 2),
        ({"replicas": 0}, 0),
    ],
    ids=["above max", "unset", "below min", "hosts unset", "none"],
)
def test_a_worker_group_has_as_many_pods_as_kuberay_keeps(group: dict[str, Any], want: int) -> None:
    cluster = make_raycluster(groups={"cpu": 5})
    cluster["spec"]["workerGroupSpecs"][0].update(group)
    spec = cluster["spec"]["workerGroupSpecs"][0]
    for field in [k for k, v in spec.items() if v is None]:
        del spec[field]

    [gang] = ADAPTER.gangs(support.view(ADAPTER, support.stored(cluster)))

    assert gang.min_member == 1 + want
    assert [p.name for p in gang.pod_sets] == (["head", "cpu"] if want else ["head"])


def test_a_new_raycluster_is_suspended_and_its_head_and_workers_join_its_gang_gated() -> None:
    ops = patch_of(mutate(make_review(make_raycluster()), support.SETTINGS))

    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops
    paths = {op["path"] for op in ops}
    assert "/spec/headGroupSpec/template/metadata" in paths
    assert "/spec/workerGroupSpecs/0/template/spec/schedulingGates" in paths
    cluster = support.mutated(make_raycluster())
    for template in support.templates(ADAPTER, cluster):
        assert support.decorated(template, "raycluster-ray")
        assert support.gated(template)
    assert support.allowed(cluster)
    assert not support.allowed(support.unsuspended(cluster), old=cluster)
    assert support.allowed(support.unsuspended(cluster), old=cluster, user=support.CONTROLLER)


def test_an_autoscaling_raycluster_is_denied_with_a_message_naming_enable_in_tree_autoscaling() -> (
    None
):
    message = support.denial(make_raycluster(autoscaling=True))
    assert "enableInTreeAutoscaling" in message
    assert "fixed size" in message
    suspended = make_raycluster(autoscaling=True)
    suspended["spec"]["suspend"] = True
    assert not support.allowed(suspended)

    held = support.mutated(make_raycluster(autoscaling=False))
    turned_on = copy.deepcopy(held)
    turned_on["spec"]["enableInTreeAutoscaling"] = True
    assert not support.allowed(turned_on, old=held)


def test_a_worker_group_named_like_the_head_is_denied() -> None:
    assert "pod set 'head'" in support.denial(make_raycluster(groups={"head": 1}))


def test_a_worker_group_of_no_pods_named_like_another_pod_set_is_denied() -> None:
    assert "pod set 'head'" in support.denial(make_raycluster(groups={"cpu": 2, "head": 0}))
    twice = new_worker_group(make_raycluster(groups={"cpu": 2}), "cpu")
    twice["spec"]["workerGroupSpecs"][1].update(replicas=0, minReplicas=0)
    assert "pod set 'cpu'" in support.denial(twice)


def test_a_suspended_worker_group_is_denied_with_a_message_naming_its_suspend_field() -> None:
    cluster = make_raycluster(groups={"cpu": 2, "gpu": 1})
    cluster["spec"]["workerGroupSpecs"][1]["suspend"] = True

    message = support.denial(cluster)

    assert "spec.workerGroupSpecs[1].suspend: true" in message
    assert "feature gate" in message
    held = support.mutated(make_raycluster(groups={"cpu": 2, "gpu": 1}))
    suspended = copy.deepcopy(held)
    suspended["spec"]["workerGroupSpecs"][1]["suspend"] = True
    assert not support.allowed(suspended, old=held)


def new_worker_group(cluster: dict[str, Any], name: str) -> dict[str, Any]:
    """`cluster` with one more worker group, a copy of its first, called `name`."""
    grown = copy.deepcopy(cluster)
    groups = grown["spec"]["workerGroupSpecs"]
    groups.append(dict(copy.deepcopy(groups[0]), groupName=name))
    return grown


def test_a_worker_group_added_by_an_update_must_carry_the_gate_and_join_the_gang() -> None:
    held = support.mutated(make_raycluster(groups={"cpu": 2}))
    plain = make_raycluster(groups={"cpu": 2, "gpu": 1})["spec"]["workerGroupSpecs"][1]

    ungated = new_worker_group(held, "gpu")
    del ungated["spec"]["workerGroupSpecs"][1]["template"]["spec"]["schedulingGates"]
    elsewhere = new_worker_group(held, "gpu")
    labels = elsewhere["spec"]["workerGroupSpecs"][1]["template"]["metadata"]["labels"]
    labels[names.POD_GROUP_LABEL] = "another-gang"
    undecorated = copy.deepcopy(held)
    undecorated["spec"]["workerGroupSpecs"].append(plain)

    assert support.allowed(new_worker_group(held, "gpu"), old=held)
    assert not support.allowed(ungated, old=held)
    assert not support.allowed(elsewhere, old=held)
    assert not support.allowed(undecorated, old=held)
    # Through the mutating webhook, the new group joins the gang gated.
    assert support.allowed(support.updated(undecorated, old=held), old=held)


def test_releasing_a_raycluster_on_a_flavor_puts_it_in_every_template_and_hold_takes_it_back() -> (
    None
):
    raw = make_raycluster(groups={"cpu": 2, "gpu": 1})
    raw["spec"]["workerGroupSpecs"][1]["template"]["spec"]["tolerations"] = [
        {"key": "spot", "operator": "Exists"}
    ]
    held = support.stored(raw)

    released, held_again = support.released_and_held(ADAPTER, held)

    assert released["spec"]["suspend"] is False
    head, cpu, gpu = support.templates(ADAPTER, released)
    assert head["spec"]["nodeSelector"] == cpu["spec"]["nodeSelector"] == {"gpu": "h100"}
    assert [t["key"] for t in gpu["spec"]["tolerations"]] == ["spot", "gpu"]
    kept = json.loads(released["metadata"]["annotations"][TEMPLATES_BEFORE_FLAVORS])
    assert kept["gpu"] == {"tolerations": [{"key": "spot", "operator": "Exists"}]}
    assert held_again["spec"]["suspend"] is True
    assert support.templates(ADAPTER, held_again) == support.templates(ADAPTER, held)


def test_a_raycluster_made_by_a_rayservice_is_a_gang_of_its_own() -> None:
    cluster = make_raycluster()
    cluster["metadata"]["ownerReferences"] = [
        {"apiVersion": "ray.io/v1", "kind": "RayService", "name": "serve", "controller": True}
    ]
    assert not support.allowed(cluster)  # unheld, it would run outside its queue

    held = support.stored(cluster)

    assert held["spec"]["suspend"] is True
    assert all(support.gated(t) for t in support.templates(ADAPTER, held))
    assert support.allowed(held)
    [gang] = ADAPTER.gangs(support.view(ADAPTER, held))
    assert (gang.name, gang.min_member) == ("raycluster-ray", 1 + 2)


def test_a_raycluster_made_by_a_workload_kohort_manages_is_left_to_its_gang() -> None:
    cluster = make_raycluster()
    cluster["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "leader", "controller": True}
    ]
    assert patch_of(mutate(make_review(cluster), support.SETTINGS)) == []
    assert ADAPTER.gangs(support.view(ADAPTER, cluster)) == []


def test_a_managed_raycluster_cannot_be_handed_to_another_managed_workload() -> None:
    held = support.mutated(make_raycluster())
    claimed = copy.deepcopy(held)
    claimed["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "js",
            "controller": True,
        }
    ]
    assert "cannot be handed" in (ADAPTER.bypass(held, claimed) or "")
    assert not support.allowed(claimed, old=held)


def kuberay_pod(cluster: dict[str, Any], name: str, group: str | None) -> dict[str, Any]:
    """A pod KubeRay made for `cluster`: the head's (group None) or a worker group's."""
    spec = cluster["spec"]
    template = copy.deepcopy(
        spec["headGroupSpec"]["template"]
        if group is None
        else next(g for g in spec["workerGroupSpecs"] if g["groupName"] == group)["template"]
    )
    labels = template["metadata"]["labels"]
    labels[names.RAY_NODE_TYPE_LABEL] = "head" if group is None else "worker"
    labels[names.RAY_GROUP_LABEL] = group or "headgroup"
    template["metadata"].update(
        name=name,
        namespace=cluster["metadata"]["namespace"],
        ownerReferences=[
            {
                "apiVersion": kinds.RAYCLUSTERS.api_version,
                "kind": "RayCluster",
                "name": cluster["metadata"]["name"],
                "uid": cluster["metadata"]["uid"],
                "controller": True,
            }
        ],
    )
    return {"apiVersion": "v1", "kind": "Pod", **template}


def test_pods_of_a_raycluster_are_the_pod_set_of_their_group() -> None:
    cluster = support.stored(make_raycluster(groups={"cpu": 1}))
    head = msgspec.convert(kuberay_pod(cluster, "ray-head", None), kube.Pod)
    worker = msgspec.convert(kuberay_pod(cluster, "ray-cpu-x", "cpu"), kube.Pod)
    assert (ADAPTER.pod_set_of(head), ADAPTER.pod_set_of(worker)) == ("head", "cpu")


async def test_an_admitted_raycluster_is_unsuspended_then_its_gated_pods_are_released(
    started: list[World],
) -> None:
    cluster = support.stored(make_raycluster(namespace="ns", queue="lq", memory=None, cpu="1"))
    world = await start(started, World((kinds.RAYCLUSTERS, cluster)))

    await world.reconciler.reconcile_once()
    await world.api.settle()

    now = world.api.read_back(kinds.RAYCLUSTERS, "ray", "ns")
    assert now is not None and now["spec"]["suspend"] is False
    wl = world.workload("raycluster-ray")
    assert wl is not None
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("head", 1), ("cpu", 2)]

    # KubeRay makes the pods from the templates: gated, as the webhook left them.
    names_ = ["ray-head", "ray-cpu-a", "ray-cpu-b"]
    for name, group in zip(names_, (None, "cpu", "cpu"), strict=True):
        world.api.put(kinds.PODS, kuberay_pod(now, name, group))
    await world.api.settle()
    await world.reconciler.reconcile_once()
    await world.api.settle()

    for name in names_:
        pod = world.api.read_back(kinds.PODS, name, "ns")
        assert pod is not None and not is_gated(msgspec.convert(pod, kube.Pod)), name
