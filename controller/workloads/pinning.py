"""An admitted pod set pinned to the nodes it was admitted on: a requirement naming their
hostnames (`kubernetes.io/hostname In [...]`), added to every term of the pods' required node
affinity (one term of it when they have none).

Rule: pure functions of the typed views; the pin only narrows what the pods' own affinity
allows (Kubernetes lets a gated pod's required node affinity gain requirements, never lose
them, and lets a node field selector name one node only: hence the hostname label), so the gang
binds where its admission placed it, whichever scheduler places it.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from controller.api import kube
from controller.workloads.edits import JSONDict, Path, pointer

HOSTNAME = "kubernetes.io/hostname"
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def required_of(spec: kube.PodSpec) -> kube.NodeSelector | None:
    """A pod spec's required node affinity, if any."""
    affinity = spec.affinity
    node = affinity.node_affinity if affinity is not None else None
    return node.required_during_scheduling_ignored_during_execution if node else None


def node_pin(hostnames: Sequence[str]) -> kube.SelectorRequirement:
    return kube.SelectorRequirement(key=HOSTNAME, operator="In", values=sorted(hostnames))


def pinned(required: kube.NodeSelector | None, hostnames: Sequence[str]) -> kube.NodeSelector:
    """`required` with every term narrowed to the nodes of `hostnames` (one term naming them
    when it has none)."""
    pin = node_pin(hostnames)
    terms = required.node_selector_terms if required is not None else []
    if not terms:
        term = kube.NodeSelectorTerm(match_expressions=[pin])
        return kube.NodeSelector(node_selector_terms=[term])
    return kube.NodeSelector(
        node_selector_terms=[
            msgspec.structs.replace(term, match_expressions=[*term.match_expressions, pin])
            for term in terms
        ]
    )


def with_required(spec: kube.PodSpec, required: kube.NodeSelector | None) -> kube.PodSpec:
    """`spec` whose required node affinity is `required` (its pod (anti-)affinity kept)."""
    affinity = spec.affinity or kube.Affinity()
    node = affinity.node_affinity or kube.NodeAffinity()
    node = msgspec.structs.replace(
        node, required_during_scheduling_ignored_during_execution=required
    )
    affinity = msgspec.structs.replace(affinity, node_affinity=node)
    return msgspec.structs.replace(spec, affinity=affinity)


def selector_json(required: kube.NodeSelector | None) -> JSONDict | None:
    out: JSONDict | None = None if required is None else msgspec.to_builtins(required)
    return out


def required_ops(
    template_path: Path, spec: kube.PodSpec, wanted: kube.NodeSelector | None
) -> list[JSONDict]:
    """JSON Patch operations that make the required node affinity at `template_path` (whose
    spec is `spec`) `wanted`, replaced whole, creating its parents as needed."""
    current = required_of(spec)
    if current == wanted:
        return []
    base = (*template_path, "spec", "affinity")
    if wanted is None:
        return [{"op": "remove", "path": pointer(_emptied(spec, base))}]
    value = selector_json(wanted)
    if spec.affinity is None:
        return [{"op": "add", "path": pointer(base), "value": {"nodeAffinity": {_REQUIRED: value}}}]
    if spec.affinity.node_affinity is None:
        path = pointer((*base, "nodeAffinity"))
        return [{"op": "add", "path": path, "value": {_REQUIRED: value}}]
    return [{"op": "add", "path": pointer((*base, "nodeAffinity", _REQUIRED)), "value": value}]


def affinity_merge(spec: kube.PodSpec, wanted: kube.NodeSelector | None) -> JSONDict | None:
    """The `affinity` member of a merge patch of `spec` that makes its required node affinity
    `wanted` (None: remove the whole affinity)."""
    if wanted is not None:
        return {"nodeAffinity": {_REQUIRED: selector_json(wanted)}}
    removed = _emptied(spec, ("affinity",))
    if len(removed) == 1:
        return None
    if len(removed) == 2:
        return {"nodeAffinity": None}
    return {"nodeAffinity": {_REQUIRED: None}}


def _emptied(spec: kube.PodSpec, base: Path) -> Path:
    """What to remove to take a required node affinity away: the whole affinity when nothing
    else is in it, its node affinity when that holds nothing else, else the required part."""
    affinity = spec.affinity
    assert affinity is not None and affinity.node_affinity is not None
    if affinity.node_affinity.preferred_during_scheduling_ignored_during_execution is not None:
        return (*base, "nodeAffinity", _REQUIRED)
    if affinity.pod_affinity is None and affinity.pod_anti_affinity is None:
        return base
    return (*base, "nodeAffinity")


def pin_ops(spec: kube.PodSpec, hostnames: Sequence[str]) -> list[JSONDict]:
    """JSON Patch operations that pin a gated pod to the nodes of `hostnames` by additions
    only: a new required node affinity when it has none, else the pin added to each term."""
    current = required_of(spec)
    terms = current.node_selector_terms if current is not None else []
    if not terms:
        return required_ops((), spec, pinned(current, hostnames))
    pin = msgspec.to_builtins(node_pin(hostnames))
    base = ("spec", "affinity", "nodeAffinity", _REQUIRED, "nodeSelectorTerms")
    ops: list[JSONDict] = []
    for i, term in enumerate(terms):
        where = (*base, i, "matchExpressions")
        if term.match_expressions:
            ops.append({"op": "add", "path": pointer((*where, "-")), "value": pin})
        else:
            ops.append({"op": "add", "path": pointer(where), "value": [pin]})
    return ops


def pinned_host(spec: kube.PodSpec) -> str | None:
    """The one host a pod is pinned to: every term of its required node affinity names the same
    single hostname (None when a term names none, several, or the terms differ)."""
    required = required_of(spec)
    hosts: set[str] = set()
    for term in required.node_selector_terms if required is not None else []:
        named = [
            r.values[0]
            for r in term.match_expressions
            if r.key == HOSTNAME and r.operator == "In" and len(r.values) == 1
        ]
        if not named:
            return None
        hosts.update(named)
    return hosts.pop() if len(hosts) == 1 else None
