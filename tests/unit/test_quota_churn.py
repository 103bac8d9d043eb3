"""Fewer evictions for the same times: whom the core evicts, and when it waits instead.

Each test is a small cluster of 8-GPU nodes run through a long-lived Engine, cycle by cycle, as
the controller and the simulator run it: gangs end between cycles, and what ended is what the
next cycle sees."""

from __future__ import annotations

from controller.quota import AdmittedGang, Config, Engine, PendingCause, PodPlacement
from controller.quota.engine import EVICTED_RECENTLY_FOR, FRESH_FOR, SETTLE_AT_MOST, SETTLE_FOR
from controller.quota.snapshot import Gang, QueueSpec
from tests.unit.test_quota_builders import admitted_names, evicted_names, gang, node, queue


def engine_with(
    queues: list[QueueSpec], nodes: int, admitted: list[tuple[Gang, str, float]]
) -> Engine:
    """`nodes` empty 8-GPU nodes n1.., and each (gang, node, admitted at) running."""
    engine = Engine(queues, [node(f"n{i + 1}") for i in range(nodes)])
    for g, on, at in admitted:
        engine.add_admitted(AdmittedGang(g, at, (PodPlacement("main", on, 1),)))
    return engine


def lender_and_borrower(
    b_gangs: list[tuple[str, str, float]], *, nodes: int = 2, a: int = 8, b: int = 8
) -> Engine:
    """Queues a and b of one cohort, b running one 8-GPU gang per (name, node, admitted at)."""
    admitted = [(gang(name, "b"), on, at) for name, on, at in b_gangs]
    return engine_with([queue("a", a), queue("b", b)], nodes, admitted)


# -- whom it evicts ---------------------------------------------------------------------------


def test_a_gang_admitted_moments_ago_is_spared_for_one_that_has_run_longer() -> None:
    now = 1000.0
    engine = lender_and_borrower([("b-long", "n1", 0.0), ("b-just-now", "n2", now - 2)])
    engine.add_pending(gang("a1", "a", created=now - 1))

    d = engine.cycle(now)

    assert admitted_names(d) == ["a1"]
    assert evicted_names(d) == ["b-long"]


def test_a_gang_admitted_moments_ago_is_still_evicted_when_no_other_will_do() -> None:
    now = 1000.0
    engine = lender_and_borrower([("b-just-now", "n1", now - 2)], nodes=1, a=8, b=0)
    engine.add_pending(gang("a1", "a", created=now - 1))

    d = engine.cycle(now)

    assert evicted_names(d) == ["b-just-now"]
    assert admitted_names(d) == ["a1"]


def test_a_gang_evicted_recently_and_admitted_again_is_spared_for_another() -> None:
    # b1 and b2 borrow a's quota. a1 takes a node back (b1, the first by name of two alike),
    # ends; b1 comes back. When a2 needs a node, b1 was evicted less than
    # EVICTED_RECENTLY_FOR ago: b2 goes, though it has run longer.
    engine = lender_and_borrower([("b1", "n1", 0.0), ("b2", "n2", 0.0)])
    engine.add_pending(gang("a1", "a", created=100))
    first = engine.cycle(100)
    assert evicted_names(first) == ["b1"]
    engine.add_pending(gang("b1", "b", created=0))
    engine.finish("a1")
    assert admitted_names(engine.cycle(200)) == ["b1"]

    later = 200 + FRESH_FOR + SETTLE_FOR + 1
    assert later - 100 < EVICTED_RECENTLY_FOR
    engine.add_pending(gang("a2", "a", created=later))
    d = engine.cycle(later)

    assert evicted_names(d) == ["b2"]
    assert admitted_names(d) == ["a2"]


def test_with_no_work_to_lose_either_way_the_lower_priority_then_the_longest_running_goes() -> None:
    # Without nodes every victim loses nothing: priority, then age, decide. b borrows c's
    # quota and a's; a takes one gang's worth back.
    queues = [queue("a", 8), queue("b", 8), queue("c", 8)]
    engine = Engine(queues, [], Config(placement=False))
    b = [
        gang("b-high", "b", priority=5),
        gang("b-low-newer", "b", priority=1),
        gang("b-low-older", "b", priority=1),
    ]
    for g, at in zip(b, (0.0, 50.0, 20.0), strict=True):
        engine.add_admitted(AdmittedGang(g, at))
    engine.add_pending(gang("a1", "a", created=100))

    d = engine.cycle(100)

    assert evicted_names(d) == ["b-low-older"]


def test_a_gang_whose_pods_have_all_finished_is_never_a_victim() -> None:
    # b-done would lose less work, but its pods are done: a1 waits for it to end, and when it
    # does not (its record never says so), evicts the other.
    engine = lender_and_borrower([("b-done", "n1", 50.0), ("b-running", "n2", 0.0)])
    engine.work_done("b-done")
    engine.add_pending(gang("a1", "a", created=100))

    assert engine.cycle(100).evictions == ()
    d = engine.cycle(100 + SETTLE_AT_MOST)

    assert evicted_names(d) == ["b-running"]


