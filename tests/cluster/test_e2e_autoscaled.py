"""Autoscaled GPU pools end to end: kohort's ProvisioningRequest check with the stand-in
autoscaler (hack/provisioner.py) on the real control plane, Volcano placing the gangs.

The GPU node group starts empty (8 GPUs a node, at most 4 nodes); the ResourceFlavor of its
nodes says the same (`autoscaling.maxNodes: 4`), and the queue names the check on it.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from controller.api import kinds, names
from controller.cluster.clients import Client
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Backend
from hack import processes, provisioner
from hack.demo import KohortStack, apply_queues
from hack.localcluster import Autoscaler, LocalCluster, NodeGroup
from hack.objects import (
    GPU,
    Probe,
    condition,
    flavored_cluster_queue,
    gang_job,
    local_queue,
    provisioning_check,
    resource_flavor,
)
from tests.cluster.conftest import SETTINGS
from tests.support import eventually

pytestmark = pytest.mark.volcano

GROUP = f"gpu-{uuid.uuid4().hex[:5]}"
MAX_NODES = 4
UNNEEDED_SECONDS = 4.0


def group(max_count: int = MAX_NODES) -> NodeGroup:
    return NodeGroup(GROUP, max_count=max_count, gpus=8, cpu="64", memory="512Gi")


@pytest.fixture(scope="module")
def autoscaler(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The stand-in autoscaler on the session's control plane, with an empty GPU group."""
    proc = cluster.start_autoscaler(
        Autoscaler(groups=(group(),), scale_down_unneeded_time=UNNEEDED_SECONDS)
    )
    yield cluster
    processes.stop(proc.pid)
    cluster.procs.remove(proc)


@pytest.fixture(scope="module")
async def stack(autoscaler: LocalCluster) -> AsyncIterator[KohortStack]:
    """kohort, started once the ProvisioningRequest CRD is served."""
    podgroups = PodGroupSettings(Backend.VOLCANO)
    running = await KohortStack(autoscaler, settings=SETTINGS, podgroups=podgroups).start()
    yield running
    await running.stop()


def group_nodes(cluster: LocalCluster) -> set[str]:
    nodes = cluster.rest.get("/api/v1/nodes")["items"]
    return {
        n["metadata"]["name"]
        for n in nodes
        if (n["metadata"].get("annotations") or {}).get(provisioner.GROUP_ANNOTATION) == GROUP
    }


