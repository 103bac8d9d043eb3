"""Gangs found from the cluster's objects, kept up to date one changed object at a time.

Rule: a gang is found from its owner through the owner's kind adapter (or, for a Workload its
creator submitted, the adapter that owns such records); its pods join it by the
`kohort.dev/pod-group` label, and its Workload and PodGroup by sharing its name in its
namespace. What differs between kinds is asked of their adapters' capabilities
(`controller.workloads.capabilities`): nothing here names a kind. Every change marks the gangs
it touches dirty; nothing here walks all gangs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from controller.api import kube, names
from controller.api.conditions import WorkloadCondition, find, is_true
from controller.api.kinds import Kind
from controller.api.quantity import QuantityError, parse_quantity
from controller.api.times import parse_time
from controller.api.workload import RequeueState, Workload
from controller.quota import PodPlacement
from controller.quota.snapshot import with_counts
from controller.workloads.base import Finished, GangShape, WorkloadAdapter, queue_in
from controller.workloads.capabilities import (
    RecordOwner,
    declares_runtime,
    gang_of_members,
    owns_its_record,
    weak_owner,
)
from controller.workloads.devices import (
    ClassDevices,
    DeviceClasses,
    DeviceError,
    claims_templates,
    pod_devices,
    takes_all,
    with_devices,
)

log = logging.getLogger("kohort.state")

GangKey = tuple[str, str]  # (namespace, name)


def id_of(key: GangKey) -> str:
    """A gang's name in the decision core and in logs: `namespace/name`."""
    return f"{key[0]}/{key[1]}"


def key_of(gang_id: str) -> GangKey:
    """The key of a gang the core names `namespace/name` (namespaces have no slash)."""
    namespace, _, name = gang_id.partition("/")
    return (namespace, name)


@dataclass(frozen=True)
class Owner:
    """The user's object a gang comes from, and the adapter of its kind."""

    adapter: WorkloadAdapter
    obj: Any  # the adapter's typed view

    @property
    def kind(self) -> Kind:
        return self.adapter.KIND

    @property
    def meta(self) -> kube.ObjectMeta:
        meta: kube.ObjectMeta = self.obj.metadata
        return meta

    def reference(self) -> kube.OwnerReference:
        return kube.controller_reference(self.kind, self.meta)


