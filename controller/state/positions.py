"""What users are told of where their gangs stand: the first pending Workloads of each
ClusterQueue and LocalQueue (in their status), and each pending Workload's own positions.

Rule: the positions are the decision core's (`controller.quota.positions`); this module decides
what to write. One admission moves every gang behind it, so a write per pending Workload per
pass would grow with the backlog: the first `positions_head` gangs of each ClusterQueue or
LocalQueue are told their exact places in them whenever these change; the other positions
(and the head's place in the cohort, which moves with every queue of the tree) at most every
`position_refresh` seconds each, and at most `position_writes` of them per pass, the most
out of date first. A gang no longer pending has its position removed.

Positions are computed (`PositionRun`, on a fork of the engine) at most every
`positions_period` seconds after the last computation ended, a slice of CPU a pass
(`positions_budget` milliseconds; at least one step of the run), so that a large backlog costs
each pass a bounded slice and a computation takes more passes: the run's steps (the engine's
pending gangs taken into the fork, then its consideration order walked), then the telling's
(the positions numbered and the head entries and writes they make, `TELL_SLICE` gangs a step;
the writes planned; the heads compared with those shown, `HEAD_SLICE` queues a step). Its
positions are those of the pass that started it, numbered as if the gangs admitted or gone
since had left the lines; they are written in the pass that ends it; gangs that came since wait
for the next computation. Without a budget, positions are computed whole in one pass.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from controller.api.queues import PendingWorkload
from controller.api.workload import QueuePosition
from controller.quota.engine import Engine
from controller.quota.positions import Position, PositionRun, positions
from controller.settings import Settings
from controller.state.gangs import GangKey, ManagedGang, id_of, key_of
from controller.state.steps import WriteWorkloadPosition

LocalKey = tuple[str, str]  # (namespace, LocalQueue)
Q = TypeVar("Q", str, LocalKey)


@dataclass(frozen=True, slots=True)
class Entry:
    """One of a queue's first pending gangs: its Workload, its LocalQueue, its priority and
    its positions (plain values: the pydantic status is made only for a status written)."""

    key: GangKey
    local_queue: str | None
    priority: int
    at: Position

    def status(self) -> PendingWorkload:
        return PendingWorkload(
            namespace=self.key[0],
            name=self.key[1],
            local_queue=self.local_queue,
            priority=self.priority,
            position_in_cluster_queue=self.at.cluster_queue,
            position_in_local_queue=self.at.local_queue,
            position_in_cohort=self.at.cohort,
        )


Head = tuple[Entry, ...]


@dataclass(frozen=True)
class Told:
    """The position last written for a gang (None: none, or removed), and when."""

    position: Position | None
    at: float


@dataclass(frozen=True)
class PositionReport:
    """A pass's position writes, one per gang, and the queues whose first gangs changed."""

    writes: dict[GangKey, WriteWorkloadPosition]
    queues: set[str]
    local_queues: set[LocalKey]


def _shown(gang: ManagedGang | None) -> Position | None:
    wl = gang.workload if gang is not None else None
    shown = wl.status.position if wl is not None and wl.status is not None else None
    if shown is None:
        return None
    return Position(shown.cluster_queue, shown.local_queue, shown.cohort or 0)


def _written(key: GangKey, at: Position | None) -> WriteWorkloadPosition:
    position = None
    if at is not None:
        position = QueuePosition(
            cluster_queue=at.cluster_queue, local_queue=at.local_queue, cohort=at.cohort
        )
    return WriteWorkloadPosition(key[0], key[1], position)


def _drift(old: Position | None, new: Position) -> float:
    """How far off what a Workload shows is, relative to where it stands (never shown: most)."""
    if old is None:
        return float("inf")
    moved = [(old.cluster_queue, new.cluster_queue), (old.cohort, new.cohort)]
    return max(abs(a - b) / max(a, 1) for a, b in moved)


