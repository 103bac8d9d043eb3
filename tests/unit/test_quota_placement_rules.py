"""What the scheduler enforces on a gang's own pods, checked before the gang is admitted:
required node affinity, (anti-)affinity and spread among its pods, host ports, and topology."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from controller.quota import Decisions, FlavorSpec, PendingCause, Snapshot, decide
from controller.quota.snapshot import (
    HostPort,
    NodeRequirement,
    OwnPodsTerm,
    PodSet,
    QueueSpec,
    SpreadConstraint,
    TopologyRequest,
)
from tests.unit.test_quota_builders import GPU, G, gang, node, queue, world

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
BLOCK = "example.com/block"
RACK = "example.com/rack"


def rack_node(name: str, block: str, rack: str, gpus: int = 8, used: int = 0) -> object:
    labels = {HOST: name, BLOCK: block, RACK: rack}
    return node(name, gpus, labels=labels, used_gpus=used)


def ruled(name: str, pods: int, gpus: int = 1, **rules: object) -> object:
    """A one-pod-set gang of `pods` pods of `gpus` GPUs, its pod set carrying `rules`."""
    base = gang(name, "a", pods, gpus)
    pod_set = replace(base.pod_sets[0], **rules)  # type: ignore[arg-type]
    return replace(base, pod_sets=(pod_set,))


def nodes_of(d: Decisions, gang_name: str) -> Counter[str]:
    [admission] = [a for a in d.admissions if a.gang == gang_name]
    return Counter({p.node: p.count for p in admission.placement})


def one_per_host(pod_set: str = "main") -> tuple[OwnPodsTerm, ...]:
    return (OwnPodsTerm(HOST, (pod_set,), anti=True),)


# -- required node affinity -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "values", "labels", "matches"),
    [
        ("In", ("a", "b"), {"k": "b"}, True),
        ("In", ("a",), {}, False),
        ("NotIn", ("a",), {}, True),
        ("NotIn", ("a",), {"k": "a"}, False),
        ("Exists", (), {"k": ""}, True),
        ("DoesNotExist", (), {"k": "x"}, False),
        ("Gt", ("3",), {"k": "4"}, True),
        ("Gt", ("3",), {"k": "3"}, False),
        ("Lt", ("3",), {"k": "2"}, True),
        ("Lt", ("3",), {"k": "two"}, False),
    ],
    ids=lambda v: str(v),
)
def test_a_node_requirement_matches_as_kubernetes_evaluates_it(
    operator: str, values: tuple[str, ...], labels: dict[str, str], matches: bool
) -> None:
    requirement = NodeRequirement("k", operator, values)  # type: ignore[arg-type]
    assert requirement.matches(labels) is matches


def test_a_gang_whose_node_affinity_no_node_meets_is_inadmissible_and_says_so() -> None:
    nowhere = ((NodeRequirement(ZONE, "In", ("zone-z",)),),)
    nodes = [node("n1", labels={ZONE: "zone-a"}), node("n2", labels={ZONE: "zone-b"})]
    d = decide(world([queue("a", 16)], nodes, [ruled("g", 3, node_affinity=nowhere)]), 0)
    assert d.admissions == ()
    assert d.pending["g"].cause is PendingCause.NEVER_FITS
    assert "no node matches its node selector, node affinity and tolerations" in (
        d.pending["g"].describe()
    )


def test_a_gang_goes_only_to_nodes_that_meet_one_of_its_affinity_terms() -> None:
    terms = (
        (NodeRequirement(ZONE, "In", ("zone-b",)),),
        (NodeRequirement("gpu-gen", "Gt", ("3",)),),
    )
    nodes = [
        node("n1", labels={ZONE: "zone-a", "gpu-gen": "2"}),
        node("n2", labels={ZONE: "zone-b"}),
        node("n3", labels={ZONE: "zone-a", "gpu-gen": "5"}),
    ]
    d = decide(world([queue("a", 24)], nodes, [ruled("g", 2, 8, node_affinity=terms)]), 0)
    assert set(nodes_of(d, "g")) == {"n2", "n3"}


# -- among the gang's own pods ----------------------------------------------------------------


def test_one_worker_per_node_on_two_nodes_for_three_pods_is_inadmissible_naming_the_rule() -> None:
    nodes = [node("n1", labels={HOST: "n1"}), node("n2", labels={HOST: "n2"})]
    d = decide(world([queue("a", 16)], nodes, [ruled("g", 3, pod_affinity=one_per_host())]), 0)
    assert d.admissions == ()
    why = d.pending["g"]
    assert why.cause is PendingCause.NEVER_FITS
    assert why.describe() == (
        "Inadmissible: needs 3 pods x 1 nvidia.com/gpu; pod anti-affinity (one per"
        " kubernetes.io/hostname) lets only 2 fit even on empty nodes"
    )


def test_one_worker_per_node_is_placed_one_per_node() -> None:
    nodes = [node(f"n{i}", labels={HOST: f"n{i}"}) for i in range(4)]
    d = decide(world([queue("a", 32)], nodes, [ruled("g", 3, pod_affinity=one_per_host())]), 0)
    assert sorted(nodes_of(d, "g").values()) == [1, 1, 1]


def test_one_worker_per_node_waits_while_a_node_is_busy_and_says_which_rule_blocks() -> None:
    nodes = [node(f"n{i}", labels={HOST: f"n{i}"}, used_gpus=8 if i == 0 else 0) for i in range(3)]
    d = decide(world([queue("a", 32)], nodes, [ruled("g", 3, pod_affinity=one_per_host())]), 0)
    why = d.pending["g"]
    assert why.cause is PendingCause.NO_NODE_FITS
    assert why.describe() == (
        "Quota ok but no node fits: needs 3 pods x 1 nvidia.com/gpu; pod anti-affinity (one per"
        " kubernetes.io/hostname) lets only 2 fit on free nodes"
    )


def test_pods_that_must_be_together_per_zone_land_in_one_zone() -> None:
    together = (OwnPodsTerm(ZONE, ("main",)),)
    nodes = [node(f"n{i}", 4, labels={ZONE: f"zone-{i % 2}"}) for i in range(4)]
    d = decide(world([queue("a", 32)], nodes, [ruled("g", 4, 2, pod_affinity=together)]), 0)
    placed = nodes_of(d, "g")
    assert sum(placed.values()) == 4
    assert len({int(n[1:]) % 2 for n in placed}) == 1


def test_workers_kept_off_the_leaders_node_by_the_leaders_anti_affinity() -> None:
    # Anti-affinity holds both ways: the leader's term keeps workers off its node.
    leader = PodSet(
        1, {GPU: G}, "leader", pod_affinity=(OwnPodsTerm(HOST, ("worker",), anti=True),)
    )
    worker = PodSet(2, {GPU: 4 * G}, "worker")
    g = replace(gang("g", "a"), pod_sets=(leader, worker))
    nodes = [node(f"n{i}", labels={HOST: f"n{i}"}) for i in range(2)]
    d = decide(world([queue("a", 32)], nodes, [g]), 0)
    [admission] = d.admissions
    leader_nodes = {p.node for p in admission.placement if p.pod_set == "leader"}
    worker_nodes = {p.node for p in admission.placement if p.pod_set == "worker"}
    assert leader_nodes.isdisjoint(worker_nodes)


def test_a_spread_over_zones_with_max_skew_one_balances_the_pods() -> None:
    spread = (SpreadConstraint(ZONE, 1, ("main",)),)
    nodes = [node(f"n{i}", labels={ZONE: f"zone-{i % 2}"}) for i in range(4)]
    d = decide(world([queue("a", 32)], nodes, [ruled("g", 4, 1, spread=spread)]), 0)
    per_zone = Counter(
        f"zone-{int(n[1:]) % 2}" for n, c in nodes_of(d, "g").items() for _ in range(c)
    )
    assert per_zone == Counter({"zone-0": 2, "zone-1": 2})


def test_a_spread_that_cannot_hold_on_the_free_nodes_waits_and_names_it() -> None:
    spread = (SpreadConstraint(ZONE, 1, ("main",)),)
    nodes = [
        node("n0", labels={ZONE: "zone-0"}),
        node("n1", labels={ZONE: "zone-1"}, used_gpus=7),
    ]
    d = decide(world([queue("a", 32)], nodes, [ruled("g", 4, 1, spread=spread)]), 0)
    assert d.pending["g"].cause is PendingCause.NO_NODE_FITS
    assert "topology spread (maxSkew 1 over topology.kubernetes.io/zone)" in (
        d.pending["g"].describe()
    )


def test_pods_binding_one_host_port_never_share_a_node() -> None:
    port = (HostPort(8080),)
    nodes = [node(f"n{i}") for i in range(2)]
    d = decide(world([queue("a", 32)], nodes, [ruled("g", 3, host_ports=port)]), 0)
    assert d.pending["g"].cause is PendingCause.NEVER_FITS
    assert "host port 8080/TCP lets only 2 fit even on empty nodes" in d.pending["g"].describe()


def test_a_node_whose_other_pods_bind_the_port_is_left_out() -> None:
    nodes = [replace(node("n0"), ports=(HostPort(8080),)), node("n1"), node("n2")]
    d = decide(world([queue("a", 32)], nodes, [ruled("g", 2, host_ports=(HostPort(8080),))]), 0)
    assert set(nodes_of(d, "g")) == {"n1", "n2"}


def test_other_protocols_and_other_addresses_do_not_conflict() -> None:
    assert not HostPort(53, "UDP").conflicts(HostPort(53, "TCP"))
    assert not HostPort(80, host_ip="10.0.0.1").conflicts(HostPort(80, host_ip="10.0.0.2"))
    assert HostPort(80, host_ip="10.0.0.1").conflicts(HostPort(80))


# -- topology ----------------------------------------------------------------------------------


def racks(
    per_rack: int = 4, blocks: int = 2, racks_per_block: int = 2, **busy: int
) -> list[object]:
    """`blocks` x `racks_per_block` racks of `per_rack` 8-GPU nodes; `busy` maps a node name to
    the GPUs others use on it."""
    out = []
    for b in range(blocks):
        for r in range(racks_per_block):
            for n in range(per_rack):
                name = f"b{b}r{r}n{n}"
                out.append(rack_node(name, f"b{b}", f"b{b}r{r}", used=busy.get(name, 0)))
    return out


def topology_world(
    nodes: list[object], *gangs: object, levels: tuple[str, ...] = (BLOCK, RACK, HOST)
) -> Snapshot:
    flavor = FlavorSpec("gpu", topology=levels)
    from controller.quota.snapshot import FlavorQuota, Quota, ResourceGroup

    groups = (
        ResourceGroup(
            (GPU, "cpu"), (FlavorQuota("gpu", {GPU: Quota(128 * G), "cpu": Quota(512 * G)}),)
        ),
    )
    q = QueueSpec("a", {}, groups=groups)
    return Snapshot((q,), tuple(nodes), tuple(gangs), (), (flavor,))  # type: ignore[arg-type]


def racks_of(d: Decisions, gang_name: str) -> set[str]:
    return {n[:4] for n in nodes_of(d, gang_name)}


def test_a_gang_with_a_required_rack_lands_inside_one_rack() -> None:
    rack = TopologyRequest(RACK)
    d = decide(topology_world(racks(), ruled("g", 4, 8, topology=rack)), 0)
    assert len(racks_of(d, "g")) == 1


def test_a_required_rack_waits_until_one_rack_is_free_though_the_cluster_has_room() -> None:
    # Every rack has one busy node: 24 GPUs free per rack, 96 in all; the gang needs 32.
    busy = {f"b{b}r{r}n0": 8 for b in range(2) for r in range(2)}
    d = decide(topology_world(racks(**busy), ruled("g", 4, 8, topology=TopologyRequest(RACK))), 0)
    why = d.pending["g"]
    assert why.cause is PendingCause.NO_NODE_FITS
    assert why.describe() == (
        "Quota ok but no node fits: needs 4 pods x 8 nvidia.com/gpu; its topology request (in"
        " one example.com/rack) lets only 3 fit on free nodes"
    )


def test_a_required_rack_larger_than_any_rack_is_inadmissible() -> None:
    d = decide(topology_world(racks(), ruled("g", 5, 8, topology=TopologyRequest(RACK))), 0)
    assert d.pending["g"].cause is PendingCause.NEVER_FITS
    assert "in one example.com/rack" in d.pending["g"].describe()


def test_a_preferred_rack_falls_back_to_one_block_when_no_rack_has_room() -> None:
    busy = {"b0r0n0": 8, "b0r1n0": 8, "b1r0n0": 8, "b1r1n0": 8}
    preferred = TopologyRequest(RACK, required=False)
    d = decide(topology_world(racks(**busy), ruled("g", 5, 8, topology=preferred)), 0)
    placed = racks_of(d, "g")
    assert len({r[:2] for r in placed}) == 1  # one block
    assert len(placed) == 2  # over its two racks


def test_the_tightest_rack_that_fits_is_chosen_so_whole_racks_stay_free() -> None:
    # b0r0 has one node busy (24 GPUs free), the other racks are empty (32 free).
    d = decide(
        topology_world(racks(**{"b0r0n0": 8}), ruled("g", 2, 8, topology=TopologyRequest(RACK))), 0
    )
    assert racks_of(d, "g") == {"b0r0"}


def test_slices_land_each_in_its_own_rack() -> None:
    sliced = TopologyRequest(BLOCK, slice_level=RACK, slice_size=4)
    d = decide(topology_world(racks(), ruled("g", 8, 8, topology=sliced)), 0)
    placed = nodes_of(d, "g")
    per_rack = Counter(n[:4] for n, c in placed.items() for _ in range(c))
    assert sorted(per_rack.values()) == [4, 4]
    assert len({r[:2] for r in per_rack}) == 1  # both in one block


def test_reclaim_for_a_gang_that_needs_one_rack_frees_one_rack_within_its_budget() -> None:
    # 2 racks x 2 nodes x 8 GPUs, all taken by four 1-pod gangs that borrow. A lender's gang
    # needs 2 nodes in one rack; what it may throw away (its waste budget) covers rack r0's two
    # gangs (5 + 6), not a walk that starts with the cheapest gang anywhere (r1's, 1).
    from controller.quota import AdmittedGang, Config, Engine, PodPlacement
    from controller.quota.snapshot import FlavorQuota, Quota, ResourceGroup

    nodes = [rack_node(f"b0r{r}n{n}", "b0", f"b0r{r}") for r in range(2) for n in range(2)]

    def spec(name: str, gpus: int) -> QueueSpec:
        quotas = {GPU: Quota(gpus * G), "cpu": Quota(gpus * 4 * G)}
        groups = (ResourceGroup((GPU, "cpu"), (FlavorQuota("gpu", quotas),)),)
        return QueueSpec(name, {}, cohort="all", reclaim_within_cohort="Any", groups=groups)

    flavor = FlavorSpec("gpu", topology=(BLOCK, RACK, HOST))
    engine = Engine(
        [spec("lender", 32), spec("borrower", 0)],
        nodes,  # type: ignore[arg-type]
        Config(waste_budget=0.023),
        flavors=[flavor],
    )
    lost = {"b0r0n0": 5, "b0r0n1": 6, "b0r1n0": 1, "b0r1n1": 100}  # work each would lose
    for node_name, work in lost.items():
        g = replace(gang(f"v-{node_name}", "borrower", 1, 8), created=0.0)
        at = 1000.0 - work / 0.25  # lost work: runtime x dominant share (8 of 32 GPUs)
        placement = (PodPlacement("main", node_name, 1),)
        engine.add_admitted(AdmittedGang(g, at, placement, {"main": {GPU: "gpu", "cpu": "gpu"}}))
    preemptor = replace(ruled("big", 2, 8, topology=TopologyRequest(RACK)), queue="lender")
    engine.add_pending(preemptor)  # type: ignore[arg-type]

    d = engine.cycle(1000.0)

    assert [a.gang for a in d.admissions] == ["big"]
    assert sorted(e.gang for e in d.evictions) == ["v-b0r0n0", "v-b0r0n1"]
    assert racks_of(d, "big") == {"b0r0"}


def test_an_admitted_gangs_host_ports_keep_the_next_gang_off_its_nodes() -> None:
    from controller.quota import Engine

    engine = Engine([queue("a", 32)], [node(f"n{i}") for i in range(3)])
    first = ruled("first", 2, host_ports=(HostPort(9000),))
    second = ruled("second", 2, host_ports=(HostPort(9000),))
    engine.add_pending(first)  # type: ignore[arg-type]
    engine.add_pending(second)  # type: ignore[arg-type]

    d = engine.cycle(0.0)

    assert [a.gang for a in d.admissions] == ["first"]
    assert "host port 9000/TCP" in d.pending["second"].describe()
    engine.finish("first")
    assert [a.gang for a in engine.cycle(1.0).admissions] == ["second"]