def test_a_gang_whose_room_is_held_by_a_finished_gang_waits_for_it_instead_of_evicting() -> None:
    engine = lender_and_borrower([("b-done", "n1", 0.0)], nodes=1, a=8, b=0)
    engine.work_done("b-done")
    engine.add_pending(gang("a1", "a", created=100))

    waiting = engine.cycle(100)
    assert waiting.evictions == () and waiting.admissions == ()
    assert engine.recheck_at == 100 + SETTLE_FOR

    engine.finish("b-done")
    d = engine.cycle(100.3)
    assert admitted_names(d) == ["a1"] and d.evictions == ()


# -- when it waits instead ----------------------------------------------------------------------


def two_borrowed_nodes() -> Engine:
    """a (nominal 16) and b (nominal 16) in one cohort on four nodes; b runs one gang on each,
    borrowing 16 GPUs; a1 needs two whole nodes."""
    engine = lender_and_borrower(
        [(f"b{i}", f"n{i}", 0.0) for i in range(1, 5)], nodes=4, a=16, b=16
    )
    engine.add_pending(gang("a1", "a", pods=2, created=100))
    return engine


def test_an_eviction_is_not_decided_in_the_instant_other_gangs_end_and_free_part_of_the_room() -> (
    None
):
    engine = two_borrowed_nodes()
    engine.finish("b1")

    waiting = engine.cycle(100)
    assert waiting.evictions == () and waiting.admissions == ()
    assert waiting.pending["a1"].cause is PendingCause.QUOTA

    engine.finish("b2")
    d = engine.cycle(100.5)
    assert admitted_names(d) == ["a1"] and d.evictions == ()


def test_the_room_coming_back_is_kept_from_gangs_the_waiting_gang_could_evict() -> None:
    engine = two_borrowed_nodes()
    engine.add_pending(gang("b5", "b", created=50))
    engine.finish("b1")

    waiting = engine.cycle(100)
    assert waiting.admissions == () and waiting.evictions == ()
    assert waiting.pending["b5"].cause is PendingCause.QUOTA

    engine.finish("b2")
    assert admitted_names(engine.cycle(100.5)) == ["a1"]


def test_a_gang_of_a_queue_within_its_nominal_quota_is_not_kept_out() -> None:
    # a1 (older) is judged first and waits for the node b1 gave back; c, within its nominal
    # quota with c1, takes that node all the same: a1 could not have evicted c1.
    admitted = [(gang(f"b{i}", "b"), f"n{i}", 0.0) for i in range(1, 5)]
    engine = engine_with(
        [queue("a", 16), queue("b", 16), queue("c", 16)],
        5,
        [*admitted, (gang("c0", "c"), "n5", 0.0)],
    )
    engine.add_pending(gang("a1", "a", pods=2, created=99))
    engine.add_pending(gang("c1", "c", created=100))
    engine.finish("b1")

    d = engine.cycle(100)

    assert admitted_names(d) == ["c1"]
    assert d.evictions == ()


def test_once_the_room_stops_coming_back_the_gang_evicts() -> None:
    engine = two_borrowed_nodes()
    engine.finish("b1")
    assert engine.cycle(100).evictions == ()
    assert engine.recheck_at == 100 + SETTLE_FOR

    d = engine.cycle(100 + SETTLE_FOR)

    assert admitted_names(d) == ["a1"]
    assert len(d.evictions) == 1


def test_room_that_keeps_coming_back_but_never_reaches_it_holds_an_eviction_back_for_a_while() -> (
    None
):
    # c borrows a's quota with c1. b, within its nominal quota, ends a gang every half second
    # and a higher-priority gang of its own takes the room back: that room comes back to the
    # cohort but never to a1, which waits SETTLE_AT_MOST seconds, then evicts c1.
    engine = engine_with(
        [queue("a", 8), queue("b", 16), queue("c", 0)],
        3,
        [(gang("c1", "c"), "n1", 0.0), (gang("b0", "b"), "n2", 0.0), (gang("b1", "b"), "n3", 0.0)],
    )
    engine.add_pending(gang("a1", "a", created=100))
    now, turn, evicted = 100.0, 1, []
    while not evicted:
        engine.finish(f"b{turn - 1}")
        engine.add_pending(gang(f"b{turn + 1}", "b", priority=1, created=now))
        d = engine.cycle(now)
        evicted = evicted_names(d)
        assert f"b{turn + 1}" in admitted_names(d)
        now, turn = now + 0.5, turn + 1

    assert evicted == ["c1"]
    assert now - 0.5 == 100 + SETTLE_AT_MOST
