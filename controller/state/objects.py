"""The objects kohort writes, built from what it knows: Workloads and their status, PodGroups,
Events, ClusterQueue status. Pure functions; the text a user reads is produced here and by the
outcomes' `describe()`, nowhere else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from controller.api import kube, names
from controller.api.common import Condition
from controller.api.conditions import (
    QueueCondition,
    Reason,
    WorkloadCondition,
    find,
    set_condition,
    without,
)
from controller.api.kinds import (
    COSCHEDULING_PODGROUPS,
    SCHEDULING_PODGROUPS,
    SCHEDULING_WORKLOADS,
    VOLCANO_PODGROUPS,
    WORKLOADS,
    Kind,
)
from controller.api.quantity import format_quantity, parse_quantity
from controller.api.queues import (
    ClusterQueue,
    ClusterQueueStatus,
    Cohort,
    CohortFlavorUsage,
    CohortResourceUsage,
    CohortStatus,
    FlavorUsage,
    LocalQueue,
    LocalQueueFlavorUsage,
    LocalQueueResourceUsage,
    LocalQueueStatus,
    PendingWorkload,
    RecentUsage,
    ResourceUsage,
)
from controller.api.times import format_time, parse_time
from controller.api.workload import (
    AdmissionRecord,
    NodeAssignment,
    PodSet,
    PodSetAssignment,
    RequeueState,
    Workload,
    WorkloadSpec,
    WorkloadStatus,
)
from controller.quota import Admission, EvictionCause, Shrink
from controller.quota.flavor_assignment import charged_requests
from controller.quota.recent import Recent, weighted
from controller.quota.snapshot import PODS, node_requests
from controller.quota.snapshot import PodSet as PodSetShape
from controller.state.gangs import ManagedGang
from controller.state.steps import CreatePodGroup, RecordEvent, Step, WriteWorkloadStatus
from controller.workloads.base import Backend, Delete, Finished, GangShape, Patch
from controller.workloads.capabilities import shrinks_in_place
from controller.workloads.pod_rules import DYNAMIC_RESOURCE_CLAIMS
from controller.workloads.taints import workload_toleration

COMPONENT = "kohort-controller"


def _quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: format_quantity(a) for r, a in sorted(amounts.items()) if a > 0}


# -- Workloads ------------------------------------------------------------------------------


def status_write(gang: ManagedGang, status: WorkloadStatus) -> WriteWorkloadStatus:
    """Write `status` to the gang's Workload; a standalone Workload's creator writes its
    status too, so that write holds to the version `status` was computed from."""
    wl = gang.workload
    based_on = (wl.metadata.resource_version or "") if wl and wl.submitted() else ""
    return WriteWorkloadStatus(gang.namespace, gang.name, status, based_on)


def workload_for(gang: ManagedGang, priority: int) -> Workload:
    """The Workload that records `gang`: its queue, priority and pod sets."""
    assert gang.owner is not None and gang.shape is not None and gang.queue is not None
    return Workload(
        metadata=kube.ObjectMeta(
            name=gang.name,
            namespace=gang.namespace,
            labels={names.MANAGED_LABEL: names.MANAGED_VALUE, names.QUEUE_LABEL: gang.queue},
            # A plain pod group's Workload outlives the pods an eviction deletes.
            owner_references=[] if gang.declared_group else [gang.owner.reference()],
        ),
        spec=WorkloadSpec(
            queue_name=gang.queue,
            priority=priority,
            pod_sets=[
                PodSet(
                    name=ps.name,
                    count=ps.count,
                    requests=_quantities(ps.requests),
                    node_selector=dict(ps.node_selector),
                    tolerations=[workload_toleration(t) for t in ps.tolerations],
                    min_count=ps.min_count,
                )
                for ps in gang.shape.pod_sets
            ],
        ),
    )


def charged(
    shape: GangShape, flavors: Mapping[str, Mapping[str, str]]
) -> list[tuple[str, int, dict[str, str]]]:
    """What an admission on `flavors` (pod set -> resource -> flavor) charges for each pod set:
    its name, pods and total requests, with its pods when they were given a flavor (its queue
    counts pods)."""
    out = []
    for ps in shape.pod_sets:
        pods = PODS in flavors.get(ps.name, {})
        usage = {r: a * ps.count for r, a in charged_requests(ps, pods).items()}
        out.append((ps.name, ps.count, _quantities(usage)))
    return out


def _admitted_counts(shape: GangShape, counts: Mapping[str, int]) -> GangShape:
    """`shape` with each pod set at the count `counts` gives it (others as they are)."""
    pod_sets = tuple(replace(ps, count=counts.get(ps.name, ps.count)) for ps in shape.pod_sets)
    return replace(shape, pod_sets=pod_sets)


def shrunk(gang: ManagedGang) -> dict[str, int] | None:
    """The pods of each pod set an admitted gang asks for now, when that is fewer than its
    admission took (at least one pod each, the same pod sets and per-pod requests) and its kind
    runs on with the pods it keeps (`capabilities.ShrinksInPlace`); None otherwise."""
    status = gang.workload.status if gang.workload else None
    owner, shape = gang.owner, gang.shape
    if owner is None or shape is None or status is None or status.admission is None:
        return None
    if not shrinks_in_place(owner.adapter) or not owner.adapter.shrinks_in_place(owner.obj):
        return None
    was = {a.name: (a.count, a.resource_usage) for a in status.admission.pod_set_assignments}
    now = {ps.name: ps.count for ps in shape.pod_sets}
    if was.keys() != now.keys() or now == {n: c for n, (c, _) in was.items()}:
        return None
    if any(not 1 <= now[n] <= count for n, (count, _) in was.items()):
        return None
    before = _admitted_counts(shape, {n: count for n, (count, _) in was.items()})
    alike = charged(before, gang.admitted_flavors())
    if {name: (count, usage) for name, count, usage in alike} != was:
        return None  # its requests changed too: a resize
    return now


def shrunk_record(
    gang: ManagedGang,
    counts: Mapping[str, int],
    now: float,
    podgroups: PodGroupSettings,
    shrink: Shrink | None = None,
) -> list[Step]:
    """The admission record of a gang that shrank in place to `counts` pods per pod set: each
    pod set's count, usage and planned nodes as they are now (the last ones dropped, or, for a
    `shrink` kohort made for another gang, those it removed, and a Shrunk condition that says
    for whom); its PodGroup's minMember and minResources lowered alike (Volcano's and
    coscheduling's; kube-scheduler's gang objects are left: their pods are bound already); and
    an Event that says what was given back."""
    assert gang.shape is not None
    shape = _admitted_counts(gang.shape, counts)
    status = _status(gang)
    admission = status.admission
    assert admission is not None
    usage = {name: used for name, _, used in charged(shape, gang.admitted_flavors())}
    removed = {p.node: p.count for p in shrink.removed} if shrink is not None else {}
    changes = []
    for assignment in admission.pod_set_assignments:
        count = counts[assignment.name]
        if count != assignment.count:
            changes.append(f"pod set {assignment.name} from {assignment.count} to {count} pods")
        assignment.count = count
        assignment.resource_usage = usage[assignment.name]
        if shrink is not None and assignment.name == shrink.pod_set:
            assignment.nodes = _without(assignment.nodes, removed)
        else:
            assignment.nodes = _first_pods(assignment.nodes, count)
    message = (
        f"Scaled down ({'; '.join(changes)}): runs on with the pods it keeps, the quota of"
        " the others given back"
    )
    reason = Reason.SCALED_DOWN
    if shrink is not None:
        reason = Reason.SHRUNK
        message = (
            f"{shrink.describe()} instead of being evicted: runs on with the pods it keeps, the"
            " quota of the others given back"
        )
        cause = (
            Reason.IN_CLUSTER_QUEUE
            if shrink.cause is EvictionCause.PREEMPTED
            else Reason.IN_COHORT_RECLAMATION
        )
        # (set anew, so its lastTransitionTime says when this shrink was made)
        conditions = without(status.conditions, WorkloadCondition.SHRUNK)
        status.conditions = set_condition(
            conditions, WorkloadCondition.SHRUNK, True, cause, message, now
        )
    steps: list[Step] = [status_write(gang, status)]
    kind = podgroups.kind
    if kind is not None and podgroups.backend is not Backend.KUBERNETES and gang.podgroup:
        spec = {
            "minMember": min(shape.min_member, sum(counts.values())),
            "minResources": _quantities(min_resources(shape)),
        }
        steps.append(Patch(kind, gang.namespace, gang.name, {"spec": spec}, expected=True))
    return [*steps, event(gang, reason, message)]


def shrink_steps(
    gang: ManagedGang, shrink: Shrink, now: float, podgroups: PodGroupSettings
) -> list[Step]:
    """Carry out a shrink the engine decided: the object asks for fewer pods first (so a
    controller stopped in between finds an object scaled down, and records it so), then its
    record (see `shrunk_record`). None for a gang whose kind cannot shrink in place."""
    owner = gang.owner
    status = gang.workload.status if gang.workload else None
    if owner is None or status is None or status.admission is None:
        return []
    if not shrinks_in_place(owner.adapter) or not owner.adapter.shrinks_in_place(owner.obj):
        return []
    counts = {a.name: a.count for a in status.admission.pod_set_assignments}
    counts[shrink.pod_set] = shrink.count
    return [*shrink_writes(gang, counts), *shrunk_record(gang, counts, now, podgroups, shrink)]


# For this many seconds after a shrink kohort made, an object that still asks for more pods
# than its record is taken as not seen lowered yet (its write and the record's reach the
# controller's caches in either order), not as resized.
SHRINK_UNSEEN_FOR = 60.0


def shrink_unseen(gang: ManagedGang, now: float) -> dict[str, int] | None:
    """The pods per pod set a shrink kohort made moments ago recorded, while the gang's object
    asks for more (the write lowering it not seen yet, or lost); None otherwise."""
    status = gang.workload.status if gang.workload else None
    owner, shape = gang.owner, gang.shape
    if owner is None or shape is None or status is None or status.admission is None:
        return None
    shrunk_at = find(status.conditions, WorkloadCondition.SHRUNK)
    since = parse_time(shrunk_at.last_transition_time) if shrunk_at is not None else None
    if shrunk_at is None or shrunk_at.status != "True" or since is None:
        return None
    if now - since > SHRINK_UNSEEN_FOR or not shrinks_in_place(owner.adapter):
        return None
    was = {a.name: a.count for a in status.admission.pod_set_assignments}
    asks = {ps.name: ps.count for ps in shape.pod_sets}
    if was.keys() != asks.keys() or all(asks[n] <= count for n, count in was.items()):
        return None
    return was


def shrink_writes(gang: ManagedGang, counts: Mapping[str, int]) -> list[Step]:
    """The writes that make the gang's object ask for `counts` pods (see `shrink_steps`)."""
    owner = gang.owner
    if owner is None or not shrinks_in_place(owner.adapter):
        return []
    return list(owner.adapter.shrink(owner.obj, counts))


