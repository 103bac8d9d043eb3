"""The decision core's rules, one small cluster each."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from controller.quota import (
    Config,
    EvictionCause,
    PendingCause,
    Snapshot,
    Taint,
    Toleration,
    decide,
)
from controller.quota.quota import build_cohorts, default_charge, share
from controller.quota.snapshot import QueueSpec, Quota
from tests.unit.test_quota_builders import (
    GPU,
    admitted_names,
    evicted_names,
    gang,
    node,
    queue,
    running,
    world,
)


def test_a_gang_that_fits_quota_and_nodes_is_admitted_with_a_plan() -> None:
    d = decide(world([queue("a", 16)], [node("n1"), node("n2")], [gang("g", "a", pods=2)]), 0)
    assert admitted_names(d) == ["g"]
    assert sorted(p.node for p in d.admissions[0].placement) == ["n1", "n2"]
    assert d.pending == {}


def test_a_gang_that_fits_quota_but_not_nodes_stays_pending_with_a_placement_reason() -> None:
    snapshot = world(
        [queue("a", 16)], [node("n1", used_gpus=2), node("n2", used_gpus=2)], [gang("g", "a", 2)]
    )
    d = decide(snapshot, 0)
    assert d.admissions == ()
    assert d.pending["g"].cause is PendingCause.NO_NODE_FITS
    assert d.pending["g"].describe() == (
        "Quota ok but no node fits: needs 2 pods x 8 nvidia.com/gpu, largest free node has 6"
    )


def test_a_gang_is_admitted_whole_or_not_at_all() -> None:
    nodes = [node("n1"), node("n2"), node("n3", used_gpus=4)]
    d = decide(world([queue("a", 24)], nodes, [gang("g", "a", 3)]), 0)
    assert d.admissions == ()
    assert "only 2 fit" in d.pending["g"].describe()


def test_a_gang_more_than_its_queue_can_ever_hold_is_inadmissible() -> None:
    d = decide(
        world([queue("a", 8, cohort=None)], [node("n1"), node("n2")], [gang("g", "a", 2)]), 0
    )
    assert d.pending["g"].cause is PendingCause.NEVER_FITS
    assert d.pending["g"].describe() == (
        "Inadmissible: needs 16 nvidia.com/gpu, more than ClusterQueue a can ever hold (8: its"
        " nominal quota plus what it may borrow); make the gang smaller or raise the quota"
    )


def test_a_gang_asking_for_a_resource_its_queue_does_not_cover_is_told_so() -> None:
    only_gpus = QueueSpec("a", {GPU: Quota(8000)})
    d = decide(world([only_gpus], [node("n1")], [gang("g", "a", 1)]), 0)
    assert d.pending["g"].cause is PendingCause.NOT_COVERED
    assert (
        d.pending["g"]
        .describe()
        .startswith("Inadmissible: ClusterQueue a does not cover cpu (it covers nvidia.com/gpu)")
    )


def test_a_gang_no_node_could_ever_host_is_inadmissible() -> None:
    d = decide(world([queue("a", 64)], [node("n1"), node("n2")], [gang("g", "a", 3)]), 0)
    assert d.pending["g"].cause is PendingCause.NEVER_FITS
    assert "all nodes that may host them together hold only 2" in d.pending["g"].describe()
    big = decide(world([queue("a", 64)], [node("n1")], [gang("g", "a", 1, gpus=16)]), 0)
    assert "largest node that may host them has 8 nvidia.com/gpu allocatable" in (
        big.pending["g"].describe()
    )


def test_a_gang_over_quota_stays_pending_with_a_quota_reason() -> None:
    nodes = [node("n1"), node("n2"), node("n3")]
    admitted = [running(gang("old", "a"), "n3")]
    d = decide(world([queue("a", 16, cohort=None)], nodes, [gang("g", "a", 2)], admitted), 0)
    assert d.pending["g"].cause is PendingCause.QUOTA
    assert (
        d.pending["g"]
        .describe()
        .startswith("Waiting for quota: needs 16 nvidia.com/gpu, queue can take 8 more")
    )


def test_idle_quota_of_the_cohort_can_be_borrowed() -> None:
    queues = [queue("a", 8), queue("b", 8)]
    d = decide(world(queues, [node("n1"), node("n2")], [gang("g", "a", 2)]), 0)
    assert admitted_names(d) == ["g"]
    assert d.admissions[0].borrowing
    assert "(borrowing)" in d.admissions[0].describe()


def test_borrowing_limit_caps_what_a_queue_takes_from_the_cohort() -> None:
    queues = [queue("a", 8, borrowing_limit=4), queue("b", 8)]
    pending = [gang("big", "a", 1, gpus=12), gang("small", "a", 1, gpus=4, created=1)]
    admitted = [running(gang("old", "a", 1, gpus=4), "n2")]
    d = decide(world(queues, [node("n1", 16), node("n2")], pending, admitted), 0)
    assert admitted_names(d) == ["small"]
    assert "borrowing limit 4" in d.pending["big"].describe()
    too_big = decide(world(queues, [node("n1"), node("n2")], [gang("g", "a", 2)]), 0)
    assert too_big.pending["g"].cause is PendingCause.NEVER_FITS


def test_lending_limit_protects_what_the_lender_keeps() -> None:
    queues = [queue("a", 8), queue("b", 8, lending_limit=2)]
    pending = [gang("g", "a", 2)]
    d = decide(world(queues, [node(f"n{i}") for i in range(3)], pending), 0)
    assert d.admissions == ()
    assert "can ever hold (10:" in d.pending["g"].describe()


def test_a_queue_under_nominal_reclaims_a_borrowed_gang_whole() -> None:
    queues = [queue("a", 8), queue("b", 8)]
    b1, b2 = gang("b1", "b", created=0), gang("b2", "b", created=1)
    admitted = [running(b1, "n1", at=0), running(b2, "n2", at=10)]
    d = decide(world(queues, [node("n1"), node("n2")], [gang("a1", "a")], admitted), 100)
    assert admitted_names(d) == ["a1"]
    assert evicted_names(d) == ["b2"]
    assert d.evictions[0].preemptor == "a1"
    assert d.admissions[0].placement[0].node == "n2"


def _wrong_nodes_world() -> Snapshot:
    """a needs one 8-GPU pod. Two young 4-GPU gangs of b share n1 and n2 with a small pod that
    cannot be evicted; an older 8-GPU gang of b fills n3. Only n3 can be freed whole."""
    queues = [queue("a", 8), queue("b", 4), queue("c", 12, reclaim="Never")]
    nodes = [node("n1", used_gpus=4), node("n2", used_gpus=4), node("n3")]
    admitted = [
        running(gang("young1", "b", gpus=4), "n1", at=90),
        running(gang("young2", "b", gpus=4), "n2", at=95),
        running(gang("old", "b"), "n3", at=0),
    ]
    return world(queues, nodes, [gang("a1", "a")], admitted)


def test_reclaim_prefers_the_victim_on_the_right_node_over_newer_ones_on_wrong_nodes() -> None:
    d = decide(_wrong_nodes_world(), 100)
    assert admitted_names(d) == ["a1"]
    assert evicted_names(d) == ["old"]


def test_naive_reclaim_evicts_the_newest_gangs_first() -> None:
    d = decide(_wrong_nodes_world(), 100, Config(victims="naive"))
    assert evicted_names(d) == ["old", "young1", "young2"]


def test_reclaim_never_pushes_the_victim_queue_below_nominal() -> None:
    # b uses 12 of its nominal 8. Evicting b4 leaves no free node; evicting b8 would leave b
    # at 4, below its nominal quota, so a1 waits.
    queues = [queue("a", 8), queue("b", 8)]
    admitted = [running(gang("b8", "b"), "n1"), running(gang("b4", "b", gpus=4), "n2")]
    nodes = [node("n1"), node("n2", used_gpus=4)]
    d = decide(world(queues, nodes, [gang("a1", "a")], admitted), 100)
    assert d.evictions == ()
    assert d.admissions == ()


def test_reclaim_judges_all_its_victims_together_against_the_lenders_nominal_quota() -> None:
    # a (nominal 8) runs 12 GPUs: a3 (4 GPUs, 10 h old) alone on n0, a1 and a2 (4 GPUs each,
    # 1 h old) on n1. b (nominal 8, using 0) needs one 8-GPU pod. Evicting a1 and a2 loses
    # less work but leaves a at 4; each alone would keep a at 8. Only a3 may go.
    queues = [queue("a", 8), queue("b", 8)]
    hour = 3600.0
    now = 10 * hour
    admitted = [
        running(gang("a3", "a", gpus=4), "n0", at=0),
        running(gang("a1", "a", gpus=4), "n1", at=now - hour),
        running(gang("a2", "a", gpus=4), "n1", at=now - hour),
    ]
    nodes = [node("n0", used_gpus=0), node("n1")]
    d = decide(world(queues, nodes, [gang("b1", "b")], admitted), now)
    assert evicted_names(d) == ["a3"]
    assert admitted_names(d) == ["b1"]


def test_young_gangs_are_protected_by_the_minimum_runtime() -> None:
    queues = [queue("a", 8), queue("b", 8, min_runtime=600)]
    admitted = [running(gang("b1", "b"), "n1", at=0), running(gang("b2", "b"), "n2", at=50)]
    d = decide(world(queues, [node("n1"), node("n2")], [gang("a1", "a")], admitted), 100)
    assert d.evictions == () and d.admissions == ()
    later = decide(world(queues, [node("n1"), node("n2")], [gang("a1", "a")], admitted), 700)
    assert evicted_names(later) == ["b2"]


def test_no_eviction_unless_the_preemptor_then_fits() -> None:
    # a's 2-pod gang is within nominal, but c's non-preemptible gang keeps n3 busy: evicting b's
    # gang frees one node, not two.
    queues = [queue("a", 16), queue("b", 4), queue("c", 8, reclaim="Never")]
    nodes = [node("n1"), node("n2", used_gpus=8), node("n3")]
    admitted = [running(gang("b1", "b"), "n1", at=0), running(gang("c1", "c"), "n3", at=0)]
    d = decide(world(queues, nodes, [gang("a1", "a", pods=2)], admitted), 100)
    assert d.evictions == ()
    assert d.admissions == ()


def test_a_queue_with_reclaim_never_does_not_evict() -> None:
    queues = [queue("a", 8, reclaim="Never"), queue("b", 8)]
    admitted = [running(gang("b1", "b"), "n1"), running(gang("b2", "b"), "n2", at=1)]
    d = decide(world(queues, [node("n1"), node("n2")], [gang("a1", "a")], admitted), 100)
    assert d.evictions == ()
    assert d.pending["a1"].describe().startswith("Waiting for quota: needs 8")


def test_higher_priority_preempts_within_its_queue_when_allowed() -> None:
    queues = [queue("a", 8, cohort=None, within="LowerPriority")]
    admitted = [running(gang("low", "a", priority=0), "n1")]
    d = decide(world(queues, [node("n1")], [gang("high", "a", priority=5)], admitted), 10)
    assert evicted_names(d) == ["low"]
    assert admitted_names(d) == ["high"]
    assert d.evictions[0].cause is EvictionCause.PREEMPTED
    assert "same queue" in d.evictions[0].describe()


def test_equal_priority_does_not_preempt_within_a_queue() -> None:
    queues = [queue("a", 8, cohort=None, within="LowerPriority")]
    admitted = [running(gang("low", "a", priority=5), "n1")]
    d = decide(world(queues, [node("n1")], [gang("high", "a", priority=5)], admitted), 10)
    assert d.evictions == ()


def test_the_queue_with_the_lower_share_goes_first() -> None:
    # Both queues already borrow; b borrows less, so b's gang takes the last free node.
    queues = [queue("a", 8), queue("b", 8), queue("idle", 16, reclaim="Never")]
    admitted = [
        running(gang("a1", "a"), "n1"),
        running(gang("a2", "a"), "n2"),
        running(gang("b1", "b"), "n3"),
    ]
    pending = [gang("a3", "a", created=0), gang("b2", "b", created=5)]
    nodes = [node(f"n{i}") for i in range(1, 5)]
    d = decide(world(queues, nodes, pending, admitted), 10)
    assert admitted_names(d) == ["b2"]


def test_share_matches_kueues_example() -> None:
    # 3 CPU nominal, using all 8 CPU of the cohort: (8 - 3) / 8 * 1000 = 625.
    specs = [
        QueueSpec("a", {"cpu": Quota(3000)}, cohort="c"),
        QueueSpec("b", {"cpu": Quota(5000)}, cohort="c"),
    ]
    states = build_cohorts(specs)
    assert share(states["a"], default_charge({"cpu": 8000})) == pytest.approx(625.0)
    assert share(states["b"], default_charge({"cpu": 1000})) == 0.0


def test_weight_zero_while_borrowing_ranks_last() -> None:
    states = build_cohorts([QueueSpec("a", {"cpu": Quota(1000)}, cohort="c", weight=0)])
    assert share(states["a"], default_charge({"cpu": 2000})) == math.inf


def test_strict_fifo_blocks_younger_gangs_behind_the_head() -> None:
    queues = [queue("a", 16, cohort=None, strict=True)]
    pending = [gang("old", "a", 3, created=0), gang("young", "a", 1, created=1)]
    d = decide(world(queues, [node("n1"), node("n2")], pending), 10)
    assert d.admissions == ()
    assert d.pending["young"].cause is PendingCause.STRICT_FIFO
    assert d.pending["young"].describe().startswith("StrictFIFO: waiting behind old")


def test_best_effort_fifo_lets_younger_gangs_pass_a_blocked_head() -> None:
    queues = [queue("a", 16, cohort=None)]
    pending = [gang("old", "a", 3, created=0), gang("young", "a", 1, created=1)]
    d = decide(world(queues, [node("n1"), node("n2")], pending), 10)
    assert admitted_names(d) == ["young"]


def test_node_selectors_and_taints_are_respected() -> None:
    tainted = node("gpu-a100", labels={"gpu": "a100"}, taints=[Taint("dedicated", "ml")])
    plain = node("plain", labels={"gpu": "t4"})
    queues = [queue("a", 16, cohort=None)]
    wants_a100 = gang("a100", "a", selector={"gpu": "a100"}, created=0)
    d = decide(world(queues, [tainted, plain], [wants_a100]), 0)
    assert "no node matches" in d.pending["a100"].describe()
    tolerant = gang(
        "a100",
        "a",
        selector={"gpu": "a100"},
        tolerations=[Toleration("dedicated", "Equal", "ml", "NoSchedule")],
    )
    d = decide(world(queues, [tainted, plain], [tolerant]), 0)
    assert d.admissions[0].placement[0].node == "gpu-a100"


def test_best_fit_keeps_whole_nodes_free() -> None:
    queues = [queue("a", 32, cohort=None)]
    nodes = [node("n1", used_gpus=6), node("n2")]
    d = decide(world(queues, nodes, [gang("small", "a", gpus=2)]), 0)
    assert d.admissions[0].placement[0].node == "n1"


def test_starvation_guard_holds_nodes_for_a_long_waiting_gang() -> None:
    queues = [queue("a", 32, cohort=None)]
    nodes = [node("n1", used_gpus=2), node("n2", used_gpus=2)]
    pending = [gang("big", "a", pods=2, created=0), gang("small", "a", gpus=2, created=4000)]
    d = decide(world(queues, nodes, pending), 5000, Config(starvation_after=3600))
    assert d.reservations == {"big": ("n1", "n2")}
    assert d.admissions == ()
    assert d.pending["big"].held_nodes == ("n1", "n2")
    assert "starvation guard" in d.pending["big"].describe()
    fresh = decide(world(queues, nodes, pending), 100, Config(starvation_after=3600))
    assert admitted_names(fresh) == ["small"]


def test_an_unknown_queue_is_named_in_the_reason() -> None:
    d = decide(world([queue("a", 8)], [node("n1")], [gang("g", "nope")]), 0)
    assert d.pending["g"].describe() == "Queue 'nope' does not exist"


def _borrower_world(created: float) -> Snapshot:
    """b (nominal 4) runs 12 GPUs since t=0; a1 (created at `created`) wants b1's node."""
    queues = [queue("a", 8), queue("b", 4)]
    admitted = [running(gang("b1", "b"), "n1", at=0), running(gang("b2", "b", gpus=4), "n2")]
    return world(queues, [node("n1"), node("n2")], [gang("a1", "a", created=created)], admitted)


