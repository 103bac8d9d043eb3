"""JobSets, PyTorchJobs, RayClusters and RayJobs with their real controllers (sigs.k8s.io/jobset,
the Kubeflow training operator, KubeRay; built by hack/build-testenv.sh): each whole workload is
one gang, held on create, admitted, bound together, evicted whole by reclaim and readmitted.

kwok's pods run no Ray, so a RayJob never finishes here: its cluster runs, and KubeRay waits
for a dashboard that never answers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from controller.workloads.edits import lookup
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster, Taint
from hack.objects import (
    Probe,
    borrower_and_lender,
    cluster_queue,
    condition,
    gang_job,
    gang_jobset,
    gang_pytorchjob,
    gang_raycluster,
    gang_rayjob,
    local_queue,
    pending_reason,
    reserved,
)
from tests.conftest import TestNodes
from tests.support import eventually, holds_for, pod_isolation, set_taints

pytestmark = pytest.mark.volcano

JSON = dict[str, Any]


@dataclass(frozen=True)
class TrainingKind:
    kind: kinds.Kind
    controller: str
    gang_prefix: str
    build: Callable[..., JSON]
    suspend: tuple[str, ...]
    pod_sets: Callable[[int], Mapping[str, int]]

    def __str__(self) -> str:
        return self.kind.kind


KINDS = [
    TrainingKind(
        kinds.JOBSETS,
        "jobset-manager",
        "jobset",
        gang_jobset,
        ("spec", "suspend"),
        lambda workers: {"leader": 1, "workers": workers},
    ),
    TrainingKind(
        kinds.PYTORCHJOBS,
        "training-operator",
        "pytorchjob",
        gang_pytorchjob,
        ("spec", "runPolicy", "suspend"),
        lambda workers: {"master": 1, "worker": workers},
    ),
    TrainingKind(
        kinds.RAYCLUSTERS,
        "kuberay-operator",
        "raycluster",
        gang_raycluster,
        ("spec", "suspend"),
        lambda workers: {"head": 1, "workers": workers},
    ),
    # HTTPMode: no submitter pod (the K8sJobMode submitter has a test of its own below).
    TrainingKind(
        kinds.RAYJOBS,
        "kuberay-operator",
        "rayjob",
        gang_rayjob,
        ("spec", "suspend"),
        lambda workers: {"head": 1, "workers": workers},
    ),
]


@pytest.fixture(params=KINDS, ids=str)
def training(request: pytest.FixtureRequest, cluster: LocalCluster) -> TrainingKind:
    kind: TrainingKind = request.param
    cluster.start_workload_controller(kind.controller)
    return kind


async def test_a_training_workload_is_one_gang_held_admitted_bound_reclaimed_whole_and_readmitted(
    stack: KohortStack,
    training: TrainingKind,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    apply_queues(cluster.rest, borrower_and_lender(namespace, {"cpu": "8"}))
    team = Probe(admin, namespace)
    isolation = pod_isolation(namespace)

    def workload(name: str, queue: str, workers: int) -> JSON:
        return training.build(
            name, queue=queue, workers=workers, requests={"cpu": "2"}, isolation=isolation
        )

    def gang(name: str) -> str:
        return f"{training.gang_prefix}-{name}"

    async def suspended(name: str) -> bool:
        obj = await admin.get(training.kind, name, namespace)
        return lookup(obj, list(training.suspend)) is True

    # Held on create: the webhook suspends it before its controller sees it.
    stored = await team.create(training.kind, workload("first", "team-a", 3))
    assert lookup(stored, list(training.suspend)) is True
    await eventually(
        lambda: team.bound(gang("first")),
        lambda bound: len(bound) == 4,
        within=120,
        what="first's four pods bound together",
    )
    admitted = await team.workload(gang("first"))
    assert reserved(admitted) and admitted is not None
    assert {ps["name"]: ps["count"] for ps in admitted["spec"]["podSets"]} == training.pod_sets(3)
    podgroup = await team.podgroup(gang("first"))
    assert podgroup is not None and podgroup["spec"]["minMember"] == 4

    # A second one borrows team-b's idle quota.
    await team.create(training.kind, workload("second", "team-a", 3))
    await eventually(
        lambda: team.bound(gang("second")),
        lambda bound: len(bound) == 4,
        within=120,
        what="second's four pods bound, on team-b's quota",
    )

    # A third does not fit anywhere: it waits with a reason and holds nothing.
    await team.create(training.kind, workload("third", "team-a", 0))
    waiting = await eventually(
        lambda: team.workload(gang("third")),
        lambda wl: wl is not None and "quota" in pending_reason(wl).lower(),
        within=60,
        what="third waiting for quota, with the reason on its Workload",
    )
    assert not reserved(waiting)
    await holds_for(
        lambda: team.pods(gang("third")),
        lambda pods: not any(lookup(p, ["spec", "nodeName"]) for p in pods),
        duration=5,
        what="no pod of third bound",
    )
    assert await suspended("third")
    await admin.delete(training.kind, "third", namespace)

    # team-b takes its quota back: one of team-a's gangs is evicted whole.
    await team.create(training.kind, workload("lender", "team-b", 3))
    await eventually(
        lambda: team.bound(gang("lender")),
        lambda bound: len(bound) == 4,
        within=120,
        what="team-b's gang bound after a reclaim",
    )
    evicted = [n for n in ("first", "second") if not reserved(await team.workload(gang(n)))]
    assert len(evicted) == 1, evicted
    [victim] = evicted
    preempted = condition(await team.workload(gang(victim)), "Preempted")
    assert preempted is not None and preempted["reason"] == "InCohortReclamation"
    assert await suspended(victim)
    await eventually(
        lambda: team.bound(gang(victim)),
        lambda bound: bound == [],
        within=60,
        what="none of the evicted gang's pods left on a node",
    )

    # Once team-b is done, the evicted gang comes back whole.
    await admin.delete(training.kind, "lender", namespace)
    await eventually(
        lambda: team.bound(gang(victim)),
        lambda bound: len(bound) == 4,
        within=120,
        what="the evicted gang readmitted and bound again",
    )
    assert not await suspended(victim)


async def test_a_rayjobs_submitter_is_in_its_quota_and_joins_its_gang_once_the_cluster_runs(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    cluster.start_workload_controller("kuberay-operator")
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    apply_queues(cluster.rest, borrower_and_lender(namespace, {"cpu": "8"}))
    team = Probe(admin, namespace)
    job = gang_rayjob(
        "submit",
        queue="team-a",
        workers=2,
        requests={"cpu": "2"},
        isolation=pod_isolation(namespace),
        mode="K8sJobMode",
        submitter={"cpu": "1"},
    )

    async def bound_by_owner() -> dict[str, int]:
        """The gang's bound pods, counted by the kind of their controller."""
        counts: dict[str, int] = {}
        for pod in await team.pods("rayjob-submit"):
            if lookup(pod, ["spec", "nodeName"]):
                [owner] = pod["metadata"]["ownerReferences"]
                counts[owner["kind"]] = counts.get(owner["kind"], 0) + 1
        return counts

    stored = await team.create(kinds.RAYJOBS, job)

    assert stored["spec"]["suspend"] is True
    # The head and the workers are the gang's minMember: bound together first.
    await eventually(
        bound_by_owner,
        lambda counts: counts.get("RayCluster") == 3,
        within=120,
        what="the RayJob's head and two workers bound together",
    )
    admitted = await team.workload("rayjob-submit")
    assert reserved(admitted) and admitted is not None
    pod_sets = {ps["name"]: ps["count"] for ps in admitted["spec"]["podSets"]}
    assert pod_sets == {"head": 1, "workers": 2, "submitter": 1}
    podgroup = await team.podgroup("rayjob-submit")
    assert podgroup is not None and podgroup["spec"]["minMember"] == 3
    # Once the cluster runs, KubeRay makes the submitter Job; its pod joins the same PodGroup.
    await eventually(
        bound_by_owner,
        lambda counts: counts == {"RayCluster": 3, "Job": 1},
        within=120,
        what="the submitter pod bound in the RayJob's gang",
    )
    # The RayCluster and the submitter Job KubeRay made are no gangs of their own.
    assert [w["metadata"]["name"] for w in await team.workloads()] == ["rayjob-submit"]


