"""Turn a ClusterView into the decision core's Snapshot (a thin adapter, no policy).

Rule: the core sees ClusterQueues as QueueSpecs, gangs as `namespace/name`, nodes with the
capacity that pods outside the snapshot's admitted gangs already use. Flavors are folded: the
core has no flavors yet, so a resource's quota is the sum over the flavors that list it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from controller.api import names
from controller.api.quantity import QuantityError, parse_quantity
from controller.cluster.view import (
    ClusterView,
    GangView,
    condition,
    gang_priority,
    milli,
    parse_time,
)
from controller.quota import (
    AdmittedGang,
    Gang,
    Node,
    PodPlacement,
    PodSet,
    QueueSpec,
    Quota,
    Snapshot,
    Taint,
    Toleration,
)
from controller.workloads.edits import lookup
from controller.workloads.requests import pod_requests

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def _opt(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def queue_spec(cq: Mapping[str, Any]) -> QueueSpec:
    spec = cq.get("spec") or {}
    nominal: dict[str, int] = {}
    borrowing: dict[str, int | None] = {}
    lending: dict[str, int | None] = {}
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                name = str(res["name"])
                nominal[name] = nominal.get(name, 0) + milli(res.get("nominalQuota", "0"))
                for limits, field in ((borrowing, "borrowingLimit"), (lending, "lendingLimit")):
                    value = _opt(res.get(field))
                    if name not in limits:
                        limits[name] = value
                    else:
                        before = limits[name]
                        limits[name] = None if before is None or value is None else before + value
    quotas = {
        r: Quota(nominal=n, borrowing_limit=borrowing.get(r), lending_limit=lending.get(r))
        for r, n in nominal.items()
    }
    preemption = spec.get("preemption") or {}
    weight_text = lookup(spec, ["fairSharing", "weight"])
    weight = milli(weight_text) / 1000 if weight_text is not None else 1.0
    return QueueSpec(
        name=str(cq["metadata"]["name"]),
        quotas=quotas,
        cohort=spec.get("cohort") or None,
        weight=weight,
        reclaim_within_cohort=preemption.get("reclaimWithinCohort", "Never"),
        within_queue=preemption.get("withinClusterQueue", "Never"),
        strategy=spec.get("queueingStrategy", "BestEffortFIFO"),
        min_runtime=float(preemption.get("minimumRuntimeSeconds", 0) or 0),
    )


def _tolerations(items: Iterable[Mapping[str, Any]]) -> tuple[Toleration, ...]:
    out = []
    for t in items:
        operator: Literal["Exists", "Equal"] = (
            "Exists" if t.get("operator") == "Exists" else "Equal"
        )
        out.append(
            Toleration(
                key=str(t.get("key") or ""),
                operator=operator,
                value=str(t.get("value") or ""),
                effect=str(t.get("effect") or ""),
            )
        )
    return tuple(out)


def core_gang(gang: GangView, cluster_queue: str, priorities: Mapping[str, int]) -> Gang:
    created = parse_time(gang.owner.obj["metadata"].get("creationTimestamp")) or 0.0
    return Gang(
        name=gang.key,
        queue=cluster_queue,
        pod_sets=tuple(
            PodSet(
                count=ps.count,
                requests=dict(ps.requests),
                name=ps.name,
                node_selector=dict(ps.node_selector),
                tolerations=_tolerations(ps.tolerations),
            )
            for ps in gang.pod_sets
        ),
        priority=gang_priority(gang, priorities),
        created=created,
    )


def _placement(gang: GangView) -> tuple[PodPlacement, ...]:
    """Where the gang's pods are: bound pods where they run, else the admission's plan."""
    bound = [p for p in gang.live_pods() if lookup(p, ["spec", "nodeName"])]
    sets = {ps.name for ps in gang.pod_sets}
    planned: list[PodPlacement] = []
    for assignment in lookup(gang.workload, ["status", "admission", "podSetAssignments"]) or []:
        name = str(assignment.get("name", ""))
        for node in assignment.get("nodes") or []:
            planned.append(PodPlacement(name, str(node["node"]), int(node["count"])))
    if bound and len(bound) >= sum(ps.count for ps in gang.pod_sets):
        first = gang.pod_sets[0].name
        counts: dict[tuple[str, str], int] = {}
        for pod in bound:
            pod_set = _pod_set_of(pod, sets) or first
            key = (pod_set, str(pod["spec"]["nodeName"]))
            counts[key] = counts.get(key, 0) + 1
        return tuple(PodPlacement(ps, node, n) for (ps, node), n in sorted(counts.items()))
    return tuple(planned)


def _pod_set_of(pod: Mapping[str, Any], sets: set[str]) -> str | None:
    labels = lookup(pod, ["metadata", "labels"]) or {}
    worker_index = labels.get(names.LWS_WORKER_INDEX_LABEL)
    if worker_index is not None:
        role = "leader" if worker_index == "0" else "worker"
        return role if role in sets else None
    return None


@dataclass(frozen=True)
class SnapshotParts:
    snapshot: Snapshot
    # Gangs the core is asked about -> their ClusterQueue.
    queue_of: Mapping[str, str]


def _pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    try:
        return pod_requests(pod.get("spec") or {})
    except (QuantityError, ValueError):
        return {}


def _node_ready(node: Mapping[str, Any]) -> bool:
    cond = condition(node, "Ready")
    return cond is not None and cond.get("status") == "True"


def build_snapshot(
    view: ClusterView, *, now: float, pending: Iterable[GangView], admitted: Iterable[GangView]
) -> SnapshotParts:
    queues = tuple(queue_spec(cq) for cq in view.cluster_queues)
    admitted_list = list(admitted)
    accounted = {g.key for g in admitted_list}
    used: dict[str, dict[str, int]] = {}
    for pod in view.pods:
        node_name = lookup(pod, ["spec", "nodeName"])
        if not node_name or lookup(pod, ["status", "phase"]) in ("Succeeded", "Failed"):
            continue
        labels = lookup(pod, ["metadata", "labels"]) or {}
        group = labels.get(names.POD_GROUP_LABEL)
        if group and f"{pod['metadata'].get('namespace', '')}/{group}" in accounted:
            continue
        on_node = used.setdefault(str(node_name), {})
        for resource, amount in _pod_requests(pod).items():
            on_node[resource] = on_node.get(resource, 0) + amount
        on_node["pods"] = on_node.get("pods", 0) + 1000
    nodes = []
    for node in view.nodes:
        if not _node_ready(node):
            continue
        name = str(node["metadata"]["name"])
        allocatable = {
            str(k): milli(v) for k, v in (lookup(node, ["status", "allocatable"]) or {}).items()
        }
        taints = [
            Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
            for t in lookup(node, ["spec", "taints"]) or []
            if t.get("effect") in ("NoSchedule", "NoExecute")
        ]
        if lookup(node, ["spec", "unschedulable"]):
            taints.append(UNSCHEDULABLE_TAINT)
        nodes.append(
            Node(
                name=name,
                allocatable=allocatable,
                labels=dict(lookup(node, ["metadata", "labels"]) or {}),
                taints=tuple(taints),
                used=used.get(name, {}),
            )
        )
    queue_of: dict[str, str] = {}
    core_pending = []
    for gang in pending:
        cq = view.cluster_queue_of(gang)
        if cq is None:
            continue
        queue_of[gang.key] = cq
        core_pending.append(core_gang(gang, cq, view.priority_classes))
    core_admitted = []
    for gang in admitted_list:
        cq = str(lookup(gang.workload, ["status", "admission", "clusterQueue"]) or "")
        cq = cq or view.cluster_queue_of(gang) or ""
        queue_of[gang.key] = cq
        core_admitted.append(
            AdmittedGang(
                gang=core_gang(gang, cq, view.priority_classes),
                admitted_at=gang.admitted_at() or now,
                placement=_placement(gang),
            )
        )
    snapshot = Snapshot(
        queues=queues,
        nodes=tuple(nodes),
        pending=tuple(core_pending),
        admitted=tuple(core_admitted),
    )
    return SnapshotParts(snapshot, queue_of)
