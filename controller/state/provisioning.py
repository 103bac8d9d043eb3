"""Gangs admitted onto nodes an autoscaled pool has still to add: the nodes the placement check
may count, the ProvisioningRequest that asks for them, and what its conditions mean.

Rule: pure functions of the API objects. A pool's nodes still to be made are named
`~new-<flavor>-<i>` (no node can be named so); a gang whose recorded placement names one waits
for its request, holding its quota, and is released only once it fits whole on real nodes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from controller import quota
from controller.api import kinds, kube, names
from controller.api.checks import CHECK_CAPACITY, AdmissionCheck, ProvisioningRequestCheck
from controller.api.quantity import QuantityError, format_quantity, parse_quantity
from controller.api.queues import ClusterQueue, ResourceFlavor
from controller.api.workload import AdmissionCheckState, Workload
from controller.quota.snapshot import PROVISIONABLE_TAINT
from controller.workloads.base import Delete, Patch
from controller.workloads.pod_rules import NODE_NAME_KEY
from controller.workloads.taints import repelling_taints, view_toleration

PREFIX = "~new-"
HOSTNAME = "kubernetes.io/hostname"
MAX_NAME = 253
_OVERCOMMITTED = frozenset({"cpu", "memory", "ephemeral-storage"})


def is_new(node: str) -> bool:
    """Whether `node` names a node a pool has still to add."""
    return node.startswith(PREFIX)


def flavor_of_new(node: str) -> str:
    """The flavor of a node still to be added (`~new-<flavor>-<i>`)."""
    return node[len(PREFIX) :].rsplit("-", 1)[0]


def waits_for_nodes(placement: Iterable[quota.PodPlacement]) -> bool:
    return any(is_new(p.node) for p in placement)


def _allocatable(amounts: Mapping[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for resource, amount in amounts.items():
        try:
            out[resource] = parse_quantity(amount)
        except QuantityError:
            out[resource] = 0
    return out


def _in_pool(flavor: ResourceFlavor, labels: Mapping[str, str]) -> bool:
    wanted = flavor.spec.node_labels
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def pool_nodes(
    flavors: Iterable[ResourceFlavor],
    node_labels: Iterable[Mapping[str, str]],
    held: Iterable[str],
) -> list[quota.Node]:
    """The nodes each autoscaled flavor's pool can still add: its maxNodes less the nodes it
    has (matching the flavor's nodeLabels, Ready or not) and less those admitted gangs hold;
    the ones held are always among them (their gangs keep their place until they move)."""
    labels = list(node_labels)
    held_names = set(held)
    out: list[quota.Node] = []
    for flavor in flavors:
        scaling = flavor.spec.autoscaling
        if scaling is None:
            continue
        name = flavor.metadata.name
        have = sum(1 for node in labels if _in_pool(flavor, node))
        mine = sorted(n for n in held_names if is_new(n) and flavor_of_new(n) == name)
        room = max(0, scaling.max_nodes - have - len(mine))
        names = list(mine)
        i = 0
        while room > 0:
            candidate = f"{PREFIX}{name}-{i}"
            if candidate not in held_names:
                names.append(candidate)
                room -= 1
            i += 1
        taints = (*repelling_taints(flavor.spec.node_taints), PROVISIONABLE_TAINT)
        allocatable = _allocatable(scaling.node_allocatable)
        for node in names:
            out.append(
                quota.Node(
                    name=node,
                    allocatable=allocatable,
                    labels={**flavor.spec.node_labels, HOSTNAME: node, NODE_NAME_KEY: node},
                    taints=taints,
                )
            )
    return out


def provisioned_flavors(
    cq: ClusterQueue, checks: Mapping[str, AdmissionCheck], flavors: Mapping[str, ResourceFlavor]
) -> frozenset[str]:
    """The queue's flavors whose pools a ProvisioningRequest check of the queue may grow."""
    out: set[str] = set()
    for group in cq.spec.resource_groups:
        for flavor in group.flavors:
            found = flavors.get(flavor.name)
            if found is None or found.spec.autoscaling is None:
                continue
            if any(_adds_nodes(checks.get(name)) for name in cq.spec.checks_on(flavor.name)):
                out.add(flavor.name)
    return frozenset(out)


def _adds_nodes(check: AdmissionCheck | None) -> bool:
    """Whether a check asks the autoscaler for new nodes (check-capacity only books capacity
    that exists, which kohort's placement check already sees)."""
    return check is not None and check.spec.provisioning_request.provisioning_class_name != (
        CHECK_CAPACITY
    )


@dataclass(frozen=True)
class Check:
    """The provisioning check a waiting gang passes: its name and settings."""

    name: str
    settings: ProvisioningRequestCheck


def check_for(
    cq: ClusterQueue | None, flavors: Iterable[str], checks: Mapping[str, AdmissionCheck]
) -> Check | None:
    """The first ProvisioningRequest check the queue lists for one of `flavors`."""
    if cq is None:
        return None
    for flavor in flavors:
        for name in cq.spec.checks_on(flavor):
            found = checks.get(name)
            if found is not None and _adds_nodes(found):
                return Check(name, found.spec.provisioning_request)
    return None


def request_name(workload: str, check: str, attempt: int) -> str:
    """`<workload>-<check>-<attempt>`, shortened with a hash when too long for a name."""
    name = f"{workload}-{check}-{attempt}"
    if len(name) <= MAX_NAME - 16:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: MAX_NAME - 32]}-{digest}"


