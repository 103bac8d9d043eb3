"""Quota arithmetic over the cohort tree: usage, what a queue may still take, fair shares.

Rule: small functions over QuotaNode, each saying what it returns; usage changes only through
`add_usage`, which carries a change up the tree.

Amounts are keyed by flavor and resource (an FR). The tree's leaves are ClusterQueues; its inner
nodes are cohorts, each with an optional parent and its own quota. A node's subtree quota is its
own nominal quota plus what its children lend to it. A node's guaranteed part (subtree quota
minus its lending limit) is never lent; its parent sees only its usage above that part. So a
queue draws first on its own guaranteed quota, then on its parent's pool (its siblings' lent
quota and the cohort's own), and only what the parent cannot cover reaches the grandparent:
borrowing is as local as it can be. Borrowing limits cap what a node takes from its parent, and
lending limits what it gives, at every level.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from controller.quota.outcomes import QuotaCeiling, QuotaShortfall
from controller.quota.snapshot import (
    DEFAULT_FLAVOR,
    FR,
    CohortSpec,
    QueueSpec,
    Quota,
    flavor_quotas,
)

NO_QUOTA = Quota(nominal=0, borrowing_limit=0)
NO_QUOTA_IN_COHORT = Quota(nominal=0)


@dataclass(eq=False, slots=True)
class QuotaNode:
    """A queue (`spec` set) or a cohort of the tree, with its quota and usage per FR."""

    name: str
    quotas: dict[FR, Quota]
    weight: float = 1.0
    spec: QueueSpec | None = None
    parent: QuotaNode | None = None
    children: list[QuotaNode] = field(default_factory=list)
    # Own nominal quota plus what the children lend, per FR.
    subtree: dict[FR, int] = field(default_factory=dict)
    usage: dict[FR, int] = field(default_factory=dict)
    # FRs whose usage is above the subtree quota, kept by add_usage.
    above: set[FR] = field(default_factory=set)
    # Why the tree this node is in admits nothing (a cycle), or None.
    broken: str | None = None
    # `most` per FR, once computed (quotas never change in a built tree).
    most_known: dict[FR, int] = field(default_factory=dict)

    def quota(self, fr: FR) -> Quota:
        found = self.quotas.get(fr)
        if found is not None:
            return found
        return NO_QUOTA if self.parent is None else NO_QUOTA_IN_COHORT

    def ancestors(self) -> Iterator[QuotaNode]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def path(self) -> list[QuotaNode]:
        """This node and its ancestors, nearest first."""
        return [self, *self.ancestors()]

    @property
    def cohort(self) -> QuotaNode | None:
        return self.parent


# The engine and its callers speak of a queue's state.
QueueState = QuotaNode


def guaranteed(node: QuotaNode, fr: FR) -> int:
    """The part of the node's subtree quota it never lends to its parent."""
    limit = node.quota(fr).lending_limit
    if limit is None:
        return 0
    return max(0, node.subtree.get(fr, 0) - limit)


def lendable(quota: Quota) -> int:
    """The part of a queue's nominal quota it puts into its cohort's pool."""
    return quota.nominal if quota.lending_limit is None else quota.lending_limit


def _fill_subtree(node: QuotaNode) -> None:
    for child in node.children:
        _fill_subtree(child)
    subtree = {fr: q.nominal for fr, q in node.quotas.items()}
    for child in node.children:
        for fr, amount in child.subtree.items():
            subtree[fr] = subtree.get(fr, 0) + amount - guaranteed(child, fr)
    node.subtree = subtree


def _cycle_from(name: str, parents: Mapping[str, str | None]) -> list[str] | None:
    seen: list[str] = []
    current: str | None = name
    while current is not None:
        if current in seen:
            return [*seen[seen.index(current) :], current]
        seen.append(current)
        current = parents.get(current)
    return None


def build_tree(
    specs: Iterable[QueueSpec], cohorts: Iterable[CohortSpec] = ()
) -> dict[str, QuotaNode]:
    """Queue nodes, linked to their cohorts (made on demand when a name has no CohortSpec),
    with subtree quotas filled in and no usage.

    A cohort in a cycle of parents is cut from its parent, and every node of its tree is marked
    broken with the cycle: such a tree admits nothing until the cycle is gone.
    """
    cohort_specs = {c.name: c for c in cohorts}
    parents = {name: c.parent for name, c in cohort_specs.items()}
    nodes: dict[str, QuotaNode] = {}
    broken_at: dict[str, str] = {}
    for name in sorted(cohort_specs):
        loop = _cycle_from(name, parents)
        if loop is not None:
            broken_at[name] = " -> ".join(loop)

    def cohort_node(name: str) -> QuotaNode:
        node = nodes.get(name)
        if node is not None:
            return node
        spec = cohort_specs.get(name)
        node = QuotaNode(name, dict(flavor_quotas(spec.groups)) if spec else {})
        node.weight = spec.weight if spec else 1.0
        nodes[name] = node
        parent = spec.parent if spec else None
        if parent is not None and name not in broken_at:
            node.parent = cohort_node(parent)
            node.parent.children.append(node)
        return node

    queues: dict[str, QuotaNode] = {}
    for name in sorted(cohort_specs):
        cohort_node(name)
    for spec in sorted(specs, key=lambda s: s.name):
        queue = QuotaNode(spec.name, dict(flavor_quotas(spec.resource_groups())), spec.weight, spec)
        if spec.cohort is not None:
            queue.parent = cohort_node(spec.cohort)
            queue.parent.children.append(queue)
        queues[spec.name] = queue
    roots = {id(n.root()): n.root() for n in [*nodes.values(), *queues.values()]}
    for root in roots.values():
        _fill_subtree(root)
    for name, cycle in broken_at.items():
        for node in _subtree_nodes(nodes[name].root()):
            node.broken = f"cohort {name} is in a cycle of parents ({cycle})"
    return queues