def _without(nodes: Sequence[NodeAssignment], removed: Mapping[str, int]) -> list[NodeAssignment]:
    """Planned nodes less the pods `removed` from each."""
    kept = [NodeAssignment(node=n.node, count=n.count - removed.get(n.node, 0)) for n in nodes]
    return [n for n in kept if n.count > 0]


def _first_pods(nodes: Sequence[NodeAssignment], count: int) -> list[NodeAssignment]:
    """The planned nodes of the first `count` pods of a pod set."""
    kept: list[NodeAssignment] = []
    for node in nodes:
        if count <= 0:
            break
        kept.append(NodeAssignment(node=node.node, count=min(node.count, count)))
        count -= node.count
    return kept


def resized(gang: ManagedGang) -> str | None:
    """How an admitted gang's shape differs from what its admission charged, or None. Its
    claimed devices alone never make it resized: when they cannot be counted now (a template
    deleted since, unknown to a restarted controller) it keeps what its record charged, and a
    record written before they were charged (device classes configured since, an older kohort)
    stands until the gang ends."""
    status = gang.workload.status if gang.workload else None
    if gang.shape is None or status is None or status.admission is None:
        return None
    if gang.devices is not None or shrunk(gang) is not None:
        return None
    was = {a.name: (a.count, a.resource_usage) for a in status.admission.pod_set_assignments}
    flavors = gang.admitted_flavors()
    now = {name: (count, usage) for name, count, usage in charged(gang.shape, flavors)}
    if not was or was == now:
        return None
    if gang.declared is not None and gang.declared != gang.shape:
        before_devices = charged(gang.declared, flavors)
        if was == {name: (count, usage) for name, count, usage in before_devices}:
            return None
    changes = []
    for name in sorted(was.keys() | now.keys()):
        before, after = was.get(name, (0, {})), now.get(name, (0, {}))
        if before[0] != after[0]:
            changes.append(f"pod set {name} from {before[0]} to {after[0]} pods")
        elif before != after:
            changes.append(f"pod set {name}'s requests changed")
    return (
        f"resized after admission ({'; '.join(changes)}); requeued to be admitted again with"
        " its new shape"
    )


