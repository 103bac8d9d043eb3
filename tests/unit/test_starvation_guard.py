"""The starvation guard: the oldest gang waiting past the limit holds quota as well as nodes."""

from __future__ import annotations

from controller.quota import Config, PendingCause, decide
from tests.unit.test_quota_builders import (
    admitted_names,
    evicted_names,
    gang,
    node,
    queue,
    running,
    world,
)

GUARD = Config(starvation_after=3600)


def test_newer_small_gangs_of_a_starving_gangs_queue_wait_behind_it() -> None:
    queues = [queue("a", 8, cohort=None)]
    admitted = [running(gang(f"s{i}", "a", gpus=1), "n1") for i in range(6)]
    pending = [gang("big", "a", gpus=8, created=0), gang("small", "a", gpus=1, created=4000)]
    snapshot = world(queues, [node("n1"), node("n2")], pending, admitted)

    guarded = decide(snapshot, 5000, GUARD)
    assert guarded.admissions == ()
    why = guarded.pending["small"]
    assert (why.cause, why.behind) == (PendingCause.HELD_FOR_STARVING, "big")
    assert why.describe() == (
        "Waiting for quota: the starvation guard holds it for an older gang of ClusterQueue a,"
        " waiting past the starvation limit"
    )

    unguarded = decide(snapshot, 5000, Config())
    assert admitted_names(unguarded) == ["small"]  # it jumps ahead, and big waits on


def test_a_small_gang_that_fits_beside_the_starving_gang_still_runs() -> None:
    queues = [queue("a", 16, cohort=None)]
    admitted = [running(gang(f"s{i}", "a", gpus=1), "n1") for i in range(6)]
    pending = [gang("big", "a", gpus=8, created=0), gang("small", "a", gpus=1, created=4000)]
    # 6 + 8 + 1 <= 16: the small gang takes nothing the starving one needs.
    d = decide(world(queues, [node("n1"), node("n2"), node("n3")], pending, admitted), 5000, GUARD)
    assert sorted(admitted_names(d)) == ["big", "small"]


def test_the_hold_stops_borrowers_of_the_cohort_but_not_a_queue_within_its_nominal() -> None:
    queues = [queue("a", 8), queue("b", 8)]
    admitted = [running(gang(f"s{i}", "a", gpus=1), "n1") for i in range(6)]
    admitted += [running(gang("b1", "b", gpus=4), "n2")]
    pending = [
        gang("big", "a", gpus=8, created=0),
        gang("b-own", "b", gpus=4, created=4000),  # b stays within its nominal 8
        gang("b-more", "b", gpus=2, created=4100),  # b would borrow
    ]
    nodes = [node(f"n{i}") for i in range(1, 5)]
    d = decide(world(queues, nodes, pending, admitted), 5000, GUARD)
    assert admitted_names(d) == ["b-own"]
    assert d.pending["b-more"].cause is PendingCause.HELD_FOR_STARVING


def test_a_gang_that_can_never_fit_holds_nothing() -> None:
    queues = [queue("a", 8, cohort=None)]
    pending = [gang("huge", "a", pods=2, gpus=8, created=0), gang("small", "a", gpus=1, created=1)]
    d = decide(world(queues, [node("n1"), node("n2")], pending), 5000, GUARD)
    assert admitted_names(d) == ["small"]
    assert d.pending["huge"].cause is PendingCause.NEVER_FITS
    assert d.reservations == {}


def test_a_starving_gang_evicts_only_within_the_waste_budget() -> None:
    """b borrows 8 of a's GPUs since t=0; a1 has waited as long. Taking b1 back throws away
    more work than a1 lost by waiting: starving or not, a1 waits for b1 to finish, while with
    no budget it takes b1 back."""
    queues = [queue("a", 8), queue("b", 4)]
    admitted = [running(gang("b1", "b"), "n1", at=0), running(gang("b2", "b", gpus=4), "n2")]
    snapshot = world(queues, [node("n1"), node("n2")], [gang("a1", "a", created=0)], admitted)
    starving = Config(waste_budget=0.1, starvation_after=3600)
    d = decide(snapshot, 10_000, starving)
    assert d.evictions == ()
    assert d.pending["a1"].cause is PendingCause.QUOTA
    no_budget = Config(waste_budget=None, starvation_after=3600)
    assert evicted_names(decide(snapshot, 10_000, no_budget)) == ["b1"]


def test_a_starving_gang_that_needs_borrowed_quota_holds_none_of_its_queue() -> None:
    """a (nominal 4) wants 8 GPUs for big, which only b's idle quota could give; b uses all
    of its own. Holding a's quota for big could keep a idle as long as b stays busy, so a's
    newer 1-GPU gang runs."""
    queues = [queue("a", 4), queue("b", 12)]
    admitted = [running(gang(f"b{i}", "b", gpus=4), f"n{i}") for i in range(3)]
    pending = [gang("big", "a", gpus=8, created=0), gang("small", "a", gpus=1, created=4000)]
    nodes = [node(f"n{i}") for i in range(4)]
    d = decide(world(queues, nodes, pending, admitted), 5000, GUARD)
    assert admitted_names(d) == ["small"]
    assert d.pending["big"].cause is PendingCause.QUOTA


def test_a_newer_gang_of_higher_priority_is_not_held_back() -> None:
    queues = [queue("a", 8, cohort=None)]
    admitted = [running(gang(f"s{i}", "a", gpus=1), "n1") for i in range(6)]
    pending = [
        gang("big", "a", gpus=8, created=0),
        gang("urgent", "a", gpus=1, created=4000, priority=10),
        gang("small", "a", gpus=1, created=4000),
    ]
    d = decide(world(queues, [node("n1"), node("n2")], pending, admitted), 5000, GUARD)
    assert admitted_names(d) == ["urgent"]
    assert d.pending["small"].cause is PendingCause.HELD_FOR_STARVING


def test_the_guard_serves_the_queue_with_the_lowest_share_first() -> None:
    """a borrows (a2 on b's quota); b's gang b1 and a's gang a3 both starve, a3 the older: b1,
    whose queue is within its nominal quota, is the one the guard holds quota for (b does not
    reclaim here)."""
    queues = [queue("a", 8), queue("b", 8, reclaim="Never")]
    admitted = [running(gang("a1", "a"), "n1"), running(gang("a2", "a", gpus=4), "n2")]
    pending = [gang("a3", "a", gpus=8, created=0), gang("b1", "b", gpus=8, created=100)]
    pending += [gang("b2", "b", gpus=4, created=4000)]  # newer than b1, same queue
    d = decide(world(queues, [node("n1"), node("n2")], pending, admitted), 5000, GUARD)
    assert d.pending["b2"].cause is PendingCause.HELD_FOR_STARVING
    assert d.pending["b2"].behind == "b1"


def test_when_the_starving_gang_leaves_the_gangs_it_held_back_go() -> None:
    from controller.quota import Engine

    queues = [queue("a", 8, cohort=None)]
    engine = Engine(queues, [node("n1"), node("n2")], GUARD)
    for admitted in [running(gang(f"s{i}", "a", gpus=1), "n1") for i in range(6)]:
        engine.add_admitted(admitted)
    engine.add_pending(gang("big", "a", gpus=8, created=0))
    engine.add_pending(gang("small", "a", gpus=1, created=4000))
    assert engine.cycle(5000).admissions == ()
    engine.remove_pending("big")  # its Job was deleted
    assert admitted_names(engine.cycle(5001)) == ["small"]
