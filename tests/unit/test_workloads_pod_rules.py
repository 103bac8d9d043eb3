"""A gang's pod templates become the placement rules of its pod sets: node affinity,
(anti-)affinity and spread among its own pods, host ports, topology annotations (kohort's and
Kueue's), and what the placement check does not model, named as unchecked."""

from __future__ import annotations

import copy
import logging
from typing import Any

import msgspec
import pytest

from controller.api import kinds, kube, names
from controller.quota.snapshot import (
    HostPort,
    NodeRequirement,
    OwnPodsTerm,
    PodSet,
    SpreadConstraint,
    TopologyRequest,
    affinity_matches,
)
from controller.state.inventory import core_node
from controller.workloads.base import Mutation, WorkloadAdapter
from controller.workloads.edits import Editor, lookup
from controller.workloads.job import JobAdapter
from controller.workloads.jobset import JobSetAdapter
from controller.workloads.leaderworkerset import LeaderWorkerSetAdapter
from controller.workloads.pod import PodAdapter
from controller.workloads.pod_rules import (
    NODE_NAME_KEY,
    PodRulesError,
    TemplatePods,
    gang_pod_sets,
)
from controller.workloads.pytorchjob import PyTorchJobAdapter
from controller.workloads.raycluster import RayClusterAdapter
from controller.workloads.rayjob import RayJobAdapter
from controller.workloads.registry import REGISTRY
from controller.workloads.statefulset import StatefulSetAdapter
from tests.fakes.reviews import make_review
from tests.fakes.workloads import (
    make_job,
    make_jobset,
    make_lws,
    make_pod,
    make_pytorchjob,
    make_raycluster,
    make_rayjob,
    make_statefulset,
)
from tests.unit.test_controller_state import state_of
from tests.unit.test_webhook_validation import SETTINGS, held
from webhook.validation import validate

JSON = dict[str, Any]
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
NS = "team-a"


def template(labels: dict[str, str] | None = None, **spec: Any) -> kube.PodTemplate:
    body: JSON = {"metadata": {"labels": labels or {}}, "spec": {"containers": [{}], **spec}}
    return msgspec.convert(body, kube.PodTemplate)


def annotated(annotations: dict[str, str], count: int = 4) -> PodSet:
    body = {"metadata": {"annotations": annotations}, "spec": {}}
    [pod_set] = gang_pod_sets(
        [TemplatePods("workers", count, msgspec.convert(body, kube.PodTemplate))], NS
    )
    return pod_set


def one(tpl: kube.PodTemplate, count: int = 3) -> PodSet:
    [pod_set] = gang_pod_sets([TemplatePods("main", count, tpl)], NS)
    return pod_set


def selector(**labels: str) -> JSON:
    return {"matchLabels": labels}


def pod_term(labels: JSON | None, key: str = HOST, **more: Any) -> JSON:
    term: JSON = {"topologyKey": key, **more}
    if labels is not None:
        term["labelSelector"] = labels
    return term


def required(*terms: JSON) -> JSON:
    return {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}


def node_affinity(*terms: JSON) -> JSON:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


# -- required node affinity ----------------------------------------------------------------------


