"""Where each pending gang stands: its place in its ClusterQueue's line, in its LocalQueue's,
and in the order its cohort tree's queues hand their gangs to an admission cycle.

Rule: pure. The order is the engine's own (`Engine.consideration_order`: the cycle's loop and
sort keys, fair sharing included); this module only numbers it. Positions count from 1 (1:
the next gang considered).

Positions may be computed whole (`positions`) or a step at a time (`PositionRun`), so that a
caller can spread them over as many calls as it likes, each costing a small slice of what the
whole does; both give the same positions.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from controller.quota.engine import Engine
from controller.quota.state import GangInfo, QueueRuntime

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Position:
    """A pending gang's places, from 1: in its ClusterQueue, in its LocalQueue (None when the
    caller named none for it), and among the gangs of every queue of its cohort tree (its
    ClusterQueue's alone when it is in no cohort)."""

    cluster_queue: int
    local_queue: int | None
    cohort: int


# How many pending gangs a step of a run takes into its fork, and how many it walks the order
# of: about half a millisecond each at 1,000 queues and 8,000 pending (reckoned from the whole
# order's cost there, some 25 us a gang, and taking all gangs, some 20 ms).
ADOPT_SLICE = 200
WALK_SLICE = 16


def positions(
    engine: Engine, now: float, local_queues: Mapping[str, str] | None = None
) -> dict[str, Position]:
    """Every pending gang of a known queue -> its positions at `now`. `local_queues`: gang ->
    its LocalQueue (any key unique across the ClusterQueue's LocalQueues)."""
    order = (
        (info.name, queue.name, id(queue.state.root()))
        for queue, info in engine.consideration_order(now)
    )
    return dict(_numbered(order, local_queues or {}))


class PositionRun:
    """`positions` of an engine at `now`, made a step at a time (`advance`; `done` once made).

    The run works on a fork taken when it is made (`Engine.quota_fork`: the queues charged as
    the engine's are, no gang taken): its first steps take the engine's pending gangs into the
    fork, `ADOPT_SLICE` a step, and the next ones walk the fork's consideration order,
    `WALK_SLICE` gangs a step. What the engine does meanwhile does not change the run: its
    positions are those of `now`. `positions` numbers the gangs that are still wanted."""

    def __init__(
        self, engine: Engine, now: float, local_queues: Mapping[str, str] | None = None
    ) -> None:
        """`local_queues`: gang -> its LocalQueue, as for `positions` (kept, not copied)."""
        self.now = now
        self.done = False
        self.steps = 0
        self._local = local_queues or {}
        self._fork = engine.quota_fork()
        self._adopting = [info for _, info in engine.pending.values()]
        self._walk: Iterator[tuple[QueueRuntime, GangInfo] | None] | None = None
        # The consideration order: (gang, ClusterQueue, its cohort tree).
        self._order: list[tuple[str, str, int]] = []

    def advance(self) -> None:
        """One step: a slice of the gangs taken into the fork, or of the order walked."""
        if self.done:
            return
        self.steps += 1
        adopting = self._adopting
        if adopting:
            start = max(len(adopting) - ADOPT_SLICE, 0)
            self._fork.adopt(adopting[start:])
            del adopting[start:]
            return
        if self._walk is None:
            self._walk = self._fork.consideration_steps(self.now)
        for _ in range(WALK_SLICE):
            try:
                step = next(self._walk)
            except StopIteration:
                self.done = True
                return
            if step is None:  # a slice of the set-up
                return
            queue, info = step
            self._order.append((info.name, queue.name, id(queue.state.root())))

    def positions(self, wanted: Container[str] | None = None) -> dict[str, Position]:
        """Once done: each gang's positions, as `positions` gives them at `now`; with
        `wanted`, only those of the gangs in it, numbered as if the others had left the
        lines (a gang admitted since `now` no longer stands before those behind it)."""
        return dict(self.numbered(wanted))

    def numbered(self, wanted: Container[str] | None = None) -> Iterator[tuple[str, Position]]:
        """`positions` a gang at a time, in consideration order; `wanted` is asked about each
        gang when it is its turn (it may change meanwhile)."""
        assert self.done, "the run is not done"
        order: Iterable[tuple[str, str, int]] = self._order
        if wanted is not None:
            order = (entry for entry in order if entry[0] in wanted)
        return _numbered(order, self._local)


def _numbered(
    order: Iterable[tuple[str, str, int]], local_queues: Mapping[str, str]
) -> Iterator[tuple[str, Position]]:
    """Positions numbered along a consideration order of (gang, ClusterQueue, cohort tree)."""
    in_queue: dict[str, int] = {}
    in_local: dict[tuple[str, str], int] = {}
    in_tree: dict[int, int] = {}
    for name, queue, tree in order:
        local = local_queues.get(name)
        place = None if local is None else _next_place(in_local, (queue, local))
        yield name, Position(_next_place(in_queue, queue), place, _next_place(in_tree, tree))


def _next_place(counters: dict[K, int], key: K) -> int:
    """The next place in the line `key` (counted in `counters`)."""
    counters[key] = counters.get(key, 0) + 1
    return counters[key]