def _status(gang: ManagedGang) -> WorkloadStatus:
    status = gang.workload.status if gang.workload else None
    return status.model_copy(deep=True) if status else WorkloadStatus()


def admitted_status(gang: ManagedGang, admission: Admission, now: float) -> WorkloadStatus:
    """QuotaReserved and Admitted, where each pod set's pods go: the durable record."""
    assert gang.shape is not None
    status = _status(gang)
    message = f"Admitted by ClusterQueue {admission.queue}"
    conditions = set_condition(
        status.conditions,
        WorkloadCondition.QUOTA_RESERVED,
        True,
        Reason.QUOTA_RESERVED,
        admission.describe(),
        now,
    )
    conditions = set_condition(
        conditions, WorkloadCondition.ADMITTED, True, Reason.ADMITTED, message, now
    )
    if find(conditions, WorkloadCondition.EVICTED) is not None:
        conditions = set_condition(
            conditions, WorkloadCondition.EVICTED, False, Reason.ADMITTED, message, now
        )
    status.conditions = without(
        conditions, WorkloadCondition.PODS_READY, WorkloadCondition.PREEMPTED
    )
    status.admission = AdmissionRecord(
        cluster_queue=admission.queue,
        pod_set_assignments=[
            PodSetAssignment(
                name=name,
                count=count,
                flavors=dict(admission.flavors.get(name, {})),
                resource_usage=usage,
                nodes=[
                    NodeAssignment(node=p.node, count=p.count)
                    for p in admission.placement
                    if p.pod_set == name
                ],
            )
            for name, count, usage in charged(gang.shape, admission.flavors)
        ],
        admitted_at=format_time(now),
    )
    status.pending_reason = None
    status.start_forecast = None
    return status