@pytest.mark.parametrize("operator", ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"])
def test_node_affinity_keeps_each_operator(operator: str) -> None:
    values = [] if operator in ("Exists", "DoesNotExist") else ["3"]
    expression = {"key": "gpu-count", "operator": operator, "values": values}

    pod_set = one(template(affinity=node_affinity({"matchExpressions": [expression]})))

    assert pod_set.node_affinity == ((NodeRequirement("gpu-count", operator, tuple(values)),),)  # type: ignore[arg-type]
    assert pod_set.unchecked == ()


def test_node_affinity_ors_its_terms_and_ands_each_terms_requirements() -> None:
    zone_a = {"key": ZONE, "operator": "In", "values": ["a"]}
    gpu = {"key": "gpu", "operator": "Exists"}
    zone_b = {"key": ZONE, "operator": "In", "values": ["b"]}
    affinity = node_affinity({"matchExpressions": [zone_a, gpu]}, {"matchExpressions": [zone_b]})

    rules = one(template(affinity=affinity)).node_affinity

    assert affinity_matches(rules, {ZONE: "a", "gpu": "1"})
    assert not affinity_matches(rules, {ZONE: "a"})
    assert affinity_matches(rules, {ZONE: "b"})
    assert not affinity_matches(rules, {ZONE: "c", "gpu": "1"})


def test_node_affinity_on_the_node_name_matches_the_node_of_that_name() -> None:
    field = {"key": "metadata.name", "operator": "In", "values": ["n2"]}
    rules = one(template(affinity=node_affinity({"matchFields": [field]}))).node_affinity
    nodes = {
        name: core_node(
            msgspec.convert(
                {
                    "metadata": {"name": name, "labels": {HOST: f"host-{name}"}},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                },
                kube.Node,
            ),
            {},
        )
        for name in ("n1", "n2")
    }

    assert rules == ((NodeRequirement(NODE_NAME_KEY, "In", ("n2",)),),)
    matching = [n for n, node in nodes.items() if node and affinity_matches(rules, node.labels)]
    assert matching == ["n2"]


def test_a_node_affinity_of_empty_terms_matches_no_node() -> None:
    rules = one(template(affinity=node_affinity({}))).node_affinity

    assert not affinity_matches(rules, {HOST: "n1", NODE_NAME_KEY: "n1"})


def test_preferred_node_affinity_is_a_preference_and_left_out() -> None:
    preferred = {"preference": {"matchExpressions": [{"key": ZONE, "operator": "In"}]}}
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [preferred]}}

    pod_set = one(template(affinity=affinity))

    assert pod_set.node_affinity == () and pod_set.unchecked == ()


# -- pod (anti-)affinity ---------------------------------------------------------------------------


def test_anti_affinity_among_the_gangs_own_pods_is_checked() -> None:
    affinity = {"podAntiAffinity": required(pod_term(selector(app="train")))}

    pod_set = one(template({"app": "train"}, affinity=affinity))

    assert pod_set.pod_affinity == (OwnPodsTerm(HOST, ("main",), anti=True),)
    assert pod_set.unchecked == ()


def test_affinity_names_the_pod_sets_whose_templates_its_selector_matches() -> None:
    affinity = {"podAffinity": required(pod_term(selector(role="leader"), RACK))}
    leader = template({"role": "leader", "app": "x"})
    workers = template({"role": "worker", "app": "x"}, affinity=affinity)

    sets = gang_pod_sets(
        [TemplatePods("leader", 1, leader), TemplatePods("workers", 4, workers)], NS
    )

    assert sets[0].pod_affinity == ()
    assert sets[1].pod_affinity == (OwnPodsTerm(RACK, ("leader",)),)


def test_a_selector_with_expressions_matches_own_templates_as_the_scheduler_would() -> None:
    labels = {
        "matchExpressions": [
            {"key": "role", "operator": "In", "values": ["worker", "ps"]},
            {"key": "debug", "operator": "DoesNotExist"},
        ]
    }
    affinity = {"podAntiAffinity": required(pod_term(labels))}
    sets = gang_pod_sets(
        [
            TemplatePods("ps", 1, template({"role": "ps"})),
            TemplatePods("debug", 1, template({"role": "worker", "debug": "1"})),
            TemplatePods("workers", 2, template({"role": "worker"}, affinity=affinity)),
        ],
        NS,
    )

    assert sets[2].pod_affinity == (OwnPodsTerm(HOST, ("ps", "workers"), anti=True),)


def test_affinity_to_pods_of_other_workloads_is_unchecked_and_named() -> None:
    affinity = {"podAffinity": required(pod_term(selector(app="cache")))}

    pod_set = one(template({"app": "train"}, affinity=affinity))

    assert pod_set.pod_affinity == ()
    assert pod_set.unchecked == ("pod affinity to pods of other workloads (app=cache)",)