def new_node_count(placement: Iterable[quota.PodPlacement]) -> int:
    return len({p.node for p in placement if is_new(p.node)})


def _owner(workload: Workload) -> dict[str, Any]:
    return {
        "apiVersion": workload.api_version,
        "kind": "Workload",
        "name": workload.metadata.name,
        "uid": workload.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }


def workload_of(meta: kube.ObjectMeta) -> str | None:
    """The Workload that owns a ProvisioningRequest (None: not one of kohort's)."""
    return next(
        (
            o.name
            for o in meta.owner_references
            if o.kind == "Workload" and o.api_version == kinds.WORKLOADS.api_version
        ),
        None,
    )


def template_name(request: str, pod_set: str) -> str:
    return f"{request}-{pod_set}"[:MAX_NAME]


def request_deletes(namespace: str, request: str, pod_sets: Iterable[str]) -> list[Delete]:
    """Delete a request and its PodTemplates."""
    return [
        Delete(kinds.PROVISIONING_REQUESTS, namespace, request),
        *(Delete(kinds.POD_TEMPLATES, namespace, template_name(request, p)) for p in pod_sets),
    ]


def request_objects(
    workload: Workload, name: str, check: Check, pod_sets: Sequence[quota.PodSet]
) -> list[tuple[kinds.Kind, dict[str, Any]]]:
    """The PodTemplates (one per pod set: what one pod asks of a node) and the
    ProvisioningRequest for all the gang's pods, owned by the gang's Workload. All of them: the
    autoscaler fits what it can on the free room of nodes that exist first (where kohort planned
    the gang's other pods), and adds nodes for the rest."""
    namespace = workload.metadata.namespace
    objects: list[tuple[kinds.Kind, dict[str, Any]]] = []
    refs: list[dict[str, Any]] = []
    for pod_set in pod_sets:
        count = pod_set.count
        template = template_name(name, pod_set.name)
        requests = {
            r: format_quantity(a)
            for r, a in sorted(pod_set.requests.items())
            if a > 0 and r != "pods"
        }
        # Extended resources (GPUs) and hugepages are not overcommitted: limits equal requests.
        limits = {r: a for r, a in requests.items() if r not in _OVERCOMMITTED}
        resources = {"requests": requests, "limits": limits} if limits else {"requests": requests}
        container = {"name": "main", "image": "pause", "resources": resources}
        spec: dict[str, Any] = {"containers": [container]}
        if pod_set.node_selector:
            spec["nodeSelector"] = dict(pod_set.node_selector)
        if pod_set.tolerations:
            spec["tolerations"] = [
                _toleration(t) for t in pod_set.tolerations if t.key != PROVISIONABLE_TAINT.key
            ]
        if pod_set.node_affinity:
            spec["affinity"] = {"nodeAffinity": _required(pod_set.node_affinity)}
        objects.append(
            (
                kinds.POD_TEMPLATES,
                {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {
                        "name": template,
                        "namespace": namespace,
                        "ownerReferences": [_owner(workload)],
                    },
                    "template": {"spec": spec},
                },
            )
        )
        refs.append({"podTemplateRef": {"name": template}, "count": count})
    body: dict[str, Any] = {
        "apiVersion": kinds.PROVISIONING_REQUESTS.api_version,
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [_owner(workload)]},
        "spec": {
            "provisioningClassName": check.settings.provisioning_class_name,
            "podSets": refs,
        },
    }
    if check.settings.parameters:
        body["spec"]["parameters"] = dict(check.settings.parameters)
    objects.append((kinds.PROVISIONING_REQUESTS, body))
    return objects


def _required(affinity: quota.snapshot.NodeAffinity) -> dict[str, Any]:
    """A required node affinity as a pod spec holds it."""
    terms = []
    for term in affinity:
        expressions, fields = [], []
        for r in term:
            if r.key == NODE_NAME_KEY:
                fields.append(
                    {"key": "metadata.name", "operator": r.operator, "values": list(r.values)}
                )
            else:
                item: dict[str, Any] = {"key": r.key, "operator": r.operator}
                if r.values:
                    item["values"] = list(r.values)
                expressions.append(item)
        found: dict[str, Any] = {}
        if expressions:
            found["matchExpressions"] = expressions
        if fields:
            found["matchFields"] = fields
        terms.append(found)
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}


