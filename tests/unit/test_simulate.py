"""The simulator: trace shapes, fairness measures, and what each policy does to a tiny trace."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from controller.quota import Config, Node
from controller.simulate.loop import Result, _Sampler, simulate
from controller.simulate.metrics import jain, max_min_fair, percentile, weighted_percentile
from controller.simulate.openb import arrivals
from controller.simulate.policies import POLICIES, EnginePolicy, make_policy
from controller.simulate.traces import (
    DEFAULT_TRACES,
    Job,
    OpenbPod,
    gang_shape,
    gpu_node,
    load_philly,
    philly_queues,
)


@pytest.mark.parametrize(
    ("gpus", "shape"),
    [(1, ((1, 1),)), (8, ((1, 8),)), (12, ((1, 8), (1, 4))), (24, ((3, 8),)), (128, ((16, 8),))],
    ids=["one", "node", "node-and-a-half", "three-nodes", "largest"],
)
def test_a_philly_job_of_n_gpus_is_a_gang_of_whole_node_pods(
    gpus: int, shape: tuple[tuple[int, int], ...]
) -> None:
    assert gang_shape(gpus) == shape


def test_jain_index_is_one_when_even_and_one_over_n_when_one_takes_all() -> None:
    assert jain([0.2, 0.2, 0.2]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)


def test_max_min_fair_shares_give_leftovers_to_the_hungry() -> None:
    shares = max_min_fair(
        12.0, {"small": 2.0, "big": 100.0, "mid": 5.0}, dict.fromkeys(("small", "big", "mid"), 1.0)
    )
    assert shares == pytest.approx({"small": 2.0, "mid": 5.0, "big": 5.0})
    weighted = max_min_fair(12.0, {"a": 100.0, "b": 100.0}, {"a": 1.0, "b": 2.0})
    assert weighted == pytest.approx({"a": 4.0, "b": 8.0})


def test_percentile_interpolates() -> None:
    assert percentile([0.0, 10.0], 50) == 5.0


def test_the_gpu_weighted_p95_is_the_wait_of_the_job_holding_that_share_of_gpus() -> None:
    waits = [10.0, 20.0, 30.0, 40.0]
    # Most GPUs were asked for by the job that waited longest: its wait is the p95 by GPU.
    assert weighted_percentile(waits, [1, 1, 1, 97], 95) == 40.0
    # One 97-GPU job that started at once outweighs three 1-GPU jobs that waited.
    assert weighted_percentile(waits, [97, 1, 1, 1], 95) == 10.0
    assert weighted_percentile(waits, [1, 1, 1, 1], 50) == 20.0
    assert math.isnan(weighted_percentile([], [], 95))


def tiny_trace() -> tuple[list[Job], list[Node]]:
    # Two 8-GPU nodes. A one-pod job holds one node for long; then a two-pod job arrives, then
    # a short one-pod job. Pod by pod, the two-pod job grabs the free node and waits for the
    # second: a partial placement that holds 8 GPUs idle.
    jobs = [
        Job("long", "a", 0.0, 1000.0, 1, 8),
        Job("pair", "b", 10.0, 100.0, 2, 8),
        Job("short", "a", 20.0, 50.0, 1, 8),
    ]
    return jobs, [gpu_node("n1", 8), gpu_node("n2", 8)]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_finishes_the_tiny_trace(policy: str) -> None:
    jobs, nodes = tiny_trace()
    queues = philly_queues({"a": 1, "b": 1}, 16)
    result = simulate(
        jobs, make_policy(policy, queues, nodes), total_gpus=16,
        weights={"a": 8.0, "b": 8.0}, progress=None,
    )  # fmt: skip
    assert result.finished == 3
    if policy == "kube-default":
        assert result.partial_jobs == 1
        assert result.partial_gpu_hours > 0
    if policy not in ("kube-default", "quota-drf"):  # the others place gangs whole
        assert result.partial_jobs == 0
        assert result.partial_gpu_hours == 0


def replay_half_full_nodes_then_a_whole_node_gang(policy: str) -> Result:
    # Two 4-GPU jobs spread over two 8-GPU nodes; then an 8-GPU gang that no node can host
    # until a 4-GPU job ends at t=1000; then a 1-GPU job (queue b) that fits either node.
    jobs = [
        Job("half-1", "a", 0.0, 1000.0, 1, 4),
        Job("half-2", "a", 1.0, 2000.0, 1, 4),
        Job("whole", "a", 10.0, 100.0, 1, 8),
        Job("small", "b", 20.0, 100.0, 1, 1),
    ]
    nodes = [gpu_node("n1", 8), gpu_node("n2", 8)]
    queues = philly_queues({"a": 1, "b": 1}, 16)
    return simulate(
        jobs, make_policy(policy, queues, nodes), total_gpus=16,
        weights={"a": 8.0, "b": 8.0}, progress=None,
    )  # fmt: skip


def test_gang_fifo_keeps_a_fitting_job_out_while_an_enqueued_gang_cannot_be_placed() -> None:
    # Volcano's enqueue checks the aggregate only: "whole" is enqueued (8 running + 8 <= 16),
    # cannot be placed, and holds its 8 GPUs of the aggregate, so "small" (8 + 8 + 1 > 16) is
    # not enqueued although 4 GPUs are free on each node. It starts when "half-1" ends.
    result = replay_half_full_nodes_then_a_whole_node_gang("gang-fifo")
    assert result.queues["b"].wait_mean == pytest.approx(980.0)
    assert result.queues["a"].wait_mean == pytest.approx(990.0 / 3)  # "whole" waited 990 s
    assert result.idle_gpu_hours_while_1gpu_waits == pytest.approx(8 * 980.0 / 3600)


def test_without_the_enqueue_stage_the_fitting_job_starts_at_once() -> None:
    result = replay_half_full_nodes_then_a_whole_node_gang("gang-fifo-no-enqueue")
    assert result.queues["b"].wait_mean == 0.0
    assert result.queues["a"].wait_mean == pytest.approx(990.0 / 3)  # "whole" waits the same
    assert result.idle_gpu_hours_while_1gpu_waits == 0.0


def test_the_report_says_which_gang_sizes_wait_beyond_the_p95() -> None:
    # A 16-GPU gang holds both nodes; four 1-GPU jobs arriving after it wait for it to end.
    jobs = [Job("big", "a", 0.0, 1000.0, 2, 8)] + [
        Job(f"small-{i}", "a", 10.0 * i, 10.0, 1, 1) for i in range(1, 5)
    ]
    nodes = [gpu_node("n1", 8), gpu_node("n2", 8)]
    queues = philly_queues({"a": 2}, 16)
    result = simulate(
        jobs, make_policy("gang-fifo", queues, nodes), total_gpus=16, weights={"a": 16.0},
        progress=None,
    )  # fmt: skip
    small, big = result.by_size["1 GPU"], result.by_size["9+ GPUs"]
    assert (small.jobs, big.jobs, result.by_size["2-8 GPUs"].jobs) == (4, 1, 0)
    assert small.wait_mean == pytest.approx(975.0)  # waited 990, 980, 970 and 960 s
    assert big.wait_mean == 0.0
    assert (small.share_of_tail, big.share_of_tail) == (1.0, 0.0)


def test_openb_arrivals_reach_the_target_and_depend_only_on_the_seed() -> None:
    pods = [OpenbPod(f"p{i}", 1000, 1000, 1 + i % 2, False) for i in range(10)]
    one = arrivals(pods, 100, 1.3, 42)
    assert sum(p.gpus for p in one) >= 130
    assert [p.name for p in one] == [p.name for p in arrivals(pods, 100, 1.3, 42)]
    assert [p.name for p in one] != [p.name for p in arrivals(pods, 100, 1.3, 43)]


@pytest.mark.skipif(not (DEFAULT_TRACES / "philly").exists(), reason="no shared traces")
def test_philly_queues_follow_the_virtual_clusters_node_shares() -> None:
    queues = philly_queues({"big": 3, "small": 1}, 32)
    gpu = {q.name: q.quotas["nvidia.com/gpu"].nominal // 1000 for q in queues}
    assert gpu == {"big": 24, "small": 8}
    assert {q.cohort for q in queues} == {"philly"}


def test_a_timer_fires_on_time_even_when_nothing_arrives_or_finishes() -> None:
    """Queue b's job may evict a's borrowed job only after waiting 100 s; nothing else happens
    until a's jobs would end at 10,000 s. The reclaim happens at 110 s, not then."""
    nodes = [gpu_node("n0", 8)]
    queues = [replace(q, evict_after=100.0) for q in philly_queues({"a": 1, "b": 1}, 8)]
    own = Job("a/own", "a", 0.0, 10_000.0, 1, 4)
    borrowed = Job("a/borrowed", "a", 1.0, 10_000.0, 1, 4)
    waiting = Job("b/short", "b", 10.0, 50.0, 1, 4)
    policy = EnginePolicy("kohort", queues, nodes, Config())
    result = simulate(
        [own, borrowed, waiting], policy, total_gpus=8, weights={"a": 1.0, "b": 1.0}, progress=None
    )
    assert result.evictions == 1
    assert result.queues["b"].wait_mean == pytest.approx(100.0)


