"""Gangs through kohort on the real control plane: webhook holds, controller admits, the gang
backend places: Volcano, and kube-scheduler's own gang scheduling (scheduling.k8s.io Workloads,
on a control plane with no Volcano process). Every test runs on both.

Issue 5, scenarios 1, 2, 4 and 7 (the seed articles, with kohort in front of the gang backend):
1. a gang that fits starts whole: one gang object of 4 (PodGroup minMember, Workload minCount),
   four pods bound;
2. a gang that nodes cannot take stays held, explains why, and starts whole once a node frees;
4. an 8-pod training Job on 6 free GPUs waits holding 0 GPUs and starts whole when 2 free up;
7. quota fits but no node can take a pod: pending with a placement reason, holding no quota.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from controller.workloads.base import Backend
from hack import testenv
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster, Taint
from hack.objects import (
    GPU,
    Probe,
    cluster_queue,
    gang_job,
    gang_statefulset,
    local_queue,
    pending_reason,
    reserved,
)
from tests.conftest import TestNodes
from tests.support import (
    GANG_BACKENDS,
    GangSetup,
    eventually,
    holds_for,
    min_members,
    pod_isolation,
    set_taints,
)

pytestmark = pytest.mark.volcano

QUEUE = "training"


@pytest.fixture(scope="module", params=GANG_BACKENDS, ids=str)
def gang_setup(request: pytest.FixtureRequest) -> GangSetup:
    setup: GangSetup = request.param
    return setup


@pytest.fixture
def team(
    stack: KohortStack, cluster: LocalCluster, namespace: str, admin: Client, drained: None
) -> Probe:
    """This test's namespace, enrolled with kohort; queues are added by `queue`."""
    stack.enroll(namespace)
    return Probe(admin, namespace)


def queue(cluster: LocalCluster, namespace: str, **quotas: str) -> str:
    """A ClusterQueue with `quotas` (cpu=..., gpu=...) and LocalQueue `training` pointing to it."""
    name = f"{namespace}-cq"
    resources = {GPU if k == "gpu" else k: v for k, v in quotas.items()}
    apply_queues(
        cluster.rest,
        [cluster_queue(name, resources), local_queue(namespace, QUEUE, name)],
    )
    return name


def job(namespace: str, name: str, pods: int, **requests: str) -> dict[str, Any]:
    resources = {GPU if k == "gpu" else k: v for k, v in requests.items()}
    return gang_job(
        name, queue=QUEUE, pods=pods, requests=resources, isolation=pod_isolation(namespace)
    )


async def test_a_gang_that_fits_is_admitted_and_runs_as_one_podgroup_of_four(
    cluster: LocalCluster,
    namespace: str,
    team: Probe,
    test_nodes: TestNodes,
    gang_setup: GangSetup,
    gang_kind: kinds.Kind,
) -> None:
    test_nodes("worker", 4, cpu="5")
    queue(cluster, namespace, cpu="16")

    await team.create(kinds.JOBS, job(namespace, "lockstep", 4, cpu="4"))

    await eventually(
        lambda: team.bound("job-lockstep"), lambda b: len(b) == 4, within=90, what="4 pods bound"
    )
    pg = await team.podgroup("job-lockstep", gang_kind)
    assert pg is not None
    assert min_members(pg) == 4
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "Workload"
    if gang_setup.backend is Backend.VOLCANO:
        assert pg["spec"]["minResources"]["cpu"] == "16"
        await eventually(
            lambda: team.podgroup("job-lockstep"),
            lambda pg: pg is not None and pg.get("status", {}).get("running") == 4,
            what="PodGroup job-lockstep Running with 4 pods",
        )
    else:
        # Each apiserver keeps the field of its own version and drops the other.
        wanted = {
            "v1alpha1": ("workloadRef", {"name": "job-lockstep", "podGroup": "gang"}),
            "v1beta1": ("schedulingGroup", {"podGroupName": "job-lockstep"}),
        }
        for pod in await team.pods("job-lockstep"):
            for api, (field, value) in wanted.items():
                assert pod["spec"].get(field) == (value if api == gang_setup.gang_api else None)
            assert pod["spec"]["schedulerName"] == "default-scheduler"
    workload = await team.workload("job-lockstep")
    assert reserved(workload)
    assert "Admitted: Admitted by ClusterQueue" in " ".join(
        await team.event_messages("Job", "lockstep")
    )


