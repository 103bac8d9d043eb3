"""The writes a gang needs, planned from what is known of it: its bookkeeping (a Workload, a
Finished record, an orphan removed), its release or hold, its admission and its eviction.

Rule: pure functions. Each takes what it reads and returns the steps, in the order they must
be written; nothing here keeps state, awaits or reads the clock.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from controller import quota
from controller.api import names
from controller.api.conditions import Reason, WorkloadCondition, set_condition
from controller.api.workload import AdmissionCheckState
from controller.quota import Admission, Pending, PendingCause, flavor_assignment
from controller.state import objects, provisioning
from controller.state.gangs import ManagedGang
from controller.state.objects import EvictionRecord, PodGroupSettings
from controller.state.steps import (
    CreateWorkload,
    DeletePodGroup,
    DeleteWorkload,
    Step,
    WriteWorkloadStatus,
)
from controller.workloads.base import Delete, Finished, PodSetFlavors

log = logging.getLogger("kohort.state")

HOSTNAME = "kubernetes.io/hostname"

# The flavors of an admission or a record: pod set -> resource -> flavor.
Assigned = Mapping[str, Mapping[str, str]]


def bookkeeping(
    gang: ManagedGang, *, priority: int, now: float, podgroups: PodGroupSettings
) -> list[Step] | None:
    """A Workload for a new gang, Finished for a done one, an orphan removed; None when the
    gang takes part in admission."""
    wl = gang.workload
    if wl is None:
        if gang.owner is None or gang.shape is None or gang.queue is None or gang.finished:
            return []
        return [CreateWorkload(objects.workload_for(gang, priority))]
    if gang.owner is None or gang.shape is None:
        if wl.metadata.labels.get(names.MANAGED_LABEL) != names.MANAGED_VALUE:
            return []
        if gang.waits_for_its_pods():
            return []
        log.info("deleting Workload %s: its owner is gone", gang.id)
        return [*delete_podgroup(gang, podgroups), DeleteWorkload(gang.namespace, gang.name)]
    if gang.finished is not None:
        if gang.workload_finished:
            return []
        steps: list[Step] = [
            objects.status_write(gang, objects.finished_status(gang, gang.finished, now))
        ]
        # A gang of a controller that succeeded has that controller's Event (a Job's
        # Completed); pods have no controller to tell.
        if gang.finished is Finished.FAILED or gang.members_only:
            message = f"Gang {gang.finished.value.lower()}; its quota is released"
            steps.append(objects.event(gang, Reason.FINISHED, message))
        return steps
    if gang.workload_finished:
        return []
    return None


def name_taken(gang: ManagedGang) -> list[Step]:
    """A managed object's gang whose name a submitted Workload holds: neither is admitted (the
    Workload is not the object's record, and the object owns the gang); an Event on the object
    says so."""
    assert gang.owner is not None
    message = (
        f"Waiting: its gang's name {gang.name} is taken by a Workload kohort did not make;"
        f" delete that Workload (or rename this {gang.owner.kind.kind}) to have it admitted"
    )
    log.warning("%s: %s", gang.id, message)
    return [objects.event(gang, Reason.INADMISSIBLE, message, warning=True)]


def delete_podgroup(gang: ManagedGang, podgroups: PodGroupSettings) -> list[Step]:
    kind = podgroups.kind
    if kind is None or gang.podgroup is None:
        return []
    return [DeletePodGroup(kind, gang.namespace, gang.name)]


def hold(gang: ManagedGang, podgroups: PodGroupSettings) -> list[Step]:
    """A gang that holds no quota: no PodGroup, and held through its adapter."""
    assert gang.owner is not None
    owner, pods = gang.owner, list(gang.pods.values())
    return [*delete_podgroup(gang, podgroups), *owner.adapter.hold(owner.obj, pods)]


def missing_flavors(assigned: Assigned, flavors: Mapping[str, quota.FlavorSpec]) -> list[str]:
    """The flavors of an admission that have no ResourceFlavor (the nodes they stand for are
    unknown)."""
    named = {f for by_resource in assigned.values() for f in by_resource.values()}
    return sorted(named - flavors.keys())


def release(
    gang: ManagedGang,
    assigned: Assigned,
    *,
    flavors: Mapping[str, quota.FlavorSpec],
    podgroups: PodGroupSettings,
    placement: Sequence[quota.PodPlacement] | None = None,
    node_labels: NodeLabels = lambda node: None,
    checked_devices: frozenset[str] = frozenset(),
) -> list[Step]:
    """The gang's PodGroup if it has none yet, then its release through its adapter, its pods
    on the nodes of the flavors `assigned` to its pod sets (all of them known) and pinned to the
    nodes its admission placed them on (`placement`; by default, as its record says; see
    `pins`; `checked_devices`: the node device resources the placement check counted)."""
    assert gang.owner is not None
    # A submitted Workload's creator runs its work as it likes: it gets no PodGroup.
    wanted = gang.podgroup is None and not gang.runs_itself
    podgroup = objects.podgroup_for(gang, podgroups) if wanted else None
    steps: list[Step] = [podgroup] if podgroup is not None else []
    placed = gang.placement() if placement is None else placement
    shape = gang.shape
    pod_sets = shape.pod_sets if shape is not None else ()
    claiming = {
        ps.name
        for ps in pod_sets
        if ps.claimed and not objects.devices_checked(ps, checked_devices)
    }
    by_pod_set: dict[str, PodSetFlavors] = {}
    for pod_set, nodes in _by_pod_set(placed, assigned).items():
        chosen = assigned.get(pod_set, {})
        specs = tuple(flavors[f] for f in dict.fromkeys(chosen.values()))
        levels = next((spec.topology for spec in specs if spec.topology), ())
        hosts, domain = pins(nodes, levels, node_labels, claims_devices=pod_set in claiming)
        per_host, node_hosts = planned_hosts(placed, pod_set, node_labels) if hosts else ({}, {})
        by_pod_set[pod_set] = PodSetFlavors(specs, hosts, domain, per_host, node_hosts)
    for ps in pod_sets:
        if ps.min_count is not None:  # elastic: released with the pods admitted
            by_pod_set[ps.name] = replace(
                by_pod_set.get(ps.name, PodSetFlavors(())), count=ps.count
            )
    pods = list(gang.pods.values())
    return steps + gang.owner.adapter.release(gang.owner.obj, pods, by_pod_set)


NodeLabels = Callable[[str], Mapping[str, str] | None]


def _by_pod_set(
    placement: Sequence[quota.PodPlacement], assigned: Assigned
) -> dict[str, list[str]]:
    """Each pod set that has flavors or a placement, and the nodes it is placed on."""
    nodes: dict[str, list[str]] = {pod_set: [] for pod_set in assigned}
    for placed in placement:
        nodes.setdefault(placed.pod_set, []).append(placed.node)
    return nodes


def pins(
    nodes: Sequence[str],
    levels: Sequence[str],
    node_labels: NodeLabels,
    *,
    claims_devices: bool = False,
) -> tuple[tuple[str, ...], dict[str, str]]:
    """What pins a pod set to its planned `nodes`: their hostnames (for a required node
    affinity, where the kind may take one), and the labels all of them share among the
    flavor's topology `levels` and the hostname (for a nodeSelector, which every kind takes:
    the domain of a topology request, or the one node). Nothing when a node is unknown or has
    no hostname label (or without a placement check). A pod set whose pods claim devices
    (DRA) is pinned to its topology domain only: the plan did not count the nodes' devices, so
    the scheduler picks the nodes whose devices are free."""
    labels = [node_labels(node) for node in nodes]
    known = [node for node in labels if node is not None and HOSTNAME in node]
    if not nodes or len(known) != len(nodes):
        return (), {}
    hosts = tuple(sorted({node[HOSTNAME] for node in known}))
    domain: dict[str, str] = {}
    for key in (*levels, HOSTNAME):
        values = {node.get(key) for node in known}
        if len(values) == 1 and None not in values:
            domain[key] = known[0][key]
    if claims_devices:
        return (), {k: v for k, v in domain.items() if k != HOSTNAME}
    return hosts, domain


def planned_hosts(
    placement: Sequence[quota.PodPlacement], pod_set: str, node_labels: NodeLabels
) -> tuple[dict[str, int], dict[str, str]]:
    """How many of a pod set's pods the plan puts on each host, and the host (hostname label)
    of each of its planned nodes; nothing when one of its nodes is unknown or has none."""
    counts: dict[str, int] = {}
    hosts: dict[str, str] = {}
    for placed in placement:
        if placed.pod_set != pod_set:
            continue
        host = (node_labels(placed.node) or {}).get(HOSTNAME)
        if host is None:
            return {}, {}
        counts[host] = counts.get(host, 0) + placed.count
        hosts[placed.node] = host
    return counts, hosts


def still_held(gang: ManagedGang) -> bool:
    """Whether some of the gang is still held (a suspended Job, gated pods)."""
    if gang.owner is None:
        return False
    return bool(gang.owner.adapter.release(gang.owner.obj, list(gang.pods.values()), {}))


def not_released(gang: ManagedGang, missing: list[str]) -> list[Step]:
    """An admitted gang whose flavors are not all known is not released: its Workload says so
    (and an Event, once)."""
    text = objects.missing_flavors(missing)
    if text == gang.pending_reason():
        return []
    status = objects.released_status(gang, text)
    return [
        objects.status_write(gang, status),
        objects.event(gang, Reason.FLAVOR_NOT_FOUND, text, warning=True),
    ]


def flavored_pod_sets(
    gang: ManagedGang, flavors: Mapping[str, quota.FlavorSpec]
) -> list[quota.PodSet]:
    """The gang's pod sets as they will be released on their admitted flavors (the flavors'
    node labels and tolerations added)."""
    assert gang.shape is not None
    given = gang.admitted_flavors()
    out = []
    for pod_set in gang.shape.pod_sets:
        names_ = sorted(set(given.get(pod_set.name, {}).values()))
        specs = [flavors.get(name) for name in names_]
        out.append(flavor_assignment.flavored(pod_set, specs))
    return out


def waiting_for_nodes(
    gang: ManagedGang, state: AdmissionCheckState, waiting: str, now: float, *, created: bool
) -> list[Step]:
    """A gang that holds its quota and waits for new nodes: Admitted False (reason
    Provisioning), its check's state, why it waits; an Event when its request is made."""
    status = objects.released_status(gang, waiting)
    status.conditions = set_condition(
        status.conditions, WorkloadCondition.ADMITTED, False, Reason.PROVISIONING, waiting, now
    )
    status.admission_checks = provisioning.with_state(status.admission_checks, state)
    steps: list[Step] = [objects.status_write(gang, status)]
    if created:
        steps.append(objects.event(gang, Reason.PROVISIONING, waiting))
    return steps


