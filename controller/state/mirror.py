"""The long-lived decision engine, kept in step with the gangs' records.

Rule: the engine changes here and nowhere else. `follow` brings it to what a gang's records
say, `decided` takes in its own cycle's decisions, the `take_*` methods give it the cluster's
shape; each gang's `Member` is set in one place, and the engine hears only what changed. The
simulator feeds the same engine the same calls (controller/simulate/loop.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from controller import quota
from controller.api.times import format_time, parse_time
from controller.quota import Pending, PendingCause
from controller.quota.engine import Engine
from controller.quota.outcomes import Decisions
from controller.quota.snapshot import HostPort
from controller.state import provisioning
from controller.state.gangs import GangKey, ManagedGang, id_of, key_of
from controller.state.inventory import Inventory
from controller.workloads.capabilities import shrinks_in_place


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
    # Admitted: all its pods succeeded, though its owner does not say it finished yet.
    done: bool = False


@dataclass(frozen=True)
class Wanted:
    """What the engine should hold for a gang, and when to look at it again (None: on change)."""

    member: Member
    wake_at: float | None = None


def core_gang(gang: ManagedGang, queue: str) -> quota.Gang:
    assert gang.shape is not None and gang.workload is not None
    return quota.Gang(
        name=gang.id,
        queue=queue,
        pod_sets=gang.shape.pod_sets,
        priority=gang.workload.spec.priority,
        created=gang.created(),
        max_runtime=gang.max_runtime(),
        provision=not provisioning.rejected(gang.workload),
    )


def wanted(gang: ManagedGang, inventory: Inventory, now: float, *, resized: bool) -> Wanted:
    """What the engine should hold for an active gang, from its records: admitted where its
    record says; waiting while it cannot take part (evicted this pass for a new size, no
    LocalQueue, a namespace its ClusterQueue does not admit, an incomplete group, a requeue
    backoff); else pending in its ClusterQueue."""
    assert gang.shape is not None
    local = inventory.local_queues.get((gang.namespace, gang.queue or ""))
    if resized:
        # Evicted in this pass: it charges nothing until it is requeued.
        return Wanted(Member("waiting", local))
    if gang.reserved:
        queue = gang.admitted_in() or local or ""
        admitted_at = gang.admitted_at() or now
        member = Member(
            "admitted",
            queue,
            _shrinkable(gang, core_gang(gang, queue)),
            admitted_at,
            gang.placement(),
            flavors=gang.admitted_flavors(),
            done=gang.work_done(),
        )
        return Wanted(member)
    if local is None:
        why = Pending(PendingCause.NO_LOCAL_QUEUE, queue=gang.queue, namespace=gang.namespace)
        return Wanted(Member("waiting", None, why=why))
    cq = inventory.cluster_queues.get(local)
    labels = inventory.namespace_labels.get(gang.namespace, {})
    if cq is not None and not cq.spec.selects_namespace(labels):
        why = Pending(
            PendingCause.NAMESPACE_NOT_SELECTED,
            queue=local,
            namespace=gang.namespace,
            detail=str(cq.spec.namespace_selector),
        )
        return Wanted(Member("waiting", local, why=why))
    problem = gang.incomplete()
    if problem is not None:
        why = Pending(PendingCause.INCOMPLETE, detail=problem)
        return Wanted(Member("waiting", local, why=why))
    if gang.devices is not None:
        why = Pending(PendingCause.DEVICES, detail=gang.devices)
        return Wanted(Member("waiting", local, why=why))
    requeue_at = gang.requeue_at()
    if requeue_at > now:
        why = Pending(PendingCause.REQUEUED, until=requeue_at, eviction=gang.evicted_because())
        return Wanted(Member("waiting", local, why=why), wake_at=requeue_at)
    return Wanted(Member("pending", local, core_gang(gang, local)))


def _but_minimum(gang: quota.Gang | None) -> quota.Gang | None:
    """`gang` with no elastic minimum: what its admission holds, whatever it may shrink to."""
    if gang is None or all(ps.min_count is None for ps in gang.pod_sets):
        return gang
    return replace(gang, pod_sets=tuple(replace(ps, min_count=None) for ps in gang.pod_sets))


def _shrinkable(gang: ManagedGang, core: quota.Gang) -> quota.Gang:
    """An admitted gang as the engine may shrink it: its elastic pod set keeps its minimum only
    when its kind runs on with fewer pods (`capabilities.ShrinksInPlace`); any other is
    evicted whole, never shrunk."""
    owner = gang.owner
    if (
        owner is not None
        and shrinks_in_place(owner.adapter)
        and owner.adapter.shrinks_in_place(owner.obj)
    ):
        return core
    rigid = _but_minimum(core)
    assert rigid is not None
    return rigid


def _recorded_flavors(flavors: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """An admission's flavors as its Workload records them (see ManagedGang.admitted_flavors)."""
    return {pod_set: dict(chosen) for pod_set, chosen in flavors.items() if chosen}