@pytest.mark.parametrize(
    "where",
    [{"namespaces": ["other"]}, {"namespaceSelector": {}}, {"namespaces": [NS, "other"]}],
    ids=["other-namespace", "every-namespace", "own-and-other"],
)
def test_anti_affinity_that_looks_in_other_namespaces_is_kept_among_own_pods_but_unchecked(
    where: JSON,
) -> None:
    affinity = {"podAntiAffinity": required(pod_term(selector(app="train"), **where))}

    pod_set = one(template({"app": "train"}, affinity=affinity))

    assert pod_set.pod_affinity == (OwnPodsTerm(HOST, ("main",), anti=True),)
    assert pod_set.unchecked == ("pod anti-affinity to pods of other workloads (app=train)",)


def test_affinity_that_looks_in_other_namespaces_is_unchecked_only() -> None:
    term = pod_term(selector(app="train"), namespaces=["other"])

    pod_set = one(template({"app": "train"}, affinity={"podAffinity": required(term)}))

    assert pod_set.pod_affinity == ()
    assert pod_set.unchecked == ("pod affinity to pods of other workloads (app=train)",)


def test_affinity_in_its_own_namespace_named_explicitly_is_checked() -> None:
    term = pod_term(selector(app="train"), namespaces=[NS])

    pod_set = one(template({"app": "train"}, affinity={"podAntiAffinity": required(term)}))

    assert pod_set.unchecked == () and len(pod_set.pod_affinity) == 1


def test_an_empty_selector_matches_every_pod_and_is_unchecked() -> None:
    affinity = {"podAntiAffinity": required(pod_term({}))}

    pod_set = one(template({"app": "train"}, affinity=affinity))

    assert pod_set.unchecked == ("pod anti-affinity to pods of other workloads (every pod)",)


def test_match_label_keys_narrow_the_selector_by_the_templates_own_values() -> None:
    term = pod_term(selector(app="x"), matchLabelKeys=["role"])
    affinity = {"podAntiAffinity": required(term)}
    sets = gang_pod_sets(
        [
            TemplatePods("a", 2, template({"app": "x", "role": "a"}, affinity=affinity)),
            TemplatePods("b", 2, template({"app": "x", "role": "b"})),
        ],
        NS,
    )

    assert sets[0].pod_affinity == (OwnPodsTerm(HOST, ("a",), anti=True),)


def test_match_label_keys_on_labels_the_template_lacks_are_unchecked() -> None:
    term = pod_term(selector(app="x"), matchLabelKeys=["batch.kubernetes.io/job-completion-index"])

    pod_set = one(template({"app": "x"}, affinity={"podAntiAffinity": required(term)}))

    assert pod_set.pod_affinity == ()
    assert pod_set.unchecked == (
        "pod anti-affinity with matchLabelKeys or mismatchLabelKeys on labels its pod template"
        " does not set (batch.kubernetes.io/job-completion-index)",
    )


def test_preferred_pod_affinity_is_left_out() -> None:
    weighted = {"weight": 10, "podAffinityTerm": pod_term(selector(app="cache"))}
    affinity = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted]}}

    pod_set = one(template({"app": "x"}, affinity=affinity))

    assert pod_set.pod_affinity == () and pod_set.unchecked == ()


# -- topology spread ---------------------------------------------------------------------------


def spread(**more: Any) -> JSON:
    return {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": selector(app="train"),
        **more,
    }


def test_spread_with_do_not_schedule_over_own_pods_is_checked() -> None:
    pod_set = one(template({"app": "train"}, topologySpreadConstraints=[spread(maxSkew=2)]))

    assert pod_set.spread == (SpreadConstraint(ZONE, 2, ("main",)),)
    assert pod_set.unchecked == ()


@pytest.mark.parametrize("policies", [{}, {"nodeTaintsPolicy": "Honor"}, {"minDomains": 1}])
def test_spread_under_the_policies_the_core_models_is_checked(policies: JSON) -> None:
    pod_set = one(template({"app": "train"}, topologySpreadConstraints=[spread(**policies)]))

    assert len(pod_set.spread) == 1 and pod_set.unchecked == ()


