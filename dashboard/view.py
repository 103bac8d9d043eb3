"""What the dashboard shows, computed from the objects the API server holds.

Rule: pure. Objects in (ClusterQueues, Cohorts, LocalQueues, Workloads, Nodes, the time), a
`View` out; no I/O, no clock of its own. The server encodes a View as it is (msgspec encodes
dataclasses), and the page draws it.

Amounts are in the resource's own units (GPUs, CPU cores, bytes), as floats: the page shows them,
nothing decides on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from controller.api.conditions import Reason, WorkloadCondition, find, is_true
from controller.api.kube import Node
from controller.api.quantity import QuantityError, parse_quantity
from controller.api.queues import ClusterQueue, Cohort, LocalQueue, ResourceGroup
from controller.api.times import parse_time
from controller.api.workload import Workload

GPU = "nvidia.com/gpu"
# The most pending gangs a queue lists (the rest are counted): a page of 1,000 queues stays
# small enough to redraw at every change.
PENDING_SHOWN = 50


def amount(quantity: str | int | float | None) -> float | None:
    """A quantity in its resource's units; None when unset or not a quantity."""
    if quantity is None:
        return None
    try:
        return parse_quantity(str(quantity)) / 1000
    except QuantityError:
        return None


@dataclass(frozen=True, slots=True)
class ResourceLine:
    """One resource of one flavor of a queue: what it uses against its quota.

    `borrowed`: what it uses above its nominal quota, from its cohort. `lendable`: the part of its
    nominal quota it does not use and lets its cohort use (capped by its lending limit).
    """

    flavor: str
    resource: str
    usage: float
    nominal: float
    borrowing_limit: float | None = None
    lending_limit: float | None = None
    borrowed: float = 0.0
    lendable: float = 0.0


@dataclass(frozen=True, slots=True)
class PendingGang:
    namespace: str
    name: str
    local_queue: str
    priority: int
    pods: int
    gpus: float
    reason: str
    waiting_since: float | None
    # Shown only when the Workload's status carries them.
    position: int | None = None
    forecast: str | None = None


@dataclass(frozen=True, slots=True)
class QueueView:
    name: str
    cohort: str | None
    resources: list[ResourceLine]
    admitted: int
    pending: int
    # The first PENDING_SHOWN pending gangs, in the order they are admitted.
    pending_gangs: list[PendingGang]
    local_queues: list[str]
    inactive_reason: str | None = None


@dataclass(frozen=True, slots=True)
class CohortLine:
    """One resource of one flavor of a cohort's subtree, as the Cohort's status reports it."""

    flavor: str
    resource: str
    usage: float
    subtree_quota: float
    borrowed: float


@dataclass(frozen=True, slots=True)
class CohortView:
    name: str
    parent: str | None
    cohorts: list[str]
    queues: list[str]
    resources: list[CohortLine]
    # What its queues use above their nominal quota: lent by the others of the tree.
    borrowed_by_queues: dict[str, float]


@dataclass(frozen=True, slots=True)
class GpuSample:
    """GPUs at one moment: `allocated` to gangs whose pods all run, `held` by admitted gangs
    whose pods do not all run yet (paid for, not working), `idle` on Ready nodes."""

    at: float
    allocated: float
    held: float
    idle: float


@dataclass(frozen=True, slots=True)
class Eviction:
    """An admitted gang sent back to its queue: why, and the GPU work thrown away."""

    at: float
    namespace: str
    name: str
    cluster_queue: str
    # "reclaim" (its cohort took back lent quota), "preemption" (within its queue), "eviction".
    kind: str
    cause: str
    message: str
    gpus: float
    gpu_seconds: float


@dataclass(frozen=True, slots=True)
class View:
    at: float
    # Top-level cohorts, and queues in no cohort, by name.
    roots: list[str]
    lone_queues: list[str]
    cohorts: dict[str, CohortView]
    queues: dict[str, QueueView]
    gpus: GpuSample
    gpu_history: list[GpuSample] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)


