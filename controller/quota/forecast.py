"""Start-time forecasts: the admission cycle run forward from the live state, in simulated time.

Rule: pure, like the rest of the core: an Engine's state and what is known of runtimes in, each
pending gang's estimated start out. The live engine is never changed: the runs are on
`Engine.fork()`, which keeps its queues, nodes and gangs but none of its memory of past cycles.

How a forecast is made: two forward runs from `now`, one in which every gang runs its median
runtime and one in which every gang runs its 90th percentile. Each run finishes admitted gangs
at their estimated ends, runs the engine's own cycle at each such instant (and when one of the
engine's timers is due: evict after, minimum runtime), and notes when each pending gang is
first admitted. Gangs that arrive later are not known, but they overtake (a higher priority,
a queue with a smaller fair share): with `Bounds.arrivals` set, the runs assume the traffic of
the last `arrivals` seconds comes again, each gang created in that window (and still in the
engine) arriving anew, as a copy, every `arrivals` seconds after it was created. Gangs leaving
early are not known either (bench/bench_forecast.py measures how often the p90 holds).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, replace

from controller.quota.engine import Engine
from controller.quota.runtimes import (
    DEFAULT_RUNTIME,
    HISTORY,
    Basis,
    Runtime,
    RuntimeHistory,
    running_times,
    size_class,
)
from controller.quota.snapshot import Gang
from controller.quota.state import GangInfo

# How many pending gangs a forward run takes into its fork a call (about a cycle's cost).
ADOPT_SLICE = 50

__all__ = [
    "DEFAULT_RUNTIME",
    "HISTORY",
    "Arrival",
    "Basis",
    "Bounds",
    "Runtime",
    "RuntimeHistory",
    "RuntimeOf",
    "StartForecast",
    "forecast",
    "learned_runtimes",
]


@dataclass(frozen=True, slots=True)
class StartForecast:
    """When a pending gang is estimated to start (seconds, the engine's clock), if all gangs
    run their median runtime and if all run their 90th percentile; None: not before the
    forecast's horizon."""

    median: float | None
    p90: float | None


@dataclass(frozen=True, slots=True)
class Bounds:
    """How far a forward run may go: `horizon` seconds after now, `max_cycles` cycles,
    `max_admissions` admissions (each costs about what it costs the live engine, so this bounds
    a refresh's CPU; None: no bound). A gang not admitted by then has no forecast. Ends less
    than `resolution` seconds apart are taken together, at the last of them (so no start is
    forecast early by this), which saves cycles when many gangs end close together."""

    horizon: float = 7 * 86400.0
    max_cycles: int = 5000
    max_admissions: int | None = None
    resolution: float = 60.0
    arrivals: float = 0.0


@dataclass(frozen=True, slots=True)
class Arrival:
    """A gang assumed to arrive at its `created`: a copy of the gang `copy_of`."""

    gang: Gang
    copy_of: Gang


def expected_arrivals(
    engine: Engine, now: float, window: float, horizon: float
) -> Iterator[Arrival]:
    """The gangs assumed to arrive after `now`, the soonest first, made as they are asked for:
    each gang of `engine` created within the last `window` seconds again every `window`
    seconds after, until `horizon` seconds after now, as a copy named `<name>~<k>` (k: the
    how-manieth). A forward run takes only those before the instant it has reached."""
    if window <= 0:
        return
    recent = [info.gang for _, info in engine.pending.values()]
    recent += [r.info.gang for _, r in engine.running.values()]
    originals = sorted(
        (g for g in recent if now - window < g.created <= now), key=lambda g: (g.created, g.name)
    )
    k = 1
    while originals and originals[0].created + k * window <= now + horizon:
        for gang in originals:
            at = gang.created + k * window
            if at > now + horizon:
                return
            yield Arrival(replace(gang, name=f"{gang.name}~{k}", created=at), gang)
        k += 1


RuntimeOf = Callable[[Gang], Runtime]


def learned_runtimes(
    history: RuntimeHistory,
    engine: Engine,
    now: float,
    declared_of: Callable[[Gang], float | None] = lambda gang: None,
) -> RuntimeOf:
    """Each gang's runtime for a forecast made at `now`: what it declares (`declared_of`), else
    learned for its queue and size class from `history` and from how long `engine`'s running
    gangs have run so far (made once per queue and size class)."""
    running = running_times((r.info.gang, now - r.admitted_at) for _, r in engine.running.values())
    made: dict[tuple[str, int], Runtime] = {}

    def runtime_of(gang: Gang) -> Runtime:
        declared = declared_of(gang)
        if declared is not None:
            return history.runtime(gang.queue, declared)
        key = (gang.queue, size_class(gang))
        runtime = made.get(key)
        if runtime is None:
            runtime = made[key] = history.runtime(gang.queue, None, key[1], running)
        return runtime

    return runtime_of


def forecast(
    engine: Engine,
    now: float,
    runtime_of: RuntimeOf,
    *,
    gangs: Collection[str] | None = None,
    bounds: Bounds = Bounds(),
) -> dict[str, StartForecast]:
    """The estimated start of each pending gang of `engine` (or of those named in `gangs`)."""
    refresh = Refresh(engine, now, runtime_of, gangs=gangs, bounds=bounds)
    while not refresh.done:
        refresh.advance()
    return refresh.forecasts()


class Refresh:
    """Both forward runs of one forecast, made a cycle at a time (`advance`), so that a caller
    may spread them over as many calls as it likes: each call costs about one cycle of the
    engine. The run that has started fewer gangs goes first, so each gang's two quantiles
    are known close together, the gangs that start soonest first (`settled`).

    The runs are on forks taken when the refresh is made: what the live engine does meanwhile
    does not change them (the result is the forecast as of `now`)."""

    def __init__(
        self,
        engine: Engine,
        now: float,
        runtime_of: RuntimeOf,
        *,
        gangs: Collection[str] | None = None,
        bounds: Bounds = Bounds(),
    ) -> None:
        self.now = now
        self.targets = set(engine.pending if gangs is None else gangs) & engine.pending.keys()
        infos = [info for _, info in engine.pending.values()]
        self.median, self.p90 = (
            ForwardRun(
                engine,
                infos,
                now,
                runtime_of,
                q,
                self.targets,
                bounds,
                expected_arrivals(engine, now, bounds.arrivals, bounds.horizon),
            )
            for q in (0.5, 0.9)
        )
        self._returned: set[str] = set()
        self._finished = False

    @property
    def done(self) -> bool:
        return self.median.done and self.p90.done

    def advance(self, admissions: int | None = None) -> None:
        """One step of the run that has started fewer gangs (a cycle ended after `admissions`
        admissions, the next call going on at the same instant); nothing once both are done."""
        runs = [r for r in (self.median, self.p90) if not r.done]
        if runs:
            min(runs, key=lambda r: len(r.starts)).advance(admissions)

    def settled(self) -> dict[str, StartForecast]:
        """The forecasts settled since the last call: gangs now started in both runs (or in
        one, the other done without starting them); once both runs are done, every target
        not returned before. Each target is returned once; the cost is in what is returned."""
        median, p90 = self.median, self.p90
        out: dict[str, StartForecast] = {}
        for run in (median, p90):
            fresh, run.fresh = run.fresh, []
            for name in fresh:
                m, p = median.starts.get(name), p90.starts.get(name)
                if (m is not None or median.done) and (p is not None or p90.done):
                    out[name] = StartForecast(m, p)
        if self.done and not self._finished:
            self._finished = True
            out.update((n, f) for n, f in self.forecasts().items() if n not in self._returned)
        self._returned.update(out)
        return out

    def forecasts(self) -> dict[str, StartForecast]:
        """Every target's forecast (None at a quantile whose run did not start it)."""
        median, p90 = self.median.starts, self.p90.starts
        return {n: StartForecast(median.get(n), p90.get(n)) for n in sorted(self.targets)}


class ForwardRun:
    """One forward run with every gang's runtime at quantile `q`: when each target starts.

    Each `advance` runs one cycle on the fork at the current simulated instant, then finishes
    the admitted gangs whose estimated end comes next and moves the clock there (or to one of
    the engine's timers: evict after, minimum runtime). It is done once every target has
    started, or at the horizon or a bound."""

    def __init__(
        self,
        live: Engine,
        pending: list[GangInfo],
        now: float,
        runtime_of: RuntimeOf,
        q: float,
        targets: set[str],
        bounds: Bounds,
        coming: Iterable[Arrival] = (),
    ) -> None:
        """`pending`: the live engine's pending gangs. They and its admitted gangs are taken
        into the fork a slice at a time by the first calls of `advance` (taking them all at
        once costs like a few cycles). `coming`: gangs that arrive later, the soonest first
        (see `expected_arrivals`); each runs as long as the gang it copies."""
        self.engine = live.fork(gangs=False)
        self.admitted_left = live.admitted_gangs()
        self.adopting = list(pending)
        self.now, self.t, self.q = now, now, q
        self.runtime_of, self.bounds = runtime_of, bounds
        # The gangs admitted in the run (they are back in their queue if evicted).
        self.gangs: dict[str, Gang] = {}
        self.ends: list[tuple[float, str, int]] = []
        self.admissions: dict[str, int] = {}  # gang -> how many times admitted, to skip stale ends
        self.taking = True
        self.waiting = set(targets)
        self.starts: dict[str, float] = {}
        self.fresh: list[str] = []  # targets started since Refresh.settled last looked
        self.cycles = self.admitted = 0
        # While set, admitted gangs ending by then are still to finish before the next cycle.
        self.ending: float | None = None
        self.budget = math.inf if bounds.max_admissions is None else bounds.max_admissions
        self._coming = iter(coming)
        self.next_arrival = next(self._coming, None)
        self.copy_of: dict[str, Gang] = {}
        self.done = not self.waiting

    def advance(self, admissions: int | None = None) -> None:
        """One cycle at the current instant (ended after `admissions` admissions: then the
        next call goes on at the same instant), then the clock moves to the next end."""
        if self.done:
            return
        engine, t, q = self.engine, self.t, self.q
        if self.taking:
            self._take()
            return
        if self.ending is not None and not self._finish(admissions):
            return
        decisions = engine.cycle(t, report=False, max_admissions=admissions)
        # A cycle cut short (more may fit at this instant) goes on at the next call.
        cut = admissions is not None and len(decisions.admissions) >= admissions
        self.cycles += 0 if cut else 1
        self.admitted += len(decisions.admissions)
        for eviction in decisions.evictions:
            engine.add_pending(self.gangs[eviction.gang])
        for admission in decisions.admissions:
            name = admission.gang
            if name in self.waiting:
                self.waiting.discard(name)
                self.starts[name] = t
                self.fresh.append(name)
            gang = self.gangs[name] = engine.running[name][1].info.gang
            times = self.admissions[name] = self.admissions.get(name, 0) + 1
            end = t + self._runtime(gang).quantile(q)
            heapq.heappush(self.ends, (end, name, times))
        bounds, ends = self.bounds, self.ends
        if not self.waiting or self.cycles >= bounds.max_cycles or self.admitted >= self.budget:
            self.done = True
            return
        if cut:
            return
        recheck = engine.recheck_at
        nxt = min(
            ends[0][0] if ends else math.inf,
            math.inf if recheck is None else recheck,
            self.next_arrival.gang.created if self.next_arrival else math.inf,
        )
        if nxt > self.now + bounds.horizon:
            self.done = True
            return
        self.t = max(nxt, t)
        self.ending = nxt + bounds.resolution
        self._finish(admissions)

    def _take(self) -> None:
        """Take the next slice of the live engine's gangs into the fork, admitted ones first
        (each with its estimated end)."""
        engine, now, q = self.engine, self.now, self.q
        admitted = self.admitted_left(ADOPT_SLICE)
        for gang in admitted:
            engine.add_admitted(gang)
            self.gangs[gang.gang.name] = gang.gang
            ran = max(now - gang.admitted_at, 0.0)
            end = gang.admitted_at + self.runtime_of(gang.gang).quantile(q, ran)
            heapq.heappush(self.ends, (max(end, now), gang.gang.name, 0))
        if admitted:
            return
        start = max(len(self.adopting) - ADOPT_SLICE, 0)
        engine.adopt(self.adopting[start:])
        del self.adopting[start:]
        self.taking = bool(self.adopting)

    def _runtime(self, gang: Gang) -> Runtime:
        """What is known of the runtime of `gang` (an expected arrival runs as its original)."""
        return self.runtime_of(self.copy_of.get(gang.name, gang))

    def _finish(self, limit: int | None) -> bool:
        """Finish the admitted gangs whose ends are due by `ending` (at most `limit` of them:
        the next call goes on), and take in the gangs arriving by then; True once none is
        left, the clock at the last of them."""
        ends, engine, done = self.ends, self.engine, 0
        assert self.ending is not None
        while (arrival := self.next_arrival) is not None and arrival.gang.created <= self.ending:
            self.next_arrival = next(self._coming, None)
            engine.add_pending(arrival.gang)
            self.copy_of[arrival.gang.name] = arrival.copy_of
            self.t = max(self.t, arrival.gang.created)
        while ends and ends[0][0] <= self.ending:
            if limit is not None and done >= limit:
                return False
            end, name, times = heapq.heappop(ends)
            if times == self.admissions.get(name, 0) and name in engine.running:
                engine.finish(name)
                self.t = max(self.t, end)
                done += 1
        self.ending = None
        return True
