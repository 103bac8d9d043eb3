"""Placement fit: pack a gang's pods onto concrete nodes, or say why it cannot be done.

Rule: node free capacity changes only through `take` and `give`, which keep the sorted indices
true; a gang placement either succeeds whole or leaves the nodes exactly as they were.

Resources are kept in one fixed order per cluster, scarce first: extended resources such as
nvidia.com/gpu, then cpu, then memory, then the rest. Nodes with the same labels and taints form
a class; each class keeps its nodes sorted by free capacity in that order. The packing rules:
- "best-fit" (default): the node whose free capacity, read scarce resource first, is smallest
  among those that fit. Large blocks of GPUs stay free; CPU-only pods land on nodes with the
  fewest free GPUs.
- "spread": the node with the most free capacity (the default kube-scheduler's preference).
- "first-fit": the first node by name that fits.
A pod set with a topology request is placed in domains by the index's domain choice
(domains.py), set when the index is built.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from controller.quota import kueue_tas
from controller.quota.domains import DomainAssigner, DomainChoice
from controller.quota.outcomes import NoFit, PlacementShortfall
from controller.quota.snapshot import (
    PROVISIONABLE_TAINT,
    PROVISIONABLE_TOLERATION,
    HostPort,
    Node,
    NodeAffinity,
    PodSet,
    Taint,
    Toleration,
    TopologyRequest,
    affinity_matches,
    node_requests,
)

Packing = Literal["best-fit", "spread", "first-fit"]
Vector = tuple[int, ...]
_BASIC = ("cpu", "memory")
_NOT_PACKED = frozenset({"pods", "ephemeral-storage"})
# The strategy of each domain choice (None: constrained.py's own best fit).
_ASSIGNERS: dict[DomainChoice, DomainAssigner | None] = {
    "best-fit": None,
    "kueue-tas": kueue_tas.assign,
}


def resource_order(nodes: Iterable[Node]) -> tuple[str, ...]:
    """Scarce first: extended resources (sorted), then cpu, memory, then the rest (sorted)."""
    names: set[str] = set()
    for node in nodes:
        names.update(node.allocatable)
    extended = sorted(n for n in names if n not in _BASIC and n not in _NOT_PACKED)
    basic = [n for n in _BASIC if n in names]
    rest = sorted(n for n in names if n in _NOT_PACKED)
    return (*extended, *basic, *rest)


def tolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> bool:
    """Whether every NoSchedule/NoExecute taint is tolerated (PreferNoSchedule is a hint)."""
    return all(
        taint.effect == "PreferNoSchedule" or any(t.tolerates(taint) for t in tolerations)
        for taint in taints
    )


@dataclass(frozen=True, slots=True)
class SetRules:
    """What placing one pod set depends on besides each pod's own fit: the pod set's name, its
    (anti-)affinity terms and spread constraints among the gang's pods (by pod set name), its
    host ports, its topology request and the levels of its flavor's topology."""

    name: str
    terms: tuple[tuple[str, tuple[str, ...], bool], ...] = ()  # (topology key, pod sets, anti)
    spread: tuple[tuple[str, int, tuple[str, ...]], ...] = ()  # (topology key, max skew, sets)
    ports: tuple[HostPort, ...] = ()
    topology: TopologyRequest | None = None
    levels: tuple[str, ...] = ()

    @property
    def trivial(self) -> bool:
        return not (self.terms or self.spread or self.ports or self.topology)


def set_rules(pod_set: PodSet, levels: tuple[str, ...] = ()) -> SetRules | None:
    """The rules of a pod set's placement beyond each pod's own fit (None: there are none)."""
    rules = SetRules(
        pod_set.name,
        terms=tuple((t.topology_key, t.pod_sets, t.anti) for t in pod_set.pod_affinity),
        spread=tuple((c.topology_key, c.max_skew, c.pod_sets) for c in pod_set.spread),
        ports=pod_set.host_ports,
        topology=pod_set.topology,
        levels=levels,
    )
    return None if rules.trivial else rules


