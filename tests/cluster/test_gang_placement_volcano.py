"""Gang placement on the local control plane, at the infrastructure level (no kohort yet).

The three scenarios of the seed article on keeping distributed jobs in lockstep: a gang that
fits starts whole; a gang that does not fit holds nothing and starts whole once capacity frees
up; without a gang scheduler the same pods start partially.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from kubernetes_asyncio import client

from hack.localcluster import Taint
from tests.conftest import TestNodes
from tests.support import eventually, holds_for, pod_spec

pytestmark = pytest.mark.volcano

PODGROUPS = ("scheduling.volcano.sh", "v1beta1", "podgroups")
GANG = 4
CPU_PER_POD = "4"


def gang_pod(namespace: str, name: str, group: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"gang": group or "none"}}
    spec = pod_spec(namespace, {"cpu": CPU_PER_POD})
    if group is not None:
        meta["annotations"] = {"scheduling.k8s.io/group-name": group}
        spec["schedulerName"] = "volcano"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


async def create_gang(api: client.ApiClient, namespace: str, group: str | None) -> None:
    if group is not None:
        podgroup = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": group},
            "spec": {"minMember": GANG, "minResources": {"cpu": str(GANG * int(CPU_PER_POD))}},
        }
        await client.CustomObjectsApi(api).create_namespaced_custom_object(
            *PODGROUPS[:2], namespace, PODGROUPS[2], podgroup
        )
    core = client.CoreV1Api(api)
    role = ["leader"] + [f"worker-{i}" for i in range(1, GANG)]
    for r in role:
        await core.create_namespaced_pod(
            namespace, gang_pod(namespace, f"{group or 'plain'}-{r}", group)
        )


async def bound_pods(api: client.ApiClient, namespace: str) -> list[str]:
    pods = await client.CoreV1Api(api).list_namespaced_pod(namespace)
    return sorted(p.metadata.name for p in pods.items if p.spec.node_name)


async def podgroup(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        PODGROUPS[0], PODGROUPS[1], namespace, PODGROUPS[2], name
    )
    return obj


def is_unschedulable(pg: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Unschedulable" and c.get("status") == "True"
        for c in pg.get("status", {}).get("conditions", [])
    )


async def test_a_gang_of_four_that_fits_runs_with_all_four_pods_bound(
    api: client.ApiClient, namespace: str, test_nodes: TestNodes
) -> None:
    test_nodes("worker", 4, cpu="5")
    await create_gang(api, namespace, "lockstep")

    pg = await eventually(
        lambda: podgroup(api, namespace, "lockstep"),
        lambda pg: (
            pg.get("status", {}).get("phase") == "Running" and pg["status"].get("running") == GANG
        ),
        what="PodGroup Running with 4 running pods",
    )
    assert pg["spec"]["minMember"] == GANG
    assert len(await bound_pods(api, namespace)) == GANG


async def test_a_gang_that_fits_only_three_binds_no_pod_until_capacity_frees_then_all_four(
    api: client.ApiClient, namespace: str, test_nodes: TestNodes, cluster: Any
) -> None:
    workers = test_nodes("worker", 4, cpu="5")
    blocked = workers[-1]
    cluster.rest.patch(
        f"/api/v1/nodes/{blocked}",
        {"spec": {"taints": [*_node_taints(cluster, blocked), _blocked_taint()]}},
    )
    await create_gang(api, namespace, "pinched")

    pg = await eventually(
        lambda: podgroup(api, namespace, "pinched"),
        is_unschedulable,
        what="PodGroup condition Unschedulable",
    )
    assert pg["status"].get("phase") != "Running"
    await holds_for(
        lambda: bound_pods(api, namespace), lambda b: b == [], 5, what="no pod of the gang bound"
    )

    cluster.rest.patch(
        f"/api/v1/nodes/{blocked}",
        {"spec": {"taints": [t for t in _node_taints(cluster, blocked) if t["key"] != "test"]}},
    )
    await eventually(
        lambda: bound_pods(api, namespace),
        lambda b: len(b) == GANG,
        what="all four pods bound after the taint is removed",
    )
    pg = await eventually(
        lambda: podgroup(api, namespace, "pinched"),
        lambda pg: pg.get("status", {}).get("phase") == "Running",
        what="PodGroup Running",
    )
    assert pg["status"].get("running") == GANG


async def test_without_a_gang_scheduler_the_same_pods_start_partially(
    api: client.ApiClient, namespace: str, test_nodes: TestNodes
) -> None:
    test_nodes("worker", 3, cpu="5")
    await create_gang(api, namespace, None)

    bound = await eventually(
        lambda: bound_pods(api, namespace),
        lambda b: len(b) == 3,
        what="three of four pods bound by the default scheduler",
    )
    await holds_for(
        lambda: bound_pods(api, namespace),
        lambda b: b == bound,
        3,
        what="the fourth pod stays pending while three hold their CPUs",
    )


def _blocked_taint() -> dict[str, str]:
    return {"key": "test", "value": "blocked", "effect": "NoSchedule"}


def _node_taints(cluster: Any, name: str) -> list[dict[str, str]]:
    taints: list[dict[str, str]] = cluster.rest.get(f"/api/v1/nodes/{name}")["spec"].get(
        "taints", []
    )
    return taints


async def create_gpu_group(
    api: client.ApiClient,
    namespace: str,
    name: str,
    gpus: int,
    *,
    queue: str | None = None,
    node: str | None = None,
) -> None:
    """A PodGroup of one pod of `gpus` GPUs (and one CPU), scheduled by Volcano."""
    spec: dict[str, Any] = {
        "minMember": 1,
        "minResources": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
    }
    if queue is not None:
        spec["queue"] = queue
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }
    await client.CustomObjectsApi(api).create_namespaced_custom_object(
        *PODGROUPS[:2], namespace, PODGROUPS[2], group
    )
    pod_fields = pod_spec(
        namespace, {"cpu": "1", "nvidia.com/gpu": str(gpus)}, schedulerName="volcano"
    )
    if node is not None:
        pod_fields["nodeSelector"]["kubernetes.io/hostname"] = node
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"scheduling.k8s.io/group-name": name}},
        "spec": pod_fields,
    }
    await client.CoreV1Api(api).create_namespaced_pod(namespace, pod)


async def node_of(api: client.ApiClient, namespace: str, pod: str) -> str | None:
    node: str | None = (
        await client.CoreV1Api(api).read_namespaced_pod(pod, namespace)
    ).spec.node_name
    return node


async def test_volcano_packs_a_second_gang_onto_the_half_full_node_like_kohorts_plan(
    api: client.ApiClient, namespace: str, test_nodes: TestNodes
) -> None:
    # kohort plans with best fit; the local Volcano is set to pack GPUs the same way, so two
    # 4-GPU pods share a node and the other node stays free for an 8-GPU pod.
    test_nodes("pack", 2, cpu="16", gpus=8)
    placed: list[str | None] = []
    for group in ("first", "second"):
        await create_gpu_group(api, namespace, group, 4)
        placed.append(
            await eventually(
                lambda g=group: node_of(api, namespace, g),
                lambda node: node is not None,
                what=f"pod {group} bound",
            )
        )
    assert placed[0] == placed[1]


QUEUES = ("scheduling.volcano.sh", "v1beta1", "queues")


async def test_volcano_alone_keeps_a_fitting_pod_out_while_an_enqueued_gang_cannot_be_placed(
    api: client.ApiClient, namespace: str, test_nodes: TestNodes
) -> None:
    # The baseline the simulator's gang-fifo models. Volcano's enqueue checks a queue's
    # capability in aggregate, not node by node: an 8-GPU group is enqueued onto two nodes with
    # 4 free GPUs each, cannot be placed, and keeps its 8 GPUs of the queue's 16 from a 1-GPU
    # group that either node could host. kohort admits no gang onto nodes that cannot host it.
    nodes = test_nodes("frag", 2, cpu="16", gpus=8)
    # GPUs that no pod here may use: the cluster has more than the queue's capability, so the
    # capability is what binds.
    test_nodes("spare", 1, cpu="16", gpus=8, taints=(Taint("test", "blocked"),))
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    queue = f"q-{namespace}"[:63]
    await custom.create_cluster_custom_object(
        QUEUES[0], QUEUES[1], QUEUES[2],
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": queue},
            "spec": {"weight": 1, "reclaimable": False, "capability": {"nvidia.com/gpu": "16"}},
        },
    )  # fmt: skip
    try:
        await eventually(
            lambda: custom.get_cluster_custom_object(*QUEUES, queue),
            lambda q: q.get("status", {}).get("state") == "Open",
            what=f"Volcano queue {queue} Open",
        )

        await create_gpu_group(api, namespace, "half-1", 4, queue=queue, node=nodes[0])
        await create_gpu_group(api, namespace, "half-2", 4, queue=queue, node=nodes[1])

        async def placed_on(name: str, node: str) -> None:
            await eventually(
                lambda: node_of(api, namespace, name), lambda b: b == node, what=f"{name} on {node}"
            )

        await placed_on("half-1", nodes[0])
        await placed_on("half-2", nodes[1])

        await create_gpu_group(api, namespace, "whole", 8, queue=queue)
        await eventually(
            lambda: podgroup(api, namespace, "whole"),
            lambda pg: pg.get("status", {}).get("phase") == "Inqueue",
            what="the 8-GPU group enqueued",
        )
        await create_gpu_group(api, namespace, "small", 1, queue=queue)
        await holds_for(
            lambda: node_of(api, namespace, "small"),
            lambda b: b is None,
            6,
            what="the 1-GPU pod stays unbound",
        )
        small = await podgroup(api, namespace, "small")
        assert small.get("status", {}).get("phase", "Pending") == "Pending"
        assert await node_of(api, namespace, "whole") is None

        await core.delete_namespaced_pod("half-1", namespace, grace_period_seconds=0)
        await placed_on("whole", nodes[0])
        await placed_on("small", nodes[1])
    finally:
        for name in ("half-1", "half-2", "whole", "small"):
            with contextlib.suppress(client.ApiException):
                await custom.delete_namespaced_custom_object(
                    *PODGROUPS[:2], namespace, PODGROUPS[2], name
                )
        await custom.delete_cluster_custom_object(*QUEUES, queue)
