"""Where each pending gang stands: its place in its ClusterQueue's line, in its LocalQueue's,
and in the order its cohort tree's queues hand their gangs to an admission cycle.

Rule: pure. The order is the engine's own (`Engine.consideration_order`: the cycle's loop and
sort keys, fair sharing included); this module only numbers it. Positions count from 1 (1:
the next gang considered).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from controller.quota.engine import Engine

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Position:
    """A pending gang's places, from 1: in its ClusterQueue, in its LocalQueue (None when the
    caller named none for it), and among the gangs of every queue of its cohort tree (its
    ClusterQueue's alone when it is in no cohort)."""

    cluster_queue: int
    local_queue: int | None
    cohort: int


def positions(
    engine: Engine, now: float, local_queues: Mapping[str, str] | None = None
) -> dict[str, Position]:
    """Every pending gang of a known queue -> its positions at `now`. `local_queues`: gang ->
    its LocalQueue (any key unique across the ClusterQueue's LocalQueues)."""
    local_queues = local_queues or {}
    in_queue: dict[str, int] = {}
    in_local: dict[tuple[str, str], int] = {}
    in_tree: dict[int, int] = {}
    out: dict[str, Position] = {}
    for queue, info in engine.consideration_order(now):
        name = info.name
        tree = id(queue.state.root())
        in_tree[tree] = in_tree.get(tree, 0) + 1
        line = _next_place(in_queue, queue.name)
        local = local_queues.get(name)
        place = None if local is None else _next_place(in_local, (queue.name, local))
        out[name] = Position(line, place, in_tree[tree])
    return out


def _next_place(counters: dict[K, int], key: K) -> int:
    """The next place in the line `key` (counted in `counters`)."""
    counters[key] = counters.get(key, 0) + 1
    return counters[key]
