"""A pending gang's Workload shows when it is estimated to start (status.startForecast),
refreshed at most every `forecast_refresh` seconds from how long its queue's gangs ran."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from controller.api import kinds, names
from controller.api.times import format_time
from controller.api.workload import StartForecast, WorkloadStatus
from controller.quota import Engine
from controller.quota.forecast import Refresh
from controller.quota.forecast import StartForecast as Estimate
from controller.state.forecasts import STEP, Forecaster, moved
from controller.state.objects import as_patch
from tests.unit.controller_world import NOW, World, held_job, start
from tests.unit.test_quota_builders import gang, node, queue, running

JSON = dict[str, Any]
HOUR = 3600.0


def start_forecast(world: World, job: str) -> JSON | None:
    workload = world.workload(f"job-{job}")
    assert workload is not None
    shown: JSON | None = (workload.get("status") or {}).get("startForecast")
    return shown


async def passes(world: World, count: int = 2) -> None:
    for _ in range(count):
        await world.reconciler.reconcile_once()
        await world.api.settle()


async def complete(world: World, job: str) -> None:
    done = world.api.read_back(kinds.JOBS, job, "ns")
    assert done is not None
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    world.api.put(kinds.JOBS, done)
    await world.api.settle()


async def test_a_job_behind_one_that_fills_the_queue_is_told_it_starts_when_that_one_ends(
    started: list[World],
) -> None:
    clock = [NOW]
    jobs = ((kinds.JOBS, held_job("first", 4)), (kinds.JOBS, held_job("second", 4)))
    world = await start(started, World(*jobs, clock=lambda: clock[0], forecast_refresh=30.0))
    await passes(world, 3)
    assert start_forecast(world, "second") is None  # not yet told why it waits at the first

    clock[0] = NOW + 30  # the next refresh is due
    await passes(world, 1)

    assert world.suspended("second") is True
    # Nothing of the queue has finished yet: every gang is taken to run the default hour.
    assert start_forecast(world, "second") == {
        "median": format_time(NOW + HOUR),
        "p90": format_time(NOW + HOUR),
        "computedAt": format_time(NOW + 30),
        "basis": "default",
    }
    assert start_forecast(world, "first") is None


async def test_a_job_that_declares_its_most_runtime_is_taken_at_its_word(
    started: list[World],
) -> None:
    first = held_job("first", 4)
    first["spec"]["activeDeadlineSeconds"] = 600
    second = held_job("second", 4)
    second["metadata"].setdefault("annotations", {})[names.MAX_RUNTIME_ANNOTATION] = "120"
    clock = [NOW]
    jobs = ((kinds.JOBS, first), (kinds.JOBS, second))
    world = await start(started, World(*jobs, clock=lambda: clock[0], forecast_refresh=30.0))
    await passes(world, 3)
    clock[0] = NOW + 30
    await passes(world, 1)

    assert world.suspended("second") is True
    # The first runs at most its deadline (not the default hour), and the second's own
    # declaration is its basis.
    assert start_forecast(world, "second") == {
        "median": format_time(NOW + 600),
        "p90": format_time(NOW + 600),
        "computedAt": format_time(NOW + 30),
        "basis": "declared",
    }


async def test_forecasts_learn_how_long_the_queues_gangs_ran_and_leave_admitted_gangs(
    started: list[World],
) -> None:
    clock = [NOW]
    jobs = [(kinds.JOBS, held_job(name, 4)) for name in ("first", "second", "third")]
    world = await start(started, World(*jobs, clock=lambda: clock[0], forecast_refresh=30.0))
    await passes(world, 3)
    clock[0] = NOW + 30
    await passes(world, 1)
    assert start_forecast(world, "second") is not None

    clock[0] = NOW + 600  # the first ran ten minutes
    await complete(world, "first")
    await passes(world, 3)

    assert world.suspended("second") is False
    assert start_forecast(world, "second") is None
    shown = start_forecast(world, "third")
    assert shown is not None
    assert (shown["median"], shown["basis"]) == (format_time(NOW + 1200), "learned")


async def test_a_job_deleted_while_it_runs_teaches_no_runtime(started: list[World]) -> None:
    # Only gangs that ran to their end tell how long their queue's gangs run, as in the
    # simulator: a cancelled one would make every estimate short.
    world = await start(started, World((kinds.JOBS, held_job("cancelled", 1))))
    await passes(world, 3)
    assert world.suspended("cancelled") is False

    await world.api.fetch("DELETE", "/apis/batch/v1/namespaces/ns/jobs/cancelled")
    await world.api.settle()
    await passes(world, 3)

    assert world.api.read_back(kinds.JOBS, "cancelled", "ns") is None
    assert world.state.mirror.engine.runtimes.runtime("cq").samples == ()
    assert world.state.forecasts.history.runtime("cq").samples == ()


async def test_forecasts_turned_off_are_never_written(started: list[World]) -> None:
    jobs = ((kinds.JOBS, held_job("first", 4)), (kinds.JOBS, held_job("second", 4)))
    world = await start(started, World(*jobs, forecast_refresh=None))

    await passes(world, 3)

    assert world.suspended("second") is True
    assert start_forecast(world, "second") is None


async def test_a_forecast_that_moved_less_than_a_minute_is_not_written_again(
    started: list[World],
) -> None:
    clock = [NOW]
    jobs = ((kinds.JOBS, held_job("first", 4)), (kinds.JOBS, held_job("second", 4)))
    world = await start(started, World(*jobs, clock=lambda: clock[0], forecast_refresh=30.0))
    await passes(world, 3)
    clock[0] = NOW + 30
    await passes(world, 1)

    clock[0] = NOW + 60  # due again; the first's end is still an hour after its admission
    await passes(world, 1)

    shown = start_forecast(world, "second")
    assert shown is not None and shown["computedAt"] == format_time(NOW + 30)


def test_a_status_write_never_writes_back_the_forecast_it_saw_and_admission_removes_it() -> None:
    seen = StartForecast(
        median="2026-11-27T12:00:00Z", computed_at="2026-11-27T11:00:00Z", basis="learned"
    )
    waiting = WorkloadStatus(pending_reason="Waiting for quota", start_forecast=seen)
    assert "startForecast" not in as_patch(waiting)
    admitted = waiting.model_copy(update={"pending_reason": None, "start_forecast": None})
    assert as_patch(admitted)["startForecast"] is None


async def test_under_a_cpu_budget_a_refresh_spreads_over_passes_and_tells_the_soonest_first(
    started: list[World],
) -> None:
    jobs = [(kinds.JOBS, held_job(name, 4)) for name in ("first", "second", "third")]
    # A budget so small that each pass works on the refresh for one step only.
    world = await start(started, World(*jobs, forecast_refresh=30.0, forecast_budget=1e-9))

    shown: list[tuple[bool, bool]] = []
    for _ in range(15):
        await passes(world, 1)
        second, third = start_forecast(world, "second"), start_forecast(world, "third")
        shown.append((second is not None, third is not None))

    assert shown[0] == (False, False)
    assert shown.index((True, False)) < shown.index((True, True))  # the sooner start first
    assert second is not None and third is not None
    assert (second["median"], third["median"]) == (
        format_time(NOW + HOUR),
        format_time(NOW + 2 * HOUR),
    )
    assert third["computedAt"] == format_time(NOW)  # as of the pass the refresh was made in


def test_a_start_far_off_is_not_rewritten_for_a_change_small_beside_the_wait() -> None:
    def written(median: float) -> StartForecast:
        at = format_time(median)
        return StartForecast(median=at, p90=at, computed_at=format_time(NOW), basis="learned")

    day = 24 * HOUR
    # A day away: a tenth of that (2.4 h) is tolerated, more is not.
    assert not moved(written(NOW + day), Estimate(NOW + day + 2 * HOUR, NOW + day + 2 * HOUR), NOW)
    assert moved(written(NOW + day), Estimate(NOW + day + 3 * HOUR, NOW + day + 3 * HOUR), NOW)
    # Five minutes away: only the minute of slack.
    assert moved(written(NOW + 300), Estimate(NOW + 400, NOW + 400), NOW)
    assert not moved(written(NOW + 300), Estimate(NOW + 330, NOW + 330), NOW)


def test_a_pass_makes_the_refresh_steps_that_fit_its_cpu_budget_and_stops_before_overrunning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = Engine([queue("a", 8, cohort=None)], [node("n1")])
    engine.add_admitted(running(gang("big", "a"), "n1", at=0.0))
    for i in range(6):
        engine.add_pending(gang(f"g{i}", "a", created=float(i)))
    steps: list[int | None] = []
    advance = Refresh.advance

    def counted(self: Refresh, admissions: int | None = None) -> None:
        steps.append(admissions)
        advance(self, admissions)

    monkeypatch.setattr(Refresh, "advance", counted)
    ticks = itertools.count()
    # Each step costs 0.1 ms of CPU on this clock: 0.5 ms fit four, the fifth would overrun.
    forecaster = Forecaster(30.0, budget_ms=0.5, clock=lambda: next(ticks) / 10_000)

    forecaster.refresh(engine, 0.0, lambda _: None)

    assert len(steps) == 4
    assert forecaster.under_way is not None
    while forecaster.under_way is not None:
        forecaster.refresh(engine, 0.0, lambda _: None)
    assert forecaster.last_passes > 1
    assert set(steps) == {STEP}  # a few admissions or ends a step


async def test_under_a_budget_a_pass_writes_at_most_its_share_of_forecasts(
    started: list[World],
) -> None:
    names = [f"j{i}" for i in range(7)]
    jobs = [(kinds.JOBS, held_job(name, 4)) for name in names]
    # A budget that makes the whole refresh in one pass; the writes are what is spread.
    world = World(*jobs, forecast_refresh=3600.0, forecast_budget=1000.0, forecast_writes=2)
    world = await start(started, world)

    shown: list[int] = []
    for _ in range(10):
        await passes(world, 1)
        shown.append(sum(1 for name in names if start_forecast(world, name) is not None))

    steps = [after - before for before, after in zip([0, *shown], shown, strict=False)]
    assert max(steps) == 2  # never more than two a pass
    assert shown[-1] == 6  # every waiting job, in the end (the first one runs)
