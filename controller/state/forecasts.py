"""Start-time forecasts of pending gangs: runtimes learned per queue, refreshed off the
admission path, written to the Workloads' status.

Rule: a refresh runs at most every `forecast_refresh` seconds, after a pass's decisions are
written, on a fork of the engine (controller/quota/forecast.py); a gang's forecast is written
only when a quantile moved by more than `SLACK` seconds, and only while its Workload still says
why it waits (a JSON patch that tests its pendingReason first, so a forecast never lands on a
Workload admitted since).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from controller.api import kinds
from controller.api.times import format_time, parse_time
from controller.api.workload import StartForecast as Written
from controller.quota.engine import Engine
from controller.quota.forecast import Bounds, RuntimeHistory, StartForecast, forecast
from controller.state.gangs import GangKey, ManagedGang
from controller.state.steps import Step
from controller.workloads.base import Patch, PatchType

# A forecast is written again only when its median or p90 moved by more than this.
SLACK = 60.0
# A forward run of a refresh stops after this many admissions (each costs about what it costs
# the live engine) or cycles (a cycle when a timer is due judges everything again): the gangs
# beyond get no forecast (bench/bench_forecast.py measures the cost).
MAX_ADMISSIONS = 1000
MAX_CYCLES = 200


class Forecaster:
    """Learns how long each queue's gangs hold their admission, and refreshes the forecasts."""

    def __init__(self, refresh: float | None, bounds: Bounds | None = None) -> None:
        self.refresh_every = refresh
        self.bounds = bounds or Bounds(max_cycles=MAX_CYCLES, max_admissions=MAX_ADMISSIONS)
        self.history = RuntimeHistory()
        self._last = -math.inf

    def ended(self, queue: str | None, admitted_at: float, now: float) -> None:
        """An admitted gang of `queue` left the engine (finished or gone) at `now`."""
        if queue is not None and self.refresh_every is not None:
            self.history.add(queue, now - admitted_at)

    def due(self, now: float) -> bool:
        return self.refresh_every is not None and now - self._last >= self.refresh_every

    def refresh(
        self, engine: Engine, now: float, gang_of: Callable[[str], ManagedGang | None]
    ) -> dict[GangKey, list[Step]]:
        """The forecast writes of the pending gangs whose forecast moved."""
        self._last = now

        def declared(gang_id: str) -> float | None:
            gang = gang_of(gang_id)
            return gang.max_runtime() if gang is not None else None

        made = forecast(
            engine,
            now,
            lambda g: self.history.runtime(g.queue, declared(g.name)),
            bounds=self.bounds,
        )
        work: dict[GangKey, list[Step]] = {}
        for gang_id, estimate in made.items():
            gang = gang_of(gang_id)
            reason = gang.pending_reason() if gang is not None else ""
            if gang is None or gang.finished is not None or not reason:
                continue
            queue = engine.pending[gang_id][1].gang.queue
            before = (
                gang.workload.status.start_forecast
                if gang.workload and gang.workload.status
                else None
            )
            if not moved(before, estimate):
                continue
            basis = self.history.runtime(queue, gang.max_runtime()).basis
            work[gang.key] = [forecast_write(gang, reason, written(estimate, basis, now))]
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


def moved(before: Written | None, now: StartForecast) -> bool:
    """Whether a forecast differs from the one written by more than SLACK at either quantile."""
    if before is None:
        return True
    for old, new in ((parse_time(before.median), now.median), (parse_time(before.p90), now.p90)):
        if (old is None) != (new is None):
            return True
        if old is not None and new is not None and abs(old - new) > SLACK:
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
