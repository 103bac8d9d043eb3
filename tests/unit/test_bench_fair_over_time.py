"""bench/bench_fair_over_time.py: through the simulator's kohort policy, a team that ran the
whole cluster yesterday is served after one that ran nothing today, once a half-life is set."""

from __future__ import annotations

from tests.support import load_bench


def test_without_a_half_life_yesterdays_heavy_team_and_an_idle_one_split_today_evenly() -> None:
    row = load_bench("bench_fair_over_time").run(0.0)
    assert row["b of first 8"] == 4
    assert row["a GPU % 0-4h"] == row["b GPU % 0-4h"] == 50


def test_with_a_half_life_the_team_idle_yesterday_gets_most_of_the_first_starts_today() -> None:
    row = load_bench("bench_fair_over_time").run(6.0)
    assert row["b of first 8"] >= 6
    assert row["b GPU % 0-4h"] > row["a GPU % 0-4h"]
    assert row["b wait h"] < row["a wait h"]