def with_check_state(steps: list[Step], state: AdmissionCheckState) -> list[Step]:
    """`steps` with the check's state added to the Workload status they write."""
    out: list[Step] = []
    for step in steps:
        if isinstance(step, WriteWorkloadStatus):
            status = step.status.model_copy(deep=True)
            status.admission_checks = provisioning.with_state(status.admission_checks, state)
            step = replace(step, status=status)
        out.append(step)
    return out


def release_failing(gang: ManagedGang, text: str) -> list[Step]:
    """An admitted gang whose release keeps failing: its Workload says why, with a Warning
    Event, each time what it says changes."""
    if text == gang.pending_reason():
        return []
    return [
        objects.status_write(gang, objects.released_status(gang, text)),
        objects.event(gang, Reason.RELEASE_FAILED, text, warning=True),
    ]


def started(gang: ManagedGang, now: float) -> list[Step]:
    """A released gang's record: PodsReady once all its pods run, and no reason it waits (one
    from before its flavor existed is over)."""
    assert gang.shape is not None
    ready = not gang.pods_ready and gang.running_pods() >= gang.shape.min_member
    if not ready and not gang.pending_reason():
        return []
    status = objects.pods_ready_status(gang, now) if ready else objects.released_status(gang, None)
    status.pending_reason = None
    return [objects.status_write(gang, status)]


