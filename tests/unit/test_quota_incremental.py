"""The long-lived engine: what changes between cycles keeps quota and nodes counted once."""

from __future__ import annotations

from dataclasses import replace

from controller.quota import AdmittedGang, Config, Engine, PodPlacement
from controller.quota.snapshot import DEFAULT_FLAVOR, HostPort
from tests.unit.test_quota_builders import GPU, G, gang, node, queue


def usage(engine: Engine, name: str) -> int:
    return engine.queues[name].state.usage.get((DEFAULT_FLAVOR, GPU), 0) // G


def free_gpus(engine: Engine, name: str) -> int:
    index = engine.index
    return index.free[index.by_name[name]][index.order.index(GPU)] // G


def running_engine() -> Engine:
    engine = Engine([queue("a", 16), queue("b", 16)], [node("n1"), node("n2")])
    a1 = gang("a1", "a", gpus=4)
    engine.add_admitted(AdmittedGang(a1, 0.0, (PodPlacement("main", "n1", 1),)))
    engine.add_pending(gang("a2", "a", gpus=8))
    return engine


def test_rebuilding_nodes_or_queues_counts_every_admitted_gang_once() -> None:
    engine = running_engine()

    engine.set_nodes([node("n1"), node("n2"), node("n3")])
    engine.set_queues([queue("a", 16), queue("b", 16)])
    engine.set_nodes([node("n1"), node("n2"), node("n3")])

    assert usage(engine, "a") == 4
    assert free_gpus(engine, "n1") == 4
    assert set(engine.pending) == {"a2"} and set(engine.running) == {"a1"}


def test_a_gang_moved_to_other_nodes_frees_its_planned_ones() -> None:
    engine = running_engine()

    engine.move("a1", (PodPlacement("main", "n2", 1),))

    assert (free_gpus(engine, "n1"), free_gpus(engine, "n2")) == (8, 4)
    assert usage(engine, "a") == 4


def test_pods_outside_gangs_take_node_capacity_and_give_it_back() -> None:
    engine = Engine([queue("a", 16, cohort=None)], [node("n1")])
    engine.add_pending(gang("g", "a", gpus=8))
    engine.set_node_used("n1", {GPU: 2 * G})

    assert engine.cycle(0).admissions == ()

    engine.set_node_used("n1", {})
    assert [a.gang for a in engine.cycle(1).admissions] == ["g"]


def test_host_ports_bound_outside_gangs_keep_a_gang_away_until_they_are_freed() -> None:
    engine = Engine([queue("a", 16, cohort=None)], [node("n1")])
    wants = gang("g", "a", gpus=1)
    ported = replace(wants.pod_sets[0], host_ports=(HostPort(9100),))
    engine.add_pending(replace(wants, pod_sets=(ported,)))
    engine.set_node_ports("n1", [HostPort(9100)])

    assert engine.cycle(0).admissions == ()

    engine.set_node_ports("n1", [])
    assert [a.gang for a in engine.cycle(1).admissions] == ["g"]


def test_a_cycle_reports_only_the_reasons_that_changed() -> None:
    engine = Engine([queue("a", 8, cohort=None)], [node("n1")])
    for name in ("g1", "g2"):
        engine.add_pending(gang(name, "a", pods=2, created=1.0))

    first = engine.cycle(10)
    again = engine.cycle(20)
    engine.add_pending(gang("g3", "a", pods=2, created=2.0))
    third = engine.cycle(30)

    assert sorted(first.pending) == ["g1", "g2"]
    assert again.pending == {}
    assert list(third.pending) == ["g3"]
    assert third.pending["g3"] == first.pending["g1"]


def test_a_victim_too_young_to_evict_is_taken_once_it_is_old_enough_without_other_changes() -> None:
    engine = Engine(
        [queue("a", 8), queue("b", 8, min_runtime=600)], [node("n1"), node("n2")], Config()
    )
    for name, where in (("b1", "n1"), ("b2", "n2")):
        borrowed = AdmittedGang(gang(name, "b"), 100.0, (PodPlacement("main", where, 1),))
        engine.add_admitted(borrowed)
    engine.add_pending(gang("a1", "a", created=200.0))

    assert engine.cycle(300).evictions == ()
    assert engine.cycle(650).evictions == ()  # nothing changed and no victim is old enough
    [eviction] = engine.cycle(700).evictions  # b's gangs have run their 600 s
    assert eviction.queue == "b"
