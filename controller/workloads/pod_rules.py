"""What the scheduler enforces on a gang's own pods, read from the gang's pod templates.

Rule: the one place where pod templates become the placement rules of the decision core's pod
sets (`quota.PodSet`: node_affinity, pod_affinity, spread, host_ports, topology, unchecked), on
top of what `base.pod_set` reads (requests, nodeSelector, tolerations); every kind's gang goes
through `gang_pod_sets`. A rule the core checks becomes its field; a rule it cannot check
(affinity to other workloads' pods, dynamic resource claims, a spread policy it does not model)
is named in the pod set's `unchecked`, never dropped in silence; preferences (preferred terms,
ScheduleAnyway) are not rules and are left out. Malformed topology annotations raise
`PodRulesError`: the webhook refuses the object, the controller leaves it unmanaged.

Assumption: a label selector that matches the labels of some of the gang's own pod templates,
in the gang's namespace only, selects the gang's own pods: other workloads' pods are taken not
to carry those labels. Another workload's pods could; the scheduler then counts pods the model
does not (an anti-affinity or spread the model found kept may not hold, an affinity it found
unmet may be met by them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import msgspec

from controller.api import kube, names
from controller.quota.snapshot import (
    HostPort,
    NodeAffinity,
    NodeRequirement,
    Operator,
    OwnPodsTerm,
    PodSet,
    SpreadConstraint,
    TopologyRequest,
)
from controller.workloads.base import pod_set

# The key under which the controller's state lists each node's name among its labels, so that a
# node affinity's matchFields on metadata.name is a requirement like any other. No label key
# has a colon: no real label can take it.
NODE_NAME_KEY = "matchFields:metadata.name"

_NODE_OPERATORS: Mapping[str, Operator] = {
    op: op for op in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
}
_LABEL_OPERATORS = frozenset(("In", "NotIn", "Exists", "DoesNotExist"))
# What a label key (a topology level) looks like: an optional DNS-subdomain prefix and a name.
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class PodRulesError(ValueError):
    """A pod template's topology annotations cannot be honoured as written."""


# What a pod set whose pods claim devices (DRA) says was not checked, unless the placement
# check counted its devices (objects.unchecked).
DYNAMIC_RESOURCE_CLAIMS = "dynamic resource claims"


@dataclass(frozen=True, slots=True)
class TemplatePods:
    """`count` pods of pod set `name`, made from `template`."""

    name: str
    count: int
    template: kube.PodTemplate


def gang_pod_sets(sets: Sequence[TemplatePods], namespace: str) -> tuple[PodSet, ...]:
    """The pod sets of a gang in `namespace` made from `sets`, with their placement rules (see
    the module). Raises PodRulesError when a template's topology annotations are malformed."""
    return tuple(_with_rules(one, sets, namespace) for one in sets)


def _with_rules(one: TemplatePods, sets: Sequence[TemplatePods], namespace: str) -> PodSet:
    spec = one.template.spec
    affinity, unchecked = required_node_affinity(spec)
    terms, more = own_pod_terms(one, sets, namespace)
    unchecked += more
    spread, more = own_spread(one, sets)
    unchecked += more
    if spec.resource_claims:
        unchecked.append(DYNAMIC_RESOURCE_CLAIMS)
    return replace(
        pod_set(one.name, one.count, one.template),
        node_affinity=affinity,
        pod_affinity=tuple(terms),
        spread=tuple(spread),
        host_ports=host_ports(spec),
        topology=topology_request(one.name, one.count, one.template.metadata.annotations),
        unchecked=tuple(dict.fromkeys(unchecked)),
    )


# -- node affinity ------------------------------------------------------------------------------


def required_node_affinity(spec: kube.PodSpec) -> tuple[NodeAffinity, list[str]]:
    """The required node affinity of a pod of `spec`: its terms ORed, each one's requirements
    ANDed, matchFields on metadata.name a requirement on NODE_NAME_KEY. A term with no
    requirement matches no node. One the core cannot evaluate leaves the whole affinity
    unchecked (dropping a term would keep pods off nodes it allows)."""
    node = spec.affinity.node_affinity if spec.affinity else None
    required = node.required_during_scheduling_ignored_during_execution if node else None
    if required is None or not required.node_selector_terms:
        return (), []
    terms: list[tuple[NodeRequirement, ...]] = []
    for term in required.node_selector_terms:
        requirements: list[NodeRequirement] = []
        for expression in term.match_expressions:
            operator = _NODE_OPERATORS.get(expression.operator)
            if operator is None:
                return (), [f"node affinity operator {expression.operator}"]
            requirements.append(NodeRequirement(expression.key, operator, tuple(expression.values)))
        for field in term.match_fields:
            if field.key != "metadata.name" or field.operator not in ("In", "NotIn"):
                return (), [f"node affinity on field {field.key} ({field.operator})"]
            operator = _NODE_OPERATORS[field.operator]
            requirements.append(NodeRequirement(NODE_NAME_KEY, operator, tuple(field.values)))
        if requirements:
            terms.append(tuple(requirements))
    if not terms:  # only empty terms: no node matches
        return ((NodeRequirement(NODE_NAME_KEY, "In", ()),),), []
    return tuple(terms), []