def devices_checked(pod_set: PodSetShape, checked_devices: frozenset[str]) -> bool:
    """Whether the placement check counted the devices the pod set's claims take on nodes (its
    claims are all from templates, of DeviceClasses whose devices nodes carry)."""
    return (
        bool(pod_set.claimed)
        and not pod_set.shared_claims
        and set(pod_set.claimed) <= checked_devices
    )


def unchecked(gang: ManagedGang, checked_devices: frozenset[str] = frozenset()) -> list[str]:
    """What the gang's pods ask of the scheduler that the placement check does not model, by
    pod set (`pod set: what`); claims whose devices it counted (`checked_devices`) are not
    among them."""
    if gang.shape is None:
        return []
    return [
        f"{ps.name}: {what}"
        for ps in gang.shape.pod_sets
        for what in ps.unchecked
        if not (what == DYNAMIC_RESOURCE_CLAIMS and devices_checked(ps, checked_devices))
    ]


def unchecked_text(unchecked: Sequence[str]) -> str:
    return (
        f"Admitted without checking {'; '.join(unchecked)}: kohort placed the gang on what it"
        " models, and the scheduler may keep some of its pods pending for the rest (the"
        " pods-ready timeout then evicts it)"
    )


def placement_not_checked(
    conditions: Sequence[Condition], unchecked: Sequence[str], now: float
) -> list[Condition]:
    return set_condition(
        conditions,
        WorkloadCondition.PLACEMENT_CHECKED,
        False,
        Reason.PLACEMENT_NOT_CHECKED,
        unchecked_text(unchecked),
        now,
    )


def missing_flavors(missing: Sequence[str]) -> str:
    """Why an admitted gang is not released: flavors it was admitted on have no ResourceFlavor."""
    many = len(missing) > 1
    return (
        f"Admitted but not released: ResourceFlavor{'s' if many else ''} {', '.join(missing)}"
        f" {'do' if many else 'does'} not exist, so its pods have no nodes to go to; they stay"
        " held (the gang keeps its quota) until the ResourceFlavor is created again or the gang"
        " is evicted"
    )


def release_write(step: Step) -> str:
    """What a write of a gang's release does, as a user reads it."""
    if isinstance(step, CreatePodGroup):
        kind = step.kind
        return f"creating its {kind.kind} {step.podgroup.metadata.name} ({kind.api_version})"
    if isinstance(step, Patch):
        return f"patching {step.kind.kind} {step.name}"
    if isinstance(step, Delete):
        return f"deleting {step.kind.kind} {step.name}"
    return type(step).__name__


def release_failing(step: Step, error: str, evict_at: float | None) -> str:
    """Why an admitted gang whose release keeps failing is not released, and what comes next
    (`evict_at`: when it is evicted if it still fails; None: never)."""
    then = (
        f"; tried again every pass: if it still fails at {format_time(evict_at)} the gang is"
        " evicted (its quota given back) and requeued"
        if evict_at is not None
        else "; tried again every pass (--release-timeout 0: it is never evicted for it)"
    )
    return f"Admitted but not released: {release_write(step)} failed: {error}{then}"


def release_failed(step: Step, error: str, *, attempts: int, after: float) -> str:
    """Why a gang whose release kept failing is evicted (its Evicted condition)."""
    tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    what = f"{release_write(step)} failed: {error}"
    return f"its release kept failing for {after:.0f}s ({tries}): {what}"


def released_status(gang: ManagedGang, reason: str | None) -> WorkloadStatus:
    """An admitted gang's status with `reason` (None: none) as why it is not released yet."""
    status = _status(gang)
    status.pending_reason = reason
    return status


