"""One read of the cache: the gangs the cluster holds, their Workloads, pods and owners.

Rule: building a view is synchronous and reads every store once, so within one reconcile pass
the controller decides on one consistent picture (nothing else runs between two awaits here).
Gangs are discovered from the user's objects through the workload adapters; a gang's Workload
and PodGroup carry the gang's name in the gang's namespace.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.api import names
from controller.api.quantity import QuantityError, parse_quantity
from controller.cluster import clients
from controller.cluster.clients import JSONDict, Kind
from controller.workloads.base import Denied, PodSet, WorkloadAdapter, has_gate, queue_of
from controller.workloads.edits import lookup
from controller.workloads.job import JobAdapter
from controller.workloads.leaderworkerset import LeaderWorkerSetAdapter
from controller.workloads.pod import PodAdapter, controller_owner
from controller.workloads.statefulset import StatefulSetAdapter

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
FINISHED = "Finished"
PODS_READY = "PodsReady"

# Requeue state of an evicted Workload (annotations, so the CRD schema need not know them).
REQUEUE_COUNT_ANNOTATION = "kohort.dev/requeue-count"
REQUEUE_AT_ANNOTATION = "kohort.dev/requeue-at"

JOB = JobAdapter()
STATEFULSET = StatefulSetAdapter()
LWS = LeaderWorkerSetAdapter()
POD = PodAdapter()


def parse_time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(seconds: float) -> str:
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).replace(microsecond=0)
    return stamp.isoformat().replace("+00:00", "Z")


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for cond in lookup(obj, ["status", "conditions"]) or []:
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return None


def is_true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


@dataclass(frozen=True)
class Owner:
    """The user's object a gang comes from (Job, StatefulSet, LeaderWorkerSet or Pod)."""

    kind: Kind
    adapter: WorkloadAdapter
    obj: JSONDict

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace") or "")

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"].get("uid") or "")

    def reference(self) -> JSONDict:
        return {
            "apiVersion": self.kind.api_version,
            "kind": self.kind.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }


@dataclass(frozen=True)
class PodSetSpec:
    """A pod set as the Workload records it: per-pod requests and where its pods may go."""

    name: str
    count: int
    requests: Mapping[str, int]
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    priority_class: str | None


