"""A released gang's pods are pinned to the nodes its admission placed them on, whatever kind
holds them, and a hold gives them back their own node affinity."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import msgspec

from controller.api import kube, names
from controller.workloads.base import Patch, PodSetFlavors
from controller.workloads.job import TEMPLATE_BEFORE_FLAVORS, JobAdapter
from controller.workloads.jobset import JobSetAdapter
from controller.workloads.pod import PodAdapter
from controller.workloads.registry import REGISTRY
from controller.workloads.suspended import TEMPLATES_BEFORE_FLAVORS
from tests.fakes.workloads import make_job, make_jobset, make_pod
from tests.unit import suspended_kinds as support

JSON = dict[str, Any]
PIN = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]}
ZONE = {"key": "zone", "operator": "In", "values": ["a"]}


def pinned_to(*nodes: str) -> PodSetFlavors:
    return PodSetFlavors((), nodes)


def required(spec: JSON) -> Any:
    return spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


def own_affinity() -> JSON:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [ZONE]}]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "x"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        },
    }


# -- gated pods ---------------------------------------------------------------------------------


def gated(**spec: Any) -> tuple[JSON, kube.Pod]:
    raw = make_pod("p0", gates=(names.ADMISSION_GATE,))
    raw["metadata"]["resourceVersion"] = "7"
    raw["spec"].update(spec)
    return raw, msgspec.convert(raw, kube.Pod)


def released_pod(raw: JSON, pod: kube.Pod) -> JSON:
    [write] = REGISTRY.instance(PodAdapter).release(pod, [pod], {"main": pinned_to("n2", "n1")})
    assert isinstance(write, Patch)
    result: JSON = jsonpatch.apply_patch(raw, write.body)
    return result


def test_a_gated_pod_without_affinity_is_pinned_to_its_planned_nodes_as_it_is_ungated() -> None:
    released = released_pod(*gated())

    assert required(released["spec"]) == {"nodeSelectorTerms": [{"matchExpressions": [PIN]}]}
    assert "schedulingGates" not in released["spec"] or not released["spec"]["schedulingGates"]


def test_a_gated_pods_own_affinity_terms_each_gain_the_pin_and_keep_the_rest() -> None:
    released = released_pod(*gated(affinity=own_affinity()))

    assert required(released["spec"]) == {"nodeSelectorTerms": [{"matchExpressions": [ZONE, PIN]}]}
    assert released["spec"]["affinity"]["podAntiAffinity"] == own_affinity()["podAntiAffinity"]


def test_a_gated_pod_with_affinity_but_no_node_affinity_gets_one() -> None:
    anti = {"podAntiAffinity": own_affinity()["podAntiAffinity"]}
    released = released_pod(*gated(affinity=anti))

    assert required(released["spec"]) == {"nodeSelectorTerms": [{"matchExpressions": [PIN]}]}
    assert released["spec"]["affinity"]["podAntiAffinity"] == anti["podAntiAffinity"]


def test_a_gate_removed_without_a_plan_adds_no_affinity() -> None:
    raw, pod = gated()
    [write] = REGISTRY.instance(PodAdapter).release(pod, [pod], {})
    assert isinstance(write, Patch)
    assert "affinity" not in jsonpatch.apply_patch(raw, write.body)["spec"]


# -- a Job's template ---------------------------------------------------------------------------


def held_job(affinity: JSON | None = None) -> JSON:
    raw = make_job(parallelism=2, completions=2, suspend=True)
    raw["metadata"]["resourceVersion"] = "1"
    raw["spec"]["template"]["metadata"] = {"labels": {names.POD_GROUP_LABEL: "job-train"}}
    if affinity is not None:
        raw["spec"]["template"]["spec"]["affinity"] = affinity
    return raw


def test_a_job_is_released_pinned_and_held_again_with_its_own_affinity_back() -> None:
    adapter = REGISTRY.instance(JobAdapter)
    raw = held_job(own_affinity())
    [release] = adapter.release(msgspec.convert(raw, kube.Job), [], {"main": pinned_to("n1", "n2")})
    assert isinstance(release, Patch)
    released = support.merged(raw, release)
    template = released["spec"]["template"]["spec"]
    assert required(template)["nodeSelectorTerms"] == [{"matchExpressions": [ZONE, PIN]}]
    kept = json.loads(released["metadata"]["annotations"][TEMPLATE_BEFORE_FLAVORS])
    assert kept["requiredNodeAffinity"] == {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}

    # The gang is what the user asked for, not where it was pinned.
    [gang] = adapter.gangs(msgspec.convert(released, kube.Job))
    assert [[r.key for r in term] for term in gang.pod_sets[0].node_affinity] == [["zone"]]

    released["spec"]["suspend"] = False
    writes = adapter.hold(msgspec.convert(released, kube.Job), [])
    held = released
    for write in writes:
        assert isinstance(write, Patch)
        if not write.subresource:
            held = support.merged(held, write)
    assert required(held["spec"]["template"]["spec"]) == {
        "nodeSelectorTerms": [{"matchExpressions": [ZONE]}]
    }
    assert TEMPLATE_BEFORE_FLAVORS not in held["metadata"].get("annotations", {})


def test_a_job_without_affinity_of_its_own_loses_the_pin_on_hold() -> None:
    adapter = REGISTRY.instance(JobAdapter)
    raw = held_job()
    [release] = adapter.release(msgspec.convert(raw, kube.Job), [], {"main": pinned_to("n1", "n2")})
    assert isinstance(release, Patch)
    released = support.merged(raw, release)
    assert required(released["spec"]["template"]["spec"]) == {
        "nodeSelectorTerms": [{"matchExpressions": [PIN]}]
    }
    released["spec"]["suspend"] = False
    held = released
    for write in adapter.hold(msgspec.convert(released, kube.Job), []):
        assert isinstance(write, Patch)
        if not write.subresource:
            held = support.merged(held, write)
    node_affinity = held["spec"]["template"]["spec"].get("affinity", {}).get("nodeAffinity", {})
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in node_affinity


# -- kinds held by a suspend field --------------------------------------------------------------


def test_a_jobsets_templates_get_the_gate_not_the_pins_and_a_hold_gives_them_back() -> None:
    # The JobSet controller merges a resumed JobSet's templates into the Jobs it kept: a pin in
    # a template would outlive its release. Its pods are pinned as they are ungated.
    adapter = REGISTRY.instance(JobSetAdapter)
    held = support.stored(make_jobset())
    sets = [t.pod_set for t in adapter.held_templates(support.view(adapter, held))]
    host = "kubernetes.io/hostname"
    plan = {name: PodSetFlavors((), (f"{name}-n",), {host: f"{name}-n"}) for name in sets}

    [release] = adapter.release(support.view(adapter, held), [], plan)
    released = support.applied(held, release)

    for template in support.templates(adapter, released):
        assert "nodeSelector" not in template["spec"]
        assert "affinity" not in template["spec"]
        assert support.gated(template)
    [hold] = adapter.hold(support.view(adapter, released), [])
    held_again = support.applied(released, hold)
    assert support.templates(adapter, held_again) == support.templates(adapter, held)
    assert TEMPLATES_BEFORE_FLAVORS not in held_again["metadata"].get("annotations", {})
    [after] = adapter.gangs(support.view(adapter, released))
    [before] = adapter.gangs(support.view(adapter, held))
    assert after == before


def test_a_pod_set_is_pinned_to_the_domain_its_planned_nodes_share() -> None:
    from controller.state.planner import pins

    labels = {
        "n1": {"kubernetes.io/hostname": "h1", "block": "b0", "rack": "r1"},
        "n2": {"kubernetes.io/hostname": "h2", "block": "b0", "rack": "r1"},
        "n3": {"kubernetes.io/hostname": "h3", "block": "b0", "rack": "r2"},
        "bare": {"rack": "r1"},
    }
    levels = ("block", "rack", "kubernetes.io/hostname")

    assert pins(["n1", "n2"], levels, labels.get) == (("h1", "h2"), {"block": "b0", "rack": "r1"})
    assert pins(["n1", "n3"], levels, labels.get) == (("h1", "h3"), {"block": "b0"})
    assert pins(["n1", "n1"], (), labels.get) == (("h1",), {"kubernetes.io/hostname": "h1"})
    assert pins(["n1", "bare"], levels, labels.get) == ((), {})  # a node without a hostname
    assert pins(["n1", "gone"], levels, labels.get) == ((), {})


def test_a_pod_set_that_claims_devices_is_pinned_to_its_topology_domain_but_not_to_nodes() -> None:
    """The plan did not count the nodes' DRA devices: the scheduler picks the nodes."""
    from controller.state.planner import pins

    labels = {
        "n1": {"kubernetes.io/hostname": "h1", "block": "b0", "rack": "r1"},
        "n2": {"kubernetes.io/hostname": "h2", "block": "b0", "rack": "r1"},
    }
    levels = ("block", "rack", "kubernetes.io/hostname")
    claimed = pins(["n1", "n2"], levels, labels.get, claims_devices=True)
    assert claimed == ((), {"block": "b0", "rack": "r1"})
    assert pins(["n1", "n1"], (), labels.get, claims_devices=True) == ((), {})


def test_a_jobs_template_restore_is_tolerated_while_refused_and_its_release_is_not() -> None:
    # Kubernetes lets a suspended Job's template change only once its pods are gone: the hold's
    # restore may be refused for a while (tolerated, made again as the Job changes), while a
    # release that is refused is a failure the controller must see.
    adapter = REGISTRY.instance(JobAdapter)
    raw = held_job()
    [release] = adapter.release(msgspec.convert(raw, kube.Job), [], {"main": pinned_to("n1")})
    assert isinstance(release, Patch) and not release.expected
    released = support.merged(raw, release)
    released["spec"]["suspend"] = False
    *_, restore = adapter.hold(msgspec.convert(released, kube.Job), [])
    assert isinstance(restore, Patch) and restore.expected
    assert "template" in restore.body["spec"]