def test_a_reclaim_never_throws_away_more_work_than_the_preemptor_has_waited() -> None:
    budget = Config(waste_budget=1.0)
    assert decide(_borrower_world(created=9000), 10000, budget).evictions == ()
    assert evicted_names(decide(_borrower_world(created=0), 10000, budget)) == ["b1"]


def test_a_gang_waits_its_queues_evict_after_seconds_before_it_may_evict() -> None:
    snapshot = _borrower_world(created=100)
    patient = replace(
        snapshot,
        queues=tuple(
            replace(q, evict_after=600.0) if q.name == "a" else q for q in snapshot.queues
        ),
    )
    assert decide(patient, 500).evictions == ()
    assert evicted_names(decide(patient, 800)) == ["b1"]


def test_a_head_waiting_beyond_oldest_first_after_goes_before_lower_shares() -> None:
    # b borrows more than a, so fair share alone serves a first; once b's head has waited
    # beyond the limit it goes first.
    queues = [queue("a", 8), queue("b", 8), queue("idle", 16, reclaim="Never")]
    admitted = [running(gang("a1", "a"), "n1")]
    admitted += [running(gang("b1", "b"), "n2"), running(gang("b2", "b"), "n3")]
    pending = [gang("a3", "a", created=5000), gang("b4", "b", created=0)]
    snapshot = world(queues, [node(f"n{i}") for i in range(1, 5)], pending, admitted)
    assert admitted_names(decide(snapshot, 6000, Config(starvation_after=None))) == ["a3"]
    aged = Config(starvation_after=None, oldest_first_after=3600)
    assert admitted_names(decide(snapshot, 6000, aged)) == ["b4"]