@pytest.fixture
async def pool(stack: KohortStack, cluster: LocalCluster, namespace: str) -> AsyncIterator[None]:
    """The pool's flavor, the check and a queue of 64 GPUs naming it, in an empty group."""
    await eventually(
        lambda: _async(group_nodes(cluster)), lambda n: not n, within=60, what="an empty group"
    )
    cluster.set_node_groups([group()])
    stack.enroll(namespace)
    flavor = f"{namespace}-pool"
    check = f"{namespace}-provision"
    rest = cluster.rest
    node = {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"}
    rest.create(
        f"/apis/{names.API_VERSION}/resourceflavors",
        resource_flavor(
            flavor,
            node_labels={provisioner.DEFAULT_GROUP_LABEL: GROUP},
            max_nodes=MAX_NODES,
            node_allocatable=node,
        ),
    )
    retry = {"backoffLimitCount": 3, "backoffBaseSeconds": 3}
    rest.create(
        f"/apis/{names.API_VERSION}/admissionchecks",
        provisioning_check(check, retryStrategy=retry),
    )
    quota = {flavor: {GPU: "64", "cpu": "64"}}
    cq = flavored_cluster_queue(f"{namespace}-q", quota, checks={check: [flavor]})
    apply_queues(rest, [cq, local_queue(namespace, "team", f"{namespace}-q")])
    yield
    for path in (
        f"/apis/{names.API_VERSION}/clusterqueues/{namespace}-q",
        f"/apis/{names.API_VERSION}/admissionchecks/{check}",
        f"/apis/{names.API_VERSION}/resourceflavors/{flavor}",
    ):
        rest.delete(path)


@pytest.fixture
def scene(pool: None, drained: None, namespace: str, admin: Client) -> Probe:
    """The team's view of the pool; after the test its gangs go (`drained`, set up after
    `pool`, is torn down before it) before the pool's objects do."""
    return Probe(admin, namespace)


async def _async(value: Any) -> Any:
    return value


def gpu_job(namespace: str, name: str, pods: int, *, complete_after: str | None = None) -> Any:
    """A Job of `pods` pods of 8 GPUs: its flavor's node labels put it on the group's nodes
    (the test nodes of other tests repel it)."""
    del namespace
    return gang_job(
        name,
        queue="team",
        pods=pods,
        requests={GPU: "8", "cpu": "1"},
        complete_after=complete_after,
    )


def requests(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    path = f"/apis/autoscaling.x-k8s.io/v1/namespaces/{namespace}/provisioningrequests"
    items: list[dict[str, Any]] = cluster.rest.get(path)["items"]
    return items


async def bound_nodes(team: Probe, gang: str) -> list[str]:
    return [p["spec"]["nodeName"] for p in await team.pods(gang) if p["spec"].get("nodeName")]


async def test_a_16_gpu_gang_asks_for_two_nodes_once_and_binds_whole_on_them(
    scene: Probe, cluster: LocalCluster, namespace: str
) -> None:
    await scene.create(kinds.JOBS, gpu_job(namespace, "train", 2))

    on = await eventually(
        lambda: bound_nodes(scene, "job-train"), lambda n: len(n) == 2, within=90, what="bound"
    )
    assert set(on) <= group_nodes(cluster)
    assert len(set(on)) == 2
    [request] = requests(cluster, namespace)
    assert request["spec"]["podSets"][0]["count"] == 2
    wl = await scene.workload("job-train")
    assert (condition(wl, "Admitted") or {}).get("status") == "True"
    [state] = (wl or {})["status"]["admissionChecks"]
    assert state["state"] == "Ready"
    # The autoscaler learns that these pods take the request's capacity (its booking ends).
    await eventually(
        lambda: scene.pods("job-train"),
        lambda pods: all(
            (p["metadata"].get("annotations") or {}).get(names.CONSUME_REQUEST_ANNOTATION)
            == request["metadata"]["name"]
            for p in pods
        ),
        within=30,
        what="the pods annotated with the request they consume",
    )


async def test_a_gang_larger_than_the_pool_is_told_so_and_asks_for_nothing(
    scene: Probe, cluster: LocalCluster, namespace: str
) -> None:
    await scene.create(kinds.JOBS, gpu_job(namespace, "huge", MAX_NODES + 1))

    wl = await eventually(
        lambda: scene.workload("job-huge"),
        lambda w: (
            "grows to 4 node(s) at most" in ((w or {}).get("status") or {}).get("pendingReason", "")
        ),
        within=60,
        what="the pool's limit in the pending reason",
    )
    assert (condition(wl, "QuotaReserved") or {}).get("status") != "True"
    assert requests(cluster, namespace) == []
    assert group_nodes(cluster) == set()


async def test_a_failed_request_frees_the_quota_and_is_retried_after_its_backoff(
    scene: Probe, cluster: LocalCluster, namespace: str
) -> None:
    cluster.set_node_groups([group(max_count=1)])  # the cloud has one node left
    await scene.create(kinds.JOBS, gpu_job(namespace, "train", 2))

    wl = await eventually(
        lambda: scene.workload("job-train"),
        lambda w: (condition(w, "Evicted") or {}).get("reason") == "AdmissionCheck",
        within=60,
        what="the gang evicted for its failed request",
    )
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "False"
    [state] = (wl or {})["status"]["admissionChecks"]
    assert (state["state"], state["retryCount"]) == ("Retry", 1)
    cq = cluster.rest.get(f"/apis/{names.API_VERSION}/clusterqueues/{namespace}-q")
    totals = [r["total"] for f in cq["status"]["flavorsUsage"] for r in f["resources"]]
    assert set(totals) == {"0"}  # the quota is not held while it waits

    cluster.set_node_groups([group()])
    on = await eventually(
        lambda: bound_nodes(scene, "job-train"), lambda n: len(n) == 2, within=120, what="bound"
    )
    assert set(on) <= group_nodes(cluster)
    wl = await scene.workload("job-train")
    [state] = (wl or {})["status"]["admissionChecks"]
    assert (state["state"], state["request"]) == ("Ready", "job-train-" + state["name"] + "-2")


async def test_two_gangs_at_once_do_not_provision_twice_for_the_same_capacity(
    scene: Probe, cluster: LocalCluster, namespace: str
) -> None:
    await scene.create(kinds.JOBS, gpu_job(namespace, "a", 1))
    await scene.create(kinds.JOBS, gpu_job(namespace, "b", 1))

    for gang in ("job-a", "job-b"):
        await eventually(
            functools.partial(bound_nodes, scene, gang),
            lambda n: len(n) == 1,
            within=90,
            what="bound",
        )
    assert len(group_nodes(cluster)) == 2
    assert sorted(r["spec"]["podSets"][0]["count"] for r in requests(cluster, namespace)) == [1, 1]


async def test_a_finished_gangs_nodes_are_scaled_down(
    scene: Probe, cluster: LocalCluster, namespace: str
) -> None:
    await scene.create(kinds.JOBS, gpu_job(namespace, "short", 2, complete_after="3s"))
    on = await eventually(
        lambda: bound_nodes(scene, "job-short"), lambda n: len(n) == 2, within=90, what="bound"
    )
    pods = await scene.pods("job-short")
    assert all(
        (p["metadata"].get("annotations") or {}).get(names.SAFE_TO_EVICT_ANNOTATION) == "false"
        for p in pods
    )

    await eventually(
        lambda: _async(group_nodes(cluster) & set(on)),
        lambda left: not left,
        within=60,
        what="the finished gang's nodes removed",
    )