@dataclass(frozen=True, slots=True)
class PodShape:
    """One pod of a pod set as the index sees it: a request vector, where it may go (node
    selector, tolerations, required node affinity), and the rules of its pod set's placement
    among the gang's pods (None: none)."""

    request: Vector
    selector: tuple[tuple[str, str], ...]
    tolerations: tuple[Toleration, ...]
    unknown: tuple[str, ...]  # requested resources no node offers
    affinity: NodeAffinity = ()
    rules: SetRules | None = None


@dataclass(frozen=True, slots=True)
class PlaceFailure:
    pod_set: int
    shape: PodShape
    why: PlacementShortfall
    # What the gang's pods placed before the failure took, by node (node index, request sum):
    # room a node had that they fill is no room for the pod that failed.
    held: tuple[tuple[int, Vector], ...] = ()


def held_by(
    plan: Mapping[tuple[int, int], int], shapes: Sequence[tuple[int, PodShape, int]]
) -> tuple[tuple[int, Vector], ...]:
    """What the pods of `plan` ((pod set index, node index) -> pods) take on each node."""
    by_set = {ps: shape.request for ps, shape, _ in shapes}
    out: dict[int, list[int]] = {}
    for (ps, node), n in plan.items():
        total = out.setdefault(node, [0] * len(by_set[ps]))
        for k, q in enumerate(by_set[ps]):
            total[k] += q * n
    return tuple((node, tuple(total)) for node, total in sorted(out.items()))


@dataclass(slots=True)
class _NodeClass:
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    # (free vector, node index), ascending.
    entries: list[tuple[Vector, int]]