@dataclass
class ManagedGang:
    """One gang: its owner, shape and LocalQueue, its Workload and PodGroup, its pods."""

    key: GangKey
    owner: Owner | None = None
    # What its owner says, with the devices its pods claim added to their requests
    # (controller/workloads/devices.py): what it is charged.
    shape: GangShape | None = None
    # What its owner says, before the devices.
    declared: GangShape | None = None
    # Why its claimed devices cannot be charged (it waits), or None.
    devices: str | None = None
    queue: str | None = None
    finished: Finished | None = None
    workload: Workload | None = None
    podgroup: kube.GangObject | None = None
    pods: dict[str, kube.Pod] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.key[0]

    @property
    def name(self) -> str:
        return self.key[1]

    @property
    def id(self) -> str:
        return id_of(self.key)

    def empty(self) -> bool:
        return (
            self.owner is None and self.workload is None and self.podgroup is None and not self.pods
        )

    # -- what its Workload records ---------------------------------------------------------

    def _is(self, condition: WorkloadCondition) -> bool:
        wl = self.workload
        return wl is not None and wl.status is not None and is_true(wl.status.conditions, condition)

    @property
    def reserved(self) -> bool:
        """Whether the Workload holds quota (the durable record of an admission)."""
        return self._is(WorkloadCondition.QUOTA_RESERVED)

    @property
    def workload_finished(self) -> bool:
        return self._is(WorkloadCondition.FINISHED)

    @property
    def pods_ready(self) -> bool:
        return self._is(WorkloadCondition.PODS_READY)

    @property
    def declared_group(self) -> bool:
        """A gang of its own members whose Workload outlives them (a plain pod group: evicting
        it deletes its pods, a gate cannot be put back, and only their creator makes them
        again, under the same group; see capabilities.GangOfMembers)."""
        owner = self.owner
        if owner is None or not gang_of_members(owner.adapter):
            return False
        return owner.adapter.outlives_members(owner.obj, self.name)

    @property
    def members_only(self) -> bool:
        """Whether the gang's owner is one of its members (its pods): no controller tells when
        it ends."""
        return self.owner is not None and gang_of_members(self.owner.adapter)

    @property
    def runs_itself(self) -> bool:
        """Whether the gang's owner is its own record, a Workload its creator submitted: its
        creator runs the work (no PodGroup) and writes its status too."""
        return self.owner is not None and owns_its_record(self.owner.adapter)

    def waits_for_its_pods(self) -> bool:
        """A Workload that outlived its gang's members, kept after an eviction deleted them: no
        pod of the gang exists, and the Workload (made with no owner) records the eviction until
        pods of the gang are made again, or someone deletes it."""
        wl = self.workload
        return (
            self.owner is None
            and wl is not None
            and not wl.metadata.owner_references
            and self._is(WorkloadCondition.EVICTED)
            and not self.reserved
            and not self.workload_finished
        )

    def admitted_in(self) -> str | None:
        status = self.workload.status if self.workload else None
        return status.admission.cluster_queue if status and status.admission else None

    def admitted_flavors(self) -> dict[str, dict[str, str]]:
        """The flavor each resource of each pod set was admitted on, as the record says (pod
        sets admitted on no named flavor left out)."""
        status = self.workload.status if self.workload else None
        if status is None or status.admission is None:
            return {}
        return {a.name: dict(a.flavors) for a in status.admission.pod_set_assignments if a.flavors}

    def admitted_as(self, counts: Mapping[str, int]) -> ManagedGang:
        """The gang as an admission of `counts` pods per pod set takes it: its elastic pod set
        at the count admitted (see `counted_shape`)."""
        if self.shape is None:
            return self
        return replace(self, shape=counted_shape(self.shape, counts))

    def admitted_at(self) -> float | None:
        status = self.workload.status if self.workload else None
        return parse_time(status.admission.admitted_at) if status and status.admission else None

    def requeue_at(self) -> float:
        status = self.workload.status if self.workload else None
        state = status.requeue_state if status else None
        return (parse_time(state.requeue_at) or 0.0) if state else 0.0

    def _requeue_state(self) -> RequeueState:
        status = self.workload.status if self.workload else None
        return (status.requeue_state if status else None) or RequeueState()

    def requeue_count(self) -> int:
        return self._requeue_state().count

    def release_failures(self) -> int:
        return self._requeue_state().release_failures

    def pods_ready_timeouts(self) -> int:
        return self._requeue_state().pods_ready_timeouts

    def evicted_because(self) -> str | None:
        """Why the gang was last evicted, as its Evicted condition says."""
        status = self.workload.status if self.workload else None
        evicted = find(status.conditions, WorkloadCondition.EVICTED) if status else None
        return evicted.message if evicted is not None and evicted.status == "True" else None

    def pending_reason(self) -> str:
        status = self.workload.status if self.workload else None
        return (status.pending_reason or "") if status else ""

    def max_runtime(self) -> float | None:
        """The most its owner declares it runs, in seconds (None: nothing declared)."""
        owner = self.owner
        if owner is None or not declares_runtime(owner.adapter):
            return None
        return owner.adapter.max_runtime(owner.obj)

    def waiting_since(self) -> float:
        """When the gang last entered its queue: its Workload's creation, or its requeue."""
        created = parse_time(self.workload.metadata.creation_timestamp) if self.workload else None
        return max(created or 0.0, self.requeue_at())

    def created(self) -> float:
        return (parse_time(self.owner.meta.creation_timestamp) if self.owner else None) or 0.0

    def incomplete(self) -> str | None:
        """Why a gang of its own members cannot be admitted yet as they are (a plain pod group
        short of pods, say); None for any other gang."""
        owner, shape = self.owner, self.shape
        if owner is None or shape is None or not gang_of_members(owner.adapter):
            return None
        return owner.adapter.incomplete(owner.obj, shape, list(self.pods.values()))

    # -- its pods -------------------------------------------------------------------------

    def live_pods(self) -> list[kube.Pod]:
        return [p for p in self.pods.values() if p.live()]

    def work_done(self) -> bool:
        """Whether the gang's pods have all succeeded, at least as many as must run at once, and
        none is left to run (a Job whose controller has not marked it Complete yet): its work is
        done though its owner does not say so yet."""
        shape = self.shape
        if shape is None or not self.pods:
            return False
        succeeded = 0
        for pod in self.pods.values():
            if pod.live():
                return False
            succeeded += pod.status.phase == "Succeeded"
        return succeeded >= max(shape.min_member, 1)

    def running_pods(self) -> int:
        return sum(
            1
            for p in self.pods.values()
            if p.status.phase in ("Running", "Succeeded") and p.metadata.deletion_timestamp is None
        )

    def placement(self) -> tuple[PodPlacement, ...]:
        """Where the gang's pods are: where they run once all are bound, else the admission's
        plan."""
        assert self.shape is not None
        bound = [p for p in self.live_pods() if p.spec.node_name]
        if bound and self.owner and len(bound) >= sum(ps.count for ps in self.shape.pod_sets):
            sets = {ps.name for ps in self.shape.pod_sets}
            first = self.shape.pod_sets[0].name
            counts: dict[tuple[str, str], int] = {}
            for pod in bound:
                pod_set = self.owner.adapter.pod_set_of(pod)
                key = (pod_set if pod_set in sets else first, str(pod.spec.node_name))
                counts[key] = counts.get(key, 0) + 1
            return tuple(PodPlacement(ps, node, n) for (ps, node), n in sorted(counts.items()))
        status = self.workload.status if self.workload else None
        if status is None or status.admission is None:
            return ()
        return tuple(
            PodPlacement(a.name, n.node, n.count)
            for a in status.admission.pod_set_assignments
            for n in a.nodes
        )


