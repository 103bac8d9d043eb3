"""A controller's informers, state, writers and reconciler on an API server in memory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from controller import quota
from controller.api import kinds, names
from controller.api.times import format_time
from controller.cluster.cache import Cache
from controller.cluster.writers import Writers
from controller.metrics import ControllerMetrics
from controller.reconciler import Reconciler
from controller.settings import Settings
from controller.state.cluster import ClusterState
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Mutation
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.registry import REGISTRY, Registry
from hack.objects import cluster_queue, local_queue, resource_flavor
from tests.fakes.memory_api import MemoryApi
from tests.fakes.workloads import make_job

JSON = dict[str, Any]
NOW = 1_800_000_000.0


def held_job(name: str, pods: int, cpu: str = "1", namespace: str = "ns") -> JSON:
    """A Job as kohort's webhook stores it."""
    job = make_job(
        name,
        namespace=namespace,
        queue="lq",
        parallelism=pods,
        completions=pods,
        cpu=cpu,
        memory=None,
    )
    editor = Editor(job)
    REGISTRY.instance(JobAdapter).default(editor, Mutation("lq"))
    return editor.doc


def workload(job: JSON, *, reserved: bool) -> JSON:
    """The Workload of `job`, holding quota (an admission recorded) or not."""
    name = f"job-{job['metadata']['name']}"
    pods = job["spec"]["parallelism"]
    status: JSON = {"conditions": []}
    if reserved:
        status["conditions"] = [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"}
        ]
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [],
            "admittedAt": format_time(NOW - 60),
        }
    return {
        "apiVersion": names.API_VERSION,
        "kind": "Workload",
        "metadata": {
            "namespace": job["metadata"]["namespace"],
            "name": name,
            "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"]}
            ],
        },
        "spec": {
            "queueName": "lq",
            "podSets": [{"name": "main", "count": pods, "requests": {"cpu": "1"}}],
        },
        "status": status,
    }


class World:
    """A controller's informers, state, writers and reconciler on an API server in memory."""

    def __init__(
        self,
        *objects: tuple[kinds.Kind, JSON],
        cpu_quota: str = "4",
        registry: Registry = REGISTRY,
        pods_ready_timeout: float | None = None,
        release_timeout: float | None = Settings.release_timeout,
        clock: Callable[[], float] = lambda: NOW,
        device_classes: Mapping[str, str] | None = None,
        placement: bool = False,
        positions_head: int = Settings.positions_head,
        position_writes: int = Settings.position_writes,
        positions_period: float = 0.0,
        positions_budget: float | None = None,
        forecast_refresh: float | None = None,
        usage_half_life: float = 0.0,
        forecast_budget: float | None = None,
        forecast_writes: int = Settings.forecast_writes,
    ) -> None:
        self.api = MemoryApi(clock=clock)
        # The flavor `cluster_queue` names (objects given may replace both).
        self.api.put(kinds.RESOURCE_FLAVORS, resource_flavor("default"))
        self.api.put(kinds.CLUSTER_QUEUES, cluster_queue("cq", {"cpu": cpu_quota}))
        self.api.put(kinds.LOCAL_QUEUES, local_queue("ns", "lq", "cq"))
        for kind, obj in objects:
            self.api.put(kind, obj)
        settings = Settings(
            pods_ready_timeout=pods_ready_timeout,
            release_timeout=release_timeout,
            core=quota.Config(placement=placement, usage_half_life=usage_half_life),
            device_classes=device_classes or {},
            positions_head=positions_head,
            position_writes=position_writes,
            positions_period=positions_period,
            positions_budget=positions_budget,
            forecast_refresh=forecast_refresh,
            forecast_budget=forecast_budget,
            forecast_writes=forecast_writes,
        )
        self.state = ClusterState(settings, PodGroupSettings(), registry=registry)
        self.cache = Cache(self.api, podgroup_kind=kinds.VOLCANO_PODGROUPS, registry=registry)
        writers = Writers(self.api, self.cache.informers)
        self.metrics = ControllerMetrics()
        self.reconciler = Reconciler(self.state, writers, settings, self.metrics, clock=clock)
        self.cache.listen(self.reconciler.notify)

    def suspended(self, name: str) -> bool | None:
        job = self.api.read_back(kinds.JOBS, name, "ns")
        return None if job is None else job["spec"].get("suspend")

    def workload(self, name: str) -> JSON | None:
        return self.api.read_back(kinds.WORKLOADS, name, "ns")


@pytest.fixture
async def started() -> AsyncIterator[list[World]]:
    """Worlds a test started, stopped after it."""
    worlds: list[World] = []
    yield worlds
    for world in worlds:
        await world.cache.stop()


async def start(worlds: list[World], world: World) -> World:
    worlds.append(world)
    world.cache.start()
    await world.cache.wait_synced()
    return world


async def passes(world: World, n: int = 2) -> None:
    """`n` reconcile passes, each with its writes seen back through the informers."""
    for _ in range(n):
        await world.reconciler.reconcile_once()
        await world.api.settle()


def queue_used(world: World, resource: str, queue: str = "cq") -> str | None:
    """How much of `resource` the ClusterQueue's status shows used (None: not shown)."""
    cq = world.api.read_back(kinds.CLUSTER_QUEUES, queue)
    assert cq is not None
    for flavor in cq["status"]["flavorsUsage"]:
        for used in flavor["resources"]:
            if used["name"] == resource:
                return str(used["total"])
    return None