async def test_a_gang_no_node_set_can_take_waits_whole_explains_why_and_starts_whole_later(
    cluster: LocalCluster,
    namespace: str,
    team: Probe,
    test_nodes: TestNodes,
    gang_kind: kinds.Kind,
) -> None:
    workers = test_nodes("worker", 3, cpu="8")
    blocked = Taint("test", "blocked")
    for node in workers[1:]:
        set_taints(cluster, node, add=blocked)
    queue(cluster, namespace, cpu="32")

    await team.create(kinds.JOBS, job(namespace, "pinched", 4, cpu="4"))

    workload = await eventually(
        lambda: team.workload("job-pinched"),
        lambda wl: "all nodes that may host them together hold only 2" in pending_reason(wl),
        within=60,
        what="Workload Inadmissible for its placement, as the nodes are now",
    )
    assert not reserved(workload)
    assert await team.podgroup("job-pinched", gang_kind) is None
    await holds_for(
        lambda: team.bound("job-pinched"), lambda b: b == [], 3, what="no pod of the gang bound"
    )
    events = await team.event_messages("Job", "pinched")
    assert any(e.startswith("Inadmissible: Inadmissible: needs 4 pods") for e in events), events
    assert "Inadmissible: needs 4 pods x 4 cpu" in await describe_job(cluster, namespace, "pinched")

    set_taints(cluster, workers[1], remove="test")

    await eventually(
        lambda: team.bound("job-pinched"),
        lambda b: len(b) == 4,
        within=90,
        what="all four pods bound after one node is untainted",
    )
    pg = await team.podgroup("job-pinched", gang_kind)
    assert pg is not None and min_members(pg) == 4


async def test_kubectl_get_shows_why_a_workload_waits_and_what_its_queues_use(
    cluster: LocalCluster, namespace: str, team: Probe, test_nodes: TestNodes
) -> None:
    test_nodes("worker", 2, cpu="8")
    cq = queue(cluster, namespace, cpu="8")
    await team.create(kinds.JOBS, job(namespace, "first", 2, cpu="4"))
    await eventually(
        lambda: team.workload("job-first"), reserved, within=60, what="job-first admitted"
    )
    await team.create(kinds.JOBS, job(namespace, "second", 2, cpu="4"))
    await eventually(
        lambda: team.workload("job-second"),
        lambda wl: "quota" in pending_reason(wl).lower(),
        within=60,
        what="job-second pending for quota",
    )

    workloads = {
        row["NAME"]: row for row in table(await kubectl(cluster, "-n", namespace, "get", "wl"))
    }
    assert workloads["job-first"]["QUEUE"] == QUEUE
    assert workloads["job-first"]["CLUSTERQUEUE"] == cq
    assert workloads["job-first"]["ADMITTED"] == "True"
    assert workloads["job-second"]["CLUSTERQUEUE"] == ""
    assert "quota" in workloads["job-second"]["REASON"].lower()

    async def queue_row() -> dict[str, str]:
        return table(await kubectl(cluster, "get", "clusterqueue", cq))[0]

    row = await eventually(
        queue_row,
        lambda r: r.get("PENDING") == "1" and r.get("ADMITTED") == "1",
        within=30,
        what="ClusterQueue status counted",
    )
    assert row["RESOURCES"] == "cpu"
    assert row["USAGE"] == "8"
    assert row["BORROWED"] == "0"

    async def local_row() -> dict[str, str]:
        return table(await kubectl(cluster, "-n", namespace, "get", "lq", QUEUE, "-o", "wide"))[0]

    local = await eventually(
        local_row,
        lambda r: r.get("PENDING") == "1" and r.get("ADMITTED") == "1",
        within=30,
        what="LocalQueue status counted",
    )
    assert local["CLUSTERQUEUE"] == cq
    assert local["REASON"].startswith("Waiting for quota")