def build_cohorts(specs: Iterable[QueueSpec]) -> dict[str, QuotaNode]:
    """Queue nodes for flat cohorts (no Cohort objects): see build_tree."""
    return build_tree(specs)


def _subtree_nodes(node: QuotaNode) -> Iterator[QuotaNode]:
    yield node
    for child in node.children:
        yield from _subtree_nodes(child)


def tree_nodes(queues: Iterable[QuotaNode]) -> list[QuotaNode]:
    """Every cohort node above `queues`, each once, in a stable order."""
    seen: dict[int, QuotaNode] = {}
    for queue in queues:
        for node in queue.ancestors():
            seen.setdefault(id(node), node)
    return sorted(seen.values(), key=lambda n: n.name)


def add_usage(node: QuotaNode, amounts: Mapping[FR, int], sign: int) -> None:
    """Add (sign=1) or remove (sign=-1) usage; the parent sees what is above the guaranteed
    part, and so on up the tree."""
    for fr, amount in amounts.items():
        _add(node, fr, sign * amount)


def _add(node: QuotaNode, fr: FR, delta: int) -> None:
    while delta:
        before = node.usage.get(fr, 0)
        after = before + delta
        node.usage[fr] = after
        if after > node.subtree.get(fr, 0):
            node.above.add(fr)
        else:
            node.above.discard(fr)
        parent = node.parent
        if parent is None:
            return
        delta = _passed_up(node, fr, before, after)
        node = parent


def _passed_up(node: QuotaNode, fr: FR, before: int, after: int) -> int:
    """How the parent's usage moves when the node's goes from `before` to `after`: only what
    is above the node's guaranteed part reaches it."""
    floor = guaranteed(node, fr)
    return max(0, after - floor) - max(0, before - floor)


def borrow_height(queue: QuotaNode, charge: Mapping[FR, int]) -> int:
    """How many levels above the queue adding `charge` makes a node use more than its subtree
    quota (0: only the queue itself goes beyond its quota). Nothing is changed."""
    height = 0
    level = 0
    amounts = dict(charge)
    node: QuotaNode | None = queue
    while node is not None and amounts:
        moved: dict[FR, int] = {}
        for fr, delta in amounts.items():
            before = node.usage.get(fr, 0)
            if before + delta > node.subtree.get(fr, 0):
                height = level
            up = _passed_up(node, fr, before, before + delta)
            if up:
                moved[fr] = up
        amounts = moved
        node = node.parent
        level += 1
    return height


def available(node: QuotaNode, fr: FR) -> int:
    """How much more of `fr` the node may take now (may be negative after reclaims).

    At the root: its subtree quota minus usage. Below: what is left of its guaranteed part plus
    what its parent can give, capped by its borrowing limit (it may hold at most its lent part
    plus its borrowing limit in the parent).
    """
    used = node.usage.get(fr, 0)
    parent = node.parent
    if parent is None:
        return node.subtree.get(fr, 0) - used
    floor = guaranteed(node, fr)
    from_parent = available(parent, fr)
    limit = node.quota(fr).borrowing_limit
    if limit is not None:
        in_parent = max(0, used - floor)
        from_parent = min(from_parent, node.subtree.get(fr, 0) - floor + limit - in_parent)
    if used < floor:
        # Within its guaranteed part it owes its parent nothing: a parent over-committed (its
        # quota shrank under running gangs) takes none of that part away.
        return floor - used + max(0, from_parent)
    return from_parent


def most(node: QuotaNode, fr: FR) -> int:
    """The most of `fr` the node could hold with nothing else running in its tree (it depends
    on quotas alone: kept once computed)."""
    known = node.most_known.get(fr)
    if known is not None:
        return known
    parent = node.parent
    if parent is None:
        found = node.subtree.get(fr, 0)
    else:
        floor = guaranteed(node, fr)
        from_parent = most(parent, fr)
        limit = node.quota(fr).borrowing_limit
        if limit is not None:
            from_parent = min(from_parent, node.subtree.get(fr, 0) - floor + limit)
        found = floor + from_parent
    node.most_known[fr] = found
    return found


def _scarce_first(fr: FR) -> tuple[bool, str, str]:
    return (fr[1] in ("cpu", "memory"), fr[1], fr[0])