class NodeIndex:
    """Free capacity of every node, indexed for fast best-fit search; `topology`: how a pod
    set with a topology request is put into domains."""

    def __init__(
        self,
        nodes: Iterable[Node],
        order: Sequence[str] | None = None,
        *,
        topology: DomainChoice = "best-fit",
    ) -> None:
        self.topology: DomainChoice = topology
        self._assign = _ASSIGNERS[topology]
        ordered = sorted(nodes, key=lambda n: n.name)
        self.order: tuple[str, ...] = tuple(order) if order else resource_order(ordered)
        self.names: list[str] = [n.name for n in ordered]
        self.allocatable: list[Vector] = [self.vector(n.allocatable) for n in ordered]
        self.free: list[Vector] = [
            tuple(
                a - u for a, u in zip(self.vector(n.allocatable), self.vector(n.used), strict=True)
            )
            for n in ordered
        ]
        self.by_name = {name: i for i, name in enumerate(self.names)}
        # Host ports bound on each node by pods outside the admitted gangs, and by the admitted
        # gangs' pods (port -> pods binding it).
        self.ports: list[tuple[HostPort, ...]] = [tuple(n.ports) for n in ordered]
        self.gang_ports: list[dict[HostPort, int]] = [{} for _ in ordered]
        self._nodes = ordered
        self.capacity: dict[str, int] = {r: 0 for r in self.order}
        classes: dict[tuple[object, ...], _NodeClass] = {}
        self.class_of: list[_NodeClass] = []
        for i, node in enumerate(ordered):
            key = (tuple(sorted(node.labels.items())), tuple(sorted(node.taints, key=repr)))
            cls = classes.setdefault(key, _NodeClass(dict(node.labels), tuple(node.taints), []))
            cls.entries.append((self.free[i], i))
            self.class_of.append(cls)
            for r, amount in node.allocatable.items():
                self.capacity[r] = self.capacity.get(r, 0) + amount
        self.classes = list(classes.values())
        for cls in self.classes:
            cls.entries.sort()
        self._eligible: dict[tuple[object, ...], tuple[_NodeClass, ...]] = {}
        # Allocatable capacity never changes in an index: what could never fit, never will.
        self._never_cache: dict[tuple[PodShape, int], PlacementShortfall | None] = {}
        self._never_rules: dict[
            tuple[tuple[int, PodShape, int], ...], tuple[int, PlacementShortfall] | None
        ] = {}
        self._empty: NodeIndex | None = None
        self.reserved: set[int] = set()
        # Nodes a pool has still to add: a gang goes there only when nodes that exist cannot
        # take it.
        self.to_be_made = tuple(i for i, n in enumerate(ordered) if PROVISIONABLE_TAINT in n.taints)

    def vector(self, amounts: Mapping[str, int]) -> Vector:
        return tuple(amounts.get(r, 0) for r in self.order)

    def shape(self, pod_set: PodSet, levels: tuple[str, ...] = ()) -> PodShape:
        """A pod of `pod_set`; `levels`: its flavor's topology."""
        requests = dict(node_requests(pod_set))
        # Claimed devices of the classes whose devices nodes carry (the others: unchecked).
        requests.update((r, a) for r, a in pod_set.claimed.items() if r in self.capacity)
        unknown = tuple(sorted(r for r, v in requests.items() if v > 0 and r not in self.capacity))
        return PodShape(
            self.vector(requests),
            tuple(sorted(pod_set.node_selector.items())),
            tuple(pod_set.tolerations),
            unknown,
            pod_set.node_affinity,
            set_rules(pod_set, levels),
        )

    def eligible(self, shape: PodShape) -> tuple[_NodeClass, ...]:
        key = (shape.selector, shape.tolerations, shape.affinity)
        found = self._eligible.get(key)
        if found is None:
            found = tuple(
                cls
                for cls in self.classes
                if all(cls.labels.get(k) == v for k, v in shape.selector)
                and tolerated(cls.taints, shape.tolerations)
                and affinity_matches(shape.affinity, cls.labels)
            )
            self._eligible[key] = found
        return found

    # -- changing free capacity -------------------------------------------------------------

    def _set_free(self, i: int, new: Vector) -> None:
        cls = self.class_of[i]
        if i not in self.reserved:
            entries = cls.entries
            del entries[bisect.bisect_left(entries, (self.free[i], i))]
            bisect.insort(entries, (new, i))
        self.free[i] = new

    def take(self, i: int, request: Vector, count: int = 1) -> None:
        self._set_free(i, tuple(f - count * q for f, q in zip(self.free[i], request, strict=True)))

    def give(self, i: int, request: Vector, count: int = 1) -> None:
        self._set_free(i, tuple(f + count * q for f, q in zip(self.free[i], request, strict=True)))

    def bind_ports(self, i: int, ports: Iterable[HostPort], count: int) -> None:
        """`count` more (or, negative, fewer) admitted pods binding `ports` on node `i`."""
        held = self.gang_ports[i]
        for port in ports:
            left = held.get(port, 0) + count
            if left > 0:
                held[port] = left
            else:
                held.pop(port, None)

    def bound_ports(self, i: int) -> list[HostPort]:
        """Every host port bound on node `i`: by pods outside the gangs and by admitted ones."""
        return [*self.ports[i], *self.gang_ports[i]]

    def reserve(self, i: int) -> None:
        """Hide a node from every search until `unreserve`."""
        if i not in self.reserved:
            entries = self.class_of[i].entries
            del entries[bisect.bisect_left(entries, (self.free[i], i))]
            self.reserved.add(i)

    def unreserve(self, i: int) -> None:
        """Show a reserved node to searches again."""
        if i in self.reserved:
            bisect.insort(self.class_of[i].entries, (self.free[i], i))
            self.reserved.discard(i)

    def unreserve_all(self) -> None:
        for i in sorted(self.reserved):
            bisect.insort(self.class_of[i].entries, (self.free[i], i))
        self.reserved.clear()

    # -- searching ----------------------------------------------------------------------------

    def find(self, shape: PodShape, packing: Packing) -> int | None:
        """The node one pod of `shape` goes to under `packing`, or None."""
        request = shape.request
        best: tuple[Vector, int] | None = None
        for cls in self.eligible(shape):
            entries = cls.entries
            if packing == "spread":
                for k in range(len(entries) - 1, -1, -1):
                    free, i = entries[k]
                    if free[0] < request[0]:
                        break
                    if _fits(free, request):
                        if best is None or (free, -i) > (best[0], -best[1]):
                            best = (free, i)
                        break
            else:
                start = bisect.bisect_left(entries, (request, -1))
                if (
                    packing == "best-fit"
                    and best is not None
                    and start < len(entries)
                    and entries[start] >= best
                ):
                    continue  # (sorted: nothing in this class fits better than `best`)
                for k in range(start, len(entries)):
                    free, i = entries[k]
                    if _fits(free, request):
                        if packing == "first-fit":
                            if best is None or i < best[1]:
                                best = (free, i)
                            continue
                        if best is None or (free, i) < best:
                            best = (free, i)
                        break
        return None if best is None else best[1]

    def largest_free(self, shape: PodShape) -> Vector | None:
        """The free vector of the emptiest eligible node (scarce resource first), or None."""
        tops = [cls.entries[-1][0] for cls in self.eligible(shape) if cls.entries]
        return max(tops) if tops else None

    def place(
        self, shapes: Sequence[tuple[int, PodShape, int]], packing: Packing
    ) -> tuple[list[tuple[int, int, int]], PlaceFailure | None]:
        """Place every pod of every (pod set index, shape, count), all or nothing.

        Returns (plan, None) with plan = [(pod set index, node index, count)] and the capacity
        taken, or ([], failure) with nothing taken. Bigger pods are placed first. A gang whose
        pods constrain each other, or ask for a topology, is placed by `constrained`.
        """
        hidden = [i for i in self.to_be_made if i not in self.reserved]
        if hidden and any(PROVISIONABLE_TOLERATION in s.tolerations for _, s, _ in shapes):
            for i in hidden:
                self.reserve(i)
            try:
                plan, failure = self._place(shapes, packing)
            finally:
                for i in hidden:
                    self.unreserve(i)
            if failure is None:
                return plan, None
        return self._place(shapes, packing)

    def _place(
        self, shapes: Sequence[tuple[int, PodShape, int]], packing: Packing
    ) -> tuple[list[tuple[int, int, int]], PlaceFailure | None]:
        if any(shape.rules is not None for _, shape, _ in shapes):
            from controller.quota.constrained import GangPlacer

            return GangPlacer(self, shapes, packing, self._assign).place()
        plan: dict[tuple[int, int], int] = {}
        for ps, shape, count in sorted(shapes, key=lambda s: (s[1].request, -s[0]), reverse=True):
            for placed in range(count):
                node = self.find(shape, packing)
                if node is None:
                    self._undo(plan, shapes)
                    why = self.explain(shape, count, placed)
                    return [], PlaceFailure(ps, shape, why, held_by(plan, shapes))
                self.take(node, shape.request)
                plan[(ps, node)] = plan.get((ps, node), 0) + 1
        return [(ps, node, n) for (ps, node), n in sorted(plan.items())], None

    def _undo(
        self, plan: Mapping[tuple[int, int], int], shapes: Sequence[tuple[int, PodShape, int]]
    ) -> None:
        by_set = {ps: shape for ps, shape, _ in shapes}
        for (ps, node), n in plan.items():
            self.give(node, by_set[ps].request, n)

    def release(self, plan: Iterable[tuple[Vector, int, int]]) -> None:
        """Give back (request, node index, count) triples."""
        for request, node, count in plan:
            self.give(node, request, count)

    def never_fits(
        self, shapes: Sequence[tuple[int, PodShape, int]]
    ) -> tuple[int, PlacementShortfall] | None:
        """A pod set the nodes could not host even if all of them were empty, and why; None
        when each pod set alone would fit on the empty cluster."""
        for ps, shape, count in shapes:
            key = (shape, count)
            if key not in self._never_cache:
                self._never_cache[key] = self._never(shape, count)
            why = self._never_cache[key]
            if why is not None:
                return ps, why
        if any(shape.rules is not None for _, shape, _ in shapes):
            return self._never_together(shapes)
        return None

    def _never_together(
        self, shapes: Sequence[tuple[int, PodShape, int]]
    ) -> tuple[int, PlacementShortfall] | None:
        """A pod set that could not be placed, its rules kept, even on empty nodes."""
        key = tuple(shapes)
        if key not in self._never_rules:
            empty = self.pristine()
            plan, failure = empty.place(shapes, "best-fit")
            if failure is None:
                empty.release((empty._shape_request(shapes, ps), node, n) for ps, node, n in plan)
                self._never_rules[key] = None
            elif failure.why.kind is NoFit.CONSTRAINED:
                why = replace(failure.why, kind=NoFit.NEVER_CONSTRAINED)
                self._never_rules[key] = (failure.pod_set, why)
            else:  # (pod sets that do not fit together on empty nodes: as without rules)
                self._never_rules[key] = None
        return self._never_rules[key]

    @staticmethod
    def _shape_request(shapes: Sequence[tuple[int, PodShape, int]], ps: int) -> Vector:
        return next(shape.request for i, shape, _ in shapes if i == ps)

    def pristine(self) -> NodeIndex:
        """The same nodes with nothing running on them (built once)."""
        if self._empty is None:
            self._empty = NodeIndex(
                [replace(n, used={}, ports=()) for n in self._nodes],
                order=self.order,
                topology=self.topology,
            )
        return self._empty

    def _shortfall(self, shape: PodShape, count: int) -> tuple[int, PlacementShortfall]:
        """The index of the pod's scarcest requested resource, and a shortfall naming it."""
        primary = next((k for k, q in enumerate(shape.request) if q > 0), 0)
        name = self.order[primary] if self.order else "resources"
        need = shape.request[primary] if self.order else 0
        return primary, PlacementShortfall(NoFit.UNKNOWN_RESOURCE, count, name, need)

    def _never(self, shape: PodShape, count: int) -> PlacementShortfall | None:
        primary, short = self._shortfall(shape, count)
        if shape.unknown:
            return replace(short, resources=shape.unknown)
        eligible = {id(cls) for cls in self.eligible(shape)}
        if not eligible:
            return replace(short, kind=NoFit.NO_MATCHING_NODE)
        hosts = [i for i, cls in enumerate(self.class_of) if id(cls) in eligible]
        request = shape.request
        per_node = [
            min(
                (a // q for a, q in zip(self.allocatable[i], request, strict=True) if q > 0),
                default=count,
            )
            for i in hosts
        ]
        if max(per_node) == 0:
            largest = max(self.allocatable[i][primary] for i in hosts)
            return replace(
                short, kind=NoFit.NO_NODE_LARGE_ENOUGH, largest_free=largest, has_selector=True
            )
        if sum(per_node) < count:
            return replace(short, kind=NoFit.TOO_FEW_NODES, placed=sum(per_node))
        return None

    def explain(self, shape: PodShape, count: int, placed: int) -> PlacementShortfall:
        """Why `count` pods of `shape` do not fit when `placed` of them did."""
        primary, short = self._shortfall(shape, count)
        if shape.unknown:
            return replace(short, resources=shape.unknown)
        if not self.eligible(shape):
            return replace(short, kind=NoFit.NO_MATCHING_NODE)
        top = self.largest_free(shape)
        if top is None:
            return replace(short, kind=NoFit.ALL_RESERVED)
        if not _fits(top, shape.request) and top[primary] < shape.request[primary]:
            return replace(
                short,
                kind=NoFit.TOO_SMALL,
                largest_free=top[primary],
                has_selector=bool(shape.selector),
            )
        if placed == 0:
            missing = [self.order[k] for k, q in enumerate(shape.request) if q > 0 and top[k] < q]
            return replace(
                short, kind=NoFit.NOT_ENOUGH_FREE, resources=tuple(missing) or ("resources",)
            )
        return replace(short, kind=NoFit.ONLY_SOME_FIT, placed=placed)


def _fits(free: Vector, request: Vector) -> bool:
    return all(f >= q for f, q in zip(free, request, strict=True))
