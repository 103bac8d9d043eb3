"""The local control plane is a real Kubernetes control plane, not a fake."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client, watch

from hack.localcluster import LocalCluster
from tests.conftest import TestNodes
from tests.support import eventually, pod_spec


async def test_objects_can_be_created_read_updated_deleted_and_watched(
    api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "settings"}, "data": {"mode": "gang"}}
    )
    events: list[tuple[str, dict[str, str] | None]] = []

    async def collect() -> None:
        async with watch.Watch() as w:
            async for event in w.stream(
                core.list_namespaced_config_map,
                namespace,
                field_selector="metadata.name=settings",
                resource_version=created.metadata.resource_version,
                timeout_seconds=30,
            ):
                events.append((event["type"], event["object"].data))
                if event["type"] == "DELETED":
                    return

    watcher = asyncio.create_task(collect())
    await asyncio.sleep(0.5)
    read = await core.read_namespaced_config_map("settings", namespace)
    assert read.data == {"mode": "gang"}
    await core.patch_namespaced_config_map("settings", namespace, {"data": {"mode": "quota"}})
    await core.delete_namespaced_config_map("settings", namespace)
    async with asyncio.timeout(30):
        await watcher

    assert events == [("MODIFIED", {"mode": "quota"}), ("DELETED", {"mode": "quota"})]
    listed = await core.list_namespaced_config_map(namespace)
    assert "settings" not in [c.metadata.name for c in listed.items]


async def test_a_kwok_node_becomes_ready_with_the_shape_it_was_given(
    api: client.ApiClient, test_nodes: TestNodes
) -> None:
    [name] = test_nodes("gpu", 1, cpu="16", memory="64Gi", gpus=8)
    node = await client.CoreV1Api(api).read_node(name)

    conditions = {c.type: c.status for c in node.status.conditions}
    assert conditions["Ready"] == "True"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert node.status.allocatable["cpu"] == "16"
    assert "node.kubernetes.io/not-ready" not in [t.key for t in node.spec.taints or []]


async def test_a_job_creates_pods_that_run_on_kwok_nodes_and_complete(
    api: client.ApiClient, namespace: str, test_nodes: TestNodes
) -> None:
    test_nodes("cpu", 1, cpu="8")
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    job: dict[str, Any] = {
        "metadata": {"name": "hello"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {"annotations": {"kwok.kohort.dev/complete-after": "2s"}},
                "spec": pod_spec(namespace, {"cpu": "1"}, restartPolicy="Never"),
            },
        },
    }
    await batch.create_namespaced_job(namespace, job)

    async def pods() -> list[Any]:
        return (await core.list_namespaced_pod(namespace, label_selector="job-name=hello")).items

    running = await eventually(
        pods,
        lambda ps: len(ps) == 2 and all(p.spec.node_name for p in ps),
        what="2 job pods bound to a kwok node",
    )
    assert all(p.metadata.owner_references[0].kind == "Job" for p in running)

    finished = await eventually(
        lambda: batch.read_namespaced_job_status("hello", namespace),
        lambda j: (j.status.succeeded or 0) == 2,
        what="the job to succeed",
    )
    assert any(c.type == "Complete" and c.status == "True" for c in finished.status.conditions)


def test_the_cluster_records_every_process_it_started(cluster: LocalCluster) -> None:
    names = {p.name for p in cluster.procs}
    assert {"etcd", "kube-apiserver", "kube-controller-manager", "kwok"} <= names
    assert {"vc-scheduler", "vc-controller-manager", "kube-scheduler"} <= names
    assert all(p.alive() for p in cluster.procs)
