"""Start-time forecasts: the cycle run forward from the live state, the live engine untouched."""

from __future__ import annotations

import pytest

from controller.quota import AdmittedGang, Engine, Gang, PodSet
from controller.quota.forecast import (
    Bounds,
    Refresh,
    Runtime,
    RuntimeHistory,
    StartForecast,
    expected_arrivals,
    forecast,
    learned_runtimes,
)
from controller.quota.runtimes import ENOUGH, running_times, size_class
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


def test_a_big_gang_runs_as_long_as_its_queues_big_gangs_once_enough_have_finished() -> None:
    history = RuntimeHistory()
    big, small = size_class(gang("big", "a", pods=4)), size_class(gang("small", "a", pods=1))
    for _ in range(ENOUGH - 1):
        history.add("a", 10 * HOUR, big)
    for _ in range(100):
        history.add("a", 0.1 * HOUR, small)

    # Too few of its size yet: the queue's runtimes, all sizes.
    assert history.runtime("a", size=big).quantile(0.5) == 0.1 * HOUR
    history.add("a", 10 * HOUR, big)
    assert history.runtime("a", size=big).quantile(0.5) == 10 * HOUR
    assert history.runtime("a", size=small).quantile(0.9) == 0.1 * HOUR
    assert history.runtime("a").quantile(0.5) == 0.1 * HOUR


def test_gangs_still_running_count_as_runtimes_at_least_as_long_as_they_have_run() -> None:
    # Ten finished after 6 minutes; ten others have run 5 h and run on: at the p90 a gang of the
    # queue runs well past 5 h (a heavy tail from there: 5 h / (1 - 0.8), the p90 falling 80 %
    # into the weight of those still running), not the 6 minutes its finished gangs say.
    history = RuntimeHistory()
    for _ in range(10):
        history.add("a", 0.1 * HOUR)
    running = running_times([(gang(f"long{i}", "a"), 5 * HOUR) for i in range(10)])

    assert history.runtime("a").quantile(0.9) == 0.1 * HOUR
    assert history.runtime("a", running=running).quantile(0.9) == pytest.approx(25 * HOUR)
    assert history.runtime("a", running=running).quantile(0.5) == 0.1 * HOUR


def test_a_gang_past_every_finished_runtime_does_not_end_at_the_longest_still_running() -> None:
    history = RuntimeHistory()
    for i in range(30):
        history.add("a", 600.0 + 10 * i)
    elapsed = (36000.0, 36600.0, 37200.0)
    running = running_times([(gang(f"r{i}", "a"), t) for i, t in enumerate(elapsed)])
    runtime = history.runtime("a", running=running)

    # Not 37,200 s at both quantiles (the longest still running is only a lower bound).
    assert runtime.quantile(0.5, 36000.0) == pytest.approx(2 * 37200.0)
    assert runtime.quantile(0.9, 36000.0) == pytest.approx(10 * 37200.0)
    assert runtime.quantile(0.5, 40000.0) == pytest.approx(2 * 40000.0)


def test_a_gang_still_running_shorter_than_some_finished_runtimes_moves_its_weight_to_them() -> (
    None
):
    history = RuntimeHistory()
    for seconds in (100.0, 300.0, 400.0):
        history.add("a", seconds)
    running = running_times([(gang("r", "a"), 200.0)])

    runtime = history.runtime("a", running=running)

    # The one at >= 200 s weighs on 300 s and 400 s, half each: 1, 1.5, 1.5 of 4.
    assert runtime.samples == (100.0, 300.0, 400.0)
    assert runtime.cumulative == (1.0, 2.5, 4.0)
    assert runtime.quantile(0.25) == 100.0
    assert runtime.quantile(0.6) == 300.0
    assert runtime.quantile(0.7) == 400.0


def test_a_forecast_counts_how_long_the_running_gangs_of_the_queue_have_run() -> None:
    history = RuntimeHistory()
    for _ in range(30):
        history.add("a", 0.1 * HOUR)
    engine = one_node_engine(
        running(gang("long", "a"), "n1", at=-20 * HOUR), pending=(gang("next", "a"),)
    )
    for i in range(10):  # the queue's other long ones, elsewhere
        engine.add_admitted(running(gang(f"other{i}", "b", pods=1, gpus=1), at=-20 * HOUR))

    result = forecast(engine, 0.0, learned_runtimes(history, engine, 0.0))["next"]

    assert result.median is not None and result.median >= 20 * HOUR


def test_gangs_are_sized_by_powers_of_two_of_their_gpus_or_else_of_their_pods() -> None:
    one, three, four = (gang(n, "a", pods=1, gpus=g) for n, g in (("1", 1), ("3", 3), ("4", 4)))
    cpu_only = Gang("c", "a", (PodSet(5, {"cpu": 1000}),))

    assert size_class(one) < size_class(three) < size_class(four)
    assert size_class(gang("2x2", "a", pods=2, gpus=2)) == size_class(four)
    assert size_class(cpu_only) != size_class(gang("5x1", "a", pods=5, gpus=1))


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