@dataclass(frozen=True)
class EvictionRecord:
    """An eviction as the Workload records it."""

    reason: Reason  # of the Evicted condition: Preempted, PodsReadyTimeout, ReleaseFailed ...
    message: str  # why, the Eviction's describe()
    preempted: Reason | None  # InClusterQueue / InCohortReclamation for preemptions
    requeue_count: int
    pods_ready_timeouts: int
    release_failures: int
    requeue_at: float  # whole seconds, as the record keeps it
    pending_reason: str


def evicted_status(gang: ManagedGang, eviction: EvictionRecord, now: float) -> WorkloadStatus:
    """Evicted, and back in the queue at once or after a backoff; the admission record is gone."""
    status = _status(gang)
    conditions = set_condition(
        status.conditions, WorkloadCondition.EVICTED, True, eviction.reason, eviction.message, now
    )
    if eviction.preempted is not None:
        conditions = set_condition(
            conditions,
            WorkloadCondition.PREEMPTED,
            True,
            eviction.preempted,
            eviction.message,
            now,
        )
    conditions = set_condition(
        conditions,
        WorkloadCondition.QUOTA_RESERVED,
        False,
        Reason.PENDING,
        eviction.pending_reason,
        now,
    )
    conditions = set_condition(
        conditions, WorkloadCondition.ADMITTED, False, eviction.reason, eviction.message, now
    )
    status.conditions = without(conditions, WorkloadCondition.PODS_READY)
    status.admission = None
    status.pending_reason = eviction.pending_reason
    status.requeue_state = RequeueState(
        count=eviction.requeue_count,
        pods_ready_timeouts=eviction.pods_ready_timeouts,
        release_failures=eviction.release_failures,
        requeue_at=format_time(eviction.requeue_at),
    )
    return status


def pending_status(
    gang: ManagedGang, text: str, now: float, reason: Reason = Reason.PENDING
) -> WorkloadStatus:
    status = _status(gang)
    status.conditions = set_condition(
        status.conditions, WorkloadCondition.QUOTA_RESERVED, False, reason, text, now
    )
    status.pending_reason = text
    return status


def finished_status(gang: ManagedGang, finished: Finished, now: float) -> WorkloadStatus:
    status = _status(gang)
    conditions = set_condition(
        status.conditions,
        WorkloadCondition.FINISHED,
        True,
        Reason(finished.value),
        f"the gang {finished.value}",
        now,
    )
    for kind in (WorkloadCondition.QUOTA_RESERVED, WorkloadCondition.ADMITTED):
        held = find(conditions, kind)
        if held is not None and held.status == "True":
            conditions = set_condition(
                conditions, kind, False, Reason.FINISHED, "quota released", now
            )
    status.conditions = conditions
    status.start_forecast = None
    return status


def pods_ready_status(gang: ManagedGang, now: float) -> WorkloadStatus:
    assert gang.shape is not None
    status = _status(gang)
    status.conditions = set_condition(
        status.conditions,
        WorkloadCondition.PODS_READY,
        True,
        Reason.STARTED,
        f"{gang.running_pods()} of {gang.shape.min_member} pods running",
        now,
    )
    return status


def event(
    gang: ManagedGang,
    reason: Reason,
    message: str,
    *,
    warning: bool = False,
    on_workload: bool = False,
) -> RecordEvent:
    """An Event on the user's object, what `kubectl describe` shows (the Workload's conditions
    carry the same words); on the Workload when the object is gone or about to go."""
    if gang.owner is not None and not on_workload:
        meta, kind = gang.owner.meta, gang.owner.kind
        about = kube.ObjectReference(
            api_version=kind.api_version,
            kind=kind.kind,
            name=meta.name,
            namespace=gang.namespace,
            uid=meta.uid,
        )
    else:
        uid = gang.workload.metadata.uid if gang.workload else None
        about = kube.ObjectReference(
            api_version=WORKLOADS.api_version,
            kind=WORKLOADS.kind,
            name=gang.name,
            namespace=gang.namespace,
            uid=uid or "",
        )
    return RecordEvent(gang.namespace, about, reason, message, warning)


# -- PodGroups ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PodGroupSettings:
    backend: Backend = Backend.VOLCANO
    volcano_queue: str = names.VOLCANO_QUEUE
    # Backend kubernetes: the scheduling.k8s.io version the cluster serves (found at start).
    gang_api: str = "v1alpha1"

    @property
    def kind(self) -> Kind | None:
        if self.backend is Backend.VOLCANO:
            return VOLCANO_PODGROUPS
        if self.backend is Backend.COSCHEDULING:
            return COSCHEDULING_PODGROUPS
        if self.backend is Backend.KUBERNETES:
            return SCHEDULING_WORKLOADS if self.gang_api == "v1alpha1" else SCHEDULING_PODGROUPS
        return None


