"""Start-time forecasts: the admission cycle run forward from the live state, in simulated time.

Rule: pure, like the rest of the core: an Engine's state and what is known of runtimes in, each
pending gang's estimated start out. The live engine is never changed: the runs are on
`Engine.fork()`, which keeps its queues, nodes and gangs but none of its memory of past cycles.

How a forecast is made: two forward runs from `now`, one in which every gang runs its median
runtime and one in which every gang runs its 90th percentile. Each run finishes admitted gangs
at their estimated ends, runs the engine's own cycle at each such instant (and when one of the
engine's timers is due: evict after, minimum runtime), and notes when each pending gang is
first admitted. Gangs that arrive later are unknown to it, and so are gangs leaving early, so
a forecast is what happens if nothing else comes; the p90 run's longer runtimes leave room
for some of what does come (bench/bench_forecast.py measures how often the p90 holds).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass

from controller.quota.engine import Engine
from controller.quota.runtimes import DEFAULT_RUNTIME, HISTORY, Basis, Runtime, RuntimeHistory
from controller.quota.snapshot import Gang

__all__ = [
    "DEFAULT_RUNTIME",
    "HISTORY",
    "Basis",
    "Bounds",
    "Runtime",
    "RuntimeHistory",
    "RuntimeOf",
    "StartForecast",
    "forecast",
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


RuntimeOf = Callable[[Gang], Runtime]


def forecast(
    engine: Engine,
    now: float,
    runtime_of: RuntimeOf,
    *,
    gangs: Collection[str] | None = None,
    bounds: Bounds = Bounds(),
) -> dict[str, StartForecast]:
    """The estimated start of each pending gang of `engine` (or of those named in `gangs`)."""
    targets = set(engine.pending if gangs is None else gangs) & engine.pending.keys()
    median = _run(engine, now, runtime_of, 0.5, targets, bounds)
    p90 = _run(engine, now, runtime_of, 0.9, targets, bounds)
    return {name: StartForecast(median.get(name), p90.get(name)) for name in sorted(targets)}


def _run(
    live: Engine,
    now: float,
    runtime_of: RuntimeOf,
    q: float,
    targets: set[str],
    bounds: Bounds,
) -> dict[str, float]:
    """One forward run with every gang's runtime at quantile `q`: when each target starts."""
    engine = live.fork()
    gangs = {name: info.gang for name, (_, info) in engine.pending.items()}
    ends: list[tuple[float, str, int]] = []
    admissions: dict[str, int] = {}  # gang -> how many times admitted, to skip stale ends
    for name, (_, running) in engine.running.items():
        gangs[name] = running.info.gang
        ran = max(now - running.admitted_at, 0.0)
        end = running.admitted_at + runtime_of(running.info.gang).quantile(q, ran)
        ends.append((max(end, now), name, 0))
    heapq.heapify(ends)
    waiting = set(targets)
    starts: dict[str, float] = {}
    t, cycles, admitted = now, 0, 0
    budget = math.inf if bounds.max_admissions is None else bounds.max_admissions
    while waiting and cycles < bounds.max_cycles and admitted < budget:
        decisions = engine.cycle(t)
        cycles += 1
        admitted += len(decisions.admissions)
        for eviction in decisions.evictions:
            engine.add_pending(gangs[eviction.gang])
        for admission in decisions.admissions:
            name = admission.gang
            if name in waiting:
                waiting.discard(name)
                starts[name] = t
            admissions[name] = admissions.get(name, 0) + 1
            heapq.heappush(ends, (t + runtime_of(gangs[name]).quantile(q), name, admissions[name]))
        recheck = engine.recheck_at
        nxt = min(ends[0][0] if ends else math.inf, math.inf if recheck is None else recheck)
        if nxt > now + bounds.horizon:
            break
        t = max(nxt, t)
        while ends and ends[0][0] <= nxt + bounds.resolution:
            end, name, times = heapq.heappop(ends)
            if times == admissions.get(name, 0) and name in engine.running:
                engine.finish(name)
                t = max(t, end)
    return starts
