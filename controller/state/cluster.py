"""The controller's picture of the cluster, changed one object at a time, and the engine it feeds.

Rule: `observe` is the informers' listener and only records what changed; `sync` brings the
long-lived decision engine in step with the records of the gangs that changed and plans the
writes they need; `decide` runs one engine cycle, and `*_work` turn its decisions into writes.
Nothing here does I/O, awaits, or reads the clock: `now` is given. The simulator feeds the
same engine.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from controller import quota
from controller.api import kinds, kube, names
from controller.api.conditions import Reason
from controller.api.kinds import Kind
from controller.api.quantity import QuantityError, parse_quantity
from controller.api.queues import ClusterQueue, Cohort, CohortStatus
from controller.api.times import parse_time
from controller.quota import Pending, PendingCause
from controller.quota.engine import Engine
from controller.quota.outcomes import PERMANENT, Admission, Decisions, Eviction, EvictionCause
from controller.quota.quota import QuotaNode, share
from controller.quota.snapshot import flavor_quotas
from controller.settings import Settings
from controller.state import objects
from controller.state.cohorts import (
    cohort_spec,
    flavor_spec,
    parent_cycle,
    queue_spec,
    tree_of,
    trees_used,
)
from controller.state.gangs import GangIndex, GangKey, ManagedGang, id_of
from controller.state.objects import CohortFigures, EvictionRecord, PodGroupSettings, QueueFigures
from controller.state.steps import (
    CreateWorkload,
    DeletePodGroup,
    DeleteWorkload,
    Step,
    WriteCohortStatus,
    WriteQueueStatus,
)
from controller.workloads.base import Delete, Finished, PodSetFlavors, WorkloadAdapter
from controller.workloads.pod import alike
from controller.workloads.registry import ADAPTERS
from controller.workloads.requests import pod_requests
from controller.workloads.standalone import STANDALONE, is_standalone
from controller.workloads.taints import repelling_taints

log = logging.getLogger("kohort.state")

UNSCHEDULABLE_TAINT = quota.Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


@dataclass(frozen=True)
class Member:
    """What the engine holds for a gang: pending in a queue, admitted on nodes, or waiting
    outside it (its LocalQueue is missing, or it waits out a requeue backoff)."""

    state: Literal["pending", "admitted", "waiting"]
    queue: str | None
    gang: quota.Gang | None = None
    admitted_at: float = 0.0
    placement: tuple[quota.PodPlacement, ...] = ()
    why: Pending | None = None
    # Admitted: the flavor each resource of each pod set holds (pod set -> resource -> flavor).
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Reported:
    """The pending reason last written for a gang."""

    cause: PendingCause
    at: float


def core_node(node: kube.Node, used: Mapping[str, int]) -> quota.Node | None:
    """A Ready node as the core sees it (None when it is not Ready)."""
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    if not ready:
        return None
    allocatable: dict[str, int] = {}
    for resource, amount in node.status.allocatable.items():
        try:
            allocatable[resource] = parse_quantity(amount)
        except QuantityError:
            allocatable[resource] = 0
    taints = list(repelling_taints(node.spec.taints))
    if node.spec.unschedulable:
        taints.append(UNSCHEDULABLE_TAINT)
    return quota.Node(
        name=node.metadata.name,
        allocatable=allocatable,
        labels=dict(node.metadata.labels),
        taints=tuple(taints),
        used=dict(used),
    )


def _recorded(flavors: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """An admission's flavors as its Workload records them (see ManagedGang.admitted_flavors)."""
    return {pod_set: dict(chosen) for pod_set, chosen in flavors.items() if chosen}


def _pod_usage(pod: kube.Pod) -> dict[str, int]:
    try:
        usage = pod_requests(pod.spec)
    except (QuantityError, ValueError):
        usage = {}
    usage["pods"] = usage.get("pods", 0) + 1000
    return usage