async def test_an_8_gpu_training_job_on_6_free_gpus_holds_none_and_starts_whole_when_2_free(
    cluster: LocalCluster, namespace: str, team: Probe, test_nodes: TestNodes
) -> None:
    test_nodes("gpu", 2, gpus=4)
    queue(cluster, namespace, gpu="8", cpu="64")
    await team.create(kinds.JOBS, job(namespace, "warmup", 2, gpu="1", cpu="1"))
    await eventually(
        lambda: team.bound("job-warmup"), lambda b: len(b) == 2, what="warmup job's 2 GPUs"
    )

    await team.create(kinds.JOBS, job(namespace, "train", 8, gpu="1", cpu="1"))

    workload = await eventually(
        lambda: team.workload("job-train"),
        lambda wl: pending_reason(wl).startswith("Waiting for quota: needs 8 nvidia.com/gpu"),
        what="training Workload waiting for quota",
    )
    assert "can take 6 more" in pending_reason(workload)
    await holds_for(
        lambda: team.held("job-train", GPU), lambda gpus: gpus == 0, 3, what="0 GPUs held"
    )
    assert await team.pods("job-train") == []

    await team.api.delete(kinds.JOBS, "warmup", namespace)

    await eventually(
        lambda: team.bound("job-train"),
        lambda b: len(b) == 8,
        within=90,
        what="all 8 training pods bound once 2 GPUs free up",
    )
    assert await team.held("job-train", GPU) == 8


async def test_a_gang_whose_quota_fits_but_whose_pods_fit_no_node_waits_holding_no_quota(
    cluster: LocalCluster,
    namespace: str,
    team: Probe,
    test_nodes: TestNodes,
    gang_kind: kinds.Kind,
) -> None:
    nodes = test_nodes("gpu", 4, gpus=4)
    cq = queue(cluster, namespace, gpu="16", cpu="64")
    for i, node in enumerate(nodes):  # 2 of 4 GPUs taken on every node: 8 free, none whole
        await team.create(kinds.PODS, _pinned_pod(namespace, f"other-{i}", node, gpus=2))

    await team.create(kinds.JOBS, job(namespace, "wide", 2, gpu="4", cpu="1"))

    workload = await eventually(
        lambda: team.workload("job-wide"),
        lambda wl: "no node fits" in pending_reason(wl),
        what="Workload pending on placement",
    )
    reason = pending_reason(workload)
    assert "largest free node" in reason and reason.endswith("has 2"), reason
    assert not reserved(workload)
    assert await team.podgroup("job-wide", gang_kind) is None
    status = (await team.cluster_queue(cq)).get("status", {})
    assert status.get("admittedWorkloads") == 0
    assert status.get("pendingWorkloads") == 1
    usage = {r["name"]: r["total"] for f in status["flavorsUsage"] for r in f["resources"]}
    assert usage[GPU] == "0"


async def test_a_statefulset_is_one_gang_whose_gated_pods_are_released_together(
    cluster: LocalCluster,
    namespace: str,
    team: Probe,
    test_nodes: TestNodes,
    gang_kind: kinds.Kind,
) -> None:
    test_nodes("worker", 2, cpu="4")
    queue(cluster, namespace, cpu="6")
    sts = gang_statefulset(
        "serve",
        queue=QUEUE,
        replicas=3,
        requests={"cpu": "2"},
        isolation=pod_isolation(namespace),
    )

    await team.create(kinds.STATEFULSETS, sts)

    await eventually(
        lambda: team.bound("sts-serve"),
        lambda b: len(b) == 3,
        within=90,
        what="three StatefulSet pods ungated and bound",
    )
    pods = await team.pods("sts-serve")
    assert all(not p["spec"].get("schedulingGates") for p in pods)
    pg = await team.podgroup("sts-serve", gang_kind)
    assert pg is not None and min_members(pg) == 3
    assert reserved(await team.workload("sts-serve"))


def _pinned_pod(namespace: str, name: str, node: str, *, gpus: int) -> dict[str, Any]:
    isolation = pod_isolation(namespace)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "tolerations": isolation["tolerations"],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {GPU: str(gpus)},
                        "limits": {GPU: str(gpus)},
                    },
                }
            ],
        },
    }


async def kubectl(cluster: LocalCluster, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(testenv.binary("kubectl")),
        f"--kubeconfig={cluster.kubeconfig}",
        *args,
        stdout=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        out, _ = await proc.communicate()
    return out.decode()


async def describe_job(cluster: LocalCluster, namespace: str, name: str) -> str:
    """What `kubectl describe job` prints (the Events at its end answer "why is it waiting?")."""
    return await kubectl(cluster, "-n", namespace, "describe", "job", name)


def table(text: str) -> list[dict[str, str]]:
    """`kubectl get` output as rows keyed by column header; columns are cut where headers start."""
    lines = [line for line in text.splitlines() if line.strip()]
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    headers = [lines[0][a:b].strip() for a, b in bounds]
    return [
        {h: line[a:b].strip() for h, (a, b) in zip(headers, bounds, strict=True)}
        for line in lines[1:]
    ]