def test_a_run_ends_with_its_last_job_not_at_a_timer_left_over() -> None:
    """b's job may evict only after 7,200 s, but a's job ends at 3,600 s and b's runs at once:
    the timer set for 7,210 s is still queued when the last job ends, and must not stretch the
    run (its makespan and GPU allocation) to it."""
    nodes = [gpu_node("n0", 8)]
    queues = [replace(q, evict_after=7200.0) for q in philly_queues({"a": 1, "b": 1}, 8)]
    jobs = [Job("a/long", "a", 0.0, 3600.0, 1, 8), Job("b/short", "b", 10.0, 60.0, 1, 8)]
    policy = EnginePolicy("kohort", queues, nodes, Config())
    result = simulate(jobs, policy, total_gpus=8, weights={"a": 1.0, "b": 1.0}, progress=None)
    assert result.makespan_h == pytest.approx(3660 / 3600)
    assert result.gpu_allocation_mean == pytest.approx(1.0)


def test_a_job_that_never_runs_is_counted_as_a_censored_wait_not_dropped() -> None:
    nodes = [gpu_node("n0", 8)]
    queues = philly_queues({"a": 1}, 8)
    jobs = [Job("a/fits", "a", 0.0, 100.0, 1, 8), Job("a/never", "a", 0.0, 100.0, 2, 8)]
    policy = EnginePolicy("kohort", queues, nodes, Config())
    result = simulate(jobs, policy, total_gpus=8, weights={"a": 1.0}, progress=None)
    assert (result.finished, result.censored, result.never_started) == (1, 1, 1)
    assert result.wait_p95 == 0.0  # the finished job alone
    assert result.wait_p95_with_censored > 0.0  # the censored one waited the whole run


