"""JobSets, PyTorchJobs and RayClusters with their real controllers (sigs.k8s.io/jobset, the
Kubeflow training operator, KubeRay; built by hack/build-testenv.sh): each whole workload is one
gang, held on create, admitted, bound together, evicted whole by reclaim and readmitted."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from controller.cluster.testing import (
    Probe,
    borrower_and_lender,
    condition,
    gang_jobset,
    gang_pytorchjob,
    gang_raycluster,
    pending_reason,
    reserved,
)
from controller.workloads.edits import lookup
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from tests.conftest import TestNodes
from tests.support import eventually, holds_for, pod_isolation

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
