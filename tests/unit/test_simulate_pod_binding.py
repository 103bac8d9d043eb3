"""The simulator's gangs hold exactly their GPUs, and its kube-scheduler model binds pods in the
order the real one takes them: by creation time, the pods of jobs created together in turn."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from controller.quota.snapshot import GPU
from controller.simulate.loop import simulate
from controller.simulate.policies import POLICIES, KubeDefaultPolicy, PodBinder, make_policy
from controller.simulate.traces import Job, gang_shape, gpu_node, load_philly, philly_queues

# Policies that bind pods one by one and so may hold part of a gang; every other places gangs
# whole.
POD_BY_POD = ("kube-default", "quota-drf")


def nine_gpus(name: str = "nine", submit: float = 0.0, duration: float = 100.0) -> Job:
    (pods, per_pod), *more = gang_shape(9)
    return Job(name, "a", submit, duration, pods, per_pod, more_groups=tuple(more))


def five_and_four(duration: float = 100.0) -> Job:
    """A job of two pod groups: one pod of 5 GPUs, one of 4."""
    return Job("nine", "a", 0.0, duration, 1, 5, more_groups=((1, 4),))


def one_gpu_pods(name: str, pods: int, submit: float = 0.0) -> Job:
    return Job(name, "a", submit, 100.0, pods, 1)


def test_a_9_gpu_job_is_a_gang_of_one_8_gpu_pod_and_one_1_gpu_pod_9_gpus_in_all() -> None:
    job = nine_gpus()
    assert gang_shape(9) == ((1, 8), (1, 1))
    assert job.gpus == 9
    sets = job.pod_sets()
    assert [(ps.name, ps.count, ps.requests[GPU] // 1000) for ps in sets] == [
        ("main", 1, 8),
        ("main-1", 1, 1),
    ]


def test_a_12_gpu_job_is_a_pod_of_8_and_a_pod_of_4_not_two_of_6() -> None:
    assert gang_shape(12) == ((1, 8), (1, 4))


@pytest.mark.parametrize("gpus", range(1, 130))
def test_a_job_of_n_gpus_fills_whole_8_gpu_pods_and_puts_the_rest_in_one_pod(gpus: int) -> None:
    groups = gang_shape(gpus)
    sizes = [per_pod for pods, per_pod in groups for _ in range(pods)]
    assert len(sizes) == math.ceil(gpus / 8)
    assert sum(sizes) == gpus
    assert sizes[:-1] == [8] * (len(sizes) - 1)  # every pod but the last a whole node's
    assert 1 <= sizes[-1] <= 8


def test_a_gpu_less_job_is_one_pod() -> None:
    assert gang_shape(0) == ((1, 0),)


def test_the_philly_loader_keeps_the_exact_gpus_of_an_uneven_job(tmp_path: Path) -> None:
    rows = ["2017-10-09 07:00:00,500.0,9,4500.0,a", "2017-10-09 07:00:01,500.0,20,10000.0,a"]
    (tmp_path / "philly").mkdir()
    (tmp_path / "philly" / "philly_vc.csv").write_text("vc,node num\na,2\n")
    header = "timestamp,duration,num_gpus,gpu_time,cluster"
    (tmp_path / "philly" / "philly.csv").write_text("\n".join([header, *rows, ""]))
    nine, twenty = load_philly(tmp_path).jobs
    assert (nine.gpus, nine.groups) == (9, ((1, 8), (1, 1)))
    assert (twenty.gpus, twenty.groups) == (20, ((2, 8), (1, 4)))


@pytest.mark.parametrize("policy", POLICIES)
def test_a_9_gpu_job_runs_on_an_8_and_a_4_gpu_node_and_counts_9_gpus(policy: str) -> None:
    # Rounded up to two pods of 8 it could never run here; its pods of 8 and 1 GPUs fit.
    nodes = [gpu_node("n8", 8), gpu_node("n4", 4)]
    queues = philly_queues({"a": 1}, 12)
    result = simulate(
        [nine_gpus(duration=3600.0)], make_policy(policy, queues, nodes), total_gpus=12,
        weights={"a": 1.0}, progress=None,
    )  # fmt: skip
    assert result.finished == 1
    assert result.demand_gpu_hours == pytest.approx(9.0)
    allocated_gpu_hours = result.gpu_allocation_mean * result.makespan_h * 12
    assert allocated_gpu_hours == pytest.approx(9.0)
    assert result.partial_jobs == 0


@pytest.mark.parametrize("policy", POLICIES)
def test_only_pod_by_pod_binders_hold_part_of_a_gang_that_cannot_fit(policy: str) -> None:
    # One 8-GPU node: the 5-GPU pod fits, the 4-GPU pod then does not.
    nodes = [gpu_node("n8", 8)]
    bound = make_policy(policy, philly_queues({"a": 1}, 16), nodes)
    bound.submit(five_and_four(), 0.0)
    assert bound.step(0.0).started == []
    assert bound.partial_gpus() == (5 if policy in POD_BY_POD else 0)


def test_a_partly_bound_job_holds_exactly_the_gpus_of_its_bound_pods() -> None:
    # The 5+4-GPU job binds its 5-GPU pod and waits for ever; a 1-GPU job runs 100-110 s beside
    # it.
    nodes = [gpu_node("n8", 8)]
    jobs = [five_and_four(), Job("one", "a", 100.0, 10.0, 1, 1)]
    result = simulate(
        jobs, KubeDefaultPolicy(nodes), total_gpus=8, weights={"a": 1.0}, progress=None
    )
    assert (result.finished, result.never_started, result.partial_jobs) == (1, 1, 1)
    assert result.partial_gpu_hours == pytest.approx(5 * 110.0 / 3600)


def test_two_8_pod_jobs_submitted_in_the_same_second_on_12_gpus_each_hold_6_and_neither_starts(
) -> None:  # fmt: skip
    nodes = [gpu_node("n8", 8), gpu_node("n4", 4)]
    policy = KubeDefaultPolicy(nodes)
    policy.submit(one_gpu_pods("first", 8), 0.0)
    policy.submit(one_gpu_pods("second", 8), 0.0)
    assert policy.step(0.0).started == []
    held = {name: len(job.bound) for name, job in policy.binder.jobs.items()}
    assert held == {"first": 6, "second": 6}
    assert policy.partial_gpus() == 12
    # Nothing ever frees a GPU: the run ends with both jobs still waiting.
    result = simulate(
        [one_gpu_pods("first", 8), one_gpu_pods("second", 8)], KubeDefaultPolicy(nodes),
        total_gpus=12, weights={"a": 1.0}, progress=None,
    )  # fmt: skip
    assert (result.finished, result.never_started, result.partial_jobs) == (0, 2, 2)


def test_jobs_submitted_at_different_times_are_bound_oldest_first_whole() -> None:
    nodes = [gpu_node("n8", 8), gpu_node("n4", 4)]
    binder = PodBinder(nodes)
    binder.add(one_gpu_pods("newer", 8, submit=1.0), 1.0)  # queued first, created later
    binder.add(one_gpu_pods("older", 8), 0.0)
    assert binder.bind() == ["older"]
    assert (len(binder.jobs["older"].bound), len(binder.jobs["newer"].bound)) == (8, 4)
    assert binder.held == 4


def test_the_pods_of_jobs_created_together_are_bound_one_of_each_in_turn() -> None:
    # Four GPUs for jobs of 2, 3 and 1 pods: a, b, c, a. c and a start; b holds one GPU.
    binder = PodBinder([gpu_node("n4", 4)])
    for name, pods in (("a", 2), ("b", 3), ("c", 1)):
        binder.add(one_gpu_pods(name, pods), 0.0)
    assert binder.bind() == ["c", "a"]
    assert len(binder.jobs["b"].bound) == 1
    assert (binder.held, binder.partial_seen) == (1, 1)
    # When a ends, b takes its two GPUs and starts.
    binder.remove("a")
    assert binder.bind() == ["b"]
    assert binder.held == 0


def test_kueue_admitted_gangs_released_in_one_cycle_interleave_too() -> None:
    # The quota (16 GPUs) admits both 8-pod jobs at once; their pods are created together on
    # admission and share the 12 GPUs of the nodes: neither starts.
    nodes = [gpu_node("n8", 8), gpu_node("n4", 4)]
    policy = make_policy("quota-drf", philly_queues({"a": 1}, 16), nodes)
    policy.submit(one_gpu_pods("first", 8), 0.0)
    policy.submit(one_gpu_pods("second", 8), 0.0)
    assert policy.step(0.0).started == []
    assert policy.partial_gpus() == 12
    assert policy.partial_jobs() == 2


def test_a_removed_job_frees_its_pods_and_leaves_the_queue() -> None:
    binder = PodBinder([gpu_node("n4", 4)])
    binder.add(one_gpu_pods("big", 6), 0.0)
    binder.add(one_gpu_pods("late", 2, submit=5.0), 5.0)
    assert binder.bind() == []
    assert binder.held == 4
    binder.remove("big")  # evicted before it started
    assert binder.held == 0
    assert binder.bind() == ["late"]