def _recorded_placement(
    admission: quota.Admission, gang: quota.Gang
) -> tuple[quota.PodPlacement, ...]:
    """An admission's placement in the order its Workload records it: by pod set, in the
    gang's order (see objects.admitted_status and ManagedGang.placement)."""
    return tuple(p for ps in gang.pod_sets for p in admission.placement if p.pod_set == ps.name)


class EngineMirror:
    """The engine and, for every gang it knows, the `Member` it holds."""

    def __init__(self, core: quota.Config) -> None:
        self._core = core
        self.engine = Engine((), (), core, require_flavors=True)
        self.members: dict[GangKey, Member] = {}
        # Admitted gangs planned (in part) on nodes a pool has still to add.
        self.waiting_for_nodes: set[GangKey] = set()
        self._specs: tuple[tuple[quota.QueueSpec, ...], tuple[quota.CohortSpec, ...]] = ((), ())
        self._flavor_specs: tuple[quota.FlavorSpec, ...] = ()

    def reset(self) -> None:
        """Forget everything: the next `follow`s build it again from the records."""
        self.engine = Engine((), (), self._core, require_flavors=True)
        self.members.clear()
        self.waiting_for_nodes.clear()
        self._specs, self._flavor_specs = ((), ()), ()

    # -- reading ----------------------------------------------------------------------------

    def admitted(self, key: GangKey) -> bool:
        member = self.members.get(key)
        return member is not None and member.state == "admitted"

    def reason(self, gang: ManagedGang) -> Pending | None:
        """Why the engine's last cycle left a pending gang waiting (None: not judged yet)."""
        if not self.engine.judged(gang.id):
            return None
        return self.engine.reason(gang.id)

    # -- the cluster's shape ----------------------------------------------------------------

    def take_queues(
        self, queues: tuple[quota.QueueSpec, ...], cohorts: tuple[quota.CohortSpec, ...]
    ) -> bool:
        """ClusterQueues and Cohorts as they are now; whether they changed."""
        if (queues, cohorts) == self._specs:
            return False
        self.engine.set_queues(queues, cohorts)
        self._specs = (queues, cohorts)
        return True

    def take_flavors(self, flavors: tuple[quota.FlavorSpec, ...]) -> None:
        if flavors != self._flavor_specs:
            self.engine.set_flavors(flavors)
            self._flavor_specs = flavors

    def take_nodes(self, nodes: list[quota.Node]) -> None:
        self.engine.set_nodes(nodes)

    def take_node_used(
        self, name: str, used: Mapping[str, int], ports: tuple[HostPort, ...]
    ) -> None:
        """What pods outside admitted gangs use, and the host ports they bind, on a node."""
        self.engine.set_node_used(name, used)
        self.engine.set_node_ports(name, ports)

    # -- the gangs ----------------------------------------------------------------------------

    def follow(self, key: GangKey, new: Member | None, ended_at: float | None = None) -> bool:
        """Bring the engine to `new` for the gang (None: it knows the gang no more); whether
        the gang's hold on its nodes changed (admitted, or admitted no more). `ended_at`: when
        an admitted gang that leaves finished its work (its queue's runtimes learn from it)."""
        old = self.members.get(key)
        if old == new:
            return False
        engine, gang_id = self.engine, id_of(key)
        touched = False
        if old is not None and old.state == "admitted":
            if (
                new is not None
                and new.state == "admitted"
                and (new.queue, new.flavors) == (old.queue, old.flavors)
                and _but_minimum(new.gang) == _but_minimum(old.gang)
            ):
                if new.gang != old.gang and new.gang is not None:
                    engine.regard(gang_id, new.gang)  # (shrunk: its minimum is its count now)
                engine.move(gang_id, new.placement)  # (its pods were bound elsewhere)
                engine.work_done(gang_id, new.done)
                self._set(key, new)
                return False
            engine.finish(gang_id, at=ended_at)
            touched = True
        elif old is not None and old.state == "pending":
            engine.remove_pending(gang_id)
        self._set(key, new)
        if new is not None and new.gang is not None:
            if new.state == "pending":
                engine.add_pending(new.gang)
            elif new.state == "admitted":
                engine.add_admitted(
                    quota.AdmittedGang(new.gang, new.admitted_at, new.placement, new.flavors)
                )
                engine.work_done(gang_id, new.done)
                touched = True
        return touched

    def decide(self, now: float) -> tuple[Decisions, list[GangKey]]:
        """One engine cycle, its decisions taken in as the records will say them (so their
        echo changes nothing); the decisions, and the gangs whose hold on nodes changed."""
        decisions = self.engine.cycle(now)
        touched: list[GangKey] = []
        for eviction in decisions.evictions:
            key = key_of(eviction.gang)
            touched.append(key)
            self._set(key, None)
        for shrink in decisions.shrinks:
            key = key_of(shrink.gang)
            member = self.members.get(key)
            if member is None:  # (evicted after it was shrunk, in the same cycle)
                continue
            assert member.gang is not None
            counts = {shrink.pod_set: shrink.count}
            gang = quota.admitted_as(member.gang, counts)
            placement = self.engine.placement(shrink.gang)
            self._set(key, replace(member, gang=gang, placement=placement))
            touched.append(key)
        recorded_at = parse_time(format_time(now)) or now
        for admission in decisions.admissions:
            key = key_of(admission.gang)
            pending = self.members[key]
            assert pending.gang is not None
            self._set(
                key,
                Member(
                    "admitted",
                    pending.queue,
                    quota.admitted_as(pending.gang, admission.counts),
                    recorded_at,
                    _recorded_placement(admission, pending.gang),
                    flavors=_recorded_flavors(admission.flavors),
                ),
            )
            touched.append(key)
        return decisions, touched

    def _set(self, key: GangKey, member: Member | None) -> None:
        if member is None:
            self.members.pop(key, None)
        else:
            self.members[key] = member
        if member is not None and provisioning.waits_for_nodes(member.placement):
            self.waiting_for_nodes.add(key)
        else:
            self.waiting_for_nodes.discard(key)

    def held_new_nodes(self) -> set[str]:
        """The nodes still to be added that admitted gangs are planned on."""
        return {
            p.node
            for key in self.waiting_for_nodes
            for p in self.members[key].placement
            if provisioning.is_new(p.node)
        }

    def settle(self, now: float) -> list[quota.Admission]:
        """Gangs planned on nodes still to be added that now fit whole on real nodes, moved
        there: each as an admission onto its new placement (its quota and flavors as before)."""
        settled: list[quota.Admission] = []
        recorded_at = parse_time(format_time(now)) or now
        for key in sorted(self.waiting_for_nodes):
            member = self.members[key]
            assert member.gang is not None and member.queue is not None
            placement = self.engine.place_on_existing(id_of(key), recorded_at)
            if placement is None:
                continue
            admission = quota.Admission(
                member.gang.name, member.queue, placement, flavors=member.flavors
            )
            self._set(
                key,
                Member(
                    "admitted",
                    member.queue,
                    member.gang,
                    recorded_at,
                    _recorded_placement(admission, member.gang),
                    flavors=member.flavors,
                ),
            )
            settled.append(admission)
        return settled