def _toleration(toleration: quota.Toleration) -> Any:
    return msgspec.to_builtins(view_toleration(toleration))


State = Literal["Pending", "Ready", "Retry", "Rejected"]


@dataclass(frozen=True)
class Verdict:
    """What a request's conditions say of the check: its state and why."""

    state: State
    message: str


def verdict(request: kube.ProvisioningRequest | None) -> Verdict:
    """The check's state from its request's conditions (the autoscaler's mapping: Provisioned
    is Ready; Failed, BookingExpired and CapacityRevoked before the gang is released call for
    another attempt)."""
    if request is None:
        return Verdict("Pending", "its ProvisioningRequest is being created")
    for kind in ("CapacityRevoked", "BookingExpired", "Failed"):
        found = request.condition(kind)
        if found is not None and found.status == "True":
            text = found.message or found.reason or kind
            return Verdict("Retry", f"{kind}: {text}")
    provisioned = request.condition("Provisioned")
    if provisioned is not None and provisioned.status == "True":
        return Verdict("Ready", provisioned.message or "capacity provisioned")
    accepted = request.condition("Accepted")
    if provisioned is not None and provisioned.message:
        return Verdict("Pending", provisioned.message)
    if accepted is not None and accepted.status == "True":
        return Verdict("Pending", accepted.message or "accepted by the autoscaler")
    return Verdict("Pending", "waiting for the autoscaler to accept it")


def consume_writes(
    workload: Workload | None, pods: Iterable[kube.Pod], classes: Mapping[str, str]
) -> list[Patch]:
    """The annotations that tell the autoscaler a released gang's pods take its provisioned
    request's capacity (its booking ends once they are bound), on the pods lacking them (those
    that finished too: a short gang may be done before the write).
    `classes`: each check's request class."""
    status = workload.status if workload else None
    ready = [
        c
        for c in (status.admission_checks if status else [])
        if c.state == "Ready" and c.request and c.name in classes
    ]
    if not ready:
        return []
    check = ready[0]
    assert check.request is not None
    wanted = {
        names.CONSUME_REQUEST_ANNOTATION: check.request,
        names.PROVISIONING_CLASS_ANNOTATION: classes[check.name],
    }
    writes: list[Patch] = []
    for pod in pods:
        have = pod.metadata.annotations
        gone = pod.metadata.deletion_timestamp is not None
        if gone or (have is not None and have.consumes == check.request):
            continue
        body = {"metadata": {"annotations": wanted}}
        writes.append(
            Patch(kinds.PODS, pod.metadata.namespace, pod.metadata.name, body, expected=True)
        )
    return writes


def check_state(workload: Workload | None, name: str) -> AdmissionCheckState | None:
    status = workload.status if workload else None
    if status is None:
        return None
    return next((c for c in status.admission_checks if c.name == name), None)


def rejected(workload: Workload | None) -> bool:
    """Whether one of the gang's checks ran out of retries (it then waits for real nodes)."""
    status = workload.status if workload else None
    return status is not None and any(c.state == "Rejected" for c in status.admission_checks)


def with_state(
    states: Sequence[AdmissionCheckState], new: AdmissionCheckState
) -> list[AdmissionCheckState]:
    """`states` with the one of `new.name` replaced (or added)."""
    kept = [s for s in states if s.name != new.name]
    return [*kept, new]


def on_admission(
    states: Sequence[AdmissionCheckState],
    *,
    waiting: bool,
    moved: bool,
    provisioned: Callable[[str], bool],
    now: str,
) -> list[AdmissionCheckState]:
    """The checks' states as an admission leaves them (Rejected ones stay): onto nodes still to
    be made, Pending for a new request; moved onto real nodes, Ready, keeping the request only
    when it was provisioned (its pods then consume it); admitted straight onto real nodes,
    Ready with no request."""
    out: list[AdmissionCheckState] = []
    for state in states:
        if state.state == "Rejected":
            out.append(state)
            continue
        new = state.model_copy()
        if waiting:
            new.state, new.request = "Pending", None
            new.message = "a ProvisioningRequest is being made"
        elif moved and state.request and provisioned(state.request):
            new.state, new.message = "Ready", "placed on the nodes provisioned for it"
        else:
            new.state, new.request = "Ready", None
            new.message = "placed on nodes that exist: nothing to provision"
        if new.state != state.state:
            new.last_transition_time = now
        out.append(new)
    return out


def backoff(settings: ProvisioningRequestCheck, retries: int) -> float:
    """Seconds before attempt `retries + 1`: base doubling with each failed attempt, capped."""
    strategy = settings.retry_strategy
    return float(
        min(strategy.backoff_max_seconds, strategy.backoff_base_seconds * 2 ** max(0, retries - 1))
    )