class ClusterState:
    """Every object the controller reads, the gangs found from them, and the engine."""

    def __init__(
        self,
        settings: Settings,
        podgroups: PodGroupSettings,
        *,
        adapters: Mapping[Kind, WorkloadAdapter] = ADAPTERS,
        namespace_filter: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.podgroups = podgroups
        self.adapters = adapters
        self.rng = rng or random.Random()
        self.index = GangIndex()
        self.engine = Engine((), (), settings.core, require_flavors=True)
        self.cluster_queues: dict[str, ClusterQueue] = {}
        self.cohorts: dict[str, Cohort] = {}
        # Each ResourceFlavor as the core sees it.
        self.flavors: dict[str, quota.FlavorSpec] = {}
        self.local_queues: dict[tuple[str, str], str] = {}
        # Namespaces whose workloads this controller manages (None: all).
        self.namespaces: set[str] | None = set() if namespace_filter else None
        self.priority_classes: dict[str, int] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        # Each node as the core sees it, without usage (None: not Ready).
        self._nodes: dict[str, quota.Node | None] = {}
        # node -> pod (namespace, name) -> (its gang, its requests)
        self._on_node: dict[str, dict[GangKey, tuple[GangKey | None, dict[str, int]]]] = {}
        self.members: dict[GangKey, Member] = {}
        self._counted: dict[GangKey, tuple[str, str, bool]] = {}
        self._figures: dict[str, list[int]] = {}
        self._reported: dict[GangKey, Reported] = {}
        self._reports: dict[GangKey, list[Step]] = {}
        self._later: set[GangKey] = set()
        self._timers: list[tuple[float, GangKey]] = []
        self._next_timer: dict[GangKey, float] = {}
        self._queues_changed = False
        self._nodes_changed = False
        self._flavors_changed = False
        self._dirty_nodes: set[str] = set()
        self._dirty_queues: set[str] = set()
        self._relevant: set[str] = set()
        self._relevant_cohorts: set[str] = set()
        self._specs: tuple[quota.QueueSpec, ...] = ()
        self._cohort_specs: tuple[quota.CohortSpec, ...] = ()
        self._flavor_specs: tuple[quota.FlavorSpec, ...] = ()
        self._timeouts: list[tuple[GangKey, str]] = []
        # Admitted gangs not released because a flavor they were admitted on has no
        # ResourceFlavor: looked at again when a ResourceFlavor appears.
        self._unreleased: set[GangKey] = set()
        # Managed gangs whose name a submitted Workload holds (told once, see _name_taken).
        self._taken: set[GangKey] = set()

    # -- reading ------------------------------------------------------------------------------

    def gang(self, gang_id: str) -> ManagedGang | None:
        return self.index.get(self.key(gang_id))

    @staticmethod
    def key(gang_id: str) -> GangKey:
        """The key of a gang the core names `namespace/name` (namespaces have no slash)."""
        namespace, _, name = gang_id.partition("/")
        return (namespace, name)

    def ours(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def next_timer(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    # -- changes (the informers' listener) ----------------------------------------------------

    def observe(self, kind: Kind, old: Any, new: Any) -> None:
        adapter = self.adapters.get(kind)
        if adapter is not None:
            self.index.owner_changed(adapter, old, new)
        if kind == kinds.PODS:
            self._pod_changed(old, new)
        elif kind == kinds.WORKLOADS:
            self.index.workload_changed(old, new)
        elif kind == self.podgroups.kind:
            self.index.podgroup_changed(old, new)
        elif kind == kinds.CLUSTER_QUEUES:
            obj = new or old
            if new is None:
                self.cluster_queues.pop(obj.metadata.name, None)
            else:
                self.cluster_queues[obj.metadata.name] = new
            if old is None or new is None or old.spec != new.spec:
                self._queues_changed = True
            if (old and old.spec.namespace_selector) != (new and new.spec.namespace_selector):
                self.index.dirty.update(g.key for g in self.index)  # rare: look at every gang
        elif kind == kinds.COHORTS:
            obj = new or old
            if new is None:
                self.cohorts.pop(obj.metadata.name, None)
            else:
                self.cohorts[obj.metadata.name] = new
            if old is None or new is None or old.spec != new.spec:
                self._queues_changed = True
        elif kind == kinds.RESOURCE_FLAVORS:
            self._flavor_changed(old, new)
        elif kind == kinds.LOCAL_QUEUES:
            self._local_queue_changed(old, new)
        elif kind == kinds.NODES:
            self._node_changed(old, new)
        elif kind == kinds.PRIORITY_CLASSES:
            obj = new or old
            if new is None:
                self.priority_classes.pop(obj.metadata.name, None)
            else:
                self.priority_classes[obj.metadata.name] = new.value
        elif kind == kinds.NAMESPACES:
            self._namespace_changed(old, new)

    def _namespace_changed(self, old: kube.Namespace | None, new: kube.Namespace | None) -> None:
        name = (new or old).metadata.name  # type: ignore[union-attr]
        labels = dict(new.metadata.labels) if new is not None else None
        if labels is None:
            self.namespace_labels.pop(name, None)
        else:
            self.namespace_labels[name] = labels
        if old is not None and new is not None and old.metadata.labels == new.metadata.labels:
            return
        self.index.dirty.update(self.index.in_namespace(name))
        if self.namespaces is not None and (old is None) != (new is None):
            # A namespace selected, or no longer selected.
            if new is None:
                self.namespaces.discard(name)
            else:
                self.namespaces.add(name)
            self._queues_changed = True

    def _flavor_changed(self, old: Any, new: Any) -> None:
        name = (new or old).metadata.name
        before = self.flavors.pop(name, None)
        after = flavor_spec(new) if new is not None else None
        if after is not None:
            self.flavors[name] = after
        if before != after:
            self._flavors_changed = True
        if after is not None:
            self.index.dirty.update(self._unreleased)  # they may be released now

    def _local_queue_changed(self, old: Any, new: Any) -> None:
        obj = new or old
        key = (obj.metadata.namespace or "", obj.metadata.name)
        if new is None:
            self.local_queues.pop(key, None)
        else:
            self.local_queues[key] = new.spec.cluster_queue
        self.index.dirty.update(self.index.in_queue(*key))
        self._queues_changed = True

    def _node_changed(self, old: kube.Node | None, new: kube.Node | None) -> None:
        name = (new or old).metadata.name  # type: ignore[union-attr]
        before = self._nodes.pop(name, None)
        after = core_node(new, {}) if new is not None else None
        if new is not None:
            self._nodes[name] = after
        if before != after:
            self._nodes_changed = True

    def _pod_changed(self, old: kube.Pod | None, new: kube.Pod | None) -> None:
        key = self.index.pod_changed(old, new)
        pod = new or old
        assert pod is not None
        ref = (pod.metadata.namespace, pod.metadata.name)
        before = old.spec.node_name if old is not None else None
        if before:
            self._on_node.get(before, {}).pop(ref, None)
            self._dirty_nodes.add(before)
        if new is not None and new.spec.node_name and not new.finished():
            # A pod shutting down counts on its node whatever its gang's state: an evicted gang
            # may be admitted again (with a new placement) before its old pods are gone.
            gang = key if new.metadata.deletion_timestamp is None else None
            self._on_node.setdefault(new.spec.node_name, {})[ref] = (gang, _pod_usage(new))
            self._dirty_nodes.add(new.spec.node_name)

    # -- one pass: bring the engine in step and plan the writes -----------------------------

    def sync(self, now: float) -> dict[GangKey, list[Step]]:
        """Take in what changed since the last call; the writes each changed gang needs."""
        self._fire_timers(now)
        if self._queues_changed:
            self._queues_changed = False
            self._update_queues()
        if self._flavors_changed:
            self._flavors_changed = False
            flavors = tuple(self.flavors[name] for name in sorted(self.flavors))
            if flavors != self._flavor_specs:
                self.engine.set_flavors(flavors)
                self._flavor_specs = flavors
        if self._nodes_changed:
            self._nodes_changed = False
            self.engine.set_nodes(self._core_nodes())
            self._dirty_nodes.clear()
        work: dict[GangKey, list[Step]] = {}
        for key in sorted(self.index.take_dirty()):
            steps = self._sync_gang(key, self.index.get(key), now)
            if steps:
                work[key] = steps
        for name in sorted(self._dirty_nodes):
            self.engine.set_node_used(name, self._node_used(name))
        self._dirty_nodes.clear()
        return work

    def _fire_timers(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            when, key = heapq.heappop(self._timers)
            if self._next_timer.get(key) == when:
                del self._next_timer[key]
            self.index.dirty.add(key)

    def _at(self, key: GangKey, when: float) -> None:
        """Look at gang `key` again at `when`."""
        if when < self._next_timer.get(key, math.inf):
            self._next_timer[key] = when
            heapq.heappush(self._timers, (when, key))

    def _update_queues(self) -> None:
        relevant = set(self.cluster_queues)
        cohorts = set(self.cohorts)
        if self.namespaces is not None:
            # The queues our namespaces use, and the whole cohort trees they are in: every
            # queue (lenders too) and every Cohort (their quota) of those trees.
            used = {cq for (ns, _), cq in self.local_queues.items() if self.ours(ns)}
            parents = self._parents()
            trees = trees_used(self.cluster_queues, used, parents)
            relevant = {
                name
                for name, cq in self.cluster_queues.items()
                if name in used or (cq.spec.cohort and tree_of(cq.spec.cohort, parents) in trees)
            }
            cohorts = {name for name in self.cohorts if tree_of(name, parents) in trees}
        specs = tuple(queue_spec(self.cluster_queues[n]) for n in sorted(relevant))
        cohort_specs = tuple(cohort_spec(self.cohorts[n]) for n in sorted(cohorts))
        if (specs, cohort_specs) != (self._specs, self._cohort_specs):
            self.engine.set_queues(specs, cohort_specs)
            self._specs, self._cohort_specs = specs, cohort_specs
            self._dirty_queues.update(relevant)
        self._relevant = relevant
        self._relevant_cohorts = cohorts

    def _parents(self) -> dict[str, str | None]:
        return {name: c.spec.parent for name, c in self.cohorts.items()}

    def _core_nodes(self) -> list[quota.Node]:
        return [
            replace(node, used=self._node_used(name))
            for name, node in sorted(self._nodes.items())
            if node is not None
        ]

    def _node_used(self, name: str) -> dict[str, int]:
        """What pods outside admitted gangs use on the node (the engine counts those gangs)."""
        used: dict[str, int] = {}
        for gang, usage in self._on_node.get(name, {}).values():
            member = self.members.get(gang) if gang else None
            if member is not None and member.state == "admitted":
                continue
            for resource, amount in usage.items():
                used[resource] = used.get(resource, 0) + amount
        return used

    def _sync_gang(self, key: GangKey, gang: ManagedGang | None, now: float) -> list[Step]:
        if gang is None or not self.ours(key[0]):
            self._set_member(key, None)
            self._reported.pop(key, None)
            self._unreleased.discard(key)
            return []
        steps = self._bookkeeping(gang, now)
        if steps is not None:
            self._set_member(key, None)
            return steps
        resized = objects.resized(gang) if gang.reserved else None
        steps = self._converge(gang, now, resized)
        member = self._desired(gang, now, resized)
        self._set_member(key, member)
        self._count(gang, member)
        why = member.why
        if why is None and member.state == "pending" and self.engine.judged(gang.id):
            why = self.engine.reason(gang.id)
        if why is not None:
            report = self.pending_steps(gang, why, now)
            if report:
                self._reports[key] = report
        return steps

    def take_reports(self) -> dict[GangKey, list[Step]]:
        """The pending reasons `sync` found to write (no decision waits on them)."""
        taken, self._reports = self._reports, {}
        return taken

    def is_new(self, key: GangKey) -> bool:
        """Whether the gang has no Workload yet (its first write creates one)."""
        gang = self.index.get(key)
        return gang is not None and gang.workload is None and gang.owner is not None

    def is_done(self, key: GangKey) -> bool:
        """Whether the gang is gone or finished: it charges no quota."""
        gang = self.index.get(key)
        return gang is None or gang.owner is None or gang.finished is not None

    def is_finishing(self, key: GangKey) -> bool:
        """Whether the gang is done and its Workload is yet to say so (its quota is already
        back: no decision waits for that write)."""
        gang = self.index.get(key)
        return (
            gang is not None
            and gang.owner is not None
            and gang.finished is not None
            and gang.workload is not None
            and not gang.workload_finished
        )

    def age(self, key: GangKey) -> float:
        """When the gang's object was created (0 when unknown): older gangs go first."""
        gang = self.index.get(key)
        if gang is None or gang.owner is None:
            return 0.0
        return parse_time(gang.owner.meta.creation_timestamp) or 0.0

    def _bookkeeping(self, gang: ManagedGang, now: float) -> list[Step] | None:
        """A Workload for a new gang, Finished for a done one, an orphan removed; None when the
        gang takes part in admission."""
        wl = gang.workload
        owner = gang.owner
        foreign_record = wl is not None and is_standalone(wl)
        if foreign_record and owner is not None and owner.kind != STANDALONE.KIND:
            return self._name_taken(gang)
        self._taken.discard(gang.key)
        if wl is None:
            if gang.owner is None or gang.shape is None or gang.queue is None or gang.finished:
                return []
            return [CreateWorkload(objects.workload_for(gang, self._priority(gang)))]
        if gang.owner is None or gang.shape is None:
            if wl.metadata.labels.get(names.MANAGED_LABEL) != names.MANAGED_VALUE:
                return []
            if gang.waits_for_its_pods():
                return []
            log.info("deleting Workload %s: its owner is gone", gang.id)
            return [*self._delete_podgroup(gang), DeleteWorkload(gang.namespace, gang.name)]
        if gang.finished is not None:
            if gang.workload_finished:
                return []
            steps: list[Step] = [
                objects.status_write(gang, objects.finished_status(gang, gang.finished, now))
            ]
            # A gang of a controller that succeeded has that controller's Event (a Job's
            # Completed); pods have no controller to tell.
            pods_only = gang.owner.kind == kube.Pod.KIND
            if gang.finished is Finished.FAILED or pods_only:
                message = f"Gang {gang.finished.value.lower()}; its quota is released"
                steps.append(objects.event(gang, Reason.FINISHED, message))
            return steps
        if gang.workload_finished:
            return []
        return None

    def _name_taken(self, gang: ManagedGang) -> list[Step]:
        """A managed object's gang whose name a submitted Workload holds: neither is admitted
        (the Workload is not the object's record, and the object owns the gang); an Event on
        the object says so, once."""
        if gang.key in self._taken:
            return []
        self._taken.add(gang.key)
        assert gang.owner is not None
        message = (
            f"Waiting: its gang's name {gang.name} is taken by a Workload kohort did not make;"
            f" delete that Workload (or rename this {gang.owner.kind.kind}) to have it admitted"
        )
        log.warning("%s: %s", gang.id, message)
        return [objects.event(gang, Reason.INADMISSIBLE, message, warning=True)]

    def _priority(self, gang: ManagedGang) -> int:
        assert gang.shape is not None
        if gang.shape.priority is not None:
            return gang.shape.priority
        values = [self.priority_classes.get(c, 0) for c in gang.shape.priority_classes]
        return max(values, default=0)

    def _converge(self, gang: ManagedGang, now: float, resized: str | None) -> list[Step]:
        """A gang that holds quota has its PodGroup and is released; any other is held and has
        none; one `resized` since its admission is evicted. This completes whatever a killed
        controller left half done."""
        assert gang.owner is not None and gang.shape is not None
        owner, pods = gang.owner, list(gang.pods.values())
        steps: list[Step] = []
        if not gang.reserved:
            self._unreleased.discard(gang.key)
            return [*self._delete_podgroup(gang), *owner.adapter.hold(owner.obj, pods)]
        if resized is not None:
            log.info("evicting %s: %s", gang.id, resized)
            return self._evict(gang, Reason.RESIZED, resized, None, now)
        if self._timed_out(gang, now):
            timeout = Eviction(
                gang.id,
                gang.admitted_in() or "",
                "",
                EvictionCause.PODS_READY_TIMEOUT,
                running=gang.running_pods(),
                needed=gang.shape.min_member,
                after=self.settings.pods_ready_timeout or 0.0,
            )
            self._timeouts.append((gang.key, timeout.queue))
            return self._evict(gang, Reason.PODS_READY_TIMEOUT, timeout.describe(), None, now)
        assigned = gang.admitted_flavors()
        missing = self._missing_flavors(assigned)
        if not missing:
            steps += self._release(gang, assigned)
        elif self._still_held(gang):
            return self._not_released(gang, missing)
        # (released before its flavor was deleted: the flavor's nodes matter no more)
        ready = not gang.pods_ready and gang.running_pods() >= gang.shape.min_member
        if ready or gang.pending_reason():
            # (a reason it was not released, from before its flavor existed, is over)
            status = (
                objects.pods_ready_status(gang, now)
                if ready
                else objects.released_status(gang, None)
            )
            status.pending_reason = None
            steps.append(objects.status_write(gang, status))
        return steps

    def _timed_out(self, gang: ManagedGang, now: float) -> bool:
        """Whether an admitted gang's pods did not all start within the pods-ready timeout."""
        assert gang.shape is not None
        timeout = self.settings.pods_ready_timeout
        if timeout is None or gang.pods_ready or gang.running_pods() >= gang.shape.min_member:
            return False
        deadline = (gang.admitted_at() or now) + timeout
        if now < deadline:
            self._at(gang.key, deadline)
            return False
        return True

    def _desired(self, gang: ManagedGang, now: float, resized: str | None) -> Member:
        """What the engine should hold for an active gang, from its records."""
        assert gang.shape is not None
        local = self.local_queues.get((gang.namespace, gang.queue or ""))
        if resized is not None:
            # Evicted in this pass (see _converge): it charges nothing until it is requeued.
            return Member("waiting", local)
        if gang.reserved:
            queue = gang.admitted_in() or local or ""
            core = self._core_gang(gang, queue)
            admitted_at = gang.admitted_at() or now
            flavors = gang.admitted_flavors()
            return Member("admitted", queue, core, admitted_at, gang.placement(), flavors=flavors)
        if local is None:
            why = Pending(PendingCause.NO_LOCAL_QUEUE, queue=gang.queue, namespace=gang.namespace)
            return Member("waiting", None, why=why)
        cq = self.cluster_queues.get(local)
        if cq is not None and not cq.spec.selects_namespace(
            self.namespace_labels.get(gang.namespace, {})
        ):
            why = Pending(
                PendingCause.NAMESPACE_NOT_SELECTED,
                queue=local,
                namespace=gang.namespace,
                detail=str(cq.spec.namespace_selector),
            )
            return Member("waiting", local, why=why)
        missing = self._group_problem(gang)
        if missing is not None:
            return Member("waiting", local, why=Pending(PendingCause.INCOMPLETE, detail=missing))
        requeue_at = gang.requeue_at()
        if requeue_at > now:
            self._at(gang.key, requeue_at)
            why = Pending(PendingCause.REQUEUED, until=requeue_at, eviction=gang.evicted_because())
            return Member("waiting", local, why=why)
        return Member("pending", local, self._core_gang(gang, local))

    def _group_problem(self, gang: ManagedGang) -> str | None:
        """Why a plain pod group cannot be admitted yet: fewer pods than its total count, more,
        or pods that ask for other resources than the one that gave the gang its shape."""
        owner, shape = gang.owner, gang.shape
        if owner is None or shape is None or owner.kind != kinds.PODS or shape.min_member < 2:
            return None
        live = gang.live_pods()
        size = shape.min_member
        label = names.POD_GROUP_TOTAL_COUNT_LABEL
        if len(live) < size:
            return f"{len(live)} of the {size} pods of group {gang.name} exist ({label})"
        if len(live) > size:
            return (
                f"{len(live)} pods carry {names.POD_GROUP_LABEL}={gang.name} but {label} says"
                f" {size}; delete the extra pods or recreate the group with the right count"
            )
        expected = alike(owner.obj)
        odd = sorted(p.metadata.name for p in live if alike(p) != expected)
        if odd:
            return (
                f"pod(s) {', '.join(odd)} ask for other resources than pod"
                f" {owner.meta.name}; the pods of a plain group must be alike"
            )
        return None

    def _core_gang(self, gang: ManagedGang, queue: str) -> quota.Gang:
        assert gang.shape is not None and gang.workload is not None
        return quota.Gang(
            name=gang.id,
            queue=queue,
            pod_sets=gang.shape.pod_sets,
            priority=gang.workload.spec.priority,
            created=gang.created(),
        )

    def _set_member(self, key: GangKey, new: Member | None) -> None:
        """Bring the engine to `new` for the gang: it only ever hears what changed."""
        old = self.members.get(key)
        if old == new:
            return
        engine = self.engine
        gang_id = id_of(key)
        if old is not None and old.state == "admitted":
            moved = (
                new is not None
                and new.state == "admitted"
                and (new.queue, new.gang, new.flavors) == (old.queue, old.gang, old.flavors)
            )
            if moved:
                assert new is not None
                engine.move(gang_id, new.placement)
                self.members[key] = new
                return
            engine.finish(gang_id)
            self._touch_nodes(key)
        elif old is not None and old.state == "pending":
            engine.remove_pending(gang_id)
        if new is None:
            self.members.pop(key, None)
            self._count(None, None, key)
            return
        self.members[key] = new
        if new.state == "pending" and new.gang is not None:
            engine.add_pending(new.gang)
        elif new.state == "admitted" and new.gang is not None:
            admitted = quota.AdmittedGang(new.gang, new.admitted_at, new.placement, new.flavors)
            engine.add_admitted(admitted)
            self._touch_nodes(key)

    def _touch_nodes(self, key: GangKey) -> None:
        gang = self.index.get(key)
        if gang is not None:
            self._dirty_nodes.update(
                p.spec.node_name for p in gang.pods.values() if p.spec.node_name
            )

    def _count(
        self, gang: ManagedGang | None, member: Member | None, key: GangKey | None = None
    ) -> None:
        """Keep each ClusterQueue's pending, inadmissible and admitted counts."""
        key = gang.key if gang is not None else key
        assert key is not None
        now: tuple[str, str, bool] | None = None
        if gang is not None and member is not None and member.queue is not None:
            now = (member.queue, member.state, bool(gang.pending_reason()))
        before = self._counted.get(key)
        if before == now:
            return
        for entry, sign in ((before, -1), (now, +1)):
            if entry is None:
                continue
            queue, state, inadmissible = entry
            figures = self._figures.setdefault(queue, [0, 0, 0])
            if state == "admitted":
                figures[2] += sign
            else:
                figures[0] += sign
                figures[1] += sign * inadmissible
            self._dirty_queues.add(queue)
        if now is None:
            self._counted.pop(key, None)
        else:
            self._counted[key] = now

    # -- pending reasons ------------------------------------------------------------------------

    def pending_steps(self, gang: ManagedGang, why: Pending, now: float) -> list[Step]:
        """Write why the gang waits when it changed: at once when its cause changed (with an
        Event), otherwise at most every `reason_refresh` seconds (the numbers in it)."""
        text = why.describe()
        if text == gang.pending_reason():
            return []
        last = self._reported.get(gang.key)
        refresh = self.settings.reason_refresh
        if last is not None and last.cause is why.cause and now - last.at < refresh:
            self._at(gang.key, last.at + refresh)
            return []
        self._reported[gang.key] = Reported(why.cause, now)
        permanent = why.cause in PERMANENT
        reason = Reason.INADMISSIBLE if permanent else Reason.PENDING
        status = objects.pending_status(gang, text, now, reason)
        steps: list[Step] = [objects.status_write(gang, status)]
        if last is None or last.cause is not why.cause:
            steps.append(objects.event(gang, reason, text, warning=permanent))
        return steps

    # -- one cycle's decisions -------------------------------------------------------------------

    def decide(self, now: float) -> Decisions:
        """One engine cycle; the members follow its decisions (the writes come from `planned`)."""
        decisions = self.engine.cycle(now)
        for eviction in decisions.evictions:
            key = self.key(eviction.gang)
            self._touch_nodes(key)
            self.members.pop(key, None)
        for admission in decisions.admissions:
            key = self.key(admission.gang)
            old = self.members[key]
            self.members[key] = replace(
                old,
                state="admitted",
                admitted_at=now,
                placement=admission.placement,
                flavors=_recorded(admission.flavors),
            )
            self._touch_nodes(key)
        return decisions

    def eviction_work(self, evictions: Iterable[Eviction], now: float) -> dict[GangKey, list[Step]]:
        return {self.key(e.gang): self.eviction_steps(e, now) for e in evictions}

    def admission_work(
        self, admissions: Iterable[Admission], now: float
    ) -> tuple[dict[GangKey, list[Step]], dict[GangKey, list[Step]]]:
        """The records of `admissions`, and their releases (each written after its record)."""
        records: dict[GangKey, list[Step]] = {}
        releases: dict[GangKey, list[Step]] = {}
        for admission in admissions:
            key = self.key(admission.gang)
            records[key], releases[key] = self.admission_steps(admission, now)
        return records, releases

    def reason_work(self, reasons: Mapping[str, Pending], now: float) -> dict[GangKey, list[Step]]:
        return {self.key(g): self.reason_steps(g, why, now) for g, why in reasons.items()}

    def eviction_steps(self, eviction: Eviction, now: float) -> list[Step]:
        gang = self.index.get(self.key(eviction.gang))
        if gang is None or gang.finished is not None:
            return []  # (done since the pass decided: its quota is back anyway)
        same_queue = eviction.cause is EvictionCause.PREEMPTED
        preempted = Reason.IN_CLUSTER_QUEUE if same_queue else Reason.IN_COHORT_RECLAMATION
        return self._evict(gang, Reason.PREEMPTED, eviction.describe(), preempted, now)

    def admission_steps(self, admission: Admission, now: float) -> tuple[list[Step], list[Step]]:
        """The admission's record (the Workload's status and an Event), and what releases the
        gang (its PodGroup, then its release through its adapter), to be written after it."""
        gang = self.index.get(self.key(admission.gang))
        if gang is None or gang.owner is None or gang.finished is not None:
            return [], []
        self._reported.pop(gang.key, None)
        status = objects.admitted_status(gang, admission, now)
        record: list[Step] = [objects.status_write(gang, status)]
        release: list[Step] = []
        missing = self._missing_flavors(admission.flavors)
        if missing:
            self._unreleased.add(gang.key)
            status.pending_reason = objects.missing_flavors(missing)
        else:
            release = self._release(gang, admission.flavors)
        message = f"Admitted by ClusterQueue {admission.queue}: {admission.describe()}"
        record.append(objects.event(gang, Reason.ADMITTED, message))
        if missing:
            text = status.pending_reason or ""
            record.append(objects.event(gang, Reason.FLAVOR_NOT_FOUND, text, warning=True))
        return record, release

    def reason_steps(self, gang_id: str, why: Pending, now: float) -> list[Step]:
        gang = self.gang(gang_id)
        if gang is None or gang.finished is not None:
            return []  # (done since the pass decided: nothing waits)
        return self.pending_steps(gang, why, now)

    def _evict(
        self, gang: ManagedGang, reason: Reason, why: str, preempted: Reason | None, now: float
    ) -> list[Step]:
        """Evict the whole gang: the record first (from then on it counts as pending and a
        restart holds it), then the hold, the PodGroup, and an Event. A gang whose pods did not
        start in time waits out a backoff before it is back in its queue; a preempted or
        resized one is back at once (its queue's minimumRuntimeSeconds keeps it from being
        preempted again as soon as it is readmitted)."""
        assert gang.owner is not None
        count, timeouts = gang.requeue_count() + 1, gang.pods_ready_timeouts()
        if reason is Reason.PODS_READY_TIMEOUT:
            timeouts += 1
            delay = min(self.settings.requeue_cap, self.settings.requeue_base * 2 ** (timeouts - 1))
            delay *= self.rng.uniform(1.0, 1.1)
            back = float(math.ceil(now + delay))  # the record keeps whole seconds
        else:
            delay, back = 0.0, float(math.floor(now))
        requeued = Pending(PendingCause.REQUEUED, until=back, eviction=why)
        record = EvictionRecord(reason, why, preempted, count, timeouts, back, requeued.describe())
        self._reported[gang.key] = Reported(PendingCause.REQUEUED, now)
        status = objects.evicted_status(gang, record, now)
        message = objects.eviction_event(why, count, delay)
        hold = gang.owner.adapter.hold(gang.owner.obj, list(gang.pods.values()))
        wl = gang.workload
        kept = (
            gang.declared_group
            and wl is not None
            and not wl.metadata.owner_references
            and any(isinstance(write, Delete) for write in hold)
        )
        if kept:
            message += (
                f"; its pods were deleted (a scheduling gate cannot be put back on a pod): create"
                f" them again, labelled {names.POD_GROUP_LABEL}={gang.name} as before, and they"
                f" rejoin this Workload"
            )
        return [
            objects.status_write(gang, status),
            *hold,
            *self._delete_podgroup(gang),
            objects.event(gang, reason, message, warning=True, on_workload=kept),
        ]

    def _release(self, gang: ManagedGang, assigned: Mapping[str, Mapping[str, str]]) -> list[Step]:
        """The gang's PodGroup if it has none yet, then its release through its adapter, its
        pods on the nodes of the flavors `assigned` to its pod sets (all of them known)."""
        assert gang.owner is not None
        self._unreleased.discard(gang.key)
        # A submitted Workload's creator runs its work as it likes: it gets no PodGroup.
        wanted = gang.podgroup is None and gang.owner.kind != STANDALONE.KIND
        podgroup = objects.podgroup_for(gang, self.podgroups) if wanted else None
        steps: list[Step] = [podgroup] if podgroup is not None else []
        flavors = {
            pod_set: PodSetFlavors(
                tuple(self.flavors[f] for f in dict.fromkeys(by_resource.values()))
            )
            for pod_set, by_resource in assigned.items()
            if by_resource
        }
        pods = list(gang.pods.values())
        return steps + gang.owner.adapter.release(gang.owner.obj, pods, flavors)

    @staticmethod
    def _still_held(gang: ManagedGang) -> bool:
        """Whether some of the gang is still held (a suspended Job, gated pods)."""
        if gang.owner is None:
            return False
        pods = list(gang.pods.values())
        return bool(gang.owner.adapter.release(gang.owner.obj, pods, {}))

    def _missing_flavors(self, assigned: Mapping[str, Mapping[str, str]]) -> list[str]:
        """The flavors of an admission that have no ResourceFlavor (the nodes they stand for
        are unknown)."""
        named = {f for by_resource in assigned.values() for f in by_resource.values()}
        return sorted(named - self.flavors.keys())

    def _not_released(self, gang: ManagedGang, missing: list[str]) -> list[Step]:
        """An admitted gang whose flavors are not all known is not released: its Workload says
        so (and an Event, once)."""
        self._unreleased.add(gang.key)
        text = objects.missing_flavors(missing)
        if text == gang.pending_reason():
            return []
        status = objects.released_status(gang, text)
        return [
            objects.status_write(gang, status),
            objects.event(gang, Reason.FLAVOR_NOT_FOUND, text, warning=True),
        ]

    def _delete_podgroup(self, gang: ManagedGang) -> list[Step]:
        kind = self.podgroups.kind
        if kind is None or gang.podgroup is None:
            return []
        return [DeletePodGroup(kind, gang.namespace, gang.name)]

    # -- ClusterQueues ----------------------------------------------------------------------------

    def queue_figures(self, name: str) -> QueueFigures:
        pending, inadmissible, admitted = self._figures.get(name, [0, 0, 0])
        runtime = self.engine.queues.get(name)
        usage = dict(runtime.state.usage) if runtime else {}
        weighted = share(runtime.state) if runtime else 0.0
        broken = runtime.state.broken if runtime else None
        return QueueFigures(pending, admitted, usage, weighted, inadmissible, broken)

    def queue_steps(self, now: float) -> tuple[list[WriteQueueStatus], list[str]]:
        """ClusterQueue statuses that changed, and the queues looked at."""
        names_ = sorted(self._dirty_queues & self._relevant)
        self._dirty_queues.clear()
        steps: list[WriteQueueStatus] = []
        for name in names_:
            cq = self.cluster_queues.get(name)
            if cq is None:
                continue
            status = objects.queue_status(cq, self.queue_figures(name), now)
            if objects.queue_status_differs(cq.status, status):
                steps.append(WriteQueueStatus(name, status))
        return steps, names_

    # -- Cohorts ----------------------------------------------------------------------------------

    def cohort_figures(
        self, name: str, nodes: Mapping[str, QuotaNode] | None = None
    ) -> CohortFigures:
        """What a Cohort's status reports: its tree's usage and quota from the engine (nothing
        when no ClusterQueue is below it), and what is wrong with its parents."""
        if nodes is None:
            nodes = {n.name: n for n in self.engine.cohort_nodes}
        node = nodes.get(name)
        parents = self._parents()
        parent = parents.get(name)
        missing = parent if parent is not None and parent not in self.cohorts else None
        cycle = parent_cycle(name, parents)
        if node is None:
            cohort = self.cohorts.get(name)
            own = cohort_spec(cohort).groups if cohort is not None else ()
            subtree = {fr: q.nominal for fr, q in flavor_quotas(own).items()}
            return CohortFigures({}, {}, subtree, 0.0, cycle, missing)
        total: dict[tuple[str, str], int] = {}
        for leaf in _queues_below(node):
            for fr, amount in leaf.usage.items():
                total[fr] = total.get(fr, 0) + amount
        borrowed = {
            fr: used - node.subtree.get(fr, 0)
            for fr, used in node.usage.items()
            if used > node.subtree.get(fr, 0)
        }
        return CohortFigures(total, borrowed, dict(node.subtree), share(node), cycle, missing)

    def cohort_steps(self, now: float) -> tuple[list[WriteCohortStatus], dict[str, CohortStatus]]:
        """The Cohort statuses that changed, and the status of every Cohort looked at (those of
        our trees). Cheap enough to look at every pass: there are few Cohorts."""
        nodes = {n.name: n for n in self.engine.cohort_nodes}
        statuses: dict[str, CohortStatus] = {}
        steps: list[WriteCohortStatus] = []
        for name in sorted(self._relevant_cohorts & self.cohorts.keys()):
            cohort = self.cohorts[name]
            status = objects.cohort_status(cohort, self.cohort_figures(name, nodes), now)
            statuses[name] = status
            if objects.cohort_status_differs(cohort.status, status):
                steps.append(WriteCohortStatus(name, status))
        return steps, statuses

    def sync_later(self, keys: Iterable[GangKey]) -> None:
        """Sync these new gangs again next pass (their Workloads were not made this pass)."""
        self._later.update(keys)

    def resume_later(self) -> None:
        """At the start of a pass: the gangs put off by the last one are synced again."""
        self.index.dirty |= self._later
        self._later.clear()

    def mark_dirty(self, keys: Iterable[GangKey]) -> None:
        """Look at these gangs again next pass (their writes failed): what they were to be
        told is told again."""
        for key in keys:
            self.index.dirty.add(key)
            self._reported.pop(key, None)

    def reset(self) -> None:
        """Forget the engine and everything derived from the records, and build them again
        from the objects on the next sync: after a pass that did not end as planned, or when
        this replica (again) becomes the leader."""
        self.engine = Engine((), (), self.settings.core, require_flavors=True)
        self.members.clear()
        self._counted.clear()
        self._figures.clear()
        self._reported.clear()
        self._reports.clear()
        self._later.clear()  # every gang is synced again anyway
        self._specs, self._cohort_specs, self._flavor_specs = (), (), ()
        self._queues_changed = self._nodes_changed = self._flavors_changed = True
        self.index.dirty.update(g.key for g in self.index)
        self._dirty_queues.update(self._relevant)

    def mark_queues_dirty(self, names_: Iterable[str]) -> None:
        self._dirty_queues.update(names_)

    def take_timeouts(self) -> list[tuple[GangKey, str]]:
        """(gang, ClusterQueue) of the pods-ready evictions `sync` planned since the last call."""
        taken, self._timeouts = self._timeouts, []
        return taken


def _queues_below(node: QuotaNode) -> list[QuotaNode]:
    """The ClusterQueues of a cohort's subtree."""
    if node.spec is not None:
        return [node]
    return [leaf for child in node.children for leaf in _queues_below(child)]