def pods_ready_deadline(gang: ManagedGang, now: float, timeout: float | None) -> float | None:
    """When an admitted gang whose pods do not all run yet is due to be evicted for it (None:
    not at all: no timeout, or its pods run)."""
    assert gang.shape is not None
    if timeout is None or gang.pods_ready or gang.running_pods() >= gang.shape.min_member:
        return None
    return (gang.admitted_at() or now) + timeout


@dataclass(frozen=True)
class Requeue:
    """When an evicted gang is back in its queue, and after how long a backoff."""

    at: float
    delay: float


def requeue(
    gang: ManagedGang,
    reason: Reason,
    now: float,
    *,
    base: float,
    cap: float,
    jitter: Callable[[], float],
) -> Requeue:
    """A gang whose pods did not start in time, or whose release kept failing, waits out a
    backoff (base doubling with each eviction of that kind, capped, times `jitter()`) before it
    is back in its queue; a preempted or resized one is back at once (its queue's
    minimumRuntimeSeconds keeps it from being preempted again as soon as it is readmitted).
    The record keeps whole seconds."""
    if reason is Reason.PODS_READY_TIMEOUT:
        times = gang.pods_ready_timeouts() + 1
    elif reason is Reason.RELEASE_FAILED:
        times = gang.release_failures() + 1
    else:
        return Requeue(float(math.floor(now)), 0.0)
    delay = min(cap, base * 2 ** (times - 1)) * jitter()
    return Requeue(float(math.ceil(now + delay)), delay)