# -- workloads ---------------------------------------------------------------------------------


def is_admitted(workload: Workload) -> bool:
    status = workload.status
    return status is not None and status.admission is not None


def is_finished(workload: Workload) -> bool:
    return workload.status is not None and is_true(
        workload.status.conditions, WorkloadCondition.FINISHED
    )


def pods_running(workload: Workload) -> bool:
    return workload.status is not None and is_true(
        workload.status.conditions, WorkloadCondition.PODS_READY
    )


def gpus_of(workload: Workload, gpu: str = GPU) -> float:
    """The GPUs a gang holds when admitted (as its admission records them), else asks for."""
    status = workload.status
    if status is not None and status.admission is not None:
        return sum(
            amount(a.resource_usage.get(gpu)) or 0.0 for a in status.admission.pod_set_assignments
        )
    return sum(p.count * (amount(p.requests.get(gpu)) or 0.0) for p in workload.spec.pod_sets)


def _extra(workload: Workload, *names: str) -> object:
    extra = workload.status.model_extra if workload.status is not None else None
    for name in names:
        if extra and extra.get(name) is not None:
            return extra[name]
    return None


def pending_gang(workload: Workload) -> PendingGang:
    status = workload.status
    position = _extra(workload, "positionInClusterQueue", "position")
    forecast = _extra(workload, "forecast", "estimatedAdmissionTime")
    return PendingGang(
        namespace=workload.metadata.namespace,
        name=workload.metadata.name,
        local_queue=workload.spec.queue_name,
        priority=workload.spec.priority,
        pods=sum(p.count for p in workload.spec.pod_sets),
        gpus=gpus_of(workload),
        reason=(status.pending_reason or "") if status is not None else "",
        waiting_since=parse_time(workload.metadata.creation_timestamp),
        position=position if isinstance(position, int) else None,
        forecast=str(forecast) if forecast is not None else None,
    )


@dataclass(frozen=True, slots=True)
class GangEntry:
    """What the page needs of one Workload: computed once per version of it."""

    namespace: str
    local_queue: str
    finished: bool
    # The ClusterQueue it is admitted in (None: not admitted).
    admitted_in: str | None
    running: bool
    gpus: float
    # Its line in its queue while it waits.
    pending: PendingGang | None


def entry_of(workload: Workload, gpu: str = GPU) -> GangEntry:
    status = workload.status
    admission = status.admission if status is not None else None
    finished = is_finished(workload)
    waiting = admission is None and not finished
    return GangEntry(
        namespace=workload.metadata.namespace,
        local_queue=workload.spec.queue_name,
        finished=finished,
        admitted_in=admission.cluster_queue if admission is not None else None,
        running=pods_running(workload),
        gpus=gpus_of(workload, gpu),
        pending=pending_gang(workload) if waiting else None,
    )


Entry = Callable[[Workload], GangEntry]
# A queue's part of the page from its ClusterQueue, LocalQueues, pending gangs, admitted count.
QueueOf = Callable[[ClusterQueue, Sequence[str], Sequence[PendingGang], int], "QueueView"]


def queue_order(gang: PendingGang) -> tuple[int, int, float, str, str]:
    """The order a queue admits its gangs in: by the position the status carries when it does,
    else by priority (highest first), then age (oldest first)."""
    position = gang.position if gang.position is not None else 1 << 62
    return (position, -gang.priority, gang.waiting_since or 0.0, gang.namespace, gang.name)


# -- queues and cohorts ------------------------------------------------------------------------


def _usage(queue: ClusterQueue) -> dict[tuple[str, str], tuple[float, float]]:
    """(flavor, resource) -> (total, borrowed), as the queue's status reports them."""
    found: dict[tuple[str, str], tuple[float, float]] = {}
    if queue.status is None:
        return found
    for flavor in queue.status.flavors_usage:
        for r in flavor.resources:
            found[flavor.name, r.name] = (amount(r.total) or 0.0, amount(r.borrowed) or 0.0)
    return found