def test_jain_is_weighted_by_the_queues_weights() -> None:
    """Two queues holding GPUs in the ratio of their weights 1:2 score 1; an even split less."""
    sampler = _Sampler({"a": 1.0, "b": 2.0}, 12, running={"a": 4, "b": 8})
    sampler.sample()
    even = _Sampler({"a": 1.0, "b": 2.0}, 12, running={"a": 6, "b": 6})
    even.sample()
    assert sampler.jain == [pytest.approx(1.0)]
    assert even.jain[0] < 1.0


def test_jobs_submitted_in_the_same_second_keep_the_traces_order(tmp_path: Path) -> None:
    folder = tmp_path / "philly"
    folder.mkdir()
    (folder / "philly_vc.csv").write_text("vc,node num\nb2,1\na1,1\n")
    (folder / "philly.csv").write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:00:00,500.0,2,1000.0,b2\n"
        "2017-10-09 07:00:00,10.0,1,10.0,a1\n"
        "2017-10-09 06:00:00,30.0,1,30.0,a1\n"
    )
    trace = load_philly(tmp_path, start="2017-10-01", end="2017-12-01")
    assert [(j.name, j.queue, j.duration) for j in trace.jobs] == [
        ("philly-000000", "a1", 30.0),
        ("philly-000001", "b2", 500.0),  # first in the file, though longer and of a later VC
        ("philly-000002", "a1", 10.0),
    ]