def evict(
    gang: ManagedGang,
    *,
    reason: Reason,
    why: str,
    preempted: Reason | None,
    back: Requeue,
    now: float,
    podgroups: PodGroupSettings,
) -> list[Step]:
    """Evict the whole gang: the record first (from then on it counts as pending and a
    restart holds it), then the hold, the PodGroup, and an Event."""
    assert gang.owner is not None
    count, timeouts = gang.requeue_count() + 1, gang.pods_ready_timeouts()
    release_failures = gang.release_failures()
    if reason is Reason.PODS_READY_TIMEOUT:
        timeouts += 1
    elif reason is Reason.RELEASE_FAILED:
        release_failures += 1
    requeued = Pending(PendingCause.REQUEUED, until=back.at, eviction=why)
    record = EvictionRecord(
        reason, why, preempted, count, timeouts, release_failures, back.at, requeued.describe()
    )
    status = objects.evicted_status(gang, record, now)
    message = objects.eviction_event(why, count, back.delay)
    hold_writes = gang.owner.adapter.hold(gang.owner.obj, list(gang.pods.values()))
    wl = gang.workload
    kept = (
        gang.declared_group
        and wl is not None
        and not wl.metadata.owner_references
        and any(isinstance(write, Delete) for write in hold_writes)
    )
    if kept:
        message += (
            f"; its pods were deleted (a scheduling gate cannot be put back on a pod): create"
            f" them again, labelled {names.POD_GROUP_LABEL}={gang.name} as before, and they"
            f" rejoin this Workload"
        )
    return [
        objects.status_write(gang, status),
        *hold_writes,
        *delete_podgroup(gang, podgroups),
        objects.event(gang, reason, message, warning=True, on_workload=kept),
    ]


@dataclass(frozen=True)
class AdmissionWrites:
    """An admission's record (the Workload's status and an Event), and what releases the gang
    (its PodGroup, then its release), to be written after it; `missing` the flavors it was
    admitted on that have no ResourceFlavor (it is then not released)."""

    record: list[Step]
    release: list[Step]
    missing: list[str]


def admission(
    gang: ManagedGang,
    decided: Admission,
    now: float,
    *,
    flavors: Mapping[str, quota.FlavorSpec],
    podgroups: PodGroupSettings,
    node_labels: NodeLabels = lambda node: None,
    checked_devices: frozenset[str] = frozenset(),
    checks: list[AdmissionCheckState] | None = None,
) -> AdmissionWrites:
    """The record of an admission (`checks`: its AdmissionChecks' states from now on, None:
    as they were) and the release of its gang, unless it waits for new nodes."""
    gang = gang.admitted_as(decided.counts)  # (its elastic pod set at the count admitted)
    status = objects.admitted_status(gang, decided, now)
    if checks is not None:
        status.admission_checks = checks
    unchecked = objects.unchecked(gang, checked_devices)
    if unchecked:
        status.conditions = objects.placement_not_checked(status.conditions, unchecked, now)
    record: list[Step] = [objects.status_write(gang, status)]
    releasing: list[Step] = []
    missing = missing_flavors(decided.flavors, flavors)
    if provisioning.waits_for_nodes(decided.placement):
        new = provisioning.new_node_count(decided.placement)
        text = f"quota reserved; waiting for {new} new node(s) to be provisioned"
        status.pending_reason = text
        status.conditions = set_condition(
            status.conditions, WorkloadCondition.ADMITTED, False, Reason.PROVISIONING, text, now
        )
        message = f"Quota reserved by ClusterQueue {decided.queue}: {decided.describe()}; {text}"
        record.append(objects.event(gang, Reason.QUOTA_RESERVED, message))
        return AdmissionWrites(record, [], [])
    if missing:
        status.pending_reason = objects.missing_flavors(missing)
    else:
        releasing = release(
            gang,
            decided.flavors,
            flavors=flavors,
            podgroups=podgroups,
            placement=decided.placement,
            node_labels=node_labels,
            checked_devices=checked_devices,
        )
    message = f"Admitted by ClusterQueue {decided.queue}: {decided.describe()}"
    record.append(objects.event(gang, Reason.ADMITTED, message))
    if missing:
        text = status.pending_reason or ""
        record.append(objects.event(gang, Reason.FLAVOR_NOT_FOUND, text, warning=True))
    if unchecked:
        text = objects.unchecked_text(unchecked)
        record.append(objects.event(gang, Reason.PLACEMENT_NOT_CHECKED, text, warning=True))
    return AdmissionWrites(record, releasing, missing)
