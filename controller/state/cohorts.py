"""ClusterQueues, Cohorts and ResourceFlavors as the decision core sees them, and the shape of
the cohort trees they form.

Rule: pure functions of the API objects. Quota is kept per flavor and resource, as the queue
or cohort lists it; the core does the arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controller import quota
from controller.api.quantity import parse_quantity
from controller.api.queues import ClusterQueue, Cohort, ResourceFlavor, ResourceGroup
from controller.workloads.taints import core_toleration, repelling_taints

# What the core counts quota of: a (flavor, resource) pair.
FR = tuple[str, str]


def _amount(value: str | None) -> int | None:
    return None if value is None else parse_quantity(value)


def core_groups(groups: Iterable[ResourceGroup]) -> tuple[quota.ResourceGroup, ...]:
    """Resource groups with each flavor's own quota and limits, in the order they are listed
    (the order flavors are tried in)."""
    return tuple(
        quota.ResourceGroup(
            resources=tuple(group.covered_resources),
            flavors=tuple(
                quota.FlavorQuota(
                    flavor.name,
                    {
                        res.name: quota.Quota(
                            nominal=parse_quantity(res.nominal_quota),
                            borrowing_limit=_amount(res.borrowing_limit),
                            lending_limit=_amount(res.lending_limit),
                        )
                        for res in flavor.resources
                    },
                )
                for flavor in group.flavors
            ),
        )
        for group in groups
    )


def queue_spec(cq: ClusterQueue) -> quota.QueueSpec:
    """A ClusterQueue as the core sees it: its flavors' quota kept apart, tried in order under
    its flavor fungibility."""
    spec = cq.spec
    return quota.QueueSpec(
        name=cq.metadata.name,
        quotas={},
        cohort=spec.cohort or None,
        weight=parse_quantity(spec.fair_sharing.weight) / 1000,
        reclaim_within_cohort=spec.preemption.reclaim_within_cohort,
        within_queue=spec.preemption.within_cluster_queue,
        strategy=spec.queueing_strategy,
        min_runtime=float(spec.preemption.minimum_runtime_seconds),
        evict_after=float(spec.preemption.evict_after_seconds),
        groups=core_groups(spec.resource_groups),
        fungibility=quota.Fungibility(
            when_can_borrow=spec.flavor_fungibility.when_can_borrow,
            when_can_preempt=spec.flavor_fungibility.when_can_preempt,
        ),
    )


def cohort_spec(cohort: Cohort) -> quota.CohortSpec:
    spec = cohort.spec
    return quota.CohortSpec(
        name=cohort.metadata.name,
        parent=spec.parent or None,
        groups=core_groups(spec.resource_groups),
        weight=parse_quantity(spec.fair_sharing.weight) / 1000,
    )


def flavor_spec(
    flavor: ResourceFlavor, topologies: Mapping[str, tuple[str, ...]] | None = None
) -> quota.FlavorSpec:
    """A ResourceFlavor: the labels and the (repelling) taints of its nodes, the tolerations its
    pods are given, and the levels of its Topology (`topologies`: each Topology's levels by
    name; a Topology not there yet gives none)."""
    spec = flavor.spec
    levels = (topologies or {}).get(spec.topology_name or "", ())
    return quota.FlavorSpec(
        name=flavor.metadata.name,
        node_labels=dict(spec.node_labels),
        node_taints=repelling_taints(spec.node_taints),
        tolerations=tuple(core_toleration(t) for t in spec.tolerations),
        topology=levels,
    )


# -- the trees' shape ---------------------------------------------------------------------


def parent_cycle(name: str, parents: Mapping[str, str | None]) -> tuple[str, ...]:
    """The cycle of parents the cohort is in or leads into, as `a, b, a` (empty: none)."""
    seen: list[str] = []
    current: str | None = name
    while current is not None and current not in seen:
        seen.append(current)
        current = parents.get(current)
    if current is None:
        return ()
    return (*seen[seen.index(current) :], current)


def tree_of(name: str, parents: Mapping[str, str | None]) -> str:
    """A name for the tree the cohort is in: its root, or for a tree with a cycle of parents
    the cycle's first name (every cohort of a tree gets the same)."""
    cycle = parent_cycle(name, parents)
    if cycle:
        return min(cycle)
    current = name
    while True:
        parent = parents.get(current)
        if parent is None:
            return current
        current = parent


def trees_used(
    queues: Mapping[str, ClusterQueue], used: Iterable[str], parents: Mapping[str, str | None]
) -> set[str]:
    """The trees (see `tree_of`) of the cohorts of the queues `used`."""
    trees: set[str] = set()
    for name in used:
        cq = queues.get(name)
        if cq is not None and cq.spec.cohort:
            trees.add(tree_of(cq.spec.cohort, parents))
    return trees
