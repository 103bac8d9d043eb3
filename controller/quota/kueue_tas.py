"""Kueue's topology-aware scheduling (TAS) choice of domains, as a strategy of the core.

Rule: a pure function of the nodes' labels and rooms (domains.py); it follows the algorithm of
Kueue v0.19 (KEP 2724, pkg/cache/scheduler/tas_flavor_snapshot.go) with the feature gates at
their defaults, for what the core models, and is used as the baseline `kueue-tas` policy.

1. Leaves are nodes: each counts the pods of the set its free capacity takes (min over
   resources of floor(free / request)). A node lacking a label of a level is in no domain.
2. Counts are summed up the levels. At the slice level a domain holds count // slice size
   slices, above it the sum of its children's slices (one pod per slice when none is asked).
3. Domains are sorted BestFit: most slices first, then fewest pods, then by their label values.
   A slice-only request (no level) is unconstrained: top level, LeastFreeCapacity order (fewest
   slices first; TASProfileMixed, beta and on).
4. At the requested level: if the first domain has room for every slice, the one with the fewest
   slices that has (first in sort order among equals); otherwise a required request fails, a
   preferred one tries the level above, and at the top level (or unconstrained) takes domains
   in sort order until the slices are covered, the last one chosen best fit.
5. Descending level by level: above the slice level, the children of all chosen domains are
   sorted and taken in order until they cover the slices, the last one best fit (the fewest
   children); at and below it, each chosen domain's pods go to its own children the same way.
6. The chosen leaves and their pod counts are the answer.

Not modelled: leaders (podset-group-name), multi-layer slice constraints, balanced placement
(alpha, off), preferred node affinity scores, node replacement, `pods` as a counted resource
(the core counts no pods per node). A request whose level is not one of the flavor's topology,
or whose pod count is not a multiple of its slice size, is refused (Kueue rejects the first and
would leave the remainder of the second unplaced).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from controller.quota.domains import DomainPlan, NodeRoom
from controller.quota.snapshot import TopologyRequest

HOSTNAME = "kubernetes.io/hostname"


@dataclass(slots=True, eq=False)
class _Domain:
    """A domain of one level (a leaf: one node). `pods`/`slices`: what fits in it, until the
    descent sets `pods` to what it is given."""

    values: tuple[str, ...]
    node: int = -1
    children: list[_Domain] = field(default_factory=list)
    pods: int = 0
    slices: int = 0


def _order(domains: Iterable[_Domain], *, least_free: bool) -> list[_Domain]:
    if least_free:
        return sorted(domains, key=lambda d: (d.slices, d.pods, d.values))
    return sorted(domains, key=lambda d: (-d.slices, d.pods, d.values))


def _tightest(domains: Sequence[_Domain], needed: int, *, slices: bool) -> _Domain:
    """The first domain with the least room at or above `needed` (the first one if none)."""
    best = domains[0]
    for d in domains:
        room = d.slices if slices else d.pods
        if needed <= room < (best.slices if slices else best.pods):
            best = d
    return best


def _spread(
    domains: Sequence[_Domain], count: int, size: int, *, best_fit: bool, slices: bool
) -> list[_Domain] | None:
    """Give `count` pods (in slices of `size` when `slices`) to `domains` in their order, each
    taking all it holds until one can take the rest (best fit among those left); None when
    they hold too little."""
    left = count // size if slices else count
    taken: list[_Domain] = []
    for at, d in enumerate(domains):
        if best_fit and (d.slices if slices else d.pods) >= left:
            d = _tightest(domains[at:], left, slices=slices)
        room = d.slices if slices else d.pods
        if room >= left:
            d.pods = left * size if slices else left
            if slices:
                d.slices = left
            taken.append(d)
            return taken
        if slices:
            d.pods = room * size
        left -= room
        taken.append(d)
    return None


@dataclass(slots=True)
class _Tree:
    """The domains of each level, the nodes' level last, with what fits in each."""

    levels: list[list[_Domain]]
    slice_level: int
    size: int

    @classmethod
    def build(
        cls, rooms: Sequence[NodeRoom], keys: Sequence[str], slice_level: int, size: int
    ) -> _Tree:
        by_values: dict[tuple[str, ...], _Domain] = {}
        levels: list[list[_Domain]] = [[] for _ in range(len(keys) + 1)]
        for room in rooms:
            values = tuple(room.labels.get(k) for k in keys)
            if any(v is None for v in values):
                continue
            path = tuple(v for v in values if v is not None)
            leaf = _Domain((*path, room.name), room.node, pods=room.room)
            levels[-1].append(leaf)
            child = leaf
            for depth in range(len(path), 0, -1):
                parent = by_values.get(path[:depth])
                fresh = parent is None
                if parent is None:
                    parent = by_values[path[:depth]] = _Domain(path[:depth])
                    levels[depth - 1].append(parent)
                parent.children.append(child)
                if not fresh:
                    break
                child = parent
        tree = cls(levels, slice_level, size)
        for depth in range(len(levels) - 1, -1, -1):
            for d in levels[depth]:
                tree._count(d, depth)
        return tree

    def _count(self, d: _Domain, depth: int) -> None:
        if d.children:
            d.pods = sum(c.pods for c in d.children)
            d.slices = sum(c.slices for c in d.children)
        if depth == self.slice_level:
            d.slices = d.pods // self.size
        elif depth > self.slice_level:
            d.slices = 0


