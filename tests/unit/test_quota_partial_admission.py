"""Partial admission: an elastic gang (a pod set with a minimum count) that does not fit whole
starts with the most pods that fit, down to its minimum."""

from __future__ import annotations

from dataclasses import replace

from controller.quota import Decisions, Gang, PendingCause, decide
from controller.quota.snapshot import admitted_as
from tests.unit.test_quota_builders import (
    gang,
    node,
    queue,
    running,
    world,
)


def elastic(
    name: str, q: str, pods: int, minimum: int, *, gpus: int = 1, priority: int = 0
) -> Gang:
    """A gang of `pods` pods of `gpus` GPUs each that may start with `minimum` of them."""
    whole = gang(name, q, pods, gpus, priority=priority)
    pod_set = replace(whole.pod_sets[0], min_count=minimum)
    return replace(whole, pod_sets=(pod_set,))


def admitted_pods(d: Decisions) -> dict[str, int]:
    return {a.gang: sum(p.count for p in a.placement) for a in d.admissions}


def test_a_gang_of_8_with_a_minimum_of_4_on_a_queue_with_room_for_6_is_admitted_with_6() -> None:
    d = decide(
        world([queue("a", 6, cohort=None)], [node("n1"), node("n2")], [elastic("g", "a", 8, 4)]), 0
    )
    assert [a.gang for a in d.admissions] == ["g"]
    assert d.admissions[0].counts == {"main": 6}
    assert admitted_pods(d) == {"g": 6}


def test_the_count_is_the_largest_that_fits_not_a_power_of_two() -> None:
    d = decide(
        world([queue("a", 7, cohort=None)], [node("n1"), node("n2")], [elastic("g", "a", 16, 2)]), 0
    )
    assert d.admissions[0].counts == {"main": 7}


def test_nodes_limit_the_count_as_quota_does() -> None:
    nodes = [node("n1", used_gpus=3), node("n2", used_gpus=8)]
    d = decide(world([queue("a", 16)], nodes, [elastic("g", "a", 8, 2)]), 0)
    assert d.admissions[0].counts == {"main": 5}
    assert admitted_pods(d) == {"g": 5}


def test_an_elastic_gang_that_fits_whole_is_admitted_whole() -> None:
    d = decide(world([queue("a", 16)], [node("n1"), node("n2")], [elastic("g", "a", 8, 4)]), 0)
    assert d.admissions[0].counts == {"main": 8}


def test_an_elastic_gang_whose_minimum_does_not_fit_stays_pending_for_its_whole_size() -> None:
    d = decide(world([queue("a", 3, cohort=None)], [node("n1")], [elastic("g", "a", 8, 4)]), 0)
    assert d.admissions == ()
    assert d.pending["g"].cause is PendingCause.NEVER_FITS
    assert "needs 8 nvidia.com/gpu" in d.pending["g"].describe()


def test_a_gang_of_8_without_a_minimum_that_fits_only_6_stays_pending() -> None:
    d = decide(
        world([queue("a", 6, cohort=None)], [node("n1"), node("n2")], [gang("g", "a", 8, 1)]), 0
    )
    assert d.admissions == ()
    assert d.pending["g"].cause is PendingCause.NEVER_FITS


def test_a_partially_admitted_gang_holds_quota_only_for_its_admitted_pods() -> None:
    # 6 of 8 GPUs of the node are free; the queue has 8: the elastic gang takes 6 of quota,
    # so the next gang is short of nodes, not of quota.
    nodes = [node("n1", used_gpus=2)]
    pending = [elastic("g", "a", 8, 4), gang("h", "a", 2, 1, created=1.0)]
    d = decide(world([queue("a", 8, cohort=None)], nodes, pending), 0)
    assert admitted_pods(d) == {"g": 6}
    assert d.pending["h"].cause is PendingCause.NO_NODE_FITS


def test_an_elastic_gang_starts_smaller_rather_than_evict_for_its_whole_size() -> None:
    def decided(high: Gang) -> tuple[list[str], dict[str, int]]:
        snapshot = world(
            [queue("a", 16, cohort=None, within="LowerPriority")],
            [node("n1"), node("n2")],
            [high],
            [running(gang("low", "a", 1, 8, priority=0), "n1")],
        )
        d = decide(snapshot, 100)
        return sorted(e.gang for e in d.evictions), admitted_pods(d)

    assert decided(gang("high", "a", 4, 4, priority=10)) == (["low"], {"high": 4})
    assert decided(elastic("high", "a", 4, 2, gpus=4, priority=10)) == ([], {"high": 2})


def test_an_elastic_gang_evicts_for_its_whole_size_when_not_even_its_minimum_fits() -> None:
    low = gang("low", "a", 1, 6, priority=0)
    high = elastic("high", "a", 2, 1, gpus=4, priority=10)
    snapshot = world(
        [queue("a", 8, cohort=None, within="LowerPriority")],
        [node("n1")],
        [high],
        [running(low, "n1")],
    )
    d = decide(snapshot, 100)
    assert sorted(e.gang for e in d.evictions) == ["low"]
    assert d.admissions[0].counts == {"main": 2}


def test_an_admitted_elastic_gang_fed_back_with_its_count_is_charged_that_count() -> None:
    g = elastic("g", "a", 8, 4)
    snapshot = world(
        [queue("a", 8, cohort=None)],
        [node("n1")],
        [gang("h", "a", 2, 1)],
        [running(admitted_as(g, {"main": 6}), *["n1"] * 6)],
    )
    assert admitted_pods(decide(snapshot, 0)) == {"h": 2}


def test_a_gang_of_a_minimum_equal_to_its_count_is_not_elastic() -> None:
    d = decide(world([queue("a", 6, cohort=None)], [node("n1")], [elastic("g", "a", 8, 8)]), 0)
    assert d.admissions == ()
