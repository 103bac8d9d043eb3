"""Placement of a gang whose pods constrain each other or must stay together in the topology.

Rule: what the scheduler enforces on a gang's own pods is checked pod by pod, against the pods
of the gang already placed: required (anti-)affinity among them on any topology key, spread with
DoNotSchedule, host ports (against the node's other pods too); a pod set with a topology
request is placed inside one domain (and each slice inside one domain of its level), chosen
before its pods. All or nothing: a failure leaves the index as it was.

Domains are chosen best-fit: among the domains of the requested level that can host the whole
pod set on their free capacity, the one with the least room (ties by name), so that large
domains stay whole for large gangs. A preferred request that no domain of its level can host
goes one level up, and at the top places its pods anywhere. A placer given another strategy
(`assign`, domains.py) asks it instead where the pods go, and puts them there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from controller.quota.domains import DomainAssigner, NodeRoom
from controller.quota.outcomes import NoFit, PlacementShortfall
from controller.quota.placement import (
    NodeIndex,
    Packing,
    PlaceFailure,
    PodShape,
    SetRules,
    Vector,
    held_by,
)
from controller.quota.snapshot import HostPort, TopologyRequest

Plan = list[tuple[int, int, int]]  # (pod set index, node index, pod count)


def victim_domains(
    index: NodeIndex, shapes: Sequence[tuple[int, PodShape, int]]
) -> list[set[int]] | None:
    """For a gang whose first pod set with a required topology level asks for one domain: the
    nodes of each domain of that level that could host that pod set were it empty, roomiest
    first (victims are then sought within one domain at a time); None for any other gang."""
    for ps, shape, count in shapes:
        request = shape.rules.topology if shape.rules is not None else None
        if request is None or request.level is None or not request.required:
            continue
        empty = index.pristine()
        rooms = GangPlacer(empty, [(ps, shape, count)], "best-fit")._rooms(
            shape, request.level, request
        )
        fitting = sorted((-room, key) for key, room in rooms.items() if room >= count)
        return [
            {
                node
                for node in range(len(index.names))
                if all(_label(index, node, k) == v for k, v in key)
            }
            for _, key in fitting
        ]
    return None


def _label(index: NodeIndex, node: int, key: str) -> str | None:
    return index.class_of[node].labels.get(key)


def fit_count(free: Vector, request: Vector) -> int:
    """How many pods of `request` fit in `free` (a large number when it asks for nothing)."""
    counts = [f // q for f, q in zip(free, request, strict=True) if q > 0]
    return max(0, min(counts)) if counts else 1 << 30


@dataclass(slots=True)
class _Blocked:
    """The first constraint that turned away a node where a pod would otherwise fit."""

    why: str = ""

    def note(self, why: str) -> None:
        if not self.why:
            self.why = why


@dataclass(slots=True)
class GangPlacer:
    """One placement attempt of a gang on `index`: what is placed so far, and by whom."""

    index: NodeIndex
    shapes: Sequence[tuple[int, PodShape, int]]
    packing: Packing
    # Where a pod set with a topology request goes (None: best fit, as this module says).
    assign: DomainAssigner | None = None
    plan: dict[tuple[int, int], int] = field(default_factory=dict)
    # (topology key, pod set index) -> domain -> pods of that set placed there
    counts: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    # node -> host ports the gang's pods placed there bind
    ports: dict[int, list[HostPort]] = field(default_factory=dict)
    set_of: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for ps, shape, _ in self.shapes:
            if shape.rules is not None:
                self.set_of[shape.rules.name] = ps

    # -- the whole gang -------------------------------------------------------------------------

    def place(self) -> tuple[Plan, PlaceFailure | None]:
        for ps, shape, count in self._order():
            failure = self._place_set(ps, shape, count)
            if failure is not None:
                failure = replace(failure, held=held_by(self.plan, self.shapes))
                self.undo()
                return [], failure
        return [(ps, node, n) for (ps, node), n in sorted(self.plan.items())], None

    def _order(self) -> list[tuple[int, PodShape, int]]:
        """Bigger pods first (as the unconstrained packing); a pod set whose affinity needs
        another's pods after that one."""
        ordered = sorted(self.shapes, key=lambda s: (s[1].request, -s[0]), reverse=True)
        placed: list[tuple[int, PodShape, int]] = []
        waiting = list(ordered)
        while waiting:
            ready = next(
                (
                    s
                    for s in waiting
                    if all(t in {p[0] for p in placed} or t == s[0] for t in self._needs(s[1]))
                ),
                waiting[0],
            )
            waiting.remove(ready)
            placed.append(ready)
        return placed

    def _needs(self, shape: PodShape) -> set[int]:
        rules = shape.rules
        if rules is None:
            return set()
        return {
            self.set_of[name]
            for _, names, anti in rules.terms
            if not anti
            for name in names
            if name in self.set_of
        }

    def undo(self) -> None:
        by_set = {ps: shape for ps, shape, _ in self.shapes}
        for (ps, node), n in self.plan.items():
            self.index.give(node, by_set[ps].request, n)
        self.plan.clear()
        self.counts.clear()
        self.ports.clear()

    # -- one pod set ------------------------------------------------------------------------------

    def _place_set(self, ps: int, shape: PodShape, count: int) -> PlaceFailure | None:
        rules = shape.rules
        request = rules.topology if rules is not None else None
        if request is None or (request.level is None and not request.slice_size):
            blocked = _Blocked()
            placed = self._pods(ps, shape, count, None, blocked)
            if placed == count:
                return None
            return PlaceFailure(ps, shape, self._why(shape, count, placed, blocked.why))
        assert rules is not None
        if self.assign is not None:
            return self._place_assigned(ps, shape, count, rules, request, self.assign)
        return self._place_in_domains(ps, shape, count, rules, request)

    def _place_in_domains(
        self, ps: int, shape: PodShape, count: int, rules: SetRules, request: TopologyRequest
    ) -> PlaceFailure | None:
        """Place the pod set in one domain of its level (or, preferred, of a coarser one, or
        anywhere), best fit first."""
        for level in self._levels(rules, request):
            for domain in self._domains(shape, level, count, request):
                snapshot = dict(self.plan)
                if self._fill(ps, shape, count, domain, request):
                    return None
                self._rewind(snapshot, shape)
            if request.required:
                break
        if not request.required:
            blocked = _Blocked()
            if self._fill(ps, shape, count, None, request, blocked):
                return None
        level = request.level or request.slice_level or ""
        largest = self._largest_domain(shape, level, request) if level else 0
        return self._topology_failure(ps, shape, count, request, largest)

    def _topology_failure(
        self, ps: int, shape: PodShape, count: int, request: TopologyRequest, fitted: int
    ) -> PlaceFailure:
        """The pod set's topology request lets only `fitted` of its pods be placed."""
        level = request.level or request.slice_level or ""
        what = (
            f"in one {level}"
            if request.level
            else f"in slices of {request.slice_size} pods, each in one {level}"
        )
        why = f"its topology request ({what})"
        return PlaceFailure(ps, shape, self._why(shape, count, min(fitted, count - 1), why))

    def _place_assigned(
        self,
        ps: int,
        shape: PodShape,
        count: int,
        rules: SetRules,
        request: TopologyRequest,
        assign: DomainAssigner,
    ) -> PlaceFailure | None:
        """Put the pod set where `assign` says, each pod checked against the set's other
        rules."""
        index, cap = self.index, self._per_node_cap(shape)
        rooms = [
            NodeRoom(
                node,
                index.names[node],
                index.class_of[node].labels,
                min(fit_count(index.free[node], shape.request), cap),
            )
            for node in self._eligible_nodes(shape)
        ]
        plan = assign(rooms, count, request, rules.levels)
        if not plan.pods:
            return self._topology_failure(ps, shape, count, request, plan.fitted)
        placed = 0
        for node, pods in sorted(plan.pods.items()):
            for _ in range(pods):
                why = self._refused(ps, shape, node)
                if why is not None:
                    return PlaceFailure(ps, shape, self._why(shape, count, placed, why))
                self._put(ps, shape, node)
                placed += 1
        return None

    def _levels(self, rules: SetRules, request: TopologyRequest) -> list[str | None]:
        """The levels to try: the requested one; preferred, then each coarser one of the
        flavor's topology."""
        if request.level is None:
            return [None]
        if request.required or request.level not in rules.levels:
            return [request.level]
        at = rules.levels.index(request.level)
        return list(reversed(rules.levels[: at + 1]))

    def _domains(
        self, shape: PodShape, level: str | None, count: int, request: TopologyRequest
    ) -> list[tuple[tuple[str, str], ...] | None]:
        """The domains of `level` whose free capacity may host `count` pods of `shape`, best
        fit first (least room, then name), each named by the labels that pick its nodes."""
        if level is None:
            return [None]
        rooms = self._rooms(shape, level, request)
        return [key for room, key in sorted((r, k) for k, r in rooms.items() if r >= count)]

    def _rooms(
        self, shape: PodShape, level: str, request: TopologyRequest
    ) -> dict[tuple[tuple[str, str], ...], int]:
        """Each domain of `level` (named by its label and those of the coarser levels) and how
        many pods of `shape` its free capacity takes (in whole slices, with a slice request)."""
        index = self.index
        levels = self._path_to(shape, level)
        per_slice: dict[tuple[tuple[str, str], ...], dict[str, int]] = {}
        for node in self._eligible_nodes(shape):
            key = tuple((lv, v) for lv in levels if (v := _label(index, node, lv)) is not None)
            if len(key) != len(levels):
                continue  # a node without the level's label is in no domain of it
            room = min(fit_count(index.free[node], shape.request), self._per_node_cap(shape))
            inner = (
                ""
                if not request.slice_size
                else (_label(index, node, request.slice_level or level) or "")
            )
            bucket = per_slice.setdefault(key, {})
            bucket[inner] = bucket.get(inner, 0) + room
        if not request.slice_size:
            return {key: sum(b.values()) for key, b in per_slice.items()}
        size = request.slice_size
        return {key: sum(r // size for r in b.values()) * size for key, b in per_slice.items()}

    def _largest_domain(self, shape: PodShape, level: str, request: TopologyRequest) -> int:
        rooms = self._rooms(shape, level, request)
        return max(rooms.values(), default=0)

    def _path_to(self, shape: PodShape, level: str) -> tuple[str, ...]:
        """The labels that name a domain of `level`: the coarser levels of the topology, and it."""
        levels = shape.rules.levels if shape.rules is not None else ()
        if level in levels:
            return levels[: levels.index(level) + 1]
        return (level,)

    def _per_node_cap(self, shape: PodShape) -> int:
        """How many pods of the set one node can take by its rules alone (one, when they bind
        host ports or keep apart per node)."""
        rules = shape.rules
        if rules is None:
            return 1 << 30
        if rules.ports:
            return 1
        for key, names, anti in rules.terms:
            if anti and rules.name in names and key == "kubernetes.io/hostname":
                return 1
        return 1 << 30

    def _eligible_nodes(self, shape: PodShape) -> Iterable[int]:
        for cls in self.index.eligible(shape):
            for _, node in cls.entries:
                yield node

    def _fill(
        self,
        ps: int,
        shape: PodShape,
        count: int,
        domain: tuple[tuple[str, str], ...] | None,
        request: TopologyRequest,
        blocked: _Blocked | None = None,
    ) -> bool:
        """Place `count` pods in `domain` (None: anywhere), slice by slice with a slice
        request; whether all fitted (the caller rewinds otherwise)."""
        blocked = blocked or _Blocked()
        allowed = self._nodes_in(shape, domain)
        if not request.slice_size:
            return self._pods(ps, shape, count, allowed, blocked) == count
        size, level = request.slice_size, request.slice_level or request.level or ""
        for _ in range(count // size):
            rooms = self._slice_rooms(shape, level, allowed)
            choices = sorted((room, value) for value, room in rooms.items() if room >= size)
            done = False
            for _, value in choices:
                inner = {
                    n
                    for n in (allowed or self._eligible_nodes(shape))
                    if _label(self.index, n, level) == value
                }
                snapshot = dict(self.plan)
                if self._pods(ps, shape, size, inner, blocked) == size:
                    done = True
                    break
                self._rewind(snapshot, shape)
            if not done:
                return False
        rest = count % size
        return rest == 0 or self._pods(ps, shape, rest, allowed, blocked) == rest

    def _slice_rooms(self, shape: PodShape, level: str, allowed: set[int] | None) -> dict[str, int]:
        rooms: dict[str, int] = {}
        cap = self._per_node_cap(shape)
        for node in allowed if allowed is not None else self._eligible_nodes(shape):
            value = _label(self.index, node, level)
            if value is None:
                continue
            room = min(fit_count(self.index.free[node], shape.request), cap)
            rooms[value] = rooms.get(value, 0) + room
        return rooms

    def _nodes_in(
        self, shape: PodShape, domain: tuple[tuple[str, str], ...] | None
    ) -> set[int] | None:
        if domain is None:
            return None
        return {
            node
            for node in self._eligible_nodes(shape)
            if all(_label(self.index, node, k) == v for k, v in domain)
        }

    def _rewind(self, snapshot: dict[tuple[int, int], int], shape: PodShape) -> None:
        """Take back what was placed since `snapshot` (pods of one pod set)."""
        for (ps, node), n in list(self.plan.items()):
            before = snapshot.get((ps, node), 0)
            for _ in range(n - before):
                self._unplace(ps, shape, node)

    # -- one pod at a time ------------------------------------------------------------------------

    def _pods(
        self, ps: int, shape: PodShape, count: int, allowed: set[int] | None, blocked: _Blocked
    ) -> int:
        """Place up to `count` pods of the set, one at a time; how many were placed."""
        for placed in range(count):
            node = self._find(ps, shape, allowed, blocked)
            if node is None:
                return placed
            self._put(ps, shape, node)
        return count

    def _find(
        self, ps: int, shape: PodShape, allowed: set[int] | None, blocked: _Blocked
    ) -> int | None:
        """The node the next pod of the set goes to under the packing rule, among those its
        rules allow."""
        index, request = self.index, shape.request
        best: tuple[Vector, int] | None = None
        for cls in index.eligible(shape):
            entries = cls.entries if self.packing != "spread" else list(reversed(cls.entries))
            for free, node in entries:
                if allowed is not None and node not in allowed:
                    continue
                if not all(f >= q for f, q in zip(free, request, strict=True)):
                    if self.packing == "spread":
                        break
                    continue
                why = self._refused(ps, shape, node)
                if why is not None:
                    blocked.note(why)
                    continue
                if self.packing == "spread":
                    better = best is None or (free, -node) > (best[0], -best[1])
                elif self.packing == "first-fit":
                    better = best is None or node < best[1]
                else:
                    better = best is None or (free, node) < best
                if better:
                    best = (free, node)
                if self.packing != "first-fit":
                    break
        return None if best is None else best[1]

    def _refused(self, ps: int, shape: PodShape, node: int) -> str | None:
        """Why the set's rules keep its next pod off `node` (None: they do not)."""
        rules = shape.rules
        if rules is None:
            return None
        index = self.index
        if rules.ports:
            held = [*index.bound_ports(node), *self.ports.get(node, ())]
            for port in rules.ports:
                if any(port.conflicts(other) for other in held):
                    return f"host port {port.port}/{port.protocol}"
        for key, names, anti in rules.terms:
            targets = [self.set_of[n] for n in names if n in self.set_of]
            domain = _label(index, node, key)
            here = sum(self.counts.get((key, t), {}).get(domain or "", 0) for t in targets)
            if anti:
                if domain is not None and here:
                    return f"pod anti-affinity (one per {key})"
            else:
                anywhere = sum(sum(self.counts.get((key, t), {}).values()) for t in targets)
                if domain is None or (anywhere and not here):
                    return f"pod affinity (together per {key})"
        # Anti-affinity is symmetric: pods placed before keep this set's pods away too.
        for other_ps, other, _ in self.shapes:
            other_rules = other.rules
            if other_rules is None or other_ps == ps:
                continue
            for key, names, anti in other_rules.terms:
                if not anti or rules.name not in names:
                    continue
                domain = _label(index, node, key)
                if domain is not None and self.counts.get((key, other_ps), {}).get(domain):
                    return f"pod anti-affinity (one per {key})"
        for key, skew, names in rules.spread:
            domain = _label(index, node, key)
            if domain is None:
                return f"topology spread (over {key})"
            targets = [self.set_of[n] for n in names if n in self.set_of]
            counts = self._domain_counts(shape, key, targets)
            least = min(counts.values(), default=0)
            if counts.get(domain, 0) + 1 - least > skew:
                return f"topology spread (maxSkew {skew} over {key})"
        return None

    def _domain_counts(self, shape: PodShape, key: str, targets: list[int]) -> dict[str, int]:
        """The pods of `targets` placed in each domain of `key` the set's pods may go to."""
        counts: dict[str, int] = {}
        for node in self._eligible_nodes(shape):
            domain = _label(self.index, node, key)
            if domain is not None:
                counts.setdefault(domain, 0)
        for t in targets:
            for domain, n in self.counts.get((key, t), {}).items():
                if domain in counts:
                    counts[domain] += n
        return counts

    def _keys(self, shape: PodShape) -> set[str]:
        """The topology keys other sets' rules may count this set's pods by."""
        keys: set[str] = set()
        for _, other, _ in self.shapes:
            if other.rules is not None:
                keys.update(key for key, _, _ in other.rules.terms)
                keys.update(key for key, _, _ in other.rules.spread)
        return keys

    def _put(self, ps: int, shape: PodShape, node: int) -> None:
        self.index.take(node, shape.request)
        self.plan[(ps, node)] = self.plan.get((ps, node), 0) + 1
        for key in self._keys(shape):
            domain = _label(self.index, node, key)
            if domain is not None:
                by_domain = self.counts.setdefault((key, ps), {})
                by_domain[domain] = by_domain.get(domain, 0) + 1
        if shape.rules is not None and shape.rules.ports:
            self.ports.setdefault(node, []).extend(shape.rules.ports)

    def _unplace(self, ps: int, shape: PodShape, node: int) -> None:
        self.index.give(node, shape.request)
        left = self.plan[(ps, node)] - 1
        if left:
            self.plan[(ps, node)] = left
        else:
            del self.plan[(ps, node)]
        for key in self._keys(shape):
            domain = _label(self.index, node, key)
            if domain is not None:
                self.counts[(key, ps)][domain] -= 1
        if shape.rules is not None and shape.rules.ports:
            held = self.ports[node]
            for port in shape.rules.ports:
                held.remove(port)

    # -- why not --------------------------------------------------------------------------------

    def _why(self, shape: PodShape, count: int, placed: int, constraint: str) -> PlacementShortfall:
        """Why `count` pods of `shape` do not all fit, `placed` of them did: a constraint when
        one turned nodes away, else what the unconstrained packing would say."""
        base = self.index.explain(shape, count, placed)
        if not constraint or base.kind in (NoFit.UNKNOWN_RESOURCE, NoFit.NO_MATCHING_NODE):
            return base
        return PlacementShortfall(
            NoFit.CONSTRAINED,
            count,
            base.resource,
            base.per_pod,
            placed=placed,
            constraint=constraint,
        )
