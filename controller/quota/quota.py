"""Quota arithmetic of queues and cohorts: usage, what a queue may still take, its fair share.

Rule: small functions over QueueState/CohortState, each saying what it returns; usage changes
only through `add_usage`, which keeps the cohort's borrowed total in step.

A queue's nominal quota splits into a guaranteed part (nominal - lendingLimit, never lent) and a
lendable part that goes into the cohort's pool. The pool of a cohort is the sum of its members'
lendable parts; a member's usage above its guaranteed part is drawn from the pool.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controller.quota.outcomes import QuotaCeiling, QuotaShortfall
from controller.quota.snapshot import QueueSpec, Quota

NO_QUOTA = Quota(nominal=0, borrowing_limit=0)
NO_QUOTA_IN_COHORT = Quota(nominal=0)


@dataclass(slots=True)
class CohortState:
    name: str
    # Sum of the members' lendable quota, per resource.
    pool: dict[str, int] = field(default_factory=dict)
    # Sum of the members' usage above their guaranteed quota, per resource.
    drawn: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class QueueState:
    spec: QueueSpec
    cohort: CohortState | None
    usage: dict[str, int] = field(default_factory=dict)
    # Resources whose usage is above nominal quota, kept by add_usage.
    above_nominal: set[str] = field(default_factory=set)

    def quota(self, resource: str) -> Quota:
        found = self.spec.quotas.get(resource)
        if found is not None:
            return found
        return NO_QUOTA if self.cohort is None else NO_QUOTA_IN_COHORT


def guaranteed(quota: Quota) -> int:
    """The part of nominal quota the queue never lends."""
    return 0 if quota.lending_limit is None else quota.nominal - quota.lending_limit


def lendable(quota: Quota) -> int:
    """The part of nominal quota the queue puts into its cohort's pool."""
    return quota.nominal if quota.lending_limit is None else quota.lending_limit


def build_cohorts(specs: Iterable[QueueSpec]) -> dict[str, QueueState]:
    """Queue states with their cohorts' pools filled in and no usage."""
    cohorts: dict[str, CohortState] = {}
    queues: dict[str, QueueState] = {}
    for spec in sorted(specs, key=lambda s: s.name):
        cohort = None
        if spec.cohort is not None:
            cohort = cohorts.setdefault(spec.cohort, CohortState(spec.cohort))
            for resource, quota in spec.quotas.items():
                cohort.pool[resource] = cohort.pool.get(resource, 0) + lendable(quota)
        queues[spec.name] = QueueState(spec, cohort)
    return queues


def add_usage(queue: QueueState, amounts: Mapping[str, int], sign: int) -> None:
    """Add (sign=1) or remove (sign=-1) usage, moving the cohort's drawn total along."""
    for resource, amount in amounts.items():
        before = queue.usage.get(resource, 0)
        after = before + sign * amount
        queue.usage[resource] = after
        if after > queue.quota(resource).nominal:
            queue.above_nominal.add(resource)
        else:
            queue.above_nominal.discard(resource)
        if queue.cohort is not None:
            floor = guaranteed(queue.quota(resource))
            delta = max(0, after - floor) - max(0, before - floor)
            if delta:
                drawn = queue.cohort.drawn
                drawn[resource] = drawn.get(resource, 0) + delta


def available(queue: QueueState, resource: str) -> int:
    """How much more of `resource` the queue may take now (may be negative after reclaims).

    Without a cohort: nominal minus usage. In a cohort: what is left of the guaranteed part plus
    what the pool has left, capped by the borrowing limit (the queue may hold at most its
    lendable part plus its borrowing limit in the pool).
    """
    quota = queue.quota(resource)
    used = queue.usage.get(resource, 0)
    cohort = queue.cohort
    if cohort is None:
        return quota.nominal - used
    floor = guaranteed(quota)
    from_pool = cohort.pool.get(resource, 0) - cohort.drawn.get(resource, 0)
    if quota.borrowing_limit is not None:
        in_pool = max(0, used - floor)
        from_pool = min(from_pool, lendable(quota) + quota.borrowing_limit - in_pool)
    return max(0, floor - used) + from_pool


def quota_shortfall(queue: QueueState, request: Mapping[str, int]) -> QuotaShortfall | None:
    """None if `request` fits the queue's quota now, else the first resource that is short.

    Extended resources (GPUs) are named before cpu and memory when several are short.
    """
    for resource in sorted(request, key=lambda r: (r in ("cpu", "memory"), r)):
        need = request[resource]
        free = available(queue, resource)
        if need > free:
            quota = queue.quota(resource)
            return QuotaShortfall(
                resource=resource,
                need=need,
                free=free,
                nominal=quota.nominal,
                borrowing_limit=quota.borrowing_limit,
                used=queue.usage.get(resource, 0),
            )
    return None


def quota_ceiling(queue: QueueState, request: Mapping[str, int]) -> QuotaCeiling | None:
    """The first resource of `request` the queue could not give even with nothing running in
    its cohort: not covered (and nothing to borrow), or more than nominal plus borrowing."""
    for resource in sorted(request, key=lambda r: (r in ("cpu", "memory"), r)):
        quota = queue.quota(resource)
        most = quota.nominal
        cohort = queue.cohort
        if cohort is not None:
            most = guaranteed(quota) + cohort.pool.get(resource, 0)
            if quota.borrowing_limit is not None:
                most = min(most, quota.nominal + quota.borrowing_limit)
        if request[resource] > most:
            return QuotaCeiling(
                queue.spec.name,
                resource,
                request[resource],
                most,
                tuple(sorted(queue.spec.quotas)),
                cohort is not None,
            )
    return None


def within_nominal(queue: QueueState, request: Mapping[str, int]) -> bool:
    """Whether usage plus `request` stays within nominal quota for every requested resource."""
    return all(
        queue.usage.get(r, 0) + amount <= queue.quota(r).nominal for r, amount in request.items()
    )


def borrowing(queue: QueueState) -> bool:
    """Whether the queue uses more than its nominal quota of some resource."""
    return bool(queue.above_nominal)


def share(queue: QueueState, extra: Mapping[str, int] | None = None) -> float:
    """Weighted dominant resource share, like Kueue's fair sharing.

    For each resource: what the queue uses above nominal (with `extra` added) over the pool of
    its cohort, times 1000; the maximum over resources, divided by the weight. Not borrowing: 0.
    Borrowing with weight 0: infinite (ranks last).
    """
    cohort = queue.cohort
    if cohort is None:
        return 0.0
    dominant = 0.0
    resources = queue.usage.keys() | (extra.keys() if extra else set())
    for resource in resources:
        used = queue.usage.get(resource, 0) + (extra.get(resource, 0) if extra else 0)
        above = used - queue.quota(resource).nominal
        if above <= 0:
            continue
        pool = cohort.pool.get(resource, 0)
        ratio = math.inf if pool <= 0 else 1000.0 * above / pool
        dominant = max(dominant, ratio)
    if dominant == 0.0:
        return 0.0
    return math.inf if queue.spec.weight <= 0 else dominant / queue.spec.weight
