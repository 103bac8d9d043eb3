"""Fixtures of the end-to-end tests: kohort running in-process against the local cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import pytest

from controller import quota
from controller.api import kinds
from controller.api.kinds import Kind
from controller.cluster import clients
from controller.cluster.clients import Client
from controller.settings import Settings
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Backend
from hack.demo import KohortStack
from hack.localcluster import ClusterOptions, GangApi, LocalCluster
from tests.conftest import TestNodes
from tests.support import GangSetup, eventually

# The measured configuration, but with no waste budget: the scenarios here reclaim gangs that
# have run for seconds, for gangs that have waited for seconds (the budget is measured in hours
# of GPU work, docs/simulator.md; tests/unit/test_starvation_guard.py and the simulator test it).
SETTINGS = Settings(core=replace(quota.Config.measured(), waste_budget=None))


@pytest.fixture(scope="module")
def gang_setup() -> GangSetup:
    """The gang backend of a module's stack; modules that run on every backend parametrise
    this with `tests.support.GANG_BACKENDS`."""
    return GangSetup(Backend.VOLCANO)


@pytest.fixture(scope="module")
def gang_backend(gang_setup: GangSetup) -> Backend:
    return gang_setup.backend


@pytest.fixture
def gang_kind(gang_setup: GangSetup) -> Kind:
    """The kind of the gang backend's gang objects (a PodGroup, a scheduling.k8s.io Workload)."""
    kind = PodGroupSettings(gang_setup.backend, gang_api=gang_setup.gang_api).kind
    assert kind is not None
    return kind


def _native(tmp_path_factory: pytest.TempPathFactory, api: GangApi) -> Iterator[LocalCluster]:
    options = ClusterOptions(node_pools=(), scheduler="kube-scheduler", gang_api=api)
    with LocalCluster(options, tmp_path_factory.mktemp(f"native-{api}")) as local:
        yield local


@pytest.fixture(scope="session")
def native_cluster_v1alpha1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane for the kubernetes backend at Kubernetes 1.35 (v1alpha1 Workloads):
    kube-scheduler with its gang scheduling on, no Volcano process (started the first time a
    test asks for it)."""
    yield from _native(tmp_path_factory, "v1alpha1")


@pytest.fixture(scope="session")
def native_cluster_v1beta1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The same at K8S_GANG_VERSION (v1beta1 PodGroups)."""
    yield from _native(tmp_path_factory, "v1beta1")


@pytest.fixture(scope="module")
def cluster(
    cluster: LocalCluster, gang_setup: GangSetup, request: pytest.FixtureRequest
) -> LocalCluster:
    """The session's control plane (Volcano), or one without Volcano for `kubernetes`."""
    if gang_setup.backend is Backend.KUBERNETES:
        native: LocalCluster = request.getfixturevalue(f"native_cluster_{gang_setup.gang_api}")
        return native
    return cluster


@pytest.fixture(scope="module")
async def stack(cluster: LocalCluster, gang_backend: Backend) -> AsyncIterator[KohortStack]:
    podgroups = PodGroupSettings(gang_backend)
    running = await KohortStack(cluster, settings=SETTINGS, podgroups=podgroups).start()
    yield running
    await running.stop()


@pytest.fixture
async def admin(cluster: LocalCluster) -> AsyncIterator[Client]:
    api = await clients.connect(str(cluster.kubeconfig))
    yield api
    await api.close()


@pytest.fixture
async def drained(namespace: str, admin: Client, test_nodes: TestNodes) -> AsyncIterator[None]:
    """After the test, the namespace's workloads and pods are gone before its nodes are.

    (Pods left bound to deleted nodes make Volcano's sessions fail for a while, which slows
    every later test down.)
    """
    yield
    owners = (
        kinds.JOBSETS,
        kinds.PYTORCHJOBS,
        kinds.RAYJOBS,
        kinds.RAYCLUSTERS,
        kinds.LEADERWORKERSETS,
        kinds.JOBS,
        kinds.STATEFULSETS,
    )
    for kind in owners:
        try:
            items, _ = await admin.list(kind, namespace)
        except clients.ApiError:
            continue
        for obj in items:
            await admin.delete(kind, obj["metadata"]["name"], namespace)

    async def remaining() -> int:
        pods, _ = await admin.list(kinds.PODS, namespace)
        for pod in pods:
            await admin.delete(kinds.PODS, pod["metadata"]["name"], namespace)
        return len(pods)

    await eventually(remaining, lambda n: n == 0, within=60, what="the test's pods gone")