def min_resources(shape: GangShape) -> dict[str, int]:
    """Requests of the first min_member pods (leader sets first), what the gang needs to start
    on nodes (claimed devices are allocated from ResourceSlices, not nodes' allocatable)."""
    left = shape.min_member
    total: dict[str, int] = {}
    for ps in shape.pod_sets:
        n = min(left, ps.count)
        left -= n
        for r, amount in node_requests(ps).items():
            total[r] = total.get(r, 0) + amount * n
    return total


def podgroup_for(gang: ManagedGang, settings: PodGroupSettings) -> CreatePodGroup | None:
    """The gang scheduler's PodGroup (for kube-scheduler: its scheduling.k8s.io Workload) for an
    admitted gang, owned by kohort's Workload."""
    kind = settings.kind
    if kind is None or gang.workload is None or gang.shape is None:
        return None
    meta = _gang_object_meta(gang)
    if settings.backend is Backend.KUBERNETES:
        policy = kube.NativePodGroupPolicy(gang=kube.GangPolicy(min_count=gang.shape.min_member))
        if kind == SCHEDULING_PODGROUPS:
            classes = gang.shape.priority_classes
            group = kube.NativePodGroupObject(
                api_version=kind.api_version,
                kind=kind.kind,
                metadata=meta,
                spec=kube.NativePodGroupSpec(
                    scheduling_policy=policy, priority_class_name=classes[0] if classes else None
                ),
            )
            return CreatePodGroup(kind, group)
        native = kube.NativeWorkload(
            api_version=kind.api_version,
            kind=kind.kind,
            metadata=meta,
            spec=kube.NativeWorkloadSpec(
                pod_groups=[kube.NativePodGroup(name=names.NATIVE_POD_GROUP, policy=policy)]
            ),
        )
        return CreatePodGroup(kind, native)
    volcano = settings.backend is Backend.VOLCANO
    classes = gang.shape.priority_classes
    spec = kube.PodGroupSpec(
        min_member=gang.shape.min_member,
        min_resources=_quantities(min_resources(gang.shape)),
        queue=settings.volcano_queue if volcano else None,
        priority_class_name=classes[0] if volcano and classes else None,
    )
    body = kube.PodGroup(api_version=kind.api_version, kind=kind.kind, metadata=meta, spec=spec)
    return CreatePodGroup(kind, body)


def _gang_object_meta(gang: ManagedGang) -> kube.ObjectMeta:
    assert gang.workload is not None
    return kube.ObjectMeta(
        name=gang.name,
        namespace=gang.namespace,
        labels={names.MANAGED_LABEL: names.MANAGED_VALUE},
        owner_references=[kube.controller_reference(WORKLOADS, gang.workload.metadata)],
    )


# -- ClusterQueues --------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueFigures:
    """What a ClusterQueue's status reports, counted by the state."""

    pending: int = 0
    admitted: int = 0
    # Per (flavor, resource).
    usage: Mapping[tuple[str, str], int] | None = None
    weighted_share: float = 0.0
    # Pending gangs whose Workload says why they wait.
    inadmissible: int = 0
    # Why its cohort tree admits nothing (a cycle of parents), or None.
    broken: str | None = None
    # Its first pending gangs, in order.
    head: Sequence[PendingWorkload] = ()
    # What fair order remembers of its borrowing, and its fair-sharing weight (None: no
    # usage half-life, or no cycle yet).
    recent: Recent | None = None
    weight: float = 1.0


def _active(old: Sequence[Condition], ok: bool, reason: str, message: str, now: float) -> Condition:
    """The Active condition; its lastTransitionTime moves only when its status does."""
    [condition] = set_condition(
        [c for c in old if c.type == QueueCondition.ACTIVE],
        QueueCondition.ACTIVE,
        ok,
        reason,
        message,
        now,
    )
    return condition


def share_shown(share: float) -> int:
    """A share as a status shows it: rounded up, -1 when infinite."""
    return math.ceil(share) if math.isfinite(share) else -1


def queue_status(cq: ClusterQueue, figures: QueueFigures, now: float) -> ClusterQueueStatus:
    old = cq.status.conditions if cq.status else []
    if figures.broken is None:
        active = _active(old, True, Reason.READY, "Can admit new workloads", now)
    else:
        message = f"Admits nothing: {figures.broken}; a Cohort's spec.parent must break the cycle"
        active = _active(old, False, Reason.COHORT_CYCLE, message, now)
    return ClusterQueueStatus(
        pending_workloads=figures.pending,
        admitted_workloads=figures.admitted,
        weighted_share=share_shown(figures.weighted_share),
        flavors_usage=flavors_usage(cq, figures.usage or {}),
        conditions=[active],
        pending_head=list(figures.head),
        recent_usage=_recent_usage(figures.recent, figures.weight),
    )