async def test_a_jobset_evicted_and_admitted_again_on_other_nodes_binds_there(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    # The JobSet controller keeps a suspended JobSet's Jobs and merges its templates into them
    # when it resumes: a pin of the first release left in them would keep the second one's
    # pods from every node. kohort pins a JobSet's pods as it ungates them instead.
    cluster.start_workload_controller("jobset-manager")
    stack.enroll(namespace)
    [first] = test_nodes("big", 1, cpu="16")
    others = test_nodes("worker", 2, cpu="8")
    closed = Taint("test", "closed")
    for node in others:
        set_taints(cluster, node, add=closed)
    cohort = f"{namespace}-org"
    apply_queues(
        cluster.rest,
        [
            cluster_queue(f"{namespace}-a", {"cpu": "0"}, cohort=cohort),
            cluster_queue(f"{namespace}-b", {"cpu": "16"}, cohort=cohort, reclaim="Any"),
            local_queue(namespace, "team-a", f"{namespace}-a"),
            local_queue(namespace, "team-b", f"{namespace}-b"),
        ],
    )
    team = Probe(admin, namespace)
    isolation = pod_isolation(namespace)
    # A leader of 2 CPU and two workers of 5: all on the big node first, then the workers
    # over both small ones (their first pin named one node, the second names none).
    trainer = gang_jobset(
        "trainer", queue="team-a", workers=2, requests={"cpu": "5"}, isolation=isolation
    )
    leader = trainer["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    leader["containers"][0]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}
    await team.create(kinds.JOBSETS, trainer)

    async def nodes_of(gang: str) -> list[str]:
        return sorted(
            p["spec"]["nodeName"]
            for p in await team.pods(gang)
            if lookup(p, ["spec", "nodeName"]) and not lookup(p, ["metadata", "deletionTimestamp"])
        )

    bound = await eventually(
        lambda: nodes_of("jobset-trainer"),
        lambda nodes: len(nodes) == 3,
        within=120,
        what="the JobSet's three pods bound, on the one open node",
    )
    assert set(bound) == {first}

    # The open node closes, the two others open; team-b takes its whole quota back.
    set_taints(cluster, first, add=closed)
    for node in others:
        set_taints(cluster, node, remove="test")
    lender = gang_job("lender", queue="team-b", pods=4, requests={"cpu": "4"}, isolation=isolation)
    await team.create(kinds.JOBS, lender)
    await eventually(
        lambda: team.bound("job-lender"),
        lambda bound: len(bound) == 4,
        within=120,
        what="team-b's gang bound after reclaiming the JobSet's quota",
    )
    assert not reserved(await team.workload("jobset-trainer"))

    await admin.delete(kinds.JOBS, "lender", namespace)
    again = await eventually(
        lambda: nodes_of("jobset-trainer"),
        lambda nodes: len(nodes) == 3,
        within=120,
        what="the JobSet admitted again and its three pods bound on the nodes now open",
    )
    assert set(again) == set(others)
