"""Victims on a node where the preemptor already has room for some of its pods: the room it
has there is counted once, by the pods it puts there, and the victims free the rest."""

from __future__ import annotations

from dataclasses import replace

from controller.quota import EvictionCause, FlavorSpec, PendingCause, Snapshot, decide
from controller.quota.snapshot import FlavorQuota, QueueSpec, Quota, ResourceGroup, TopologyRequest
from tests.unit.test_quota_builders import (
    GPU,
    G,
    admitted_names,
    evicted_names,
    gang,
    node,
    queue,
    running,
    world,
)
from tests.unit.test_quota_placement_rules import HOST, nodes_of


def _one_host_scene(low_beside_the_room: bool) -> Snapshot:
    """Two 8-GPU nodes; a gang of two 4-GPU pods of priority 5 that must share a node. n1 has
    room for one pod; beside it runs low (priority 0) or peer1 (priority 5: no victim); n2
    holds peer2 and the other of the two."""
    quotas = {GPU: Quota(24 * G), "cpu": Quota(96 * G)}
    groups = (ResourceGroup((GPU, "cpu"), (FlavorQuota("gpu", quotas),)),)
    queues = (QueueSpec("a", {}, within_queue="LowerPriority", groups=groups),)
    nodes = tuple(node(n, labels={HOST: n}) for n in ("n1", "n2"))
    low = gang("low", "a", 1, gpus=4)
    peer1, peer2 = (gang(f"peer{i}", "a", 1, gpus=4, priority=5) for i in (1, 2))
    beside, far = (low, peer1) if low_beside_the_room else (peer1, low)
    admitted = (running(beside, "n1"), running(peer2, "n2"), running(far, "n2"))
    base = gang("high", "a", 2, gpus=4, priority=5)
    high = replace(base, pod_sets=(replace(base.pod_sets[0], topology=TopologyRequest(HOST)),))
    return Snapshot(queues, nodes, (high,), admitted, (FlavorSpec("gpu", topology=(HOST,)),))


def test_a_higher_priority_gang_of_2x4_gpus_evicts_a_lower_priority_1x4_gang_from_the_only_8_gpu_node() -> (  # noqa: E501
    None
):
    queues = [queue("a", 8, cohort=None, within="LowerPriority")]
    admitted = [running(gang("low", "a", 1, gpus=4, priority=0), "n1")]
    high = gang("high", "a", 2, gpus=4, priority=5)
    d = decide(world(queues, [node("n1")], [high], admitted), 100)
    assert evicted_names(d) == ["low"]
    assert d.evictions[0].cause is EvictionCause.PREEMPTED
    assert admitted_names(d) == ["high"]
    assert nodes_of(d, "high") == {"n1": 2}


def test_with_the_default_preemption_settings_the_same_gang_waits_and_nothing_is_evicted() -> None:
    # withinClusterQueue defaults to Never: priority alone evicts nothing in the queue.
    queues = [queue("a", 8, cohort=None)]
    admitted = [running(gang("low", "a", 1, gpus=4, priority=0), "n1")]
    high = gang("high", "a", 2, gpus=4, priority=5)
    d = decide(world(queues, [node("n1")], [high], admitted), 100)
    assert d.evictions == ()
    assert d.pending["high"].cause is PendingCause.QUOTA


def test_a_gang_uses_its_room_on_one_node_and_clears_only_what_it_lacks_on_the_other() -> None:
    # 3 pods x 4 GPUs. n1 has room for one pod beside old (run longest: most work to lose);
    # n2 is full with two younger gangs. Evicting both of n2's gangs makes room for two pods
    # there, and the third takes n1's room: old stays.
    queues = [queue("a", 16, cohort=None, within="LowerPriority")]
    admitted = [
        running(gang("old", "a", 1, gpus=4), "n1", at=0),
        running(gang("young1", "a", 1, gpus=4), "n2", at=50),
        running(gang("young2", "a", 1, gpus=4), "n2", at=60),
    ]
    high = gang("high", "a", 3, gpus=4, priority=5)
    d = decide(world(queues, [node("n1"), node("n2")], [high], admitted), 100)
    assert evicted_names(d) == ["young1", "young2"]
    assert nodes_of(d, "high") == {"n1": 1, "n2": 2}


def test_a_gang_that_needs_both_half_free_nodes_evicts_the_gang_on_each() -> None:
    queues = [queue("a", 16, cohort=None, within="LowerPriority")]
    admitted = [
        running(gang("low1", "a", 1, gpus=4), "n1"),
        running(gang("low2", "a", 1, gpus=4), "n2"),
    ]
    high = gang("high", "a", 4, gpus=4, priority=5)
    d = decide(world(queues, [node("n1"), node("n2")], [high], admitted), 100)
    assert evicted_names(d) == ["low1", "low2"]
    assert nodes_of(d, "high") == {"n1": 2, "n2": 2}


def test_no_eviction_when_the_victim_is_on_another_node_than_the_room_a_one_node_gang_needs() -> (
    None
):
    # Evicting low would leave two half rooms, on n1 and n2, never one whole node.
    d = decide(_one_host_scene(low_beside_the_room=False), 100)
    assert d.evictions == ()
    assert d.pending["high"].cause is PendingCause.NO_NODE_FITS


def test_a_one_node_gang_evicts_the_victim_beside_its_room_and_takes_that_node() -> None:
    d = decide(_one_host_scene(low_beside_the_room=True), 100)
    assert evicted_names(d) == ["low"]
    assert nodes_of(d, "high") == {"n1": 2}


def test_a_lender_reclaims_a_borrowed_1x4_gang_from_the_only_8_gpu_node_for_its_2x4_gang() -> None:
    # b has no quota of its own: its gang runs on what a lends. a's gang of two 4-GPU pods
    # needs all 8 GPUs of a's nominal quota and of the node.
    queues = [queue("a", 8), queue("b", 0)]
    admitted = [running(gang("b1", "b", 1, gpus=4), "n1")]
    d = decide(world(queues, [node("n1")], [gang("a1", "a", 2, gpus=4)], admitted), 100)
    assert evicted_names(d) == ["b1"]
    assert d.evictions[0].cause is EvictionCause.RECLAIMED
    assert admitted_names(d) == ["a1"]
    assert nodes_of(d, "a1") == {"n1": 2}
