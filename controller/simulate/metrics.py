"""Scheduling-quality measures: percentiles, Jain's index, weighted max-min fair shares.

Rule: pure functions over plain numbers, so a figure in a report can be recomputed by hand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def weighted_percentile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """The smallest value at or below which q% (0..100) of the total weight lies; NaN for none.

    With GPUs as weights: the wait that q% of the requested GPUs waited at most.
    """
    pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
    total = sum(w for _, w in pairs)
    if not pairs:
        return math.nan
    needed = total * q / 100.0
    running = 0.0
    for value, weight in pairs:
        running += weight
        if running >= needed:
            return value
    return pairs[-1][0]


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n * sum x^2); 1 is perfectly even."""
    if not values:
        return math.nan
    squares = sum(v * v for v in values)
    if squares == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


def max_min_fair(
    capacity: float, demand: Mapping[str, float], weight: Mapping[str, float]
) -> dict[str, float]:
    """Weighted max-min fair shares of `capacity` (water-filling).

    Every queue gets capacity in proportion to its weight until its demand is met; what a
    satisfied queue does not need is shared again among the others.
    """
    shares = {q: 0.0 for q in demand}
    left = capacity
    active = {q for q, d in demand.items() if d > 0 and weight.get(q, 0) > 0}
    while active and left > 1e-9:
        total_weight = sum(weight[q] for q in active)
        level = left / total_weight
        satisfied = {q for q in active if demand[q] - shares[q] <= level * weight[q] + 1e-9}
        if not satisfied:
            for q in active:
                shares[q] += level * weight[q]
            break
        for q in satisfied:
            left -= demand[q] - shares[q]
            shares[q] = demand[q]
        active -= satisfied
    return shares