def test_spread_with_schedule_anyway_is_a_preference_and_left_out() -> None:
    constraint = spread(whenUnsatisfiable="ScheduleAnyway")

    pod_set = one(template({"app": "train"}, topologySpreadConstraints=[constraint]))

    assert pod_set.spread == () and pod_set.unchecked == ()


@pytest.mark.parametrize(
    ("more", "why"),
    [
        ({"minDomains": 3}, "topology spread over topology.kubernetes.io/zone with minDomains 3"),
        (
            {"nodeAffinityPolicy": "Ignore"},
            "topology spread over topology.kubernetes.io/zone with nodeAffinityPolicy Ignore",
        ),
        (
            {"labelSelector": selector(app="web")},
            "topology spread over topology.kubernetes.io/zone of pods of other workloads (app=web)",
        ),
    ],
    ids=["min-domains", "node-affinity-ignored", "foreign-selector"],
)
def test_spread_the_core_does_not_model_is_unchecked_and_named(more: JSON, why: str) -> None:
    pod_set = one(template({"app": "train"}, topologySpreadConstraints=[spread(**more)]))

    assert pod_set.spread == ()
    assert pod_set.unchecked == (why,)


# -- host ports and claims -------------------------------------------------------------------------


def test_host_ports_of_every_container_are_bound_tcp_unless_said() -> None:
    containers = [
        {"name": "a", "ports": [{"containerPort": 80}, {"containerPort": 8080, "hostPort": 80}]},
        {"name": "b", "ports": [{"containerPort": 53, "hostPort": 53, "protocol": "UDP"}]},
    ]
    init = [{"name": "i", "ports": [{"containerPort": 9, "hostPort": 9, "hostIP": "10.0.0.1"}]}]
    tpl = msgspec.convert(
        {"spec": {"containers": containers, "initContainers": init}}, kube.PodTemplate
    )

    pod_set = one(tpl)

    assert pod_set.host_ports == (
        HostPort(9, "TCP", "10.0.0.1"),
        HostPort(80, "TCP"),
        HostPort(53, "UDP"),
    )


def test_on_the_hosts_network_every_container_port_is_a_host_port() -> None:
    tpl = msgspec.convert(
        {"spec": {"hostNetwork": True, "containers": [{"ports": [{"containerPort": 29500}]}]}},
        kube.PodTemplate,
    )

    assert one(tpl).host_ports == (HostPort(29500),)


def test_dynamic_resource_claims_are_unchecked() -> None:
    claims = [{"name": "gpu", "resourceClaimTemplateName": "a100"}]

    assert one(template(resourceClaims=claims)).unchecked == ("dynamic resource claims",)


# -- topology annotations ----------------------------------------------------------------------


@pytest.mark.parametrize("vocabulary", ["kohort.dev", "kueue.x-k8s.io"])
@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        ({"podset-required-topology": RACK}, TopologyRequest(RACK)),
        ({"podset-preferred-topology": RACK}, TopologyRequest(RACK, required=False)),
        ({"podset-unconstrained-topology": "true"}, TopologyRequest(None)),
        (
            {"podset-slice-required-topology": HOST, "podset-slice-size": "2"},
            TopologyRequest(None, slice_level=HOST, slice_size=2),
        ),
        (
            {
                "podset-preferred-topology": "example.com/block",
                "podset-slice-required-topology": RACK,
                "podset-slice-size": "4",
            },
            TopologyRequest("example.com/block", required=False, slice_level=RACK, slice_size=4),
        ),
        ({"podset-unconstrained-topology": "false"}, None),
    ],
    ids=[
        "required",
        "preferred",
        "unconstrained",
        "slices",
        "preferred-slices",
        "not-unconstrained",
    ],
)
def test_topology_annotations_ask_for_a_topology(
    vocabulary: str, annotations: dict[str, str], want: TopologyRequest | None
) -> None:
    keys = {f"{vocabulary}/{k}": v for k, v in annotations.items()}

    assert annotated(keys).topology == want


