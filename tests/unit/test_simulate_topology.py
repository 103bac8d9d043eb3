"""The simulator's topology: racks and blocks over the nodes, gangs' requests, the kueue-tas
policy against kohort, and the figures of the choice of domains."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from controller.quota import Node
from controller.quota.snapshot import GPU, TopologyRequest
from controller.simulate.loop import simulate
from controller.simulate.policies import POLICIES, make_policy
from controller.simulate.topology import (
    BLOCK_LABEL,
    HOSTNAME_LABEL,
    RACK_LABEL,
    Layout,
    RequestPolicy,
    TopologyMeter,
    flavors_with_topology,
)
from controller.simulate.traces import (
    CPU_PER_GPU,
    MEMORY_PER_GPU,
    Job,
    gang_shape,
    gpu_node,
    philly_queues,
)


def homogeneous(count: int) -> list[Node]:
    return [gpu_node(f"node-{i:04d}", 8) for i in range(count)]


def test_racks_of_8_in_blocks_of_4_over_352_nodes_make_44_racks_in_11_blocks() -> None:
    nodes = Layout.parse("racks8x4").label(homogeneous(352))
    racks = Counter(n.labels[RACK_LABEL] for n in nodes)
    blocks = {n.labels[BLOCK_LABEL] for n in nodes}
    assert len(racks) == 44 and set(racks.values()) == {8}
    assert len(blocks) == 11
    assert nodes[9].labels == {
        BLOCK_LABEL: "b00",
        RACK_LABEL: "b00-r1",
        HOSTNAME_LABEL: "node-0009",
    }
    assert nodes[32].labels[RACK_LABEL] == "b01-r0"


def test_no_rack_mixes_machine_sizes_and_the_largest_come_first() -> None:
    mixed = [gpu_node(f"m{i}", 2 if i % 3 else 8) for i in range(30)]
    nodes = Layout.parse("racks4x2").label(mixed)
    sizes: dict[str, set[int]] = {}
    for n in nodes:
        sizes.setdefault(n.labels[RACK_LABEL], set()).add(n.allocatable[GPU] // 1000)
    assert all(len(s) == 1 for s in sizes.values())
    assert nodes[0].labels[RACK_LABEL] == "b00-r0"  # m0 is the first 8-GPU machine
    assert sizes["b00-r0"] == {8}


@pytest.mark.parametrize("text", ["racks0x4", "rack8x4", "8x4"])
def test_a_layout_that_is_not_racks_n_x_m_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="racksNxM"):
        Layout.parse(text)


def test_a_multi_pod_gang_asks_for_a_rack_when_it_fits_one_else_a_block() -> None:
    nodes = Layout.parse("racks2x2").label(homogeneous(8))  # racks of 16 GPUs, blocks of 32
    rule = RequestPolicy.of("required", nodes)
    assert rule.request(Job("one", "a", 0, 1, 1, 8)) is None
    assert rule.request(Job("rack", "a", 0, 1, 2, 8)) == TopologyRequest(RACK_LABEL)
    assert rule.request(Job("block", "a", 0, 1, 3, 8)) == TopologyRequest(BLOCK_LABEL)
    assert rule.request(Job("huge", "a", 0, 1, 5, 8)) is None
    preferred = RequestPolicy.of("preferred", nodes).request(Job("p", "a", 0, 1, 2, 8))
    assert preferred == TopologyRequest(RACK_LABEL, required=False)
    assert RequestPolicy.of("none", nodes).request(Job("n", "a", 0, 1, 2, 8)) is None


@pytest.mark.parametrize(
    ("gpus", "shape"),
    [(4, ((1, 4),)), (8, ((2, 4),)), (6, ((1, 4), (1, 2))), (12, ((3, 4),)), (32, ((8, 4),))],
)
def test_gangs_of_smaller_pods_split_a_job_into_pods_of_at_most_that_many_gpus(
    gpus: int, shape: tuple[tuple[int, int], ...]
) -> None:
    assert gang_shape(gpus, pod_gpus=4) == shape


def one_rack_with_busy_nodes() -> list[Node]:
    """Four 8-GPU nodes in one rack; node-0002 and node-0003 each run 2 GPUs of other pods."""
    busy = {GPU: 2000, "cpu": 2 * CPU_PER_GPU, "memory": 2 * MEMORY_PER_GPU}
    nodes = Layout(4, 1).label(homogeneous(4))
    return [replace(n, used=busy) if n.name >= "node-0002" else n for n in nodes]


def run(
    policy: str, layout: Layout, nodes: list[Node], jobs: list[Job], rule: str = "required"
) -> object:
    requests = RequestPolicy.of(rule, nodes)  # type: ignore[arg-type]
    jobs = list(requests.apply(jobs))
    queues = philly_queues({"a": len(nodes)}, 8 * len(nodes))
    made = make_policy(policy, queues, nodes, flavors=flavors_with_topology(()))
    meter = TopologyMeter.of(layout, nodes, requests, jobs)
    return simulate(
        jobs, made, total_gpus=8 * len(nodes), weights={"a": 1.0}, progress=None, meter=meter
    )


def test_best_fit_keeps_two_nodes_empty_for_the_next_rack_gang_and_kueue_tas_does_not() -> None:
    # A gang of two 6-GPU pods, then one of two 8-GPU pods, each asking for the rack. Best fit
    # puts the 6-GPU pods on the partly used nodes, so the second gang starts at once; Kueue
    # counts one pod per node everywhere and takes the first nodes by name, so it waits.
    jobs = [Job("halves", "a", 0.0, 100.0, 2, 6), Job("wholes", "a", 1.0, 100.0, 2, 8)]
    nodes = one_rack_with_busy_nodes()
    kohort, kueue = (run(p, Layout(4, 1), nodes, jobs) for p in ("kohort", "kueue-tas"))
    assert kohort.waits == [0.0, 0.0]  # type: ignore[attr-defined]
    assert kueue.waits == [0.0, 99.0]  # type: ignore[attr-defined]
    for result in (kohort, kueue):
        figures = result.topology  # type: ignore[attr-defined]
        assert (figures.required_starts, figures.required_within) == (2, 2)


def random_trace(seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for i in range(120):
        pods, per_pod = rng.choice([(1, 1), (1, 2), (1, 8), (2, 6), (2, 8), (3, 8), (4, 8)])
        duration = float(rng.choice([60, 600, 3600]))
        jobs.append(Job(f"j{i:03d}", "a", 30.0 * i, duration, pods, per_pod))
    return jobs


@pytest.mark.parametrize("policy", ["kohort", "kueue-tas"])
@pytest.mark.parametrize("rule", ["required", "preferred"])
def test_every_gang_requiring_a_rack_starts_inside_one(policy: str, rule: str) -> None:
    layout = Layout(4, 2)
    result = run(policy, layout, list(layout.label(homogeneous(16))), random_trace(7), rule)
    figures = result.topology  # type: ignore[attr-defined]
    assert result.finished == 120  # type: ignore[attr-defined]
    if rule == "required":
        assert figures.required_starts > 20
        assert figures.required_within == figures.required_starts
    else:  # preferred may end anywhere
        assert figures.preferred_starts > 20
        assert figures.preferred_within <= figures.preferred_within_block
        assert figures.preferred_within_block <= figures.preferred_starts
    for share in (figures.racks_whole_free_mean, figures.whole_rack_fits, figures.gang_fits):
        assert 0.0 <= share <= 1.0


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_runs_with_a_layout_and_its_starts_are_checked(policy: str) -> None:
    layout = Layout(4, 2)
    result = run(policy, layout, list(layout.label(homogeneous(16))), random_trace(5))
    figures = result.topology  # type: ignore[attr-defined]
    assert result.finished == 120  # type: ignore[attr-defined]
    assert 0 < figures.required_within <= figures.required_starts


def test_without_requests_a_layout_and_kueue_tas_decide_as_kohort_without_one() -> None:
    jobs = random_trace(11)
    plain = [gpu_node(f"node-{i:04d}", 8) for i in range(16)]
    queues = philly_queues({"a": 16}, 128)

    def waits(policy: str, nodes: list[Node], flavored: bool) -> list[float]:
        flavors = flavors_with_topology(()) if flavored else ()
        made = make_policy(policy, queues, nodes, flavors=flavors)
        return simulate(jobs, made, total_gpus=128, weights={"a": 1.0}, progress=None).waits

    laid_out = list(Layout(4, 2).label(plain))
    base = waits("kohort", plain, False)
    assert waits("kohort", laid_out, True) == base
    assert waits("kueue-tas", laid_out, True) == base


def test_the_meter_counts_whole_racks_free_and_fragmented_time() -> None:
    nodes = Layout(2, 1).label(homogeneous(4))  # two racks of two nodes, 16 GPUs each
    rule = RequestPolicy.of("required", nodes)
    meter = TopologyMeter.of(Layout(2, 1), nodes, rule, [])
    meter.advance(0.0)
    meter.start(Job("x", "a", 0, 10, 1, 1), {"node-0000": 1})
    meter.advance(10.0)  # one rack of two wholly free
    meter.start(Job("y", "a", 0, 10, 1, 1), {"node-0002": 1})
    meter.advance(20.0)  # none wholly free, 30 GPUs free: fragmented
    meter.stop("x")
    meter.stop("y")
    meter.advance(40.0)  # both free
    figures = meter.figures([])
    assert figures.racks_whole_free_mean == pytest.approx((0.5 * 10 + 0 * 10 + 1 * 20) / 40)
    assert figures.whole_rack_fits == pytest.approx(30 / 40)
    assert figures.fragmented == pytest.approx(10 / 40)
