"""Fairness over time: what a queue borrowed lately weighs in the order of admission.

With a usage half-life, fair order adds to each queue's (and cohort's) share now its recent
share: what it borrowed above its quota, averaged over time with that half-life on the clock
the engine is given. With half-life 0 the order is the share now alone, as before.
"""

from __future__ import annotations

import pytest

from controller.quota import Config, Engine
from controller.quota.recent import Recent, advanced, kept, weighted
from tests.unit.test_quota_builders import admitted_names, gang, node, queue

HOUR = 3600.0


def test_a_recent_share_halves_every_half_life() -> None:
    assert kept(HOUR, HOUR) == pytest.approx(0.5)
    assert kept(2 * HOUR, HOUR) == pytest.approx(0.25)
    assert kept(0.0, HOUR) == 1.0


def test_a_share_held_for_one_half_life_counts_half_and_held_long_counts_whole() -> None:
    start = Recent(0.0, 0.0)
    assert advanced(start, 500.0, HOUR, HOUR).share == pytest.approx(250.0)
    assert advanced(start, 500.0, 50 * HOUR, HOUR).share == pytest.approx(500.0)


def test_with_half_life_zero_nothing_is_remembered() -> None:
    assert kept(HOUR, 0.0) == 0.0
    assert advanced(Recent(800.0, 0.0), 0.0, 1.0, 0.0).share == 0.0


def test_a_node_without_history_starts_from_nothing_and_time_never_runs_backwards() -> None:
    assert advanced(None, 500.0, 10.0, HOUR) == Recent(0.0, 10.0)
    assert advanced(Recent(300.0, 10.0), 900.0, 5.0, HOUR) == Recent(300.0, 10.0)


def test_a_weight_divides_the_recent_share_and_weight_zero_ranks_last() -> None:
    assert weighted(Recent(300.0, 0.0), 2.0) == 150.0
    assert weighted(Recent(300.0, 0.0), 0.0) == float("inf")
    assert weighted(Recent(0.0, 0.0), 0.0) == 0.0
    assert weighted(None, 1.0) == 0.0


def two_teams(half_life: float) -> Engine:
    """Teams a and b, 16 GPUs of quota each, in one cohort of 32 GPUs on four 8-GPU nodes."""
    config = Config(usage_half_life=half_life)
    return Engine([queue("a", 16), queue("b", 16)], [node(f"n{i}") for i in range(4)], config)


def yesterday_a_ran_the_whole_cluster(engine: Engine, hours: float = 1.0) -> float:
    """Team a runs four 8-GPU gangs (all 32 GPUs, 16 of them borrowed) from 0 for `hours`,
    team b nothing; then they end. Returns the clock when they ended."""
    for i in range(4):
        engine.add_pending(gang(f"a-old{i}", "a"))
    assert len(engine.cycle(0.0).admissions) == 4
    end = hours * HOUR
    for i in range(4):
        engine.finish(f"a-old{i}")
    engine.cycle(end)
    return end


def both_want_the_whole_cluster(engine: Engine, at: float) -> list[str]:
    """Each team submits a 32-GPU gang, a's first: only one fits. Who gets in."""
    engine.add_pending(gang("a-today", "a", pods=4, created=at + 1))
    engine.add_pending(gang("b-today", "b", pods=4, created=at + 2))
    return admitted_names(engine.cycle(at + 3))


def test_a_team_that_used_the_whole_cluster_in_the_last_hour_waits_behind_an_idle_one() -> None:
    """At equal share now (each head would borrow 16 GPUs), b goes first although a's gang is
    older: a borrowed half the cluster for the last hour."""
    engine = two_teams(half_life=HOUR)
    end = yesterday_a_ran_the_whole_cluster(engine)
    assert both_want_the_whole_cluster(engine, end) == ["b-today"]


def test_with_half_life_zero_the_order_is_todays() -> None:
    engine = two_teams(half_life=0.0)
    end = yesterday_a_ran_the_whole_cluster(engine)
    assert both_want_the_whole_cluster(engine, end) == ["a-today"]
    assert engine.recent_share("a") is None


