"""kube-scheduler packs kohort's gangs as kohort planned them (issue 33), at both API versions
of its gang scheduling: the tour's scenario (docs/tour.md) on two 8-GPU nodes. A 4-pod gang of
2 GPUs each, planned on one node, is bound on one node; a 1-pod 8-GPU job within quota then
finds the other node whole and runs. With kube-scheduler's spreading defaults the gang was
bound 2 + 2 and the 8-GPU job waited for good; the local control plane's kube-scheduler packs
(hack/localcluster.py packing_scheduler_config, docs/gang-backends.md)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from controller.workloads.base import Backend
from controller.workloads.edits import lookup
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import GPU, Probe, cluster_queue, gang_job, local_queue
from tests.conftest import TestNodes
from tests.support import GangSetup, eventually, pod_isolation


@pytest.fixture(
    scope="module",
    params=[GangSetup(Backend.KUBERNETES, "v1alpha1"), GangSetup(Backend.KUBERNETES, "v1beta1")],
    ids=str,
)
def gang_setup(request: pytest.FixtureRequest) -> GangSetup:
    setup: GangSetup = request.param
    return setup


def _job(namespace: str, name: str, pods: int, gpus: int, cpu: str, memory: str) -> dict[str, Any]:
    requests = {GPU: str(gpus), "cpu": cpu, "memory": memory}
    return gang_job(
        name, queue="default", pods=pods, requests=requests, isolation=pod_isolation(namespace)
    )


async def _nodes_of(team: Probe, gang: str) -> list[str]:
    return sorted(str(lookup(p, ["spec", "nodeName"])) for p in await team.pods(gang))


async def test_the_kube_scheduler_backend_packs_as_planned(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("gpu", 2, gpus=8, cpu="64", memory="512Gi")
    team_a, team_b = f"{namespace}-a", f"{namespace}-b"
    quota = {"cpu": "32", "memory": "256Gi", GPU: "8"}
    apply_queues(
        cluster.rest,
        [
            cluster_queue(team_a, quota, cohort=namespace, borrowing_limits={GPU: "8"}),
            cluster_queue(team_b, quota, cohort=namespace),
            local_queue(namespace, "default", team_a),
        ],
    )
    team = Probe(admin, namespace)

    await team.create(kinds.JOBS, _job(namespace, "train-resnet", 4, 2, "4", "16Gi"))
    await eventually(
        lambda: team.bound("job-train-resnet"),
        lambda bound: len(bound) == 4,
        within=90,
        what="the 4-pod gang bound",
    )
    planned = await team.workload("job-train-resnet")
    [assignment] = lookup(planned, ["status", "admission", "podSetAssignments"]) or []
    assert [n["count"] for n in assignment["nodes"]] == [4]  # "4 pods on 1 node(s)"
    # On one node, as planned (which of the two empty ones is kube-scheduler's pick: pinning
    # the gang to the planned node is another change).
    [node] = set(await _nodes_of(team, "job-train-resnet"))

    await team.create(kinds.JOBS, _job(namespace, "big", 1, 8, "1", "1Gi"))
    await eventually(
        lambda: team.bound("job-big"),
        lambda bound: len(bound) == 1,
        within=90,
        what="the 1-pod 8-GPU job bound on the node the gang left whole",
    )
    [other] = await _nodes_of(team, "job-big")
    assert other != node