def _takes_over(claimant: WorkloadAdapter, owner: WorkloadAdapter) -> bool:
    """Whether an object of `claimant`'s kind takes a gang from its current owner: a managed
    object takes it from weak owners (pods that only carry its label, a Workload its creator
    submitted under its name), seen first; weak owners never take a gang from each other."""
    return weak_owner(owner) and not weak_owner(claimant)


def _grows(claimant: WorkloadAdapter, owner: WorkloadAdapter) -> bool:
    """Whether a claim on an owned gang is how it grows (one more pod of a plain group), not a
    conflict worth a warning."""
    return claimant.KIND == owner.KIND and weak_owner(owner) and owner.shares_gangs()


class GangIndex:
    """Every gang of the cluster by key, with the keys that changed since they were taken.
    `records` owns the Workloads their creators submitted."""

    def __init__(self, records: RecordOwner, device_classes: DeviceClasses | None = None) -> None:
        self._records = records
        self._device_classes: DeviceClasses = device_classes or {}
        # namespace -> name -> the ResourceClaimTemplates of that namespace.
        self._templates: dict[str, dict[str, kube.ResourceClaimTemplate]] = {}
        # DeviceClass -> node -> its devices: what a claim for all of a node's devices is
        # charged (devices.every_node_has).
        self._class_devices: ClassDevices = {}
        self.gangs: dict[GangKey, ManagedGang] = {}
        # (owner kind, namespace, name) -> the gangs it runs as.
        self._owned: dict[tuple[Kind, str, str], list[GangKey]] = {}
        # (namespace, LocalQueue) -> gangs waiting in it; namespace -> its gangs.
        self._by_queue: dict[tuple[str, str], set[GangKey]] = {}
        self._by_namespace: dict[str, set[GangKey]] = {}
        self.dirty: set[GangKey] = set()

    def get(self, key: GangKey) -> ManagedGang | None:
        return self.gangs.get(key)

    def __iter__(self) -> Iterator[ManagedGang]:
        return iter(self.gangs.values())

    def in_queue(self, namespace: str, queue: str) -> set[GangKey]:
        return self._by_queue.get((namespace, queue), set())

    def in_namespace(self, namespace: str) -> set[GangKey]:
        return self._by_namespace.get(namespace, set())

    def take_dirty(self) -> set[GangKey]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def _gang(self, key: GangKey) -> ManagedGang:
        gang = self.gangs.get(key)
        if gang is None:
            gang = self.gangs[key] = ManagedGang(key)
            self._by_namespace.setdefault(key[0], set()).add(key)
        self.dirty.add(key)
        return gang

    def _drop_if_empty(self, gang: ManagedGang) -> None:
        if gang.empty():
            del self.gangs[gang.key]
            self._by_namespace[gang.namespace].discard(gang.key)

    # -- changes ----------------------------------------------------------------------------

    def owner_changed(self, adapter: WorkloadAdapter, old: Any, new: Any) -> None:
        """An object of a managed kind was added, changed (new) or deleted (new is None)."""
        meta = (new or old).metadata
        ref = (adapter.KIND, meta.namespace, meta.name)
        before = self._owned.pop(ref, [])
        shapes = [] if new is None else self._shapes(adapter, new)
        after: list[GangKey] = []
        for shape in shapes:
            key = (meta.namespace, shape.name)
            gang = self._gang(key)
            current = gang.owner
            if current is not None and (current.kind, current.meta.name) != (
                adapter.KIND,
                meta.name,
            ):
                if not _takes_over(adapter, current.adapter):
                    if not _grows(adapter, current.adapter):
                        log.warning("gang %s/%s already belongs to another object", *key)
                    continue
                log.warning(
                    "gang %s/%s: taken from %s %s", *key, current.kind.kind, current.meta.name
                )
            self._set_queue(gang, queue_in(new.metadata.labels))
            gang.owner = Owner(adapter, new)
            self._take_shape(gang, shape)
            gang.finished = adapter.finished(new)
            after.append(key)
        for key in set(before) - set(after):
            gang = self._gang(key)
            owner = gang.owner
            if owner is not None and (owner.kind, owner.meta.name) != (adapter.KIND, meta.name):
                continue  # taken over by another object meanwhile
            gang.owner = gang.shape = gang.declared = gang.finished = None
            self._set_queue(gang, None)
            self._succeed(adapter, gang, meta.name)
            if gang.owner is None and gang.workload is not None:
                self._record_changed(gang, gang.workload)  # its own gang again, if submitted
            self._drop_if_empty(gang)
        for key in after:
            self._judge_by_members(self.gangs[key])
        if after:
            self._owned[ref] = after

    def _succeed(self, adapter: WorkloadAdapter, gang: ManagedGang, gone: str) -> None:
        """A gang of its own members whose owner went: the member its adapter names owns it
        from now on."""
        members = adapter
        if not gang_of_members(members):
            return
        successor = members.successor(gone, gang.name, list(gang.pods.values()))
        if successor is not None:
            self.owner_changed(adapter, None, successor)

    def _judge_by_members(self, gang: ManagedGang) -> None:
        """A gang of its own members is done as its members say (a plain pod group when its
        pods have run and none still runs), not when its owner is."""
        owner, shape = gang.owner, gang.shape
        if owner is None or shape is None or not gang_of_members(owner.adapter):
            return
        gang.finished = owner.adapter.group_done(owner.obj, shape, list(gang.pods.values()))

    def _shapes(self, adapter: WorkloadAdapter, obj: Any) -> list[GangShape]:
        meta = obj.metadata
        if meta.deletion_timestamp or queue_in(meta.labels) is None:
            return []
        try:
            return adapter.gangs(obj)
        except (QuantityError, ValueError) as err:
            log.warning(
                "%s %s/%s: not managed: %s", adapter.KIND.kind, meta.namespace, meta.name, err
            )
            return []

    def _take_shape(self, gang: ManagedGang, shape: GangShape) -> None:
        """The gang's shape is `shape` from now on, charged with the devices its pods claim."""
        same = gang.declared == shape
        gang.declared = shape
        try:
            templates = self._templates.get(gang.namespace, {})
            charged = with_devices(shape, templates, self._device_classes, self._class_devices)
        except DeviceError as err:
            gang.devices = str(err)
            # An admitted gang keeps what it was charged (its pods have their claims; a
            # template deleted since changes nothing for them): as this process charged it,
            # or, new to it (a restart), as its record says.
            if same and gang.reserved and gang.shape is not None:
                return
            recorded = as_recorded(shape, gang.workload) if gang.reserved else shape
            gang.shape = as_admitted(recorded, gang.workload)
            return
        gang.devices = None
        if self._charged_by_record(gang, shape):
            # Its claims were allocated as its admission counted them, whatever nodes have now.
            charged = devices_as_recorded(charged, gang.workload)
        gang.shape = as_admitted(charged, gang.workload)

    def _charged_by_record(self, gang: ManagedGang, declared: GangShape) -> bool:
        """Whether an admitted gang's claimed devices are charged as its admission counted
        them: those of its claims for all of a node's devices."""
        admitted = gang.owner is not None and gang.reserved
        return admitted and self._takes_all(gang.namespace, declared)

    def _takes_all(self, namespace: str, shape: GangShape) -> bool:
        """Whether a claim of the gang's pods asks for all of a node's devices of a class."""
        templates = self._templates.get(namespace, {})
        return any(n in templates and takes_all(templates[n]) for n in claims_templates(shape))

    def pod_devices(self, pod: kube.Pod, node_has: Mapping[str, int]) -> dict[str, int]:
        """What the pod's claims made from templates take of its node's devices (`node_has`:
        what that node has, by node device resource)."""
        templates = self._templates.get(pod.metadata.namespace, {})
        return pod_devices(pod.spec.resource_claims, templates, node_has)

    def class_devices_changed(self, devices: ClassDevices) -> None:
        """The devices of each class per node are now `devices`: the gangs whose claims ask for
        all of a node's devices are charged again (an admitted one keeps the charge its
        admission recorded, its claims were allocated so; but it now knows how many devices a
        node of it holds, which it could not while no node's devices were known)."""
        if devices == self._class_devices:
            return
        self._class_devices = devices
        for key, gang in self.gangs.items():
            declared = gang.declared
            if gang.owner is None or declared is None:
                continue
            if self._takes_all(gang.namespace, declared):
                self._take_shape(gang, declared)
                self.dirty.add(key)

    def template_changed(
        self, old: kube.ResourceClaimTemplate | None, new: kube.ResourceClaimTemplate | None
    ) -> None:
        """A ResourceClaimTemplate was added, changed or deleted: the gangs of its namespace
        whose pods name it are charged again."""
        obj = new or old
        assert obj is not None
        namespace, name = obj.metadata.namespace, obj.metadata.name
        templates = self._templates.setdefault(namespace, {})
        if new is None:
            templates.pop(name, None)
        else:
            templates[name] = new
        for key in self.in_namespace(namespace):
            gang = self.gangs[key]
            declared = gang.declared
            if gang.owner is None or declared is None or name not in claims_templates(declared):
                continue
            self._take_shape(gang, declared)
            self.dirty.add(key)

    def _set_queue(self, gang: ManagedGang, queue: str | None) -> None:
        if gang.queue == queue:
            return
        if gang.queue is not None:
            self._by_queue.get((gang.namespace, gang.queue), set()).discard(gang.key)
        if queue is not None:
            self._by_queue.setdefault((gang.namespace, queue), set()).add(gang.key)
        gang.queue = queue

    def pod_changed(self, old: kube.Pod | None, new: kube.Pod | None) -> GangKey | None:
        """A pod changed; returns the gang it belongs to now, if any."""
        old_group = old.metadata.labels.get(names.POD_GROUP_LABEL) if old else None
        new_group = new.metadata.labels.get(names.POD_GROUP_LABEL) if new else None
        if old is not None and old_group and (new is None or new_group != old_group):
            gang = self._gang((old.metadata.namespace, old_group))
            gang.pods.pop(old.metadata.name, None)
            self._drop_if_empty(gang)
        if new is None or not new_group:
            return None
        key = (new.metadata.namespace, new_group)
        gang = self._gang(key)
        gang.pods[new.metadata.name] = new
        self._judge_by_members(gang)
        return key

    def workload_changed(self, old: Workload | None, new: Workload | None) -> None:
        obj = new or old
        assert obj is not None
        gang = self._gang((obj.metadata.namespace or "", obj.metadata.name))
        gang.workload = new
        owned = gang.owner is not None and gang.owner.adapter is self._records
        if owned or (new is not None and new.submitted()):
            self._record_changed(gang, new)
        elif (declared := gang.declared) is not None and (
            self._charged_by_record(gang, declared) or _elastic(declared)
        ):
            self._take_shape(gang, declared)
        self._drop_if_empty(gang)

    def _record_changed(self, gang: ManagedGang, record: Workload | None) -> None:
        """A Workload its creator submitted owns its gang (capabilities.OwnsItsRecord), unless
        an object of a managed kind does: that gang waits, its name taken (see
        ClusterState._bookkeeping)."""
        records, owner = self._records, gang.owner
        if owner is not None and owner.adapter is not records:
            return
        view = None if record is None else records.owner_of(record)
        shapes = [] if view is None else records.gangs(view)
        if view is None or not shapes:
            gang.owner = gang.shape = gang.declared = gang.finished = None
            self._set_queue(gang, None)
            return
        gang.owner = Owner(records, view)
        self._take_shape(gang, shapes[0])
        gang.finished = records.finished(view)
        self._set_queue(gang, records.queue_name(view))

    def podgroup_changed(self, old: kube.GangObject | None, new: kube.GangObject | None) -> None:
        obj = new or old
        assert obj is not None
        gang = self._gang((obj.metadata.namespace, obj.metadata.name))
        gang.podgroup = new
        self._drop_if_empty(gang)


