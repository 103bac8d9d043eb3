"""Reclaim and priority preemption shrink an admitted elastic gang down to its minimum instead
of evicting it, when removing its surplus pods frees what the preemptor needs: the gang loses
workers, not its work."""

from __future__ import annotations

from controller.quota import Engine, EvictionCause, decide
from controller.quota.snapshot import admitted_as
from tests.unit.test_quota_builders import (
    admitted_names,
    evicted_names,
    gang,
    node,
    queue,
    running,
    world,
)
from tests.unit.test_quota_partial_admission import elastic
from tests.unit.test_quota_victims_beside_room import nodes_of


def test_a_lender_reclaiming_4_gpus_from_a_borrowing_elastic_job_of_8_min_4_shrinks_it_to_4() -> (
    None
):
    queues = [queue("a", 8), queue("b", 0)]
    admitted = [running(elastic("b1", "b", 8, 4), *["n1"] * 8)]
    d = decide(world(queues, [node("n1")], [gang("a1", "a", 4, gpus=1)], admitted), 100)
    assert d.evictions == ()
    assert [(s.gang, s.pod_set, s.count) for s in d.shrinks] == [("b1", "main", 4)]
    assert d.shrinks[0].cause is EvictionCause.RECLAIMED
    assert d.shrinks[0].preemptor == "a1"
    assert [(p.node, p.count) for p in d.shrinks[0].removed] == [("n1", 4)]
    assert admitted_names(d) == ["a1"]
    assert nodes_of(d, "a1") == {"n1": 4}


def test_a_shrink_takes_only_the_pods_the_preemptor_needs() -> None:
    queues = [queue("a", 8), queue("b", 0)]
    admitted = [running(elastic("b1", "b", 8, 2), *["n1"] * 8)]
    d = decide(world(queues, [node("n1")], [gang("a1", "a", 3, gpus=1)], admitted), 100)
    assert [(s.gang, s.count) for s in d.shrinks] == [("b1", 5)]
    assert "reclaiming lent quota" in d.shrinks[0].describe()


def test_a_gang_at_its_minimum_is_evicted_whole() -> None:
    queues = [queue("a", 8), queue("b", 0)]
    at_minimum = admitted_as(elastic("b1", "b", 8, 4), {"main": 4})
    admitted = [running(at_minimum, *["n1"] * 4)]
    d = decide(world(queues, [node("n1")], [gang("a1", "a", 8, gpus=1)], admitted), 100)
    assert d.shrinks == ()
    assert evicted_names(d) == ["b1"]
    assert admitted_names(d) == ["a1"]


def test_a_shrink_that_would_not_free_the_nodes_the_preemptor_needs_is_not_made() -> None:
    # b1 runs 4 pods on each node and may lose only 2: no node is freed for a1's one 8-GPU pod.
    queues = [queue("a", 16), queue("b", 0)]
    admitted = [running(elastic("b1", "b", 8, 6), *["n1"] * 4, *["n2"] * 4)]
    pending = [gang("a1", "a", 1, gpus=8)]
    d = decide(world(queues, [node("n1"), node("n2")], pending, admitted), 100)
    assert d.shrinks == ()
    assert evicted_names(d) == ["b1"]
    assert admitted_names(d) == ["a1"]


def test_a_shrink_frees_the_node_the_preemptor_needs_from_the_pods_on_it() -> None:
    # Each node has 4 GPUs free beside 4 pods of b1, which may lose 4: the 4 on one node go,
    # so a1's 8-GPU pod gets that node whole.
    queues = [queue("a", 16), queue("b", 0)]
    admitted = [running(elastic("b1", "b", 8, 4), *["n1"] * 4, *["n2"] * 4)]
    nodes = [node("n1"), node("n2")]
    pending = [gang("a1", "a", 1, gpus=8)]
    d = decide(world(queues, nodes, pending, admitted), 100)
    assert d.evictions == ()
    assert [(s.gang, s.count) for s in d.shrinks] == [("b1", 4)]
    (where,) = {p.node for p in d.shrinks[0].removed}
    assert nodes_of(d, "a1") == {where: 1}


def test_a_priority_preemption_prefers_shrinking_to_evicting_a_cheaper_gang() -> None:
    # Evicting `tiny` (admitted later) would lose less work than evicting `wide`; shrinking
    # `wide` loses none.
    queues = [queue("a", 12, cohort=None, within="LowerPriority")]
    admitted = [
        running(elastic("wide", "a", 8, 4), *["n1"] * 8, at=0.0),
        running(gang("tiny", "a", 1, gpus=4), "n2", at=90.0),
    ]
    nodes = [node("n1"), node("n2", gpus=4)]
    high = gang("high", "a", 4, gpus=1, priority=5)
    d = decide(world(queues, nodes, [high], admitted), 100)
    assert d.evictions == ()
    assert [(s.gang, s.count, s.cause) for s in d.shrinks] == [("wide", 4, EvictionCause.PREEMPTED)]
    assert admitted_names(d) == ["high"]
    assert nodes_of(d, "high") == {"n1": 4}


def test_a_shrunk_gang_stays_admitted_with_its_charge_lowered() -> None:
    queues = [queue("a", 8), queue("b", 0)]
    engine = Engine(queues, [node("n1")])
    engine.add_admitted(running(elastic("b1", "b", 8, 4), *["n1"] * 8))
    engine.add_pending(gang("a1", "a", 4, gpus=1))
    d = engine.cycle(100)
    assert [s.gang for s in d.shrinks] == ["b1"]
    _, b1 = engine.running["b1"]
    assert b1.info.gang.pod_sets[0].count == 4
    assert sum(n for _, _, n in b1.plan) == 4
    assert engine.queues["b"].state.usage.get(("", "nvidia.com/gpu"), 0) == 4000
    # A second reclaim finds b1 at its minimum: it is evicted whole.
    engine.add_pending(gang("a2", "a", 4, gpus=1, created=1.0))
    d = engine.cycle(101)
    assert evicted_names(d) == ["b1"]
    assert d.shrinks == ()


def test_a_gang_is_shrunk_once_a_cycle_even_when_two_preemptors_could_each_shrink_it() -> None:
    # b1 may lose 4 pods; a1 and a2 each need 2: one shrink this cycle, the other waits.
    queues = [queue("a", 8), queue("b", 0)]
    admitted = [running(elastic("b1", "b", 8, 4), *["n1"] * 8)]
    pending = [gang("a1", "a", 2, gpus=1, created=1.0), gang("a2", "a", 2, gpus=1, created=2.0)]
    d = decide(world(queues, [node("n1")], pending, admitted), 100)
    assert [(s.gang, s.count, s.preemptor) for s in d.shrinks] == [("b1", 6, "a1")]
    assert d.evictions == ()
    assert admitted_names(d) == ["a1"]
