"""Nodes a pool can still add, in the decision core: a queue with a provisioning check on a
flavor admits gangs onto them (the controller then asks the autoscaler for those nodes), and
moves such a gang onto real nodes once they are there."""

from __future__ import annotations

from dataclasses import replace

from controller.quota import Config, Engine, Node, PendingCause, Toleration
from controller.quota.snapshot import PROVISIONABLE_TAINT, FlavorSpec
from tests.unit.test_quota_builders import GPU, G, gang, node
from tests.unit.test_quota_flavors import flavored_queue

POOL = {"pool": "gpu"}
GPU_FLAVOR = FlavorSpec("a100", POOL)


def real(name: str, used: int = 0) -> Node:
    return node(name, 8, labels=POOL, used_gpus=used)


def to_be_made(name: str) -> Node:
    return node(name, 8, labels=POOL, taints=[PROVISIONABLE_TAINT])


def engine(*nodes: Node, provisioned: bool = True, config: Config | None = None) -> Engine:
    q = flavored_queue("q", {"a100": 64})
    if provisioned:
        q = replace(q, provisioned=frozenset({"a100"}))
    return Engine([q], list(nodes), config or Config(), flavors=[GPU_FLAVOR], require_flavors=True)


def test_a_gang_that_fits_only_with_new_nodes_is_admitted_onto_them_existing_nodes_first() -> None:
    e = engine(real("r1"), to_be_made("~new-a100-0"), to_be_made("~new-a100-1"))
    e.add_pending(gang("g", "q", 2, 8))
    d = e.cycle(10.0)
    (admission,) = d.admissions
    assert sorted(p.node for p in admission.placement) == ["r1", "~new-a100-0"]


def test_without_a_provisioning_check_nodes_still_to_be_made_are_never_counted() -> None:
    e = engine(real("r1"), to_be_made("~new-a100-0"), provisioned=False)
    e.add_pending(gang("g", "q", 2, 8))
    d = e.cycle(10.0)
    assert not d.admissions
    assert e.reason("g").cause in (PendingCause.NO_NODE_FITS, PendingCause.NEVER_FITS)


def test_a_gang_whose_requests_failed_waits_for_real_nodes() -> None:
    e = engine(real("r1"), to_be_made("~new-a100-0"))
    e.add_pending(replace(gang("g", "q", 2, 8), provision=False))
    assert not e.cycle(10.0).admissions


def test_two_gangs_at_once_take_different_nodes_to_be_made() -> None:
    e = engine(to_be_made("~new-a100-0"), to_be_made("~new-a100-1"), to_be_made("~new-a100-2"))
    e.add_pending(gang("a", "q", 1, 8))
    e.add_pending(gang("b", "q", 2, 8, created=1))
    e.add_pending(gang("c", "q", 1, 8, created=2))
    d = e.cycle(10.0)
    placed = {a.gang: [p.node for p in a.placement] for a in d.admissions}
    assert set(placed) == {"a", "b"}  # c: the pool can add no fourth node
    nodes = [n for ns in placed.values() for n in ns]
    assert len(nodes) == len(set(nodes)) == 3


def test_a_gang_moves_onto_real_nodes_once_they_fit_it_whole_and_keeps_its_quota() -> None:
    e = engine(real("r1"), to_be_made("~new-a100-0"), to_be_made("~new-a100-1"))
    e.add_pending(gang("g", "q", 2, 8))
    e.cycle(10.0)
    assert e.place_on_existing("g", 11.0) is None  # only one real node yet: it stays
    e.set_nodes([real("r1"), real("gpu-abcde"), to_be_made("~new-a100-0")])
    moved = e.place_on_existing("g", 11.0)
    assert moved is not None
    assert sorted(p.node for p in moved) == ["gpu-abcde", "r1"]
    e.add_pending(gang("late", "q", 1, 8, created=5))
    (late,) = e.cycle(11.0).admissions
    assert [p.node for p in late.placement] == ["~new-a100-0"]  # the real nodes are g's now
    assert e.queues["q"].state.usage[("a100", GPU)] == 24 * G  # g keeps its 16, late takes 8


def test_a_pod_that_tolerates_every_taint_still_never_lands_on_nodes_to_be_made() -> None:
    e = engine(to_be_made("~new-a100-0"), provisioned=False)
    anything = Toleration("", "Exists")
    g = gang("g", "q", 1, 8)
    e.add_pending(replace(g, pod_sets=(replace(g.pod_sets[0], tolerations=(anything,)),)))
    assert not e.cycle(10.0).admissions


def test_nodes_that_exist_are_taken_before_nodes_to_be_made_whatever_the_packing() -> None:
    spread = Config(packing="spread")
    e = engine(real("r1", used=4), to_be_made("~new-a100-0"), config=spread)
    e.add_pending(gang("g", "q", 1, 4))
    (admission,) = e.cycle(10.0).admissions
    assert [p.node for p in admission.placement] == ["r1"]


def test_a_moved_gang_counts_as_admitted_when_it_moved() -> None:
    e = engine(to_be_made("~new-a100-0"))
    e.add_pending(gang("g", "q", 1, 8))
    e.cycle(10.0)
    e.set_nodes([real("r1"), to_be_made("~new-a100-0")])
    assert e.place_on_existing("g", 50.0) is not None
    (running,) = e.admitted_gangs()(10)
    assert running.admitted_at == 50.0
