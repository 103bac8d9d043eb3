"""Start-time forecasts of pending gangs: runtimes learned per queue, refreshed off the
admission path, written to the Workloads' status.

Rule: a refresh (controller/quota/forecast.py: two forward runs on forks of the engine) is
made at most every `forecast_refresh` seconds and worked on after each pass's decisions are
written, for at most `forecast_budget` milliseconds of CPU a pass (at least one cycle of a
run), so that a large backlog costs each pass a bounded slice and its refresh takes more
passes. A gang's forecast is written as soon as both runs have settled it (the gangs that
start soonest first), and only when a quantile moved by more than `SLACK` seconds or
`RELATIVE` of the time until it, and only while its Workload still says why it waits (a JSON
patch that tests its pendingReason first, so a forecast never lands on a Workload admitted
since).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from controller import defaults
from controller.api import kinds
from controller.api.times import format_time, parse_time
from controller.api.workload import StartForecast as Written
from controller.quota.engine import Engine
from controller.quota.forecast import (
    Bounds,
    Refresh,
    RuntimeHistory,
    StartForecast,
    learned_runtimes,
)
from controller.quota.runtimes import size_class
from controller.quota.snapshot import Gang
from controller.state.gangs import GangKey, ManagedGang
from controller.state.steps import Step
from controller.workloads.base import Patch, PatchType

# A forecast is written again only when its median or p90 moved by more than this, or by
# more than RELATIVE of the time from the refresh to it (a start a day away is not rewritten
# for an hour's change; each write costs a pass about what an admission's status write does).
SLACK = 60.0
RELATIVE = 0.1
# A forward run of a refresh stops after this many admissions (each costs about what it costs
# the live engine) or cycles (a cycle when a timer is due judges everything again): the gangs
# beyond get no forecast (bench/bench_forecast.py measures the cost).
MAX_ADMISSIONS = 20_000
MAX_CYCLES = 5_000
# Under a budget, a run is worked on this many admissions (or ends) at a time, about 0.5 ms of
# CPU at 10,000 pending (the budget is looked at between such steps).
STEP = 8
# A pass that writes forecasts looks at no more than this many settled ones per write it may
# make (those that did not move are passed over), so that passing over stays cheap too.
LOOK = 16


class Forecaster:
    """Learns how long each queue's gangs hold their admission, and refreshes the forecasts,
    a slice of CPU a pass (`budget_ms`; None: a refresh is made whole in one pass)."""

    def __init__(
        self,
        refresh: float | None,
        bounds: Bounds | None = None,
        budget_ms: float | None = defaults.FORECAST_BUDGET_MS,
        writes: int = defaults.FORECAST_WRITES,
        clock: Callable[[], float] = time.process_time,
        arrivals: float = defaults.FORECAST_ARRIVALS_SECONDS,
    ) -> None:
        self.refresh_every = refresh
        self.bounds = bounds or Bounds(
            max_cycles=MAX_CYCLES, max_admissions=MAX_ADMISSIONS, arrivals=arrivals
        )
        self.budget_ms = budget_ms
        self.history = RuntimeHistory()
        self._clock = clock
        self._last = -math.inf
        self._run: Refresh | None = None
        # How many passes the refresh under way, and the last one finished, took.
        self.passes = 0
        self.last_passes = 0
        # How many forecast writes the refreshes have planned.
        self.written = 0
        # Forecasts settled and not yet looked at for writing: (gang, forecast, as of when).
        self._settled: deque[tuple[str, StartForecast, float]] = deque()
        self.writes = writes

    @property
    def under_way(self) -> Refresh | None:
        """The refresh being worked on, if any."""
        return self._run

    def forget(self) -> None:
        """Drop the refresh under way and the forecasts left to write (the next refresh
        starts from scratch when due)."""
        self._run = None
        self._settled.clear()

    def ended(self, queue: str | None, gang: Gang | None, admitted_at: float, now: float) -> None:
        """An admitted gang of `queue` finished at `now`."""
        if queue is not None and self.refresh_every is not None:
            self.history.add(queue, now - admitted_at, None if gang is None else size_class(gang))

    def due(self, now: float) -> bool:
        """Whether a refresh is under way or has forecasts left to write, or one may start."""
        if self.refresh_every is None:
            return False
        busy = self._run is not None or bool(self._settled)
        return busy or now - self._last >= self.refresh_every

    def refresh(
        self, engine: Engine, now: float, gang_of: Callable[[str], ManagedGang | None]
    ) -> dict[GangKey, list[Step]]:
        """This pass's share of the forecasts: under a budget, the writes of at most `writes`
        settled forecasts that moved, or if none is to be written, steps of the refresh
        (starting one from `engine` if none is under way) for the pass's budget. Without a
        budget, the whole refresh and all its writes."""
        if self.budget_ms is None:
            self._steps(engine, now, gang_of)
            return self._writes(engine, gang_of, None)
        work = self._writes(engine, gang_of, self.writes)
        if not work:
            self._steps(engine, now, gang_of)
        return work

    def _steps(
        self, engine: Engine, now: float, gang_of: Callable[[str], ManagedGang | None]
    ) -> None:
        run = self._run
        if run is None:
            if not self.due(now):
                return

            def declared(g: Gang) -> float | None:
                gang = gang_of(g.name)
                return gang.max_runtime() if gang else None

            runtime = learned_runtimes(self.history, engine, now, declared)
            self._last = now
            run = self._run = Refresh(engine, now, runtime, bounds=self.bounds)
            self.passes = 0
        self.passes += 1
        budget = math.inf if self.budget_ms is None else self.budget_ms / 1000
        step = None if self.budget_ms is None else STEP
        # Steps while the next one, if it costs what the last did, still fits the budget (the
        # first is always made, or a refresh would never end).
        start = last = self._clock()
        run.advance(step)
        while not run.done:
            spent = self._clock()
            if (spent - start) + (spent - last) >= budget:
                break
            last = spent
            run.advance(step)
        if run.done:
            self._run = None
            self.last_passes = self.passes
        self._settled.extend((gang_id, f, run.now) for gang_id, f in run.settled().items())

    def _writes(
        self,
        engine: Engine,
        gang_of: Callable[[str], ManagedGang | None],
        limit: int | None,
    ) -> dict[GangKey, list[Step]]:
        """The writes of settled forecasts that moved, the soonest settled first (at most
        `limit`, looking at no more than LOOK times as many)."""
        work: dict[GangKey, list[Step]] = {}
        settled = self._settled
        looks = math.inf if limit is None else LOOK * limit
        while settled and looks > 0 and (limit is None or len(work) < limit):
            looks -= 1
            gang_id, estimate, at = settled.popleft()
            gang = gang_of(gang_id)
            reason = gang.pending_reason() if gang is not None else ""
            if gang is None or gang.finished is not None or not reason:
                continue
            if gang_id not in engine.pending:
                continue
            before = (
                gang.workload.status.start_forecast
                if gang.workload and gang.workload.status
                else None
            )
            if not moved(before, estimate, at):
                continue
            core = engine.pending[gang_id][1].gang
            basis = self.history.runtime(core.queue, gang.max_runtime(), size_class(core)).basis
            work[gang.key] = [forecast_write(gang, reason, written(estimate, basis, at))]
        self.written += len(work)
        return work


def written(estimate: StartForecast, basis: str, now: float) -> Written:
    def stamp(at: float | None) -> str | None:
        return None if at is None else format_time(at)

    return Written.model_validate(
        {
            "median": stamp(estimate.median),
            "p90": stamp(estimate.p90),
            "computedAt": format_time(now),
            "basis": basis,
        }
    )


def moved(before: Written | None, now: StartForecast, at: float) -> bool:
    """Whether a forecast made at `at` differs from the one written by more than SLACK, or
    than RELATIVE of the time from `at` to it, at either quantile."""
    if before is None:
        return True
    for old, new in ((parse_time(before.median), now.median), (parse_time(before.p90), now.p90)):
        if (old is None) != (new is None):
            return True
        if (
            old is not None
            and new is not None
            and abs(old - new) > max(SLACK, RELATIVE * (new - at))
        ):
            return True
    return False


def forecast_write(gang: ManagedGang, reason: str, estimate: Written) -> Patch:
    """Set the Workload's startForecast if it still says `reason` (else the API server refuses
    the patch, which is expected: the gang was admitted or told something else since)."""
    body = [
        {"op": "test", "path": "/status/pendingReason", "value": reason},
        {
            "op": "add",
            "path": "/status/startForecast",
            "value": estimate.model_dump(mode="json", by_alias=True, exclude_none=True),
        },
    ]
    return Patch(
        kinds.WORKLOADS,
        gang.namespace,
        gang.name,
        body,
        PatchType.JSON,
        expected=True,
        subresource="status",
    )