def test_fair_sharing_preemption_evicts_from_a_queue_with_a_higher_share() -> None:
    # a is at nominal and would borrow 8 (share 250); b borrows 16 (share 500), and evicting one
    # of its gangs leaves it at 250: allowed with fair-sharing preemption, not without.
    queues = [queue("a", 8), queue("b", 8), queue("lender", 16, reclaim="Never")]
    admitted = [running(gang("a1", "a"), "n1")]
    admitted += [running(gang(f"b{i}", "b"), f"n{i + 1}", at=i) for i in range(1, 4)]
    nodes = [node(f"n{i}") for i in range(1, 5)]
    snapshot = world(queues, nodes, [gang("a2", "a", created=10)], admitted)
    assert decide(snapshot, 100).evictions == ()
    d = decide(snapshot, 100, Config(fair_sharing_preemption=True))
    assert admitted_names(d) == ["a2"]
    assert evicted_names(d) == ["b3"]


def test_fair_sharing_preemption_stops_when_shares_would_cross() -> None:
    # b borrows only 8 (share 333); taking a gang from it would leave a at 333 and b at 0.
    queues = [queue("a", 8), queue("b", 8), queue("lender", 8, reclaim="Never")]
    admitted = [running(gang("a1", "a"), "n1")]
    admitted += [running(gang(f"b{i}", "b"), f"n{i + 1}", at=i) for i in range(1, 3)]
    nodes = [node(f"n{i}") for i in range(1, 4)]
    snapshot = world(queues, nodes, [gang("a2", "a", created=10)], admitted)
    assert decide(snapshot, 100, Config(fair_sharing_preemption=True)).evictions == ()