@dataclass
class GangView:
    """One gang: its owner, its pods, its Workload (None until created) and its state."""

    namespace: str
    name: str
    owner: Owner
    queue: str
    min_member: int
    pod_sets: tuple[PodSetSpec, ...]
    pods: list[JSONDict] = field(default_factory=list)
    workload: JSONDict | None = None
    # "Succeeded" / "Failed" once the user's object says it is done.
    finished: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def reserved(self) -> bool:
        """Whether the Workload holds quota (the durable record of an admission)."""
        return self.workload is not None and is_true(self.workload, QUOTA_RESERVED)

    @property
    def workload_finished(self) -> bool:
        return self.workload is not None and is_true(self.workload, FINISHED)

    def admitted_at(self) -> float | None:
        return parse_time(lookup(self.workload, ["status", "admission", "admittedAt"]))

    def requeue_at(self) -> float:
        text = lookup(self.workload, ["metadata", "annotations", REQUEUE_AT_ANNOTATION])
        try:
            return float(text) if text is not None else 0.0
        except (TypeError, ValueError):
            return 0.0

    def requeue_count(self) -> int:
        text = lookup(self.workload, ["metadata", "annotations", REQUEUE_COUNT_ANNOTATION])
        try:
            return int(text) if text is not None else 0
        except (TypeError, ValueError):
            return 0

    def live_pods(self) -> list[JSONDict]:
        """Pods not being deleted and not finished."""
        return [
            p
            for p in self.pods
            if not p["metadata"].get("deletionTimestamp")
            and lookup(p, ["status", "phase"]) not in ("Succeeded", "Failed")
        ]

    def gated_pods(self) -> list[JSONDict]:
        return [p for p in self.live_pods() if has_gate(p)]

    def running_pods(self) -> int:
        return sum(
            1
            for p in self.pods
            if lookup(p, ["status", "phase"]) in ("Running", "Succeeded")
            and not p["metadata"].get("deletionTimestamp")
        )

    def total_requests(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for ps in self.pod_sets:
            for resource, amount in ps.requests.items():
                total[resource] = total.get(resource, 0) + amount * ps.count
        return total


@dataclass
class ClusterView:
    gangs: dict[str, GangView]
    # Workloads without a gang (their owner is gone): to be deleted.
    orphans: list[JSONDict]
    cluster_queues: list[JSONDict]
    local_queues: dict[tuple[str, str], str]  # (namespace, name) -> ClusterQueue
    nodes: list[JSONDict]
    pods: list[JSONDict]
    podgroups: dict[str, JSONDict]  # "ns/name" -> PodGroup
    priority_classes: dict[str, int]

    def cluster_queue_of(self, gang: GangView) -> str | None:
        return self.local_queues.get((gang.namespace, gang.queue))


def _template(obj: JSONDict, path: Sequence[str]) -> Mapping[str, Any]:
    found = lookup(obj, list(path))
    return found if isinstance(found, Mapping) else {}


def _pod_set_spec(obj: JSONDict, pod_set: PodSet) -> PodSetSpec:
    spec = _template(obj, [*pod_set.template_path, "spec"])
    selector = spec.get("nodeSelector") or {}
    tolerations = spec.get("tolerations") or []
    return PodSetSpec(
        name=pod_set.name,
        count=pod_set.count,
        requests={k: v for k, v in pod_set.requests.items() if v > 0},
        node_selector={str(k): str(v) for k, v in selector.items()},
        tolerations=tuple(t for t in tolerations if isinstance(t, Mapping)),
        priority_class=spec.get("priorityClassName") or None,
    )


def _template_gang_name(obj: JSONDict, path: Sequence[str]) -> str | None:
    value = lookup(obj, [*path, "metadata", "labels", names.POD_GROUP_LABEL])
    return value if isinstance(value, str) and value else None


def _owner_gangs(kind: Kind, adapter: WorkloadAdapter, obj: JSONDict) -> list[GangView]:
    queue = queue_of(obj)
    if queue is None:
        return []
    try:
        gangs = adapter.gangs(obj)
    except (Denied, QuantityError, ValueError):
        return []
    owner = Owner(kind, adapter, obj)
    out = []
    for gang in gangs:
        name = gang.name
        if adapter is JOB or adapter is STATEFULSET:
            # The webhook wrote the gang name into the template: it is authoritative (a name
            # chosen with generateName at CREATE differs from what the adapter derives later).
            labelled = _template_gang_name(obj, gang.pod_sets[0].template_path)
            if labelled is None:
                continue  # not mutated by kohort's webhook: not ours to admit
            name = labelled
        sets = tuple(_pod_set_spec(obj, ps) for ps in gang.pod_sets if ps.count > 0)
        if not sets:
            continue
        out.append(GangView(owner.namespace, name, owner, queue, max(gang.min_member, 1), sets))
    return out


def _job_finished(job: JSONDict) -> str | None:
    if is_true(job, "Complete") or is_true(job, "SuccessCriteriaMet"):
        return "Succeeded"
    if is_true(job, "Failed") or is_true(job, "FailureTarget"):
        return "Failed"
    return None


def _priority(gang: GangView, classes: Mapping[str, int]) -> int:
    values = [classes.get(ps.priority_class, 0) for ps in gang.pod_sets if ps.priority_class]
    return max(values, default=0)


def gang_priority(gang: GangView, classes: Mapping[str, int]) -> int:
    return _priority(gang, classes)


def build_view(
    *,
    jobs: Iterable[JSONDict],
    statefulsets: Iterable[JSONDict],
    leaderworkersets: Iterable[JSONDict],
    pods: Iterable[JSONDict],
    workloads: Iterable[JSONDict],
    cluster_queues: Iterable[JSONDict],
    local_queues: Iterable[JSONDict],
    nodes: Iterable[JSONDict],
    podgroups: Iterable[JSONDict],
    priority_classes: Iterable[JSONDict] = (),
    namespaces: frozenset[str] | None = None,
) -> ClusterView:
    """`namespaces`: manage gangs in these namespaces only (None: everywhere)."""

    def ours(obj: JSONDict) -> bool:
        return namespaces is None or obj["metadata"].get("namespace") in namespaces

    gangs: dict[str, GangView] = {}
    gang: GangView | None
    for kind, adapter, objs in (
        (clients.JOBS, JOB, jobs),
        (clients.STATEFULSETS, STATEFULSET, statefulsets),
        (clients.LEADERWORKERSETS, LWS, leaderworkersets),
    ):
        for obj in objs:
            if obj["metadata"].get("deletionTimestamp") or not ours(obj):
                continue
            for gang in _owner_gangs(kind, adapter, obj):
                if adapter is JOB:
                    gang.finished = _job_finished(obj)
                gangs.setdefault(gang.key, gang)
    all_pods = list(pods)
    for pod in all_pods:
        meta = pod["metadata"]
        group = (meta.get("labels") or {}).get(names.POD_GROUP_LABEL)
        if not group or not ours(pod):
            continue
        key = f"{meta.get('namespace', '')}/{group}"
        gang = gangs.get(key)
        bare = controller_owner(pod) is None and not (meta.get("labels") or {}).get(
            names.LWS_NAME_LABEL
        )
        if gang is None and bare and not meta.get("deletionTimestamp"):
            # A bare pod in a queue is a gang of one, owned by itself (an LWS pod whose
            # LeaderWorkerSet is not known yet waits for it instead).
            found = _owner_gangs(clients.PODS, POD, pod)
            if found:
                gang = gangs[key] = found[0]
                phase = lookup(pod, ["status", "phase"])
                gang.finished = phase if phase in ("Succeeded", "Failed") else None
        if gang is not None:
            gang.pods.append(pod)
    orphans: list[JSONDict] = []
    for wl in workloads:
        if not ours(wl):
            continue
        meta = wl["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        gang = gangs.get(key)
        if gang is None:
            if (meta.get("labels") or {}).get(names.MANAGED_LABEL) == names.MANAGED_VALUE:
                orphans.append(wl)
            continue
        gang.workload = wl
    classes = {str(pc["metadata"]["name"]): int(pc.get("value") or 0) for pc in priority_classes}
    local = {
        (str(lq["metadata"].get("namespace")), str(lq["metadata"]["name"])): str(
            lookup(lq, ["spec", "clusterQueue"]) or ""
        )
        for lq in local_queues
        if ours(lq)
    }
    queues = list(cluster_queues)
    if namespaces is not None:
        # The queues our namespaces use, and every queue of their cohorts (lenders included).
        used = set(local.values())
        cohorts = {
            lookup(cq, ["spec", "cohort"]) for cq in queues if cq["metadata"]["name"] in used
        } - {None, ""}
        queues = [
            cq
            for cq in queues
            if cq["metadata"]["name"] in used or lookup(cq, ["spec", "cohort"]) in cohorts
        ]
    groups = {
        f"{pg['metadata'].get('namespace', '')}/{pg['metadata']['name']}": pg for pg in podgroups
    }
    return ClusterView(
        gangs=gangs,
        orphans=orphans,
        cluster_queues=queues,
        local_queues=local,
        nodes=list(nodes),
        pods=all_pods,
        podgroups=groups,
        priority_classes=classes,
    )


def milli(value: Any) -> int:
    try:
        return parse_quantity(value)
    except (QuantityError, TypeError):
        return 0