# -- label selectors ----------------------------------------------------------------------------


def _requirements(
    selector: kube.LabelSelector, extra: Sequence[NodeRequirement]
) -> tuple[NodeRequirement, ...]:
    """A label selector's requirements (and `extra` ones), as the core's: its four operators
    mean the same on pod labels as on node labels. The apiserver admits no other operator; one
    would match no pod."""
    requirements = [NodeRequirement(k, "In", (v,)) for k, v in selector.match_labels.items()]
    for r in selector.match_expressions:
        if r.operator in _LABEL_OPERATORS:
            requirements.append(
                NodeRequirement(r.key, _NODE_OPERATORS[r.operator], tuple(r.values))
            )
        else:
            requirements.append(NodeRequirement(r.key, "In", ()))
    return (*requirements, *extra)


def _everything(selector: kube.LabelSelector) -> bool:
    return not selector.match_labels and not selector.match_expressions


def selector_text(selector: kube.LabelSelector) -> str:
    """A label selector as kubectl writes one: `app=cache,tier in (a,b),!gpu`."""
    parts = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for r in selector.match_expressions:
        if r.operator == "Exists":
            parts.append(r.key)
        elif r.operator == "DoesNotExist":
            parts.append(f"!{r.key}")
        else:
            parts.append(f"{r.key} {r.operator.lower()} ({','.join(r.values)})")
    return ",".join(parts) or "every pod"


def _label_key_requirements(
    labels: Mapping[str, str], match: Sequence[str], mismatch: Sequence[str] = ()
) -> tuple[list[NodeRequirement], list[str]]:
    """What matchLabelKeys (the pod's own value) and mismatchLabelKeys (any other value) add to
    a selector, from a template's `labels`; and the keys the template does not set (its pods
    may get them from their operator: the selector is then unknown)."""
    extra: list[NodeRequirement] = []
    missing: list[str] = []
    for keys, operator in ((match, "In"), (mismatch, "NotIn")):
        for key in keys:
            if key not in labels:
                missing.append(key)
            else:
                extra.append(NodeRequirement(key, _NODE_OPERATORS[operator], (labels[key],)))
    return extra, missing


def _matched(
    selector: kube.LabelSelector, extra: Sequence[NodeRequirement], sets: Sequence[TemplatePods]
) -> tuple[str, ...]:
    """The pod sets of the gang whose template labels `selector` (with `extra`) matches."""
    requirements = _requirements(selector, extra)
    return tuple(
        s.name for s in sets if all(r.matches(s.template.metadata.labels) for r in requirements)
    )


# -- (anti-)affinity among pods -----------------------------------------------------------------


def own_pod_terms(
    one: TemplatePods, sets: Sequence[TemplatePods], namespace: str
) -> tuple[list[OwnPodsTerm], list[str]]:
    """The required pod (anti-)affinity terms of `one`'s pods among the gang's own pods (see
    the module's assumption), and what of them is unchecked: a term that can also match pods
    of other workloads (its selector matches none of the gang's templates, matches every pod,
    or it looks in other namespaces). An anti-affinity term that does keeps its part among the
    gang's pods (a condition of it); an affinity term does not (others' pods may meet it)."""
    affinity = one.template.spec.affinity
    if affinity is None:
        return [], []
    terms: list[OwnPodsTerm] = []
    unchecked: list[str] = []
    for anti, group in ((False, affinity.pod_affinity), (True, affinity.pod_anti_affinity)):
        what = "pod anti-affinity" if anti else "pod affinity"
        for term in group.required_during_scheduling_ignored_during_execution if group else []:
            selector = term.label_selector
            if selector is None:  # selects no pod
                if not anti:
                    unchecked.append(f"{what} without a labelSelector")
                continue
            labels = one.template.metadata.labels
            extra, missing = _label_key_requirements(
                labels, term.match_label_keys, term.mismatch_label_keys
            )
            if missing:
                unchecked.append(
                    f"{what} with matchLabelKeys or mismatchLabelKeys on labels its pod"
                    f" template does not set ({', '.join(missing)})"
                )
                continue
            own = _matched(selector, extra, sets)
            elsewhere = (
                term.namespace_selector is not None
                or any(n != namespace for n in term.namespaces)
                or _everything(selector)
            )
            if own and (anti or not elsewhere):
                terms.append(OwnPodsTerm(term.topology_key, own, anti=anti))
            if not own or elsewhere:
                unchecked.append(f"{what} to pods of other workloads ({selector_text(selector)})")
    return terms, unchecked