def _level_of(key: str | None, keys: Sequence[str]) -> int | None:
    """The index of `key` among the levels, the nodes' level (after them) for the hostname."""
    if key == HOSTNAME:
        return len(keys)
    return keys.index(key) if key in keys else None


def assign(
    rooms: Sequence[NodeRoom], count: int, request: TopologyRequest, levels: tuple[str, ...]
) -> DomainPlan:
    """Where Kueue's TAS puts `count` pods of a pod set with `request` (see the module)."""
    keys = [k for k in levels if k != HOSTNAME]
    size = request.slice_size or 1
    unconstrained = request.level is None
    # A slice-only request is placed from the top level down.
    at = 0 if unconstrained else _level_of(request.level, keys)
    slice_key = (request.slice_level or request.level) if request.slice_size else HOSTNAME
    slice_at = _level_of(slice_key, keys)
    if at is None or slice_at is None or at > slice_at or count % size:
        return DomainPlan()
    tree = _Tree.build(rooms, keys, slice_at, size)
    best_fit = not unconstrained
    required = request.required and not unconstrained
    found = _fit_level(tree, at, count // size, required=required, best_fit=best_fit)
    if isinstance(found, int):
        return DomainPlan(fitted=found * size)
    level, chosen = found
    placed = _descend(tree, level, chosen, count, best_fit=best_fit)
    if placed is None:
        return DomainPlan()
    return DomainPlan({d.node: d.pods for d in placed if d.pods > 0})


def _fit_level(
    tree: _Tree, level: int, wanted: int, *, required: bool, best_fit: bool
) -> tuple[int, list[_Domain]] | int:
    """The level and the domains that take `wanted` slices; or the most slices that fit."""
    domains = _order(tree.levels[level], least_free=not best_fit)
    if not domains:
        return 0
    top = domains[0]
    if best_fit and top.slices >= wanted:
        return level, [_tightest(domains, wanted, slices=True)]
    if not best_fit:
        first = next((d for d in domains if d.slices >= wanted), None)
        if first is not None:
            return level, [first]
    if required:
        return top.slices
    if level > 0 and best_fit:
        return _fit_level(tree, level - 1, wanted, required=False, best_fit=best_fit)
    chosen: list[_Domain] = []
    left = wanted
    for at, d in enumerate(domains):
        if left <= 0:
            break
        if best_fit and d.slices >= left:
            d = _tightest(domains[at:], left, slices=True)
        chosen.append(d)
        left -= d.slices
    if left > 0:
        return wanted - left
    return level, chosen


def _descend(
    tree: _Tree, level: int, chosen: list[_Domain], count: int, *, best_fit: bool
) -> list[_Domain] | None:
    """The leaves the pods go to, from the domains chosen at `level`."""
    spread = _spread(chosen, count, tree.size, best_fit=best_fit, slices=True)
    leaves = len(tree.levels) - 1
    while spread is not None and level < min(leaves, tree.slice_level):
        children = _order((c for d in spread for c in d.children), least_free=not best_fit)
        spread = _spread(children, count, tree.size, best_fit=best_fit, slices=True)
        level += 1
    while spread is not None and level < leaves:
        below: list[_Domain] = []
        for d in spread:
            kids = _order(d.children, least_free=not best_fit)
            given = _spread(kids, d.pods, 1, best_fit=best_fit, slices=False)
            if given is None:
                return None
            below.extend(given)
        spread = below
        level += 1
    return spread