def _recent_usage(recent: Recent | None, weight: float) -> RecentUsage | None:
    if recent is None:
        return None
    return RecentUsage(
        weighted_share=share_shown(weighted(recent, weight)),
        share=round(recent.share, 3),
        last_update=format_time(recent.at),
    )


def recorded_recent(cq: ClusterQueue | None) -> Recent | None:
    """The recent share a ClusterQueue's status kept (what a restarted controller starts
    from), or None."""
    kept = cq.status.recent_usage if cq is not None and cq.status is not None else None
    at = parse_time(kept.last_update) if kept is not None else None
    if kept is None or at is None:
        return None
    return Recent(max(0.0, kept.share), at)


def flavors_usage(cq: ClusterQueue, usage: Mapping[tuple[str, str], int]) -> list[FlavorUsage]:
    """Usage per flavor and resource, and what of it is borrowed (above nominal quota)."""
    out: list[FlavorUsage] = []
    for group in cq.spec.resource_groups:
        for flavor in group.flavors:
            resources = []
            for quota in flavor.resources:
                used = usage.get((flavor.name, quota.name), 0)
                nominal = parse_quantity(quota.nominal_quota)
                resources.append(
                    ResourceUsage(
                        name=quota.name,
                        total=format_quantity(max(used, 0)),
                        borrowed=format_quantity(max(0, used - nominal)),
                    )
                )
            out.append(FlavorUsage(name=flavor.name, resources=resources))
    return out


def _status_differs(
    old: ClusterQueueStatus | LocalQueueStatus | None,
    new: ClusterQueueStatus | LocalQueueStatus,
    fields: tuple[str, ...],
) -> bool:
    """Whether writing `new` changes what a user sees: its `fields`, and its conditions
    compared by type and status."""
    if old is None:
        return True
    same_conditions = [(c.type, c.status) for c in old.conditions] == [
        (c.type, c.status) for c in new.conditions
    ]
    return not same_conditions or any(getattr(old, f) != getattr(new, f) for f in fields)


def queue_status_differs(old: ClusterQueueStatus | None, new: ClusterQueueStatus) -> bool:
    """Whether writing `new` changes what a user sees (conditions compare by type and status)."""
    fields = (
        "pending_workloads",
        "admitted_workloads",
        "weighted_share",
        "flavors_usage",
        "pending_head",
    )
    return _status_differs(old, new, fields) or _recent_shown(old) != _recent_shown(new)


def _recent_shown(status: ClusterQueueStatus | None) -> int | None:
    """The recent share a status shows: it is written again when that changes (its exact
    value and clock alone change at every cycle)."""
    recent = status.recent_usage if status is not None else None
    return None if recent is None else recent.weighted_share


# -- Cohorts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CohortFigures:
    """What a Cohort's status reports, per (flavor, resource) where amounts are concerned."""

    # What the ClusterQueues below it use.
    total: Mapping[tuple[str, str], int]
    # What its tree uses above its subtree quota, taken from its parent.
    borrowed: Mapping[tuple[str, str], int]
    # Its own nominal quota plus what its members lend to it.
    subtree: Mapping[tuple[str, str], int]
    weighted_share: float = 0.0
    # The cycle of parents it is in or leads into (`a, b, a`; empty: none).
    cycle: tuple[str, ...] = ()
    # Its parent, when that names no Cohort object.
    missing_parent: str | None = None


def cohort_status(cohort: Cohort, figures: CohortFigures, now: float) -> CohortStatus:
    old = cohort.status.conditions if cohort.status else []
    name = cohort.metadata.name
    if figures.cycle:
        shown = " -> ".join(figures.cycle)
        where = (
            f"Cohort {name} is in a cycle of parents ({shown})"
            if name in figures.cycle
            else f"the parents of Cohort {name} lead into a cycle ({shown})"
        )
        message = (
            f"Admits nothing: {where}; no ClusterQueue of this tree admits a workload until one"
            " of these Cohorts' spec.parent breaks the cycle"
        )
        active = _active(old, False, Reason.COHORT_CYCLE, message, now)
    elif figures.missing_parent is not None:
        parent = figures.missing_parent
        message = (
            f"Can admit new workloads; its parent {parent} is no Cohort object, so {parent} is"
            " an implicit cohort with no quota of its own (create Cohort"
            f" {parent} to give it quota, or fix spec.parent)"
        )
        active = _active(old, True, Reason.PARENT_NOT_FOUND, message, now)
    else:
        active = _active(old, True, Reason.READY, "Can admit new workloads", now)
    return CohortStatus(
        conditions=[active],
        flavors_usage=cohort_flavors_usage(cohort, figures),
        weighted_share=share_shown(figures.weighted_share),
    )