def test_kohorts_topology_annotation_wins_over_kueues_of_the_same_meaning() -> None:
    pod_set = annotated(
        {
            names.REQUIRED_TOPOLOGY_ANNOTATION: RACK,
            names.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: HOST,
            names.KUEUE_SLICE_SIZE_ANNOTATION: "2",
            names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION: HOST,
        }
    )

    assert pod_set.topology == TopologyRequest(RACK, slice_level=HOST, slice_size=2)


def test_other_annotations_ask_for_no_topology() -> None:
    assert annotated({"example.com/owner": "team-a"}).topology is None


@pytest.mark.parametrize(
    ("annotations", "words"),
    [
        (
            {names.REQUIRED_TOPOLOGY_ANNOTATION: RACK, names.PREFERRED_TOPOLOGY_ANNOTATION: HOST},
            "contradict each other",
        ),
        (
            {
                names.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK,
                names.UNCONSTRAINED_TOPOLOGY_ANNOTATION: "true",
            },
            "contradict each other",
        ),
        (
            {names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION: HOST, names.SLICE_SIZE_ANNOTATION: "3"},
            "does not divide its 4 pods",
        ),
        (
            {names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION: HOST, names.SLICE_SIZE_ANNOTATION: "0"},
            "at least 1",
        ),
        (
            {names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION: HOST, names.SLICE_SIZE_ANNOTATION: "two"},
            "whole number",
        ),
        ({names.SLICE_SIZE_ANNOTATION: "2"}, "needs the level each slice stays in"),
        ({names.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: HOST}, "needs its size"),
        ({names.REQUIRED_TOPOLOGY_ANNOTATION: "a rack"}, "must name a node label"),
        ({names.UNCONSTRAINED_TOPOLOGY_ANNOTATION: "yes"}, 'must be "true" or "false"'),
    ],
    ids=[
        "required-and-preferred",
        "required-and-unconstrained",
        "slice-not-dividing",
        "slice-zero",
        "slice-not-a-number",
        "slice-size-without-level",
        "slice-level-without-size",
        "level-not-a-label",
        "unconstrained-not-a-bool",
    ],
)
def test_malformed_topology_annotations_are_refused_with_what_to_do(
    annotations: dict[str, str], words: str
) -> None:
    with pytest.raises(PodRulesError, match=words) as raised:
        annotated(annotations)
    assert "pod set 'workers'" in str(raised.value)


# -- every kind's pod sets go through the conversion ---------------------------------------------


def _annotate_templates(obj: JSON, adapter: WorkloadAdapter, annotations: dict[str, str]) -> JSON:
    out = copy.deepcopy(obj)
    for path in adapter.templates(out):
        meta = lookup(out, list(path)) if path else out
        meta.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
    return out


KINDS: list[tuple[type[Any], JSON]] = [
    (JobAdapter, make_job(parallelism=4, completions=4)),
    (StatefulSetAdapter, make_statefulset(replicas=4)),
    (LeaderWorkerSetAdapter, make_lws(replicas=1, size=4)),
    (JobSetAdapter, make_jobset(jobs={"workers": (2, 2)})),
    (PyTorchJobAdapter, make_pytorchjob(workers=2)),
    (RayClusterAdapter, make_raycluster(groups={"cpu": 2})),
    (RayJobAdapter, make_rayjob(groups={"cpu": 2}, mode="HTTPMode")),
    (
        PodAdapter,
        make_pod(labels={names.POD_GROUP_LABEL: "group", names.POD_GROUP_TOTAL_COUNT_LABEL: "2"}),
    ),
]


@pytest.mark.parametrize(("adapter_class", "obj"), KINDS, ids=[cls.__name__ for cls, _ in KINDS])
def test_every_kinds_pod_sets_carry_their_templates_rules(
    adapter_class: type[Any], obj: JSON
) -> None:
    adapter = REGISTRY.instance(adapter_class)
    anti = {"podAntiAffinity": required(pod_term(selector(**{names.MANAGED_LABEL: "kohort"})))}
    rules = _annotate_templates(obj, adapter, {names.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK})
    for path in adapter.templates(rules):
        spec = lookup(rules, [*path, "spec"])
        spec["affinity"] = anti
        spec["containers"][0]["ports"] = [{"containerPort": 7000, "hostPort": 7000}]
    editor = Editor(rules)
    adapter.default(editor, Mutation("research"))

    [gang, *_] = adapter.gangs(msgspec.convert(editor.doc, adapter.model))

    names_ = tuple(ps.name for ps in gang.pod_sets)
    for pod_set in gang.pod_sets:
        assert pod_set.topology == TopologyRequest(RACK)
        assert pod_set.pod_affinity == (OwnPodsTerm(HOST, names_, anti=True),)
        assert pod_set.host_ports == (HostPort(7000),)