def _named(queue: QuotaNode, fr: FR) -> str:
    """The flavor to name in a message about `fr`: only when the queue has several for it."""
    flavors = {flavor for flavor, resource in queue.quotas if resource == fr[1]}
    return fr[0] if len(flavors) > 1 else ""


def quota_shortfall(queue: QuotaNode, request: Mapping[FR, int]) -> QuotaShortfall | None:
    """None if `request` fits the queue's quota now, else the first FR that is short.

    Extended resources (GPUs) are named before cpu and memory when several are short.
    """
    for fr in sorted(request, key=_scarce_first):
        need = request[fr]
        free = available(queue, fr)
        if need > free:
            quota = queue.quota(fr)
            return QuotaShortfall(
                resource=fr[1],
                need=need,
                free=free,
                nominal=quota.nominal,
                borrowing_limit=quota.borrowing_limit,
                used=queue.usage.get(fr, 0),
                flavor=_named(queue, fr),
            )
    return None


def quota_ceiling(queue: QuotaNode, request: Mapping[FR, int]) -> QuotaCeiling | None:
    """The first FR of `request` the queue could not give even with nothing running in its
    tree: not covered (and nothing to borrow), or more than it can ever hold."""
    for fr in sorted(request, key=_scarce_first):
        ceiling = most(queue, fr)
        if request[fr] > ceiling:
            covered = tuple(sorted({r for _, r in queue.quotas}))
            return QuotaCeiling(
                queue.name,
                fr[1],
                request[fr],
                ceiling,
                covered,
                queue.parent is not None,
                flavor=_named(queue, fr),
                flavor_covered=fr in queue.quotas,
            )
    return None


def within_nominal(queue: QuotaNode, request: Mapping[FR, int]) -> bool:
    """Whether usage plus `request` stays within nominal quota for every requested FR."""
    return all(
        queue.usage.get(fr, 0) + amount <= queue.quota(fr).nominal for fr, amount in request.items()
    )


def borrowing(node: QuotaNode) -> bool:
    """Whether the node uses more than its subtree quota of some FR."""
    return bool(node.above)


def borrowing_any(node: QuotaNode, frs: Iterable[FR]) -> bool:
    """Whether the node uses more than its subtree quota of one of `frs`."""
    above = node.above
    return any(fr in above for fr in frs)


def share(node: QuotaNode, extra: Mapping[FR, int] | None = None) -> float:
    """Weighted dominant resource share of a node in its parent, like Kueue's fair sharing:
    `dominant` divided by the node's weight. Borrowing with weight 0: infinite (ranks last).
    """
    dominant_share = dominant(node, extra)
    if not dominant_share:
        return 0.0
    return math.inf if node.weight <= 0 else dominant_share / node.weight


def dominant(node: QuotaNode, extra: Mapping[FR, int] | None = None) -> float:
    """Dominant resource share of a node in its parent, before its weight.

    For each resource: what the node uses above its subtree quota (with `extra` added), summed
    over flavors, over the most its parent could hold of that resource (summed over flavors:
    its subtree quota, plus what it may borrow from further up), times 1000; the maximum over
    resources. At the root, or not borrowing: 0.
    """
    parent = node.parent
    if parent is None:
        return 0.0
    frs: set[FR] = set(node.usage) | set(extra or ())
    above: dict[str, int] = {}
    for fr in frs:
        used = node.usage.get(fr, 0) + (extra.get(fr, 0) if extra else 0)
        over = used - node.subtree.get(fr, 0)
        if over > 0:
            above[fr[1]] = above.get(fr[1], 0) + over
    if not above:
        return 0.0
    pools: dict[str, int] = {}
    for fr in parent.subtree.keys() | parent.usage.keys():
        if fr[1] in above:
            pools[fr[1]] = pools.get(fr[1], 0) + most(parent, fr)
    found = 0.0
    for resource, over in above.items():
        pool = pools.get(resource, 0)
        ratio = math.inf if pool <= 0 else 1000.0 * over / pool
        found = max(found, ratio)
    return found


def path_shares(queue: QuotaNode, extra: Mapping[FR, int] | None = None) -> tuple[float, ...]:
    """The shares of the queue's ancestors below the root, as they are, and the queue's own
    with `extra` added, top down. Fair order at every level compares these left to right: two
    queues under one cohort tie on every level above it and are compared where they part."""
    return tuple(share(node, extra if node is queue else None) for node in fair_path(queue))


def fair_path(queue: QuotaNode) -> list[QuotaNode]:
    """The nodes whose shares fair order compares for a queue, top down: its ancestors below
    the root and itself (itself alone when it is in no cohort)."""
    nodes = queue.path()[:-1] if queue.parent is not None else [queue]
    return nodes[::-1]


def default_charge(totals: Mapping[str, int]) -> dict[FR, int]:
    """Resource totals charged to the default flavor (queues without named flavors)."""
    return {(DEFAULT_FLAVOR, r): amount for r, amount in totals.items()}