def cohort_flavors_usage(cohort: Cohort, figures: CohortFigures) -> list[CohortFlavorUsage]:
    """Per flavor and resource of the Cohort's tree: the flavors and resources it lists first,
    in its order, then the others its tree has quota or usage of, by name."""
    order: list[tuple[str, str]] = [
        (flavor.name, quota.name)
        for group in cohort.spec.resource_groups
        for flavor in group.flavors
        for quota in flavor.resources
    ]
    listed = set(order)
    others = {*figures.total, *figures.borrowed, *figures.subtree} - listed
    # The default flavor (""): resources no group covers, which no Cohort can name.
    order += sorted(fr for fr in others if fr[0])
    by_flavor: dict[str, list[CohortResourceUsage]] = {}
    for flavor, resource in order:
        by_flavor.setdefault(flavor, []).append(
            CohortResourceUsage(
                name=resource,
                total=format_quantity(max(0, figures.total.get((flavor, resource), 0))),
                borrowed=format_quantity(max(0, figures.borrowed.get((flavor, resource), 0))),
                subtree_quota=format_quantity(max(0, figures.subtree.get((flavor, resource), 0))),
            )
        )
    return [CohortFlavorUsage(name=f, resources=r) for f, r in by_flavor.items()]


def cohort_status_differs(old: CohortStatus | None, new: CohortStatus) -> bool:
    """Whether writing `new` changes what a user sees (conditions by type, status, reason and
    message: they change only when the tree's shape does)."""
    if old is None:
        return True

    def shown(status: CohortStatus) -> list[tuple[str, str, str, str]]:
        return [(c.type, c.status, c.reason, c.message) for c in status.conditions]

    fields = ("weighted_share", "flavors_usage")
    return shown(old) != shown(new) or any(getattr(old, f) != getattr(new, f) for f in fields)


# -- LocalQueues ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalQueueFigures:
    """What a LocalQueue's status reports: its gangs pending and admitted, what the admitted
    ones hold per (flavor, resource), and why its first pending gang waits."""

    pending: int = 0
    admitted: int = 0
    usage: Mapping[tuple[str, str], int] | None = None
    head_reason: str | None = None
    head: Sequence[PendingWorkload] = ()
    # Pending gangs whose Workload says why they wait.
    inadmissible: int = 0


def local_queue_status(
    lq: LocalQueue, figures: LocalQueueFigures, cq_exists: bool, now: float
) -> LocalQueueStatus:
    old = lq.status.conditions if lq.status else []
    cq = lq.spec.cluster_queue
    if cq_exists:
        active = _active(old, True, Reason.READY, f"Can submit new workloads to {cq}", now)
    else:
        message = (
            f"ClusterQueue {cq} does not exist: nothing submitted here is admitted until it does"
        )
        active = _active(old, False, Reason.CLUSTER_QUEUE_NOT_FOUND, message, now)
    by_flavor: dict[str, list[LocalQueueResourceUsage]] = {}
    for (flavor, resource), amount in sorted((figures.usage or {}).items()):
        if amount > 0 and flavor:
            usage = LocalQueueResourceUsage(name=resource, total=format_quantity(amount))
            by_flavor.setdefault(flavor, []).append(usage)
    return LocalQueueStatus(
        conditions=[active],
        pending_workloads=figures.pending,
        admitted_workloads=figures.admitted,
        flavors_usage=[LocalQueueFlavorUsage(name=f, resources=r) for f, r in by_flavor.items()],
        pending_reason=figures.head_reason,
        pending_head=list(figures.head),
    )


def local_queue_status_differs(old: LocalQueueStatus | None, new: LocalQueueStatus) -> bool:
    """Whether writing `new` changes what a user sees (conditions by type and status)."""
    fields = (
        "pending_workloads",
        "admitted_workloads",
        "flavors_usage",
        "pending_reason",
        "pending_head",
    )
    return _status_differs(old, new, fields)


def as_patch(
    status: WorkloadStatus | ClusterQueueStatus | LocalQueueStatus | CohortStatus,
) -> dict[str, object]:
    """A merge patch that makes the object's status `status`: members it no longer has are
    removed (explicit nulls), members inside are written whole. A Workload's position is left
    out: it is written on its own (WriteWorkloadPosition); so is its start forecast, which a
    status write only removes (on admission), never writes back as it last saw it."""
    body: dict[str, object] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    for name, info in type(status).model_fields.items():
        if getattr(status, name) is None:
            body[info.alias or name] = None
    if isinstance(status, WorkloadStatus):
        body.pop("position", None)
        if status.start_forecast is not None:
            body.pop("startForecast", None)
    return body


def eviction_event(why: str, count: int, delay: float) -> str:
    back = f"back in the queue in {delay:.0f}s" if delay > 0 else "back in the queue at once"
    return f"Evicted: {why}; requeued (attempt {count}), {back}"