def test_borrowing_long_forgotten_no_longer_counts() -> None:
    """Thirty half-lives later a's borrowing is forgotten (below recent.FORGOTTEN): the older
    gang, a's, goes first again."""
    engine = two_teams(half_life=HOUR)
    end = yesterday_a_ran_the_whole_cluster(engine)
    engine.cycle(end + 30 * HOUR)
    assert engine.recent_share("a") == 0.0
    assert both_want_the_whole_cluster(engine, end + 30 * HOUR) == ["a-today"]


def test_the_engine_averages_what_a_team_borrowed_on_its_own_clock() -> None:
    """a borrows 16 of the cohort's 32 GPUs (a share of 500) for one half-life: its recent
    share is 250; one more half-life with nothing, 125; b, within its quota, stays at 0."""
    engine = two_teams(half_life=HOUR)
    end = yesterday_a_ran_the_whole_cluster(engine)
    assert engine.recent_share("a") == pytest.approx(250.0)
    engine.cycle(end + HOUR)
    assert engine.recent_share("a") == pytest.approx(125.0)
    assert engine.recent_share("b") == 0.0


def test_usage_within_a_teams_own_quota_is_not_held_against_it() -> None:
    engine = two_teams(half_life=HOUR)
    engine.add_pending(gang("a0", "a", pods=2))
    engine.add_pending(gang("b0", "b", pods=2))
    engine.cycle(0.0)
    engine.cycle(5 * HOUR)
    assert (engine.recent_share("a"), engine.recent_share("b")) == (0.0, 0.0)


def test_a_restarted_engine_given_the_recent_usage_orders_as_the_old_one() -> None:
    """The recent shares the old engine kept are all a new one needs (the gangs it learns
    from the cluster)."""
    old = two_teams(half_life=HOUR)
    end = yesterday_a_ran_the_whole_cluster(old)
    restarted = two_teams(half_life=HOUR)
    restarted.restore_recent_usage(old.recent_usage())
    assert restarted.recent_usage() == old.recent_usage()
    assert both_want_the_whole_cluster(restarted, end) == ["b-today"]


def test_a_cohort_that_borrowed_lately_weighs_on_all_its_queues() -> None:
    """Two cohorts of one tree: x's queue borrowed lately, so y's queue goes first at equal
    share now, and the recent share of the cohort x is what decided it."""
    from controller.quota import DEFAULT_FLAVOR, CohortSpec, FlavorQuota, Quota, ResourceGroup
    from tests.unit.test_quota_builders import GPU, G

    def gpus(n: int) -> dict[str, Quota]:
        return {GPU: Quota(n * G), "cpu": Quota(n * 4 * G)}

    root = CohortSpec(
        "root", None, (ResourceGroup((GPU, "cpu"), (FlavorQuota(DEFAULT_FLAVOR, gpus(32)),)),)
    )
    cohorts = [root, CohortSpec("x", "root"), CohortSpec("y", "root")]
    queues = [queue("qx", 0, cohort="x"), queue("qy", 0, cohort="y")]
    engine = Engine(
        queues, [node(f"n{i}") for i in range(4)], Config(usage_half_life=HOUR), cohorts=cohorts
    )
    for i in range(4):
        engine.add_pending(gang(f"x-old{i}", "qx"))
    engine.cycle(0.0)
    for i in range(4):
        engine.finish(f"x-old{i}")
    engine.cycle(HOUR)
    assert engine.recent_usage()[("cohort", "x")].share > 0
    assert engine.recent_usage()[("cohort", "y")].share == 0
    engine.add_pending(gang("x-today", "qx", pods=4, created=HOUR + 1))
    engine.add_pending(gang("y-today", "qy", pods=4, created=HOUR + 2))
    assert admitted_names(engine.cycle(HOUR + 3)) == ["y-today"]
