"""The `kueue-tas` domain choice (Kueue's TAS algorithm) against kohort's best fit: where they
choose differently, and that both keep every gang inside the domain it requires."""

from __future__ import annotations

from collections import Counter

from controller.quota import Config, Decisions, PendingCause, decide
from controller.quota.domains import NodeRoom
from controller.quota.kueue_tas import assign
from controller.quota.snapshot import TopologyRequest
from tests.unit.test_quota_placement_rules import (
    BLOCK,
    HOST,
    RACK,
    nodes_of,
    racks,
    racks_of,
    ruled,
    topology_world,
)

KUEUE = Config(topology="kueue-tas")


def both(world: object) -> tuple[Decisions, Decisions]:
    """The decisions of kohort's best fit and of Kueue's TAS on the same world."""
    return decide(world, 0), decide(world, 0, KUEUE)  # type: ignore[arg-type]


def per_rack(d: Decisions, gang_name: str) -> Counter[str]:
    return Counter(n[:4] for n, c in nodes_of(d, gang_name).items() for _ in range(c))


def test_within_a_rack_best_fit_fills_partly_used_nodes_and_kueue_counts_pods_per_node() -> None:
    # Rack b0r0: n0 and n1 empty, n2 has 6 GPUs free, n3 7. Each node takes one 6-GPU pod, so
    # Kueue's counts tie and it takes the first nodes by name; best fit takes the fullest.
    world = topology_world(
        racks(blocks=1, racks_per_block=1, b0r0n2=2, b0r0n3=1),
        ruled("g", 2, 6, topology=TopologyRequest(RACK)),
    )
    kohort, kueue = both(world)
    assert set(nodes_of(kohort, "g")) == {"b0r0n2", "b0r0n3"}
    assert set(nodes_of(kueue, "g")) == {"b0r0n0", "b0r0n1"}


def test_slices_best_fit_takes_the_tightest_racks_and_kueue_the_fewest() -> None:
    # Block b0: rack r0 has room for one slice of 4 pods, r1 for two. Best fit puts each slice
    # in the tightest rack that takes it (r0, then r1); Kueue takes r1, which holds both.
    busy = {f"b0r0n{n}": 8 for n in range(4, 8)}
    world = topology_world(
        racks(per_rack=8, blocks=1, racks_per_block=2, **busy),
        ruled("g", 8, 8, topology=TopologyRequest(BLOCK, slice_level=RACK, slice_size=4)),
    )
    kohort, kueue = both(world)
    assert per_rack(kohort, "g") == Counter({"b0r0": 4, "b0r1": 4})
    assert per_rack(kueue, "g") == Counter({"b0r1": 8})


def test_a_preferred_rack_falls_back_to_the_tightest_block_under_both() -> None:
    # No rack has room for 5 pods; block b0 is the tightest that has (7 free nodes).
    busy = {"b0r0n0": 8}
    world = topology_world(
        racks(**busy), ruled("g", 5, 8, topology=TopologyRequest(RACK, required=False))
    )
    for d in both(world):
        assert {r[:2] for r in racks_of(d, "g")} == {"b0"}
        assert sum(nodes_of(d, "g").values()) == 5


def test_both_choose_the_tightest_rack_that_fits_a_required_rack() -> None:
    world = topology_world(
        racks(**{"b0r0n0": 8, "b1r1n0": 8, "b1r1n1": 8}),
        ruled("g", 2, 8, topology=TopologyRequest(RACK)),
    )
    kohort, kueue = both(world)
    assert racks_of(kohort, "g") == racks_of(kueue, "g") == {"b1r1"}


def test_a_required_rack_that_no_rack_holds_waits_with_the_same_reason_under_both() -> None:
    busy = {f"b{b}r{r}n0": 8 for b in range(2) for r in range(2)}
    world = topology_world(racks(**busy), ruled("g", 4, 8, topology=TopologyRequest(RACK)))
    kohort, kueue = both(world)
    assert kohort.pending["g"].cause is kueue.pending["g"].cause is PendingCause.NO_NODE_FITS
    assert kohort.pending["g"].describe() == kueue.pending["g"].describe()
    assert "in one example.com/rack) lets only 3 fit" in kueue.pending["g"].describe()


def test_a_required_rack_larger_than_any_rack_is_inadmissible_under_kueue_tas() -> None:
    d = decide(topology_world(racks(), ruled("g", 5, 8, topology=TopologyRequest(RACK))), 0, KUEUE)
    assert d.pending["g"].cause is PendingCause.NEVER_FITS


def test_gangs_admitted_one_after_another_stay_each_in_one_rack_under_both() -> None:
    gangs = [ruled(f"g{i}", 2 + i % 3, 8, topology=TopologyRequest(RACK)) for i in range(5)]
    world = topology_world(racks(), *gangs)
    for d in both(world):
        admitted = [a.gang for a in d.admissions]
        assert len(admitted) >= 3
        for name in admitted:
            assert len(racks_of(d, name)) == 1


def test_gangs_without_a_topology_request_are_placed_alike() -> None:
    world = topology_world(racks(b0r0n0=3), ruled("a", 3, 2), ruled("b", 1, 5))
    kohort, kueue = both(world)
    for name in ("a", "b"):
        assert nodes_of(kohort, name) == nodes_of(kueue, name)


def leaves(*rooms: tuple[str, str, int]) -> list[NodeRoom]:
    """Nodes as (block, name, room), one rack per block."""
    return [
        NodeRoom(i, name, {BLOCK: block, RACK: f"{block}-r", HOST: name}, room)
        for i, (block, name, room) in enumerate(rooms)
    ]


def test_kueue_spreads_a_preferred_request_at_the_top_most_room_first() -> None:
    # No block holds 12 pods: the largest block whole, then the tightest that takes the rest.
    rooms = leaves(("b0", "x", 10), ("b1", "y", 10), ("b2", "z", 3))
    plan = assign(rooms, 12, TopologyRequest(BLOCK, required=False), (BLOCK, RACK, HOST))
    assert dict(plan.pods) == {0: 10, 2: 2}


def test_kueue_refuses_a_required_level_and_says_how_many_fit() -> None:
    rooms = leaves(("b0", "x", 3), ("b1", "y", 2))
    plan = assign(rooms, 4, TopologyRequest(BLOCK), (BLOCK, RACK, HOST))
    assert not plan.pods
    assert plan.fitted == 3