def resource_lines(
    groups: Sequence[ResourceGroup], usage: Mapping[tuple[str, str], tuple[float, float]]
) -> list[ResourceLine]:
    lines = []
    for group in groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                nominal = amount(quota.nominal_quota) or 0.0
                used, borrowed = usage.get((flavor.name, quota.name), (0.0, 0.0))
                lending = amount(quota.lending_limit)
                unused = max(0.0, nominal - used)
                lines.append(
                    ResourceLine(
                        flavor=flavor.name,
                        resource=quota.name,
                        usage=used,
                        nominal=nominal,
                        borrowing_limit=amount(quota.borrowing_limit),
                        lending_limit=lending,
                        borrowed=borrowed,
                        lendable=unused if lending is None else min(unused, lending),
                    )
                )
    return lines


def _inactive_reason(queue: ClusterQueue) -> str | None:
    if queue.status is None:
        return None
    active = find(queue.status.conditions, "Active")
    if active is None or active.status == "True":
        return None
    return active.message or active.reason or "inactive"


def queue_view(
    queue: ClusterQueue, local_queues: Sequence[str], pending: Sequence[PendingGang], admitted: int
) -> QueueView:
    ordered = sorted(pending, key=queue_order)
    return QueueView(
        name=queue.metadata.name,
        cohort=queue.spec.cohort,
        resources=resource_lines(queue.spec.resource_groups, _usage(queue)),
        admitted=admitted,
        pending=len(ordered),
        pending_gangs=ordered[:PENDING_SHOWN],
        local_queues=sorted(local_queues),
        inactive_reason=_inactive_reason(queue),
    )


def _cohort_lines(cohort: Cohort | None) -> list[CohortLine]:
    if cohort is None or cohort.status is None:
        return []
    return [
        CohortLine(
            flavor=flavor.name,
            resource=r.name,
            usage=amount(r.total) or 0.0,
            subtree_quota=amount(r.subtree_quota) or 0.0,
            borrowed=amount(r.borrowed) or 0.0,
        )
        for flavor in cohort.status.flavors_usage
        for r in flavor.resources
    ]


def build_view(
    *,
    cluster_queues: Iterable[ClusterQueue],
    cohorts: Iterable[Cohort],
    local_queues: Iterable[LocalQueue],
    workloads: Iterable[Workload],
    gpus: GpuSample,
    gpu_history: Sequence[GpuSample] = (),
    evictions: Sequence[Eviction] = (),
    now: float,
    entry: Entry = entry_of,
    queue_of: QueueOf = queue_view,
) -> View:
    """The whole page: the cohort tree, each queue with its pending gangs in order, the GPUs.

    `entry` reads what the page needs of a Workload, `queue_of` makes a queue's part of the page
    (a caller may remember them: the same objects in give the same out)."""
    # LocalQueue (namespace, name) -> its ClusterQueue.
    target = {
        (lq.metadata.namespace, lq.metadata.name): lq.spec.cluster_queue for lq in local_queues
    }
    locals_of: dict[str, list[str]] = {}
    for (namespace, name), cq in target.items():
        locals_of.setdefault(cq, []).append(f"{namespace}/{name}")
    pending: dict[str, list[PendingGang]] = {}
    admitted: dict[str, int] = {}
    for workload in workloads:
        gang = entry(workload)
        if gang.admitted_in is not None and not gang.finished:
            admitted[gang.admitted_in] = admitted.get(gang.admitted_in, 0) + 1
        elif gang.pending is not None:
            found = target.get((gang.namespace, gang.local_queue))
            if found is not None:
                pending.setdefault(found, []).append(gang.pending)

    queues = {
        cq.metadata.name: queue_of(
            cq,
            locals_of.get(cq.metadata.name, ()),
            pending.get(cq.metadata.name, ()),
            admitted.get(cq.metadata.name, 0),
        )
        for cq in cluster_queues
    }
    cohort_objects = {c.metadata.name: c for c in cohorts}
    # Cohorts named by a queue or a parent but with no object are implicit: no quota of their own.
    names = set(cohort_objects)
    names.update(q.cohort for q in queues.values() if q.cohort)
    names.update(c.spec.parent for c in cohort_objects.values() if c.spec.parent)
    parent_of = {
        name: (cohort_objects[name].spec.parent if name in cohort_objects else None)
        for name in names
    }
    children: dict[str, list[str]] = {name: [] for name in names}
    for name, parent in parent_of.items():
        if parent is not None:
            children[parent].append(name)
    members: dict[str, list[str]] = {name: [] for name in names}
    for queue in queues.values():
        if queue.cohort:
            members[queue.cohort].append(queue.name)
    views = {}
    for name in sorted(names):
        borrowed: dict[str, float] = {}
        for q in members[name]:
            for line in queues[q].resources:
                if line.borrowed:
                    borrowed[line.resource] = borrowed.get(line.resource, 0.0) + line.borrowed
        views[name] = CohortView(
            name=name,
            parent=parent_of[name],
            cohorts=sorted(children[name]),
            queues=sorted(members[name]),
            resources=_cohort_lines(cohort_objects.get(name)),
            borrowed_by_queues=borrowed,
        )
    return View(
        at=now,
        roots=sorted(n for n, p in parent_of.items() if p is None or p not in names),
        lone_queues=sorted(q.name for q in queues.values() if not q.cohort),
        cohorts=views,
        queues=queues,
        gpus=gpus,
        gpu_history=list(gpu_history),
        evictions=list(evictions),
    )


