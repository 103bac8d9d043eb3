"""The objects `kubectl kohort` reads, and the decision core's view of them.

Rule: no I/O here. The engine is fed what the objects say (queues, cohorts, flavors, nodes and
the pods on them, admitted and pending Workloads), so a question asked of it ("would this gang
be admitted now if ...") is answered by the same code that admits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from controller import quota
from controller.api import kube, names
from controller.api.conditions import WorkloadCondition
from controller.api.queues import ClusterQueue, Cohort, LocalQueue, ResourceFlavor
from controller.api.times import parse_time
from controller.api.workload import Workload
from controller.quota.positions import Position, positions
from controller.state.cohorts import cohort_spec, flavor_spec, queue_spec
from controller.state.inventory import core_node
from controller.workloads.requests import pod_requests
from controller.workloads.taints import core_toleration


@dataclass
class Objects:
    """What was read: kohort's queue objects, its Workloads, the nodes and their pods."""

    cluster_queues: list[ClusterQueue] = field(default_factory=list)
    cohorts: list[Cohort] = field(default_factory=list)
    local_queues: list[LocalQueue] = field(default_factory=list)
    flavors: list[ResourceFlavor] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    nodes: list[kube.Node] = field(default_factory=list)
    pods: list[kube.Pod] = field(default_factory=list)


def gang_id(wl: Workload) -> str:
    return f"{wl.metadata.namespace}/{wl.metadata.name}"


def _true(wl: Workload, kind: WorkloadCondition) -> bool:
    status = wl.status
    return status is not None and any(
        c.type == kind and c.status == "True" for c in status.conditions
    )


def state_of(wl: Workload) -> str:
    """finished, admitted or pending."""
    if _true(wl, WorkloadCondition.FINISHED):
        return "finished"
    if _true(wl, WorkloadCondition.QUOTA_RESERVED) and wl.status and wl.status.admission:
        return "admitted"
    return "pending"


def gang_of(wl: Workload, queue: str) -> quota.Gang:
    """A Workload as the core sees it in ClusterQueue `queue` (its pod sets as recorded)."""
    pod_sets = tuple(
        quota.PodSet(
            ps.count,
            ps.request_milli(),
            ps.name,
            dict(ps.node_selector),
            tuple(core_toleration(t) for t in ps.tolerations),
        )
        for ps in wl.spec.pod_sets
    )
    created = parse_time(wl.metadata.creation_timestamp) or 0.0
    return quota.Gang(gang_id(wl), queue, pod_sets, wl.spec.priority, created)


@dataclass(frozen=True)
class World:
    """The core's snapshot of what was read, and which Workload each gang is."""

    snapshot: quota.Snapshot
    workloads: Mapping[str, Workload]
    # (namespace, LocalQueue) -> ClusterQueue
    local_queues: Mapping[tuple[str, str], str]
    # When it was read (seconds since the epoch): the engine's clock.
    now: float

    def engine(
        self,
        pending: Iterable[quota.Gang] | None = None,
        admitted: Iterable[quota.AdmittedGang] | None = None,
        queues: Iterable[quota.QueueSpec] | None = None,
    ) -> quota.Engine:
        """An engine holding the snapshot (or the gangs and queues given instead)."""
        snap = self.snapshot
        engine = quota.Engine(
            snap.queues if queues is None else queues,
            snap.nodes,
            quota.Config.measured(),
            flavors=snap.flavors,
            cohorts=snap.cohorts,
            require_flavors=True,
        )
        for gang in sorted(snap.admitted if admitted is None else admitted, key=_admitted_name):
            engine.add_admitted(gang)
        for pending_gang in sorted(snap.pending if pending is None else pending, key=_name):
            engine.add_pending(pending_gang)
        return engine

    def positions(self) -> dict[str, Position]:
        """Every pending gang's positions, as the engine orders them now."""
        local = {
            gang_id(wl): f"{wl.metadata.namespace}/{wl.spec.queue_name}"
            for wl in self.workloads.values()
        }
        return positions(self.engine(), self.now, local)

    def queue_of(self, wl: Workload) -> str | None:
        return self.local_queues.get((wl.metadata.namespace or "", wl.spec.queue_name))


def _name(gang: quota.Gang) -> str:
    return gang.name


def _admitted_name(gang: quota.AdmittedGang) -> str:
    return gang.gang.name


def _admitted(wl: Workload, queue: str) -> quota.AdmittedGang:
    assert wl.status is not None and wl.status.admission is not None
    record = wl.status.admission
    placement = tuple(
        quota.PodPlacement(ps.name, node.node, node.count)
        for ps in record.pod_set_assignments
        for node in ps.nodes
    )
    flavors = {ps.name: dict(ps.flavors) for ps in record.pod_set_assignments}
    at = parse_time(record.admitted_at) or 0.0
    return quota.AdmittedGang(gang_of(wl, queue), at, placement, flavors)


def _outside_gangs(pods: Iterable[kube.Pod], admitted: set[str]) -> dict[str, dict[str, int]]:
    """What live pods that are no admitted gang's hold, per node."""
    used: dict[str, dict[str, int]] = {}
    for pod in pods:
        node = pod.spec.node_name
        if not node or not pod.live():
            continue
        group = pod.metadata.labels.get(names.POD_GROUP_LABEL)
        if group is not None and f"{pod.metadata.namespace}/{group}" in admitted:
            continue
        on = used.setdefault(node, {})
        for resource, amount in {**pod_requests(pod.spec), "pods": 1000}.items():
            on[resource] = on.get(resource, 0) + amount
    return used


def world_of(objects: Objects, now: float) -> World:
    local = {
        (lq.metadata.namespace or "", lq.metadata.name): lq.spec.cluster_queue
        for lq in objects.local_queues
    }
    queues = {cq.metadata.name for cq in objects.cluster_queues}
    pending: list[quota.Gang] = []
    admitted: list[quota.AdmittedGang] = []
    by_id: dict[str, Workload] = {}
    for wl in objects.workloads:
        cq = local.get((wl.metadata.namespace or "", wl.spec.queue_name))
        state = state_of(wl)
        by_id[gang_id(wl)] = wl
        if state == "admitted":
            record = wl.status.admission if wl.status else None
            admitted.append(_admitted(wl, record.cluster_queue if record else cq or ""))
        elif state == "pending" and cq in queues:
            pending.append(gang_of(wl, cq))
    used = _outside_gangs(objects.pods, {a.gang.name for a in admitted})
    nodes = [
        n
        for node in objects.nodes
        if (n := core_node(node, used.get(node.metadata.name, {}))) is not None
    ]
    snapshot = quota.Snapshot(
        queues=tuple(queue_spec(cq) for cq in objects.cluster_queues),
        nodes=tuple(nodes),
        pending=tuple(pending),
        admitted=tuple(admitted),
        flavors=tuple(flavor_spec(f) for f in objects.flavors),
        cohorts=tuple(cohort_spec(c) for c in objects.cohorts),
    )
    return World(snapshot, by_id, local, now)


def with_count(gang: quota.Gang, pod_set: int, count: int) -> quota.Gang:
    """`gang` with `count` pods in its pod set number `pod_set`."""
    sets = list(gang.pod_sets)
    sets[pod_set] = replace(sets[pod_set], count=count)
    return replace(gang, pod_sets=tuple(sets))