# -- topology spread ----------------------------------------------------------------------------


def own_spread(
    one: TemplatePods, sets: Sequence[TemplatePods]
) -> tuple[list[SpreadConstraint], list[str]]:
    """The DoNotSchedule topology spread constraints of `one`'s pods among the gang's own pods,
    and what of them is unchecked: a selector that matches none of the gang's templates,
    minDomains above 1, nodeAffinityPolicy Ignore. ScheduleAnyway is a preference: left out.
    The core counts the domains of the nodes a pod may go to, its tolerations included
    (nodeTaintsPolicy Honor); under the default policy (Ignore) the scheduler also counts
    domains of nodes whose taints the pods do not tolerate."""
    constraints: list[SpreadConstraint] = []
    unchecked: list[str] = []
    labels = one.template.metadata.labels
    for c in one.template.spec.topology_spread_constraints:
        if c.when_unsatisfiable != "DoNotSchedule" or c.label_selector is None:
            continue  # a preference; or a selector of no pod, which nothing can skew
        what = f"topology spread over {c.topology_key}"
        extra, missing = _label_key_requirements(labels, c.match_label_keys)
        if missing:
            unchecked.append(
                f"{what} with matchLabelKeys on labels its pod template does not set"
                f" ({', '.join(missing)})"
            )
            continue
        own = _matched(c.label_selector, extra, sets)
        if not own or _everything(c.label_selector):
            unchecked.append(
                f"{what} of pods of other workloads ({selector_text(c.label_selector)})"
            )
        elif c.min_domains is not None and c.min_domains > 1:
            unchecked.append(f"{what} with minDomains {c.min_domains}")
        elif c.node_affinity_policy == "Ignore":
            unchecked.append(f"{what} with nodeAffinityPolicy Ignore")
        else:
            constraints.append(SpreadConstraint(c.topology_key, c.max_skew, own))
    return constraints, unchecked


# -- host ports ---------------------------------------------------------------------------------


def host_ports(spec: kube.PodSpec) -> tuple[HostPort, ...]:
    """The host ports a pod of `spec` binds: every container's (init containers' too) ports
    with a hostPort, or all of them on the host's network (protocol TCP when unset)."""
    ports: list[HostPort] = []
    for container in (*spec.init_containers, *spec.containers):
        for p in container.ports:
            number = p.host_port or (p.container_port if spec.host_network else 0)
            if number > 0:
                port = HostPort(number, p.protocol or "TCP", p.host_ip)
                if port not in ports:
                    ports.append(port)
    return tuple(ports)


# -- topology annotations -----------------------------------------------------------------------


# kohort's annotation and Kueue's of the same meaning.
TOPOLOGY_ANNOTATIONS: tuple[tuple[str, str], ...] = (
    (names.REQUIRED_TOPOLOGY_ANNOTATION, names.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION),
    (names.PREFERRED_TOPOLOGY_ANNOTATION, names.KUEUE_PREFERRED_TOPOLOGY_ANNOTATION),
    (names.UNCONSTRAINED_TOPOLOGY_ANNOTATION, names.KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION),
    (names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION, names.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION),
    (names.SLICE_SIZE_ANNOTATION, names.KUEUE_SLICE_SIZE_ANNOTATION),
)

Chosen = tuple[str, str] | None  # (annotation key, value) of one meaning, or unset


def _chosen(annotations: kube.PlacementAnnotations) -> dict[str, Chosen]:
    """Each meaning (by kohort's key): kohort's annotation when set, else Kueue's."""
    values = {
        field.encode_name: value
        for field in msgspec.structs.fields(annotations)
        if (value := getattr(annotations, field.name)) is not None
    }
    out: dict[str, Chosen] = {}
    for ours, kueues in TOPOLOGY_ANNOTATIONS:
        key = ours if ours in values else kueues
        out[ours] = (key, values[key]) if key in values else None
    return out


