"""Under churn, the controller's engine always holds exactly what the records say.

Jobs arrive in three queues sharing a lender's quota, a stand-in kubelet starts and finishes
their pods, nodes go NotReady and come back, ClusterQueue statuses change: after every pass
each gang whose Workload holds quota runs in the engine and no other does, every queue's usage
is the sum of its running gangs, and every node's free capacity is its allocatable minus the
pods outside admitted gangs and the admitted gangs' plans.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from controller import quota
from controller.api import kinds
from controller.quota.engine import Engine
from controller.workloads.job import JobAdapter
from controller.workloads.registry import REGISTRY
from hack.objects import cluster_queue, local_queue, reserved
from tests.unit.controller_world import World, start
from tests.unit.test_controller_state import held

JSON = dict[str, Any]
TEAMS = (("red", "1"), ("green", "1"), ("blue", "2"))


def node(name: str, ready: bool = True) -> JSON:
    return {
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod_of(job: JSON, node_name: str, index: int = 0) -> JSON:
    """Pod `index` of `job`, running on `node_name`."""
    name = job["metadata"]["name"]
    return {
        "metadata": {
            "name": f"{name}-{index}",
            "namespace": "ns",
            "labels": {"kohort.dev/pod-group": f"job-{name}"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "controller": True}
            ],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


def check(world: World) -> None:
    engine: Engine = world.state.engine
    records = {
        f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
        for wl in world.api.all(kinds.WORKLOADS)
        if reserved(wl)
    }
    assert set(engine.running) == records
    for name, runtime in engine.queues.items():
        total: dict[tuple[str, str], int] = {}
        for running in runtime.running.values():
            for fr, amount in running.charge.items():
                total[fr] = total.get(fr, 0) + amount
        used = {r: a for r, a in runtime.state.usage.items() if a}
        assert used == total, f"queue {name}"
    index = engine.index
    taken = [list(v) for v in index.allocatable]
    for node_name, node in engine._nodes.items():
        i = index.by_name.get(node_name)
        if i is not None:
            for k, resource in enumerate(index.order):
                taken[i][k] -= node.used.get(resource, 0)
    for _, running in engine.running.values():
        for request, i, count in running.on_nodes():
            for k, q in enumerate(request):
                taken[i][k] -= q * count
    assert [tuple(v) for v in taken] == index.free


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_the_engine_mirrors_the_records_through_churn(
    started: list[World], seed: int
) -> None:
    rng = random.Random(seed)
    world = World(cpu_quota="0")
    world.state.engine.config = quota.Config()  # the placement check on
    for name in ("n0", "n1"):
        world.api.put(kinds.NODES, node(name))
    for i in range(12):
        for team, _ in TEAMS:
            world.api.put(
                kinds.JOBS, held(_job(f"{team}-{i}"), REGISTRY.instance(JobAdapter), queue=team)
            )
    for team, weight in TEAMS:
        queue = cluster_queue(team, {"cpu": "0"}, cohort="c", weight=weight)
        world.api.put(kinds.CLUSTER_QUEUES, queue)
        world.api.put(kinds.LOCAL_QUEUES, local_queue("ns", team, team))
    world.api.put(kinds.CLUSTER_QUEUES, cluster_queue("lender", {"cpu": "12"}, cohort="c"))
    await start(started, world)
    admitted = 0
    for _ in range(40):
        await world.api.settle()
        stats = await world.reconciler.reconcile_once()
        admitted += stats.admitted
        check(world)
        _kubelet(world, rng)
        if rng.random() < 0.3:
            lender = world.api.read_back(kinds.CLUSTER_QUEUES, "lender")
            assert lender is not None
            lender.setdefault("status", {})["pendingWorkloads"] = rng.randrange(9)
            world.api.put(kinds.CLUSTER_QUEUES, lender)
        if rng.random() < 0.2:
            world.api.put(kinds.NODES, node("n1", ready=rng.random() < 0.6))
    assert admitted >= 12  # the churn did admit, finish and admit again


def _job(name: str) -> JSON:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
            },
        },
    }


def _kubelet(world: World, rng: random.Random) -> None:
    """Pods for released Jobs, bound at once; some finish (and so their Job); none for held."""
    for job in world.api.all(kinds.JOBS):
        name = job["metadata"]["name"]
        conditions = (job.get("status") or {}).get("conditions") or []
        done = any(c["type"] == "Complete" for c in conditions)
        pod = world.api.read_back(kinds.PODS, f"{name}-0", "ns")
        released = job["spec"].get("suspend") is False
        if released and not done and pod is None:
            world.api.put(kinds.PODS, pod_of(job, rng.choice(["n0", "n1"])))
        elif released and not done and pod is not None and rng.random() < 0.3:
            pod["status"]["phase"] = "Succeeded"
            world.api.put(kinds.PODS, pod)
            job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
            world.api.put(kinds.JOBS, job)