def _in_head(position: Position | None, limit: int) -> bool:
    """Whether a position is among the first `limit` of its ClusterQueue or LocalQueue."""
    if position is None:
        return False
    local = position.local_queue
    return position.cluster_queue <= limit or (local is not None and local <= limit)


def _in_queues(position: Position) -> tuple[int, int | None]:
    """The places told exactly at the head (the cohort's moves with every queue of the tree,
    so it is refreshed like the positions further back)."""
    return (position.cluster_queue, position.local_queue)


# A pass that tells the positions of a computation that ended takes this many gangs a step
# (their head entries, and whether each is to be written).
TELL_SLICE = 200
# And compares this many queues' heads with those shown a step.
HEAD_SLICE = 100
# While a computation is under way, a pass is due at most this many seconds after the last
# one, so that a quiet cluster (no event, no timer) still finishes it within seconds.
STEP_GAP = 0.2


@dataclass(frozen=True, slots=True)
class _Pass:
    """What a pass gives the reporter: the live engine and its time, each gang's LocalQueue
    and whether it is admitted, and the gangs' records."""

    engine: Engine
    now: float
    local: Mapping[GangKey, tuple[LocalKey, bool]]
    lookup: Callable[[GangKey], ManagedGang | None]


class _Telling:
    """The positions of a computation being told, a slice of gangs at a time."""

    def __init__(self, numbered: Iterator[tuple[str, Position]]) -> None:
        self.numbered = numbered
        self.left = True  # gangs left to take
        self.heads: dict[str, list[Entry]] = {}
        self.local_heads: dict[LocalKey, list[Entry]] = {}
        self.wanted: dict[GangKey, Position] = {}
        self.writes: dict[GangKey, Position | None] = {}
        self.behind: list[tuple[float, GangKey]] = []  # (how far off, gang): candidates
        # Once all are taken: the writes planned, the gangs left out (no longer pending), and
        # the queues whose heads are still to compare with those shown, those found changed
        # and the new heads.
        self.planned: dict[GangKey, WriteWorkloadPosition] | None = None
        self.gone: set[GangKey] = set()
        self.to_compare: list[str] = []
        self.local_to_compare: list[LocalKey] = []
        self.changed: set[str] = set()
        self.local_changed: set[LocalKey] = set()
        self.new_heads: dict[str, Head] = {}
        self.new_local_heads: dict[LocalKey, Head] = {}


def _in_cq(entry: Entry) -> int:
    return entry.at.cluster_queue


def _in_lq(entry: Entry) -> int:
    return entry.at.local_queue or 0


def _compare_heads(
    todo: list[Q],
    found: Mapping[Q, list[Entry]],
    shown: Mapping[Q, Head],
    new: dict[Q, Head],
    changed: set[Q],
    gone: set[GangKey],
    count: int | None,
    place: Callable[[Entry], int],
) -> int | None:
    """Compare the heads of the last `count` queues of `todo` (None: all), taken off it, with
    those `shown`: each queue's entries `found`, but those `gone`, in order of `place`, go to
    `new`, and the queue to `changed` if they differ. How many more may be compared."""
    batch = todo if count is None else todo[len(todo) - min(count, len(todo)) :]
    for queue in batch:
        head = tuple(sorted((e for e in found.get(queue, ()) if e.key not in gone), key=place))
        if head:
            new[queue] = head
        if (head or None) != shown.get(queue):
            changed.add(queue)
    taken = len(batch)
    del todo[len(todo) - taken :]
    return None if count is None else count - taken