# -- GPUs and evictions ------------------------------------------------------------------------


def node_gpus(node: Node, gpu: str = GPU) -> float:
    """A Ready, schedulable node's allocatable GPUs (0 for any other node)."""
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    if not ready or node.spec.unschedulable:
        return 0.0
    return amount(node.status.allocatable.get(gpu)) or 0.0


def gpu_sample(
    workloads: Iterable[Workload],
    nodes: Iterable[Node],
    now: float,
    gpu: str = GPU,
    entry: Entry | None = None,
) -> GpuSample:
    allocated = held = 0.0
    for workload in workloads:
        gang = entry(workload) if entry is not None else entry_of(workload, gpu)
        if gang.admitted_in is None or gang.finished:
            continue
        if gang.running:
            allocated += gang.gpus
        else:
            held += gang.gpus
    capacity = sum(node_gpus(node, gpu) for node in nodes)
    return GpuSample(
        at=now, allocated=allocated, held=held, idle=max(0.0, capacity - allocated - held)
    )


_KIND_OF_PREEMPTION: dict[str, str] = {
    Reason.IN_COHORT_RECLAMATION: "reclaim",
    Reason.IN_CLUSTER_QUEUE: "preemption",
}


def eviction_of(old: Workload | None, new: Workload | None, now: float) -> Eviction | None:
    """The eviction a Workload's change records: it held an admission and is now evicted."""
    if old is None or new is None or old.status is None or new.status is None:
        return None
    admission = old.status.admission
    evicted = find(new.status.conditions, WorkloadCondition.EVICTED)
    if admission is None or new.status.admission is not None:
        return None
    if evicted is None or evicted.status != "True":
        return None
    at = parse_time(evicted.last_transition_time) or now
    preempted = find(new.status.conditions, WorkloadCondition.PREEMPTED)
    kind, cause = "eviction", evicted.reason
    if preempted is not None and preempted.status == "True":
        kind = _KIND_OF_PREEMPTION.get(preempted.reason, "preemption")
        cause = preempted.reason
    gpus = gpus_of(old)
    since = parse_time(admission.admitted_at)
    return Eviction(
        at=at,
        namespace=new.metadata.namespace,
        name=new.metadata.name,
        cluster_queue=admission.cluster_queue,
        kind=kind,
        cause=cause,
        message=evicted.message,
        gpus=gpus,
        gpu_seconds=gpus * max(0.0, at - since) if since is not None else 0.0,
    )
