"""Fixtures for tests on the real local control plane (marked `cluster`).

`cluster` starts one control plane for the whole session (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok, Volcano); `namespace` gives every test a fresh
namespace; `api` is a kubernetes-asyncio client with the admin identity. Tests that need nodes
of a particular shape add their own with `test_nodes` so that tests never share capacity.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from controller.api import kinds
from hack import processes
from hack.localcluster import ClusterOptions, LocalCluster, NodePool, Taint
from hack.rest import ApiError
from tests.support import TEST_NODE_KEY

CLUSTER_LOGS_ENV = "KOHORT_TEST_CLUSTER_DIR"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/cluster/" in str(item.path) and item.get_closest_marker("cluster") is None:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    work_dir = Path(os.environ.get(CLUSTER_LOGS_ENV) or tmp_path_factory.mktemp("cluster"))
    local = LocalCluster(ClusterOptions(node_pools=(), scheduler="both"), work_dir)
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture
async def api(cluster: LocalCluster) -> AsyncIterator[client.ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(cluster.kubeconfig), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api_client:
        yield api_client


def _dns_label(text: str, limit: int = 40) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")


@pytest.fixture
def namespace(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"{_dns_label(request.node.name, 40)}-{uuid.uuid4().hex[:6]}"
    cluster.rest.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    yield name
    cluster.rest.delete(f"/api/v1/namespaces/{name}")


TestNodes = Callable[..., list[str]]


@pytest.fixture
def test_nodes(cluster: LocalCluster, namespace: str) -> Iterator[TestNodes]:
    """Adds kwok nodes that only this test's pods can use.

    The nodes carry the label and the NoSchedule taint `kohort.dev/test=<namespace>`;
    `tests.support.pod_isolation(namespace)` gives the nodeSelector and toleration that reach them.
    """
    added: list[str] = []

    def add(
        name: str,
        count: int = 1,
        *,
        cpu: str = "32",
        memory: str = "256Gi",
        gpus: int = 0,
        dra_gpus: int = 0,
        taints: tuple[Taint, ...] = (),
        labels: Mapping[str, str] | None = None,
    ) -> list[str]:
        pool = NodePool(
            f"{namespace[:30]}-{name}",
            count,
            cpu=cpu,
            memory=memory,
            gpus=gpus,
            dra_gpus=dra_gpus,
            labels={**(labels or {}), TEST_NODE_KEY: namespace},
            taints=(Taint(TEST_NODE_KEY, namespace), *taints),
        )
        names = cluster.add_nodes(pool)
        added.extend(names)
        return names

    yield add
    if added:
        _drain(cluster, namespace)
    cluster.remove_nodes(added)


def _drain(cluster: LocalCluster, namespace: str) -> None:
    """Deletes the namespace's workloads and pods before their nodes go.

    Pods left bound to deleted nodes make Volcano's sessions fail for a while, which would slow
    down every later test.
    """
    background = {"propagationPolicy": "Background"}
    for kind in (
        kinds.JOBSETS,
        kinds.PYTORCHJOBS,
        kinds.RAYJOBS,
        kinds.RAYCLUSTERS,
        kinds.LEADERWORKERSETS,
        kinds.JOBS,
        kinds.STATEFULSETS,
    ):
        with contextlib.suppress(ApiError):  # a kind whose CRD this cluster does not have
            cluster.rest.request("DELETE", kind.path(namespace), query=background)
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def gone() -> bool:
        if not cluster.rest.get(pods)["items"]:
            return True
        # Controllers may still be recreating pods of workloads deleted a moment ago.
        cluster.rest.request("DELETE", pods, query={"gracePeriodSeconds": "0"})
        return False

    processes.wait_until(f"the pods of {namespace} to be gone", gone, timeout=60, interval=0.5)
