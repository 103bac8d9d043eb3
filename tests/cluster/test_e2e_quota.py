"""Queues sharing a cohort on the real control plane: borrowing, reclaim of whole gangs, DRF;
on both gang backends (Volcano, and kube-scheduler's own gang scheduling with no Volcano).

Issue 5, scenarios 5 and 6:
5. team-a borrows team-b's idle GPUs; team-b submits; one whole borrowed gang of team-a is
   evicted (never part of it), team-b's gang runs, the evicted gang requeues and runs again
   when capacity returns;
6. three queues with weights 1/1/2 that keep submitting converge to shares in that ratio.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import (
    GPU,
    Probe,
    cluster_queue,
    condition,
    gang_job,
    gang_statefulset,
    local_queue,
    reserved,
)
from tests.conftest import TestNodes
from tests.support import GANG_BACKENDS, GangSetup, eventually, pod_isolation

pytestmark = pytest.mark.volcano


@pytest.fixture(scope="module", params=GANG_BACKENDS, ids=str)
def gang_setup(request: pytest.FixtureRequest) -> GangSetup:
    setup: GangSetup = request.param
    return setup


def gpu_job(namespace: str, name: str, queue: str, pods: int, gpus: int) -> dict[str, Any]:
    return gang_job(
        name,
        queue=queue,
        pods=pods,
        requests={GPU: str(gpus), "cpu": "1"},
        isolation=pod_isolation(namespace),
    )


async def test_a_borrowed_gang_is_evicted_whole_for_its_lender_and_runs_again_later(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
    gang_kind: kinds.Kind,
) -> None:
    stack.enroll(namespace)
    test_nodes("gpu", 2, gpus=4)
    cohort = f"{namespace}-research"
    apply_queues(
        cluster.rest,
        [
            cluster_queue(f"{namespace}-a", {GPU: "4", "cpu": "16"}, cohort=cohort),
            cluster_queue(f"{namespace}-b", {GPU: "4", "cpu": "16"}, cohort=cohort, reclaim="Any"),
            local_queue(namespace, "team-a", f"{namespace}-a"),
            local_queue(namespace, "team-b", f"{namespace}-b"),
        ],
    )
    team = Probe(admin, namespace)
    for name in ("a1", "a2"):
        await team.create(kinds.JOBS, gpu_job(namespace, name, "team-a", 2, 2))
    await eventually(
        lambda: _bound_by_gang(team, ["job-a1", "job-a2"]),
        lambda bound: bound == {"job-a1": 2, "job-a2": 2},
        within=90,
        what="team-a running both gangs, one of them on team-b's idle GPUs",
    )
    borrowing = await eventually(
        lambda: team.cluster_queue(f"{namespace}-a"),
        lambda cq: _gpu_usage(cq) == ("8", "4"),
        what="team-a's ClusterQueue status: 8 GPUs used, 4 of them borrowed",
    )
    assert borrowing["status"]["admittedWorkloads"] == 2
    assert borrowing["status"]["weightedShare"] > 0

    await team.create(kinds.JOBS, gpu_job(namespace, "b1", "team-b", 2, 2))

    seen: list[dict[str, int]] = []

    async def probe() -> dict[str, int]:
        bound = await _bound_by_gang(team, ["job-a1", "job-a2", "job-b1"])
        seen.append(bound)
        return bound

    after = await eventually(
        probe,
        lambda b: b["job-b1"] == 2 and sorted((b["job-a1"], b["job-a2"])) == [0, 2],
        within=90,
        what="team-b's gang running and exactly one team-a gang evicted",
    )
    victim = "job-a1" if after["job-a1"] == 0 else "job-a2"
    survivor = "job-a2" if victim == "job-a1" else "job-a1"
    assert all(s[survivor] == 2 for s in seen), "the other gang of team-a was never touched"
    evicted = await team.workload(victim)
    assert not reserved(evicted)
    preempted = condition(evicted, "Preempted")
    assert preempted is not None and preempted["reason"] == "InCohortReclamation"
    assert await team.podgroup(victim, gang_kind) is None
    assert await team.podgroup(survivor, gang_kind) is not None  # the backend's object exists

    metrics = stack.controller.metrics.registry if stack.controller else None
    assert metrics is not None
    labels = {"cluster_queue": f"{namespace}-a", "reason": "Preempted"}
    assert metrics.get_sample_value("kohort_evicted_workloads_total", labels) == 1

    await admin.delete(kinds.JOBS, "b1", namespace)

    await eventually(
        lambda: _bound_by_gang(team, [victim]),
        lambda b: b[victim] == 2,
        within=90,
        what="the evicted gang running again once team-b's GPUs are idle",
    )


def _gpu_usage(cq: dict[str, Any]) -> tuple[str, str] | None:
    for flavor in (cq.get("status") or {}).get("flavorsUsage", []):
        for resource in flavor["resources"]:
            if resource["name"] == GPU:
                return resource["total"], resource["borrowed"]
    return None


async def _bound_by_gang(team: Probe, gangs: list[str]) -> dict[str, int]:
    return {gang: len(await team.bound(gang)) for gang in gangs}


async def test_three_queues_weighted_1_1_2_that_keep_submitting_share_the_cohort_1_1_2(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    cohort = f"{namespace}-shared"
    weights = {"red": "1", "green": "1", "blue": "2"}
    team = Probe(admin, namespace)
    for i in range(12):  # enough for two rounds of blue's 6
        for name in weights:
            job = gang_job(
                f"{name}-{i}",
                queue=name,
                pods=1,
                requests={"cpu": "1"},
                isolation=pod_isolation(namespace),
                complete_after="6s",
            )
            await team.create(kinds.JOBS, job)
    await eventually(
        team.workloads, lambda wls: len(wls) == 36, what="the controller seeing all 36 gangs"
    )
    queues: list[dict[str, Any]] = []
    for name, weight in weights.items():
        queues.append(
            cluster_queue(f"{namespace}-{name}", {"cpu": "0"}, cohort=cohort, weight=weight)
        )
        queues.append(local_queue(namespace, name, f"{namespace}-{name}"))
    apply_queues(cluster.rest, queues)
    # Last, the lender: all of the cohort's 12 CPUs and no workloads of its own. Until it
    # exists nobody can be admitted, so all three queues start the race together.
    apply_queues(cluster.rest, [cluster_queue(f"{namespace}-lender", {"cpu": "12"}, cohort=cohort)])

    async def usage() -> dict[str, int]:
        out = {}
        for name in weights:
            status = (await team.cluster_queue(f"{namespace}-{name}")).get("status") or {}
            totals = [r["total"] for f in status.get("flavorsUsage", []) for r in f["resources"]]
            out[name] = int(totals[0]) if totals else 0
        return out

    first = await eventually(
        usage, lambda u: sum(u.values()) == 12, within=90, what="the cohort's 12 CPUs in use"
    )
    assert first == {"red": 3, "green": 3, "blue": 6}
    # The first gangs finish after 6s; the queues refill and keep the ratio.
    later = await eventually(
        lambda: _finished_then_usage(team, usage),
        lambda u: u is not None and sum(u.values()) == 12,
        within=90,
        what="a refilled cohort after the first gangs finished",
    )
    assert later == {"red": 3, "green": 3, "blue": 6}


async def _finished_then_usage(team: Probe, usage: Any) -> dict[str, int] | None:
    finished = [
        wl
        for wl in await team.workloads()
        if (condition(wl, "Finished") or {}).get("status") == "True"
    ]
    if len(finished) < 6:
        return None
    result: dict[str, int] = await usage()
    return result


def _urgent_queue(
    stack: KohortStack, cluster: LocalCluster, namespace: str, quotas: dict[str, str]
) -> Iterator[str]:
    """LocalQueue `team` on a ClusterQueue of `quotas` that preempts by priority within the
    queue, and a PriorityClass (value 1000) whose name it yields."""
    stack.enroll(namespace)
    cq = f"{namespace}-cq"
    apply_queues(
        cluster.rest,
        [
            cluster_queue(cq, quotas, within_queue="LowerPriority"),
            local_queue(namespace, "team", cq),
        ],
    )
    name = f"{namespace}-urgent"
    cluster.rest.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": 1000,
        },
    )
    yield name
    cluster.rest.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


@pytest.fixture
def urgent(
    stack: KohortStack, cluster: LocalCluster, namespace: str, test_nodes: TestNodes
) -> Iterator[str]:
    """Two 4-CPU nodes and an 8-CPU queue that preempts by priority (`_urgent_queue`)."""
    test_nodes("worker", 2, cpu="4")
    yield from _urgent_queue(stack, cluster, namespace, {"cpu": "8"})


@pytest.fixture
def urgent_on_one_gpu_node(
    stack: KohortStack, cluster: LocalCluster, namespace: str, test_nodes: TestNodes
) -> Iterator[str]:
    """One node of 8 GPUs and an 8-GPU queue that preempts by priority (`_urgent_queue`)."""
    test_nodes("gpu", 1, gpus=8)
    yield from _urgent_queue(stack, cluster, namespace, {GPU: "8", "cpu": "16"})


async def _urgent_replaces_batch(
    team: Probe, urgent: str, requests: dict[str, str], batch_pods: int, what: str
) -> None:
    """A gang `batch` of `batch_pods` pods runs; a gang `deadline` of two pods at priority
    `urgent` (both gangs' pods asking `requests`) then runs in its place, and batch is told it
    was preempted within its ClusterQueue."""
    isolation = pod_isolation(team.namespace)
    batch = gang_job("batch", queue="team", pods=batch_pods, requests=requests, isolation=isolation)
    await team.create(kinds.JOBS, batch)
    await eventually(
        lambda: team.bound("job-batch"), lambda b: len(b) == batch_pods, what="low-priority gang"
    )
    high = gang_job(
        "deadline",
        queue="team",
        pods=2,
        requests=requests,
        isolation=isolation,
        priority_class=urgent,
    )
    await team.create(kinds.JOBS, high)

    await eventually(
        lambda: _bound_by_gang(team, ["job-batch", "job-deadline"]),
        lambda b: b == {"job-batch": 0, "job-deadline": 2},
        within=90,
        what=what,
    )
    preempted = condition(await team.workload("job-batch"), "Preempted")
    assert preempted is not None and preempted["reason"] == "InClusterQueue"


async def test_a_higher_priority_gang_preempts_a_lower_one_of_its_own_queue_whole(
    namespace: str, admin: Client, urgent: str, drained: None
) -> None:
    team = Probe(admin, namespace)
    await _urgent_replaces_batch(
        team,
        urgent,
        {"cpu": "4"},
        batch_pods=2,
        what="the urgent gang running in place of the whole low-priority gang",
    )
    deadline = await team.workload("job-deadline")
    assert deadline is not None and deadline["spec"]["priority"] == 1000


async def test_a_higher_priority_gang_of_2x4_gpus_evicts_a_1x4_gang_from_the_only_8_gpu_node(
    namespace: str, admin: Client, urgent_on_one_gpu_node: str, drained: None
) -> None:
    # The node has room for one of the urgent gang's pods already: the other needs the GPUs
    # of the low-priority gang beside it.
    await _urgent_replaces_batch(
        Probe(admin, namespace),
        urgent_on_one_gpu_node,
        {GPU: "4", "cpu": "1"},
        batch_pods=1,
        what="the urgent gang's two pods on the node in place of the low-priority gang",
    )


async def test_an_evicted_statefulset_comes_back_gated_and_is_released_whole_again(
    namespace: str, admin: Client, urgent: str, drained: None
) -> None:
    team = Probe(admin, namespace)
    isolation = pod_isolation(namespace)
    sts = gang_statefulset(
        "serve", queue="team", replicas=2, requests={"cpu": "4"}, isolation=isolation
    )
    await team.create(kinds.STATEFULSETS, sts)
    await eventually(
        lambda: team.bound("sts-serve"), lambda b: len(b) == 2, what="StatefulSet gang"
    )
    # A pod that goes away after the release comes back gated and is released too.
    await admin.delete(kinds.PODS, "serve-1", namespace)
    await eventually(
        lambda: team.bound("sts-serve"),
        lambda b: b == ["serve-0", "serve-1"],
        what="the recreated pod released and bound",
    )

    high = gang_job(
        "deadline",
        queue="team",
        pods=1,
        requests={"cpu": "4"},
        isolation=isolation,
        priority_class=urgent,
    )
    await team.create(kinds.JOBS, high)

    pods = await eventually(
        lambda: team.pods("sts-serve"),
        lambda ps: len(ps) == 2 and all(_gated(p) for p in ps),
        within=90,
        what="both StatefulSet pods deleted and recreated gated",
    )
    assert all(not p["spec"].get("nodeName") for p in pods)
    assert not reserved(await team.workload("sts-serve"))
    await eventually(
        lambda: team.bound("job-deadline"), lambda b: len(b) == 1, what="urgent job running"
    )

    await admin.delete(kinds.JOBS, "deadline", namespace)

    await eventually(
        lambda: team.bound("sts-serve"),
        lambda b: len(b) == 2,
        within=90,
        what="the StatefulSet gang released whole again",
    )


def _gated(pod: dict[str, Any]) -> bool:
    return any(
        g.get("name") == "kohort.dev/admission" for g in pod["spec"].get("schedulingGates", [])
    )