def devices_as_recorded(shape: GangShape, record: Workload | None) -> GangShape:
    """`shape` with each pod set's claimed devices charged per pod as the gang's admission
    charged them (what its claims were counted then), its other requests as they are."""
    admission = record.status.admission if record is not None and record.status else None
    if admission is None:
        return shape
    recorded = {
        a.name: {r: parse_quantity(q) // max(a.count, 1) for r, q in a.resource_usage.items()}
        for a in admission.pod_set_assignments
    }
    pod_sets = []
    for ps in shape.pod_sets:
        was = recorded.get(ps.name)
        if was is None or not ps.devices:
            pod_sets.append(ps)
            continue
        requests = dict(ps.requests)
        devices = dict(ps.devices)
        for resource, amount in ps.devices.items():
            other = requests.get(resource, 0) - amount
            devices[resource] = max(0, was.get(resource, 0) - other)
            requests[resource] = other + devices[resource]
        pod_sets.append(replace(ps, requests=requests, devices=devices))
    return replace(shape, pod_sets=tuple(pod_sets))


def as_recorded(shape: GangShape, record: Workload | None) -> GangShape:
    """`shape` with each pod set's per-pod requests as the gang's Workload records them where
    they ask for more (the devices its claims were charged at admission)."""
    if record is None:
        return shape
    recorded = {ps.name: ps.request_milli() for ps in record.spec.pod_sets}
    pod_sets = []
    for ps in shape.pod_sets:
        requests = dict(ps.requests)
        devices = dict(ps.devices)
        for resource, amount in recorded.get(ps.name, {}).items():
            extra = amount - requests.get(resource, 0)
            if extra > 0:
                requests[resource] = amount
                devices[resource] = devices.get(resource, 0) + extra
        pod_sets.append(replace(ps, requests=requests, devices=devices))
    return replace(shape, pod_sets=tuple(pod_sets))


def _elastic(shape: GangShape) -> bool:
    return any(ps.min_count is not None for ps in shape.pod_sets)


def counted_shape(shape: GangShape, counts: Mapping[str, int]) -> GangShape:
    """`shape` with its elastic pod set at the count `counts` gives it (see
    `quota.snapshot.with_counts`), and as many pods at least to start as it then has."""
    pod_sets = with_counts(shape.pod_sets, counts)
    if pod_sets == shape.pod_sets:
        return shape
    pods = sum(ps.count for ps in pod_sets)
    return replace(shape, pod_sets=pod_sets, min_member=min(shape.min_member, pods))


def as_admitted(shape: GangShape, record: Workload | None) -> GangShape:
    """`shape` as the gang's admission took it, when the admission took fewer pods of its
    elastic pod set than it asks for. Held (not released yet): while the admitted count is
    one the shape allows. Released: by what it runs now: the admitted count, fewer (scaled
    down: that many), or more (a resize: the whole shape, which its admission does not
    cover)."""
    admission = record.status.admission if record is not None and record.status else None
    if admission is None or not _elastic(shape):
        return shape
    admitted = {a.name: a.count for a in admission.pod_set_assignments}
    elastic = next(ps for ps in shape.pod_sets if ps.min_count is not None)
    count = admitted.get(elastic.name)
    if count is None:
        return shape
    running = shape.running
    if running is None:
        least = elastic.min_count or 1
        return counted_shape(shape, admitted) if least <= count <= elastic.count else shape
    if running == count:
        return counted_shape(shape, admitted)
    if running < count:
        return counted_shape(shape, {**admitted, elastic.name: max(running, 1)})
    return shape