def two_queue_backlog() -> Engine:
    """Two queues sharing a cohort on four 8-GPU nodes, all busy, with a line of 1- and 2-GPU
    gangs behind them and a high-priority one."""
    engine = Engine(
        [queue("a", 16, borrowing_limit=16), queue("b", 16, borrowing_limit=16)],
        [node(f"n{i}") for i in range(4)],
    )
    for i in range(4):
        engine.add_admitted(running(gang(f"busy{i}", "ab"[i % 2]), f"n{i}", at=-600.0 * i))
    for i in range(24):
        g = gang(f"p{i}", "ab"[i % 3 == 0], gpus=1 + i % 2, created=float(i), priority=i // 20)
        engine.add_pending(g)
    return engine


def runtimes(g: Gang) -> Runtime:
    return learned(0.5, 1.0, 1.5, 3.0) if g.queue == "a" else learned(2.0, 4.0)


def test_a_forecast_made_a_few_admissions_at_a_time_is_the_forecast_made_whole() -> None:
    engine = two_queue_backlog()
    whole = forecast(engine, 0.0, runtimes)

    refresh = Refresh(engine, 0.0, runtimes)
    calls = 0
    while not refresh.done:
        refresh.advance(admissions=1)
        calls += 1

    assert refresh.forecasts() == whole
    assert all(f.median is not None and f.p90 is not None for f in whole.values())
    assert calls > 2 * len(whole)  # one admission or one end a call, in both runs


def test_the_gangs_that_start_soonest_are_settled_first_and_each_once() -> None:
    engine = two_queue_backlog()
    refresh = Refresh(engine, 0.0, runtimes)
    batches: list[dict[str, StartForecast]] = []
    while not refresh.done:
        refresh.advance(admissions=2)
        batches.append(refresh.settled())
    batches.append(refresh.settled())

    settled = [name for batch in batches for name in batch]
    assert sorted(settled) == sorted(engine.pending)  # every gang once
    firsts = next(batch for batch in batches if batch)
    assert len(firsts) < len(engine.pending)  # known before the runs are done
    first_median = max(f.median or 0.0 for f in firsts.values())
    assert first_median <= min(f.median or 0.0 for b in batches[-3:] for f in b.values())
    assert {n: f for b in batches for n, f in b.items()} == refresh.forecasts()


def test_a_cycle_cut_short_after_some_admissions_goes_on_at_the_next_cycle() -> None:
    engine = Engine([queue("a", 8, cohort=None)], [node("n1")])
    for i in range(4):
        engine.add_pending(gang(f"g{i}", "a", gpus=2, created=float(i)))

    first = engine.cycle(0.0, max_admissions=3)
    rest = engine.cycle(0.0, max_admissions=3)

    assert [a.gang for a in first.admissions] == ["g0", "g1", "g2"]
    assert [a.gang for a in rest.admissions] == ["g3"]


def test_a_fork_shares_the_pending_gangs_precomputed_shapes_and_leaves_them_alone() -> None:
    engine = two_queue_backlog()
    engine.cycle(0.0)

    fork = engine.fork()
    admitted = fork.cycle(7200.0 * 4)  # nothing has ended in the fork: nothing more fits

    assert admitted.admissions == ()
    assert all(fork.pending[n][1] is info for n, (_, info) in engine.pending.items())
    for name in list(fork.running):
        fork.finish(name)
    assert len(fork.cycle(7200.0 * 4).admissions) > 0
    assert set(engine.running) == {f"busy{i}" for i in range(4)}


def test_traffic_of_the_last_window_is_expected_to_come_again_and_overtake() -> None:
    # n2 frees at 600 s, when "urgent" (priority 10, declared 1 h) ends; an hour after it was
    # created, its like comes again and takes n2 first, and again an hour later; "mine" starts
    # when "big" (2 h, not recent) frees n1. The copies run as long as "urgent" declares.
    engine = Engine([queue("a", 16, cohort=None)], [node("n1"), node("n2")])
    engine.add_admitted(running(gang("big", "a", created=-7200.0), "n1", at=-1800.0))
    engine.add_admitted(
        running(gang("urgent", "a", priority=10, created=-3000.0), "n2", at=-3000.0)
    )
    engine.add_pending(gang("mine", "a", created=-600.0))

    def runtime_of(g: Gang) -> Runtime:
        return Runtime(declared=HOUR) if g.name == "urgent" else learned(2.0)

    alone = forecast(engine, 0.0, runtime_of, gangs=["mine"])
    with_traffic = forecast(engine, 0.0, runtime_of, gangs=["mine"], bounds=Bounds(arrivals=HOUR))

    assert alone["mine"].median == 600.0
    assert with_traffic["mine"].median == 5400.0
    assert set(engine.pending) == {"mine"}


def test_gangs_created_within_the_window_arrive_again_every_window_until_the_horizon() -> None:
    engine = Engine([queue("a", 16, cohort=None)], [node("n1")])
    engine.add_pending(gang("recent", "a", created=-1000.0))
    engine.add_pending(gang("old", "a", created=-5000.0))

    coming = list(expected_arrivals(engine, 0.0, HOUR, 3 * HOUR))

    assert [(a.gang.name, a.gang.created, a.copy_of.name) for a in coming] == [
        ("recent~1", 2600.0, "recent"),
        ("recent~2", 6200.0, "recent"),
        ("recent~3", 9800.0, "recent"),
    ]
    assert list(expected_arrivals(engine, 0.0, 0.0, 3 * HOUR)) == []
