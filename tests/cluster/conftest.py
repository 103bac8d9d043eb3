"""Fixtures of the end-to-end tests: kohort running in-process against the local cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from controller import quota
from controller.api import kinds
from controller.cluster import clients
from controller.cluster.clients import Client
from controller.settings import Settings
from hack.demo import KohortStack
from hack.localcluster import LocalCluster
from tests.conftest import TestNodes
from tests.support import eventually

# The measured configuration, but with no waste budget: the scenarios here reclaim gangs that
# have run for seconds, for gangs that have waited for seconds (the budget is measured in hours
# of GPU work, docs/simulator.md; tests/unit/test_starvation_guard.py and the simulator test it).
SETTINGS = Settings(core=replace(quota.Config.measured(), waste_budget=None))


@pytest.fixture(scope="module")
async def stack(cluster: LocalCluster) -> AsyncIterator[KohortStack]:
    running = await KohortStack(cluster, settings=SETTINGS).start()
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
    for kind in (kinds.JOBS, kinds.STATEFULSETS, kinds.LEADERWORKERSETS):
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