class PositionReporter:
    def __init__(self, settings: Settings, clock: Callable[[], float] = time.process_time) -> None:
        self._settings = settings
        self._clock = clock
        self._told: dict[GangKey, Told] = {}
        self._heads: dict[str, Head] = {}
        self._local_heads: dict[LocalKey, Head] = {}
        # Whether every admitted gang's Workload is to be checked for a stale position (after
        # a restart or a reset, what was told before is not known).
        self._check_all = True
        # When the last computation ended, and the one under way (its pass's `now`).
        self._ended_at = -math.inf
        self._run: PositionRun | None = None
        self._telling: _Telling | None = None
        self._stepped_at = -math.inf
        # The steps computations have made (of their runs and of telling their positions).
        self.steps = 0
        # How many passes the computation under way, and the last one ended, took.
        self.passes = 0
        self.last_passes = 0

    def reset(self) -> None:
        self._told.clear()
        self._check_all = True
        self._ended_at = -math.inf
        self._run = self._telling = None

    @property
    def under_way(self) -> PositionRun | None:
        """The computation being made over passes, if any."""
        return self._run

    def next_step(self) -> float | None:
        """When a pass is due to go on with the computation under way (None: none is)."""
        return None if self._run is None else self._stepped_at + STEP_GAP

    def failed(self, key: GangKey) -> None:
        """A position write was refused: what the Workload shows is not known."""
        self._told.pop(key, None)

    def head(self, queue: str) -> list[PendingWorkload]:
        return [entry.status() for entry in self._heads.get(queue, ())]

    def local_head(self, queue: LocalKey) -> list[PendingWorkload]:
        return [entry.status() for entry in self._local_heads.get(queue, ())]

    def report(
        self,
        engine: Engine,
        now: float,
        local: Mapping[GangKey, tuple[LocalKey, bool]],
        lookup: Callable[[GangKey], ManagedGang | None],
    ) -> PositionReport:
        """The positions of every pending gang (`local`: each gang's LocalQueue and whether it
        is admitted), the writes they need, and the queues whose heads changed, in the pass
        that ends a computation; nothing in the others, nor within `positions_period` of the
        end of the last computation."""
        budget = self._settings.positions_budget
        this = _Pass(engine, now, local, lookup)
        if self._run is None:
            if now - self._ended_at < self._settings.positions_period:
                return PositionReport({}, set(), set())
            pending_local = {
                id_of(k): f"{q[0]}/{q[1]}" for k, (q, admitted) in local.items() if not admitted
            }
            if not budget:
                telling = _Telling(iter(positions(engine, now, pending_local).items()))
                self._tell(telling, this, None)
                self._plan(telling, this)
                self._ended_at = now
                self.last_passes = 1
                found = self._compare(telling, None)
                assert found is not None
                return found
        assert budget, "a computation is under way only under a budget"
        self._stepped_at = now
        self.passes += 1
        # Steps while the next one, if it costs what the last did, still fits the budget (the
        # first is always made, or a computation would never end); making the run is the first.
        start = last = self._clock()
        if self._run is None:
            self._run = PositionRun(engine, now, pending_local)
            self.passes = 1
            self.steps += 1
            found = None
        else:
            found = self._step(this)
        while found is None:
            spent = self._clock()
            if (spent - start) + (spent - last) >= budget / 1000:
                return PositionReport({}, set(), set())
            last = spent
            found = self._step(this)
        self._run = self._telling = None
        self._ended_at = now
        self.last_passes = self.passes
        return found

    def _step(self, this: _Pass) -> PositionReport | None:
        """One step of the computation under way: of its run, then of telling its positions
        (`TELL_SLICE` gangs a step, then the writes planned); its report once it ends."""
        run, telling = self._run, self._telling
        assert run is not None
        self.steps += 1
        if not run.done:
            run.advance()
            if run.done:
                self._telling = _Telling(run.numbered(this.engine.pending))
            return None
        assert telling is not None
        if telling.left:
            self._tell(telling, this, TELL_SLICE)
        elif telling.planned is None:
            self._plan(telling, this)
        else:
            return self._compare(telling, HEAD_SLICE)
        return None

    def _tell(self, telling: _Telling, this: _Pass, count: int | None) -> None:
        """Take the next `count` gangs' positions (None: all): the head entries they make,
        and whether each is to be written (a head's place that changed: written; a position
        further back that moved: a candidate, by how far off it is)."""
        limit, refresh = self._settings.positions_head, self._settings.position_refresh
        engine, now, local, lookup = this.engine, this.now, this.local, this.lookup
        taken = 0
        for name, place in itertools.islice(telling.numbered, count):
            taken += 1
            key = key_of(name)
            telling.wanted[key] = place
            if _in_head(place, limit):
                queue, info = engine.pending[name]
                lq = local.get(key, (None, False))[0]
                entry = Entry(key, lq[1] if lq else None, info.gang.priority, place)
                if place.cluster_queue <= limit and queue is not None:
                    telling.heads.setdefault(queue.name, []).append(entry)
                if lq is not None and place.local_queue is not None and place.local_queue <= limit:
                    telling.local_heads.setdefault(lq, []).append(entry)
            told = self._told.get(key)
            shown = told.position if told is not None else _shown(lookup(key))
            if shown == place:
                if told is None:
                    self._told[key] = Told(place, now)
                continue
            if (_in_head(place, limit) or _in_head(shown, limit)) and (
                shown is None or _in_queues(shown) != _in_queues(place)
            ):
                telling.writes[key] = place
            elif told is None or now - told.at >= refresh:
                telling.behind.append((_drift(shown, place), key))
        telling.left = count is not None and taken == count

    def _plan(self, telling: _Telling, this: _Pass) -> None:
        """The writes of a computation all taken: gangs no longer pending left out, at most
        `position_writes` of the candidates written (the most out of date first), positions
        removed from the gangs that no longer wait; the queues whose heads to compare."""
        pending, now = this.engine.pending, this.now
        gone = telling.gone = {key for key in telling.wanted if id_of(key) not in pending}
        wanted = {k: p for k, p in telling.wanted.items() if k not in gone}
        writes = {k: p for k, p in telling.writes.items() if k not in gone}
        behind = sorted(
            ((d, k) for d, k in telling.behind if k not in gone), key=lambda d: (-d[0], d[1])
        )
        for _, key in behind[: self._settings.position_writes]:
            writes[key] = wanted[key]
        for key in self._gone(wanted, this.lookup, this.local):
            writes[key] = None
        for key, place in writes.items():
            self._told[key] = Told(place, now)
        telling.planned = {k: _written(k, p) for k, p in writes.items()}
        telling.to_compare = sorted(telling.heads.keys() | self._heads.keys())
        telling.local_to_compare = sorted(telling.local_heads.keys() | self._local_heads.keys())

    def _compare(self, telling: _Telling, count: int | None) -> PositionReport | None:
        """Compare the next `count` queues' heads with those shown (None: all); once all are,
        the new heads are shown and the computation's report is made."""
        t = telling
        left = _compare_heads(
            t.to_compare, t.heads, self._heads, t.new_heads, t.changed, t.gone, count, _in_cq
        )
        if left is None or left > 0:
            _compare_heads(
                t.local_to_compare,
                t.local_heads,
                self._local_heads,
                t.new_local_heads,
                t.local_changed,
                t.gone,
                left,
                _in_lq,
            )
        if t.to_compare or t.local_to_compare:
            return None
        assert t.planned is not None
        self._heads, self._local_heads = t.new_heads, t.new_local_heads
        return PositionReport(t.planned, t.changed, t.local_changed)

    def _gone(
        self,
        wanted: Mapping[GangKey, Position],
        lookup: Callable[[GangKey], ManagedGang | None],
        local: Mapping[GangKey, tuple[LocalKey, bool]],
    ) -> Iterable[GangKey]:
        """Gangs that no longer wait whose Workload still shows a position."""
        candidates = [k for k in self._told if k not in wanted]
        if self._check_all:
            candidates += [
                k for k, (_, admitted) in local.items() if admitted and k not in self._told
            ]
            self._check_all = False
        for key in candidates:
            told = self._told.get(key)
            gang = lookup(key)
            if gang is None or gang.workload is None:
                self._told.pop(key, None)
                continue
            if (told.position if told is not None else _shown(gang)) is None:
                self._told.pop(key, None)
                continue
            yield key
