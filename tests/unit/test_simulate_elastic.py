"""Elastic jobs in the simulator: a stated share of the jobs may start with half their GPUs,
and one that does runs longer in proportion."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.simulate.loop import Result, simulate
from controller.simulate.policies import make_policy
from controller.simulate.traces import Job, gpu_node, philly_queues, with_elastic


def replay(jobs: list[Job]) -> Result:
    """`jobs` through the kohort policy on two 8-GPU nodes, one queue each for a and b."""
    nodes = [gpu_node("n1", 8), gpu_node("n2", 8)]
    queues = philly_queues({"a": 1, "b": 1}, 16)
    return simulate(
        jobs, make_policy("kohort", queues, nodes), total_gpus=16,
        weights={"a": 8.0, "b": 8.0}, progress=None,
    )  # fmt: skip


# One node is held until t=1000; then a 16-GPU job (two pods of 8) that runs 100 s whole.
BUSY = Job("busy", "a", 0.0, 1000.0, 1, 8)
PAIR = Job("pair", "b", 10.0, 100.0, 2, 8)


def test_an_elastic_job_that_fits_only_half_starts_at_once_and_runs_twice_as_long() -> None:
    result = replay([BUSY, replace(PAIR, min_pods=1)])
    assert result.partially_admitted == 1
    # It started at t=10 on the free node and ran 200 s: it waited for nothing; its JCT is
    # its longer run.
    assert result.waits == [0.0, 0.0]
    assert result.jct_mean == pytest.approx((1000.0 + 200.0) / 2)


def test_the_same_job_without_a_minimum_waits_for_the_busy_node() -> None:
    result = replay([BUSY, PAIR])
    assert result.partially_admitted == 0
    assert sorted(result.waits) == [0.0, 990.0]


def test_an_elastic_job_counts_the_gpus_it_runs_with_not_those_it_asks_for() -> None:
    result = replay([BUSY, replace(PAIR, min_pods=1)])
    # 8 GPUs busy for 1000 s, 8 more for the elastic job's 200 s, out of 16 GPUs x 1000 s.
    assert result.gpu_allocation_mean == pytest.approx((8 * 1000 + 8 * 200) / (16 * 1000))


def test_a_stated_share_of_the_jobs_of_two_pods_or_more_is_elastic_down_to_half() -> None:
    jobs = [Job(f"j{i}", "a", float(i), 10.0, pods, 8) for i, pods in enumerate([1, 2, 3, 4] * 50)]
    none, every = with_elastic(jobs, 0.0), with_elastic(jobs, 1.0)
    assert all(j.min_pods is None for j in none)
    assert {(j.pods, j.min_pods) for j in every} == {(1, None), (2, 1), (3, 2), (4, 2)}
    half = with_elastic(jobs, 0.5)
    eligible = [j for j in half if j.pods >= 2]
    assert 0.35 < sum(j.min_pods is not None for j in eligible) / len(eligible) < 0.65
    assert with_elastic(jobs, 0.5) == half  # the same jobs every run


# b's elastic job of two 8-GPU pods borrows a's node for 10,000 s whole; a's job of one 8-GPU
# pod comes at t=100 and may take its node back after waiting 30 min (kohort's evictAfter).
WIDE = Job("wide", "b", 0.0, 10_000.0, 2, 8, min_pods=1)
LENDER = Job("lender", "a", 100.0, 100.0, 1, 8)


def test_a_lender_shrinks_a_borrowing_elastic_job_instead_of_evicting_it() -> None:
    result = replay([WIDE, LENDER])
    assert (result.shrinks, result.evictions, result.wasted_gpu_hours) == (1, 0, 0.0)
    # The lender waited its 1,800 s, then started on the pod's node.
    assert sorted(result.waits) == [0.0, 1800.0]


def test_a_shrunk_job_keeps_its_work_and_runs_the_rest_longer_in_proportion() -> None:
    result = replay([WIDE, LENDER])
    # At t=1900 wide has 8,100 s left on 16 GPUs: 16,200 s on 8, so it ends at t=18,100.
    wide_jct = 18_100.0
    assert result.jct_mean == pytest.approx((wide_jct + 1900.0) / 2)


def test_without_a_minimum_the_lender_waits_for_the_borrowing_job_to_end() -> None:
    # Evicting it whole would take b's own nominal quota too: not a victim.
    result = replay([replace(WIDE, min_pods=None), LENDER])
    assert (result.shrinks, result.evictions) == (0, 0)
    assert sorted(result.waits) == [0.0, 9900.0]
