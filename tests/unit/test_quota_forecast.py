"""Start-time forecasts: the cycle run forward from the live state, the live engine untouched."""

from __future__ import annotations

from controller.quota import AdmittedGang, Engine, Gang
from controller.quota.forecast import Bounds, Runtime, RuntimeHistory, StartForecast, forecast
from tests.unit.test_quota_builders import gang, node, queue, running

HOUR = 3600.0


def one_node_engine(*admitted: AdmittedGang, pending: tuple[Gang, ...] = ()) -> Engine:
    engine = Engine([queue("a", 8, cohort=None)], [node("n1")])
    for a in admitted:
        engine.add_admitted(a)
    for g in pending:
        engine.add_pending(g)
    return engine


def learned(*hours: float) -> Runtime:
    return Runtime(samples=tuple(sorted(h * HOUR for h in hours)))


def test_a_gang_behind_one_running_1_hour_gang_that_fills_the_queue_starts_in_about_an_hour() -> (
    None
):
    engine = one_node_engine(running(gang("big", "a"), "n1", at=0.0), pending=(gang("next", "a"),))

    result = forecast(engine, 0.0, lambda g: learned(1.0))

    assert result == {"next": StartForecast(HOUR, HOUR)}


def test_a_gang_that_fits_now_is_forecast_to_start_now() -> None:
    engine = one_node_engine(pending=(gang("small", "a", gpus=4),))

    assert forecast(engine, 50.0, lambda g: learned(1.0)) == {"small": StartForecast(50.0, 50.0)}


def test_the_p90_forecast_comes_from_the_long_runtimes_of_the_queue() -> None:
    engine = one_node_engine(running(gang("big", "a"), "n1", at=0.0), pending=(gang("next", "a"),))
    history = learned(*([1.0] * 8), 5.0, 5.0)

    result = forecast(engine, 0.0, lambda g: history)["next"]

    assert result.median == HOUR
    assert result.p90 == 5 * HOUR


def test_gangs_queued_one_behind_another_add_up_their_runtimes() -> None:
    pending = (gang("second", "a", created=1.0), gang("third", "a", created=2.0))
    engine = one_node_engine(running(gang("first", "a"), "n1", at=0.0), pending=pending)

    result = forecast(engine, 0.0, lambda g: learned(2.0))

    assert result["second"].median == 2 * HOUR
    assert result["third"].median == 4 * HOUR


def test_a_declared_runtime_wins_over_the_learned_one() -> None:
    engine = one_node_engine(running(gang("big", "a"), "n1", at=0.0), pending=(gang("next", "a"),))
    history = RuntimeHistory()
    for _ in range(10):
        history.add("a", 5 * HOUR)

    def runtime_of(g: Gang) -> Runtime:
        return history.runtime(g.queue, declared=HOUR / 2 if g.name == "big" else None)

    assert forecast(engine, 0.0, runtime_of)["next"] == StartForecast(HOUR / 2, HOUR / 2)


def test_a_running_gang_that_outlived_its_learned_runtimes_is_expected_to_run_on() -> None:
    engine = one_node_engine(running(gang("big", "a"), "n1", at=0.0), pending=(gang("next", "a"),))

    result = forecast(engine, 3 * HOUR, lambda g: learned(1.0))["next"]

    assert result.median == 6 * HOUR  # as long again as it has run
    assert result.p90 is not None and result.p90 > result.median


def test_learned_runtimes_shorter_than_what_a_gang_has_run_are_ruled_out() -> None:
    runtime = learned(0.5, 1.0, 2.0, 4.0)

    assert runtime.quantile(0.5, ran=0.0) == 1.0 * HOUR
    assert runtime.quantile(0.5, ran=1.5 * HOUR) == 2.0 * HOUR


def test_a_queue_with_no_finished_gangs_uses_the_default_runtime() -> None:
    runtime = RuntimeHistory(default=HOUR).runtime("new")

    assert runtime.basis == "default"
    assert runtime.quantile(0.9) == HOUR


def test_the_history_keeps_only_the_most_recent_runtimes_of_each_queue() -> None:
    history = RuntimeHistory(keep=2)
    for seconds in (100.0, 200.0, 300.0):
        history.add("a", seconds)
    history.add("b", 5.0)

    assert history.runtime("a").samples == (200.0, 300.0)
    assert history.runtime("a").basis == "learned"
    assert history.runtime("b").samples == (5.0,)


def test_forecasting_leaves_the_live_engine_as_it_was() -> None:
    engine = one_node_engine(
        running(gang("big", "a"), "n1", at=0.0),
        pending=(gang("next", "a", created=1.0), gang("later", "a", created=2.0)),
    )

    forecast(engine, 0.0, lambda g: learned(1.0))

    assert set(engine.pending) == {"next", "later"}
    assert set(engine.running) == {"big"}
    assert [a.gang for a in engine.cycle(0.0).admissions] == []


def test_a_gang_that_cannot_start_within_the_horizon_has_no_forecast() -> None:
    engine = one_node_engine(running(gang("big", "a"), "n1", at=0.0), pending=(gang("next", "a"),))

    result = forecast(engine, 0.0, lambda g: learned(10.0), bounds=Bounds(horizon=HOUR))

    assert result == {"next": StartForecast(None, None)}


def test_a_gang_that_never_fits_has_no_forecast() -> None:
    engine = one_node_engine(pending=(gang("huge", "a", pods=2),))

    assert forecast(engine, 0.0, lambda g: learned(1.0)) == {"huge": StartForecast(None, None)}


def test_ends_close_together_are_taken_at_the_last_of_them() -> None:
    engine = Engine([queue("a", 8, cohort=None)], [node("n1")])
    engine.add_admitted(running(gang("x", "a", gpus=4), "n1", at=0.0))
    engine.add_admitted(running(gang("y", "a", gpus=4), "n1", at=30.0))
    engine.add_pending(gang("next", "a"))

    result = forecast(engine, 30.0, lambda g: learned(1.0), bounds=Bounds(resolution=60.0))

    assert result["next"].median == HOUR + 30.0


def test_only_the_named_gangs_are_forecast() -> None:
    pending = (gang("second", "a", created=1.0), gang("third", "a", created=2.0))
    engine = one_node_engine(running(gang("first", "a"), "n1", at=0.0), pending=pending)

    assert set(forecast(engine, 0.0, lambda g: learned(1.0), gangs=["third"])) == {"third"}


def test_a_refresh_bounded_in_admissions_leaves_the_gangs_beyond_it_without_a_forecast() -> None:
    pending = tuple(gang(f"g{i}", "a", created=float(i)) for i in range(4))
    engine = one_node_engine(running(gang("first", "a"), "n1", at=0.0), pending=pending)

    result = forecast(engine, 0.0, lambda g: learned(1.0), bounds=Bounds(max_admissions=2))

    assert [result[f"g{i}"].median for i in range(4)] == [HOUR, 2 * HOUR, None, None]