def without_slices(template: kube.PodTemplate) -> kube.PodTemplate:
    """`template` for a pod set it was not written for (a LeaderWorkerSet's leader made from
    its worker template): its topology level kept, its slices (sized for the others) left out."""
    annotations = template.metadata.annotations
    if annotations is None:
        return template
    kept = msgspec.structs.replace(
        annotations,
        slice_required_topology=None,
        slice_size=None,
        kueue_slice_required_topology=None,
        kueue_slice_size=None,
    )
    metadata = msgspec.structs.replace(template.metadata, annotations=kept)
    return msgspec.structs.replace(template, metadata=metadata)


def _level(where: str, chosen: Chosen) -> str | None:
    """The node label a level annotation names; PodRulesError when it names none."""
    if chosen is None:
        return None
    key, value = chosen
    prefix, _, name = value.rpartition("/")
    if not _LABEL_KEY.match(value) or len(name) > 63 or len(prefix) > 253:
        raise PodRulesError(
            f"{where}: annotation {key} must name a node label (a topology"
            f" level such as kubernetes.io/hostname), got {value!r}"
        )
    return value


def topology_request(
    pod_set_name: str, count: int, annotations: kube.PlacementAnnotations | None
) -> TopologyRequest | None:
    """Where the pods of a pod set of `count` pods go together, as its template's annotations
    ask (kohort's, or Kueue's of the same meaning): all in one domain of a required or preferred
    level, or anywhere (unconstrained); slices of a size, each in one domain of a level
    (anywhere without a required or preferred level). None: no annotation asks."""
    if annotations is None:
        return None
    chosen = _chosen(annotations)
    if not any(chosen.values()):
        return None
    where = f"pod set {pod_set_name!r}"
    required = _level(where, chosen[names.REQUIRED_TOPOLOGY_ANNOTATION])
    preferred = _level(where, chosen[names.PREFERRED_TOPOLOGY_ANNOTATION])
    unconstrained = chosen[names.UNCONSTRAINED_TOPOLOGY_ANNOTATION]
    if unconstrained is not None and unconstrained[1] not in ("true", "false"):
        raise PodRulesError(
            f'{where}: annotation {unconstrained[0]} must be "true" or "false",'
            f" got {unconstrained[1]!r}"
        )
    levels = (
        chosen[names.REQUIRED_TOPOLOGY_ANNOTATION],
        chosen[names.PREFERRED_TOPOLOGY_ANNOTATION],
    )
    asked = [c[0] for c in levels if c is not None]
    anywhere = unconstrained is not None and unconstrained[1] == "true"
    if unconstrained is not None and anywhere:
        asked.append(unconstrained[0])
    if len(asked) > 1:
        raise PodRulesError(
            f"{where}: annotations {' and '.join(asked)} contradict each other: set one of a"
            " required level, a preferred level or unconstrained"
        )
    slice_level = _level(where, chosen[names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION])
    size = _slice_size(where, count, chosen[names.SLICE_SIZE_ANNOTATION], slice_level)
    if not (asked or size):
        return None  # unconstrained: "false" alone
    return TopologyRequest(
        level=required or preferred,
        required=preferred is None,
        slice_level=slice_level,
        slice_size=size,
    )


def _slice_size(where: str, count: int, chosen: Chosen, slice_level: str | None) -> int:
    """The pods in each slice (0: no slices); a slice needs both a level and a size, and its
    size must divide the pod set's pods."""
    if chosen is None:
        if slice_level is not None:
            raise PodRulesError(
                f"{where}: a slice topology needs its size: set {names.SLICE_SIZE_ANNOTATION}"
                " (the pods in each slice) too"
            )
        return 0
    key, value = chosen
    if slice_level is None:
        raise PodRulesError(
            f"{where}: annotation {key} needs the level each slice stays in: set"
            f" {names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION} too"
        )
    size = int(value) if value.isdigit() else 0
    if size < 1:
        raise PodRulesError(
            f"{where}: annotation {key} must be a whole number of pods, at least 1, got {value!r}"
        )
    if count % size:
        raise PodRulesError(
            f"{where}: annotation {key} is {size}, which does not divide its {count} pods into"
            " whole slices"
        )
    return size