def test_a_leader_made_from_the_workers_template_keeps_their_level_not_their_slices() -> None:
    adapter = REGISTRY.instance(LeaderWorkerSetAdapter)
    slices = {
        names.REQUIRED_TOPOLOGY_ANNOTATION: RACK,
        names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION: HOST,
        names.SLICE_SIZE_ANNOTATION: "2",
    }
    lws = _annotate_templates(make_lws(replicas=1, size=5, leader=False), adapter, slices)
    editor = Editor(lws)
    adapter.default(editor, Mutation("research"))

    [gang] = adapter.gangs(msgspec.convert(editor.doc, adapter.model))

    leader, workers = gang.pod_sets
    assert leader.topology == TopologyRequest(RACK)
    assert workers.topology == TopologyRequest(RACK, slice_level=HOST, slice_size=2)


# -- the webhook refuses what the controller could not honour; the controller leaves it ----------


def job_with(annotations: dict[str, str], pods: int = 4) -> JSON:
    job = make_job(parallelism=pods, completions=pods)
    job["spec"]["template"]["metadata"] = {"annotations": annotations}
    return job


def test_the_webhook_refuses_a_slice_that_does_not_divide_the_pod_set() -> None:
    job = job_with(
        {names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION: HOST, names.SLICE_SIZE_ANNOTATION: "3"}
    )

    response = validate(make_review(held(job)), SETTINGS)["response"]

    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "kohort.dev/podset-slice-size is 3, which does not divide its 4 pods" in message


def test_the_webhook_refuses_required_and_preferred_together_on_any_kind() -> None:
    adapter = REGISTRY.instance(JobSetAdapter)
    both = {
        names.REQUIRED_TOPOLOGY_ANNOTATION: RACK,
        names.KUEUE_PREFERRED_TOPOLOGY_ANNOTATION: HOST,
    }
    jobset = _annotate_templates(make_jobset(), adapter, both)

    response = validate(make_review(held(jobset)), SETTINGS)["response"]

    assert response["allowed"] is False
    assert "contradict each other" in response["status"]["message"]


def test_the_webhook_admits_a_kueue_manifests_topology_annotations_unchanged() -> None:
    job = job_with(
        {
            names.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: "example.com/block",
            names.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: RACK,
            names.KUEUE_SLICE_SIZE_ANNOTATION: "2",
        }
    )

    assert validate(make_review(held(job)), SETTINGS)["response"]["allowed"] is True


def test_the_webhook_refuses_an_update_that_makes_the_annotations_malformed() -> None:
    sts = held(make_statefulset(replicas=4))
    sts["spec"]["template"]["metadata"]["annotations"] = {
        names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION: HOST,
        names.SLICE_SIZE_ANNOTATION: "2",
    }
    scaled = copy.deepcopy(sts)
    scaled["spec"]["replicas"] = 3

    review = make_review(scaled, operation="UPDATE", old=sts)
    response = validate(review, SETTINGS)["response"]

    assert response["allowed"] is False
    assert "does not divide its 3 pods" in response["status"]["message"]


def test_the_controller_leaves_a_workload_with_malformed_annotations_unmanaged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = held(job_with({names.SLICE_SIZE_ANNOTATION: "2"}))

    with caplog.at_level(logging.WARNING):
        state = state_of((kinds.JOBS, job))

    assert list(state.index) == []
    assert "not managed: pod set 'main': annotation kohort.dev/podset-slice-size" in caplog.text
