"""A pod set whose plan spreads it over several nodes is pinned pod by pod: each pod is ungated
onto its own planned node, so no scheduler can put more of the gang on a node than planned (and
leave the next admitted gang without the room it was planned on). Jobs and JobSets, whose pods
are made ungated, get their templates gated by the release for it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import jsonpatch
import msgspec

from controller import quota
from controller.api import kube, names
from controller.state.planner import planned_hosts
from controller.workloads.base import Patch, PodSetFlavors, Write, ungate
from controller.workloads.job import JobAdapter
from controller.workloads.jobset import JobSetAdapter
from controller.workloads.pinning import pinned_host
from controller.workloads.registry import REGISTRY
from tests.fakes.workloads import make_job, make_jobset, make_pod
from tests.unit import suspended_kinds as support

JSON = dict[str, Any]
OWNER_UID = "0f0e0d0c-0000-4000-8000-000000000001"
HOSTNAME = "kubernetes.io/hostname"


def plan(**per_host: int) -> PodSetFlavors:
    return PodSetFlavors((), tuple(sorted(per_host)), {}, per_host)


def pod(name: str, *, gated: bool = True, host: str | None = None, owner: str = "Job") -> JSON:
    raw = make_pod(name, owner_kind=owner, gates=(names.ADMISSION_GATE,) if gated else ())
    raw["metadata"]["resourceVersion"] = "5"
    if host is not None:
        term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [host]}]}
        raw["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    return raw


def typed(raws: list[JSON]) -> list[kube.Pod]:
    return [msgspec.convert(raw, kube.Pod) for raw in raws]


def hosts_written(raws: list[JSON], writes: list[Write]) -> Counter[str | None]:
    """The one host each ungated pod is pinned to, counted."""
    by_name = {raw["metadata"]["name"]: raw for raw in raws}
    hosts: Counter[str | None] = Counter()
    for write in writes:
        assert isinstance(write, Patch)
        after = jsonpatch.apply_patch(by_name[write.name], write.body)
        assert not after["spec"].get("schedulingGates")
        hosts[pinned_host(msgspec.convert(after["spec"], kube.PodSpec))] += 1
    return hosts


def test_three_gated_pods_planned_two_and_one_are_each_pinned_to_their_own_node() -> None:
    raws = [pod(f"w-{i}") for i in range(3)]
    pods = typed(raws)
    mine = plan(h1=2, h2=1)

    writes = ungate(pods, lambda p: mine, among=pods)

    assert hosts_written(raws, writes) == Counter({"h1": 2, "h2": 1})


def test_pods_already_running_on_their_planned_nodes_keep_their_places_counted() -> None:
    # One pod of the two planned on h1 runs there; the pod made again after another ended goes
    # where a place is left, not onto h1 a second time.
    raws = [pod("w-0", gated=False, host="h1"), pod("w-1", gated=False, host="h2"), pod("w-2")]
    pods = typed(raws)
    mine = plan(h1=2, h2=1)

    writes = ungate(pods, lambda p: mine, among=pods)

    assert hosts_written(raws, writes) == Counter({"h1": 1})


def test_a_pod_beyond_the_plan_is_pinned_to_the_pod_sets_nodes_not_to_one() -> None:
    raws = [pod("w-0", gated=False, host="h1"), pod("w-1", gated=False, host="h2"), pod("w-2")]
    pods = typed(raws)

    mine = plan(h1=1, h2=1)
    [write] = ungate(pods, lambda p: mine, among=pods)

    assert hosts_written(raws, [write]) == Counter({None: 1})
    assert isinstance(write, Patch)
    after = jsonpatch.apply_patch(raws[2], write.body)
    [term] = after["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert term["matchExpressions"][-1]["values"] == ["h1", "h2"]


def test_a_pod_set_planned_on_one_node_is_pinned_to_it_whole() -> None:
    assert not plan(h1=4).pinned_per_pod
    assert plan(h1=3, h2=1).pinned_per_pod


def test_the_plans_counts_are_read_per_host_of_each_pod_set() -> None:
    labels = {"n1": {HOSTNAME: "h1"}, "n2": {HOSTNAME: "h2"}, "bare": {}}
    placement = [
        quota.PodPlacement("workers", "n1", 3),
        quota.PodPlacement("workers", "n2", 1),
        quota.PodPlacement("leader", "n2", 1),
    ]

    assert planned_hosts(placement, "workers", labels.get) == (
        {"h1": 3, "h2": 1},
        {"n1": "h1", "n2": "h2"},
    )
    assert planned_hosts(placement, "leader", labels.get) == ({"h2": 1}, {"n2": "h2"})
    unknown = [*placement, quota.PodPlacement("workers", "bare", 1)]
    assert planned_hosts(unknown, "workers", labels.get) == ({}, {})


# -- a Job ---------------------------------------------------------------------------------------


def held_job() -> JSON:
    raw = make_job(parallelism=3, completions=3, suspend=True)
    raw["metadata"].update(resourceVersion="1", uid=OWNER_UID)
    raw["spec"]["template"]["metadata"] = {"labels": {names.POD_GROUP_LABEL: "job-train"}}
    return raw


def released(raw: JSON, flavors: PodSetFlavors) -> JSON:
    writes = REGISTRY.instance(JobAdapter).release(
        msgspec.convert(raw, kube.Job), [], {"main": flavors}
    )
    [release] = [w for w in writes if isinstance(w, Patch) and not w.subresource]
    return support.merged(raw, release)


def test_a_job_planned_over_two_nodes_is_released_with_its_pods_gated_then_ungated_one_by_one() -> (
    None
):
    adapter = REGISTRY.instance(JobAdapter)
    job = released(held_job(), plan(h1=2, h2=1))
    assert job["spec"]["suspend"] is False
    assert job["spec"]["template"]["spec"]["schedulingGates"] == [{"name": names.ADMISSION_GATE}]

    # The Job controller makes its pods from the gated template.
    raws = [pod(f"train-{i}") for i in range(3)]
    writes = adapter.release(
        msgspec.convert(job, kube.Job), typed(raws), {"main": plan(h1=2, h2=1)}
    )

    assert hosts_written(raws, writes) == Counter({"h1": 2, "h2": 1})


def test_a_job_planned_on_one_node_is_released_ungated() -> None:
    job = released(held_job(), plan(h1=3))

    assert "schedulingGates" not in job["spec"]["template"]["spec"]


def test_another_jobs_pods_are_not_ungated_with_a_job() -> None:
    job = released(held_job(), plan(h1=2, h2=1))
    stranger = pod("other-0")
    stranger["metadata"]["ownerReferences"][0]["uid"] = "another"

    writes = REGISTRY.instance(JobAdapter).release(
        msgspec.convert(job, kube.Job), typed([stranger]), {"main": plan(h1=2, h2=1)}
    )

    assert writes == []


def test_a_held_job_gets_its_template_back_without_the_gate() -> None:
    adapter = REGISTRY.instance(JobAdapter)
    job = released(held_job(), plan(h1=2, h2=1))
    held = job
    for write in adapter.hold(msgspec.convert(job, kube.Job), []):
        assert isinstance(write, Patch)
        if not write.subresource:
            held = support.merged(held, write)

    assert held["spec"]["suspend"] is True
    assert "schedulingGates" not in held["spec"]["template"]["spec"]
    assert held["spec"]["template"] == held_job()["spec"]["template"]


# -- a JobSet ------------------------------------------------------------------------------------


def test_a_jobset_planned_over_several_nodes_gates_its_templates_until_each_pod_is_pinned() -> None:
    adapter = REGISTRY.instance(JobSetAdapter)
    held = support.stored(make_jobset())
    sets = [t.pod_set for t in adapter.held_templates(support.view(adapter, held))]
    flavors = {name: plan(**{f"{name}-a": 1, f"{name}-b": 1}) for name in sets}

    [release] = adapter.release(support.view(adapter, held), [], flavors)
    running = support.applied(held, release)
    assert all(support.gated(t) for t in support.templates(adapter, running))

    first = sets[0]
    raws = [pod(f"{first}-{i}") for i in range(2)]
    for raw in raws:
        raw["metadata"]["labels"][names.JOBSET_REPLICATED_JOB_LABEL] = first
        raw["metadata"]["labels"][names.JOBSET_NAME_LABEL] = held["metadata"]["name"]
    writes = adapter.release(support.view(adapter, running), typed(raws), flavors)
    assert hosts_written(raws, writes) == Counter({f"{first}-a": 1, f"{first}-b": 1})

    [hold] = adapter.hold(support.view(adapter, running), [])
    held_again = support.applied(running, hold)
    assert support.templates(adapter, held_again) == support.templates(adapter, held)


def test_a_jobsets_pods_get_their_pins_as_they_are_ungated_never_through_its_templates() -> None:
    # The JobSet controller keeps a suspended JobSet's Jobs and merges its templates into them
    # when it resumes: a pin in a template would outlive its release. Every pod set with a
    # plan is gated; the leader, planned on one node, is pinned to it as it is ungated, the
    # workers each to their own node.
    adapter = REGISTRY.instance(JobSetAdapter)
    held = support.stored(make_jobset())
    lead, work = adapter.held_templates(support.view(adapter, held))
    leader, workers = lead.pod_set, work.pod_set
    assert lead.count == 1
    h1 = PodSetFlavors((), ("h1",), {HOSTNAME: "h1"}, {"h1": 1})
    flavors = {leader: h1, workers: plan(h2=work.count - 1, h3=1)}
    [release] = adapter.release(support.view(adapter, held), [], flavors)
    running = support.applied(held, release)
    templates = support.templates(adapter, running)
    assert [support.gated(t) for t in templates] == [True, True]
    assert [t["spec"].get("nodeSelector", {}).get(HOSTNAME) for t in templates] == [None, None]

    raws = [pod(f"{leader}-0")]
    raws += [pod(f"{workers}-{i}") for i in range(work.count)]
    for raw in raws:
        name = raw["metadata"]["name"].rsplit("-", 1)[0]
        raw["metadata"]["labels"][names.JOBSET_REPLICATED_JOB_LABEL] = name
        raw["metadata"]["labels"][names.JOBSET_NAME_LABEL] = held["metadata"]["name"]
    writes = adapter.release(support.view(adapter, running), typed(raws), flavors)

    assert hosts_written(raws, writes) == Counter({"h1": 1, "h2": work.count - 1, "h3": 1})
    [leader_write] = [w for w in writes if isinstance(w, Patch) and w.name == f"{leader}-0"]
    pinned_leader = jsonpatch.apply_patch(raws[0], leader_write.body)
    assert pinned_leader["spec"]["nodeSelector"][HOSTNAME] == "h1"


def test_a_pod_a_jobset_made_gated_for_an_earlier_release_is_released_all_the_same() -> None:
    adapter = REGISTRY.instance(JobSetAdapter)
    held = support.stored(make_jobset())
    [release] = adapter.release(support.view(adapter, held), [], {})
    running = support.applied(held, release)
    assert not any(support.gated(t) for t in support.templates(adapter, running))
    stale = pod("workers-0")  # its Job kept the gate of a release before this one
    stale["metadata"]["labels"][names.JOBSET_NAME_LABEL] = held["metadata"]["name"]

    [write] = adapter.release(support.view(adapter, running), typed([stale]), {})

    assert isinstance(write, Patch) and write.name == "workers-0"

    other = pod("workers-1")  # a pod of another JobSet's Job
    other["metadata"]["labels"][names.JOBSET_NAME_LABEL] = "another"
    assert adapter.release(support.view(adapter, running), typed([other]), {}) == []


def test_a_running_job_ungates_no_more_pods_than_it_runs_at_once() -> None:
    job = released(held_job(), plan(h1=2, h2=1))
    raws = [pod(f"train-{i}") for i in range(5)]

    writes = REGISTRY.instance(JobAdapter).release(
        msgspec.convert(job, kube.Job), typed(raws), {"main": plan(h1=2, h2=1)}
    )

    assert hosts_written(raws, writes) == Counter({"h1": 2, "h2": 1})


def test_a_running_job_whose_template_was_not_gated_ungates_nothing() -> None:
    job = released(held_job(), plan(h1=3))

    writes = REGISTRY.instance(JobAdapter).release(
        msgspec.convert(job, kube.Job), typed([pod("train-0")]), {"main": plan(h1=3)}
    )

    assert writes == []


def test_pods_of_a_set_that_ask_for_different_nodes_themselves_are_pinned_to_the_sets_nodes() -> (
    None
):
    # A JobSet's exclusive placement gives each Job's pods a nodeSelector of their own: any pod
    # taking any of the plan's places could be sent where its own selector forbids.
    raws = [pod("w-0"), pod("w-1")]
    raws[0]["spec"]["nodeSelector"] = {"team.example/job": "a"}
    raws[1]["spec"]["nodeSelector"] = {"team.example/job": "b"}
    pods = typed(raws)
    mine = plan(h1=1, h2=1)

    writes = ungate(pods, lambda p: mine, among=pods)

    assert hosts_written(raws, writes) == Counter({None: 2})


def test_a_pod_bound_by_node_name_holds_its_place_under_its_nodes_hostname() -> None:
    bound = pod("w-0", gated=False)
    bound["spec"]["nodeName"] = "node-1"
    raws = [bound, pod("w-1")]
    pods = typed(raws)
    mine = PodSetFlavors((), ("h1", "h2"), {}, {"h1": 1, "h2": 1}, {"node-1": "h1", "node-2": "h2"})

    writes = ungate(pods, lambda p: mine, among=pods)

    assert hosts_written(raws, writes) == Counter({"h2": 1})
