"""Gangs that need new nodes: time from submission to bound with kohort's ProvisioningRequest
check, and what happens without it, on the local control plane with the stand-in autoscaler.

    .venv/bin/python bench/bench_autoscaled.py [--gangs 12] [--pace 2] [--never-after 60]
        [--runtime 20] [--seed 1]

The cluster: no node at first; one autoscaled node group `gpu` (8 GPUs, 64 CPUs a node, at most
`--max-nodes`) served by the stand-in autoscaler (hack/provisioner.py, scan every 0.5 s, nodes
unneeded for 30 s removed); Volcano places the gangs; kohort's webhook and controller run in this
process (hack/demo.py's KohortStack) with the measured configuration. One ResourceFlavor `pool`
stands for the group's nodes (`autoscaling.maxNodes` = the group's max).

Two queues of the same quota on it: `without` names no check (kohort as it was: a gang that
needs nodes that do not exist waits, and the autoscaler never hears of it), `with` names the
AdmissionCheck `provision` (best-effort-atomic-scale-up). First `--gangs` gangs go to `without`
and are watched for `--never-after` seconds; then the same gangs go to `with`, one every
`--pace` seconds, each Job finishing `--runtime` seconds after it starts. Printed per setting:
gangs bound, and for `with` the p50 / p95 / max of submission to request made, request made to
Provisioned, Provisioned to all pods bound and submission to all pods bound (seen by polling
every 0.25 s), requests made, nodes made, and gangs that bound with no request (on nodes a
finished gang left).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller import quota
from controller.api import names
from controller.settings import Settings
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Backend
from hack import provisioner
from hack.demo import KohortStack, apply_queues
from hack.localcluster import Autoscaler, ClusterOptions, LocalCluster, NodeGroup
from hack.objects import (
    GPU,
    flavored_cluster_queue,
    gang_job,
    local_queue,
    provisioning_check,
    resource_flavor,
)

GROUP = "gpu"
NODE = {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"}  # one new node of the group
SHAPES = (1, 2, 4, 2, 1, 4, 2)  # pods of 8 GPUs each
POLL = 0.25
REQUESTS = "/apis/autoscaling.x-k8s.io/v1/namespaces/{ns}/provisioningrequests"


@dataclass
class Gang:
    name: str
    pods: int
    submitted: float
    requested: float | None = None
    provisioned: float | None = None
    bound: float | None = None
    requests: set[str] = field(default_factory=set)


def _queues(max_nodes: int) -> list[dict[str, Any]]:
    flavor = resource_flavor(
        "pool",
        node_labels={provisioner.DEFAULT_GROUP_LABEL: GROUP},
        max_nodes=max_nodes,
        node_allocatable=NODE,
    )
    quota = {"pool": {GPU: str(8 * max_nodes), "cpu": "2000"}}
    without = flavored_cluster_queue("without", quota)
    with_check = flavored_cluster_queue("with", quota, checks={"provision": ["pool"]})
    return [flavor, provisioning_check("provision"), without, with_check]


def _job(name: str, pods: int, runtime: float) -> dict[str, Any]:
    return gang_job(
        name, queue="team", pods=pods, requests={GPU: "8", "cpu": "1"}, complete_after=f"{runtime}s"
    )


async def _get(cluster: LocalCluster, path: str) -> Any:
    return await asyncio.to_thread(cluster.rest.get, path)


async def _bound(cluster: LocalCluster, ns: str) -> dict[str, int]:
    """Pods bound (or finished) per Job of the namespace."""
    pods = (await _get(cluster, f"/api/v1/namespaces/{ns}/pods"))["items"]
    counts: dict[str, int] = {}
    for pod in pods:
        job = (pod["metadata"].get("labels") or {}).get("job-name")
        if job and pod["spec"].get("nodeName"):
            counts[job] = counts.get(job, 0) + 1
    return counts


async def _run_without(
    cluster: LocalCluster, shapes: list[int], wait: float, runtime: float
) -> str:
    ns = "without"
    for i, pods in enumerate(shapes):
        job = _job(f"g{i}", pods, runtime)
        await asyncio.to_thread(cluster.rest.create, f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    await asyncio.sleep(wait)
    bound = await _bound(cluster, ns)
    made = len(await _group_nodes(cluster))
    wl = await _get(cluster, f"/apis/{names.API_VERSION}/namespaces/{ns}/workloads/job-g0")
    reason = (wl.get("status") or {}).get("pendingReason", "")
    for i in range(len(shapes)):
        await asyncio.to_thread(cluster.rest.delete, f"/apis/batch/v1/namespaces/{ns}/jobs/g{i}")
    return (
        f"without the check: {sum(1 for n in bound.values() if n)} of {len(shapes)} gangs bound"
        f" after {wait:.0f}s (never), {made} node(s) made; first gang's reason: {reason}"
    )


async def _group_nodes(cluster: LocalCluster) -> set[str]:
    nodes = (await _get(cluster, "/api/v1/nodes"))["items"]
    return {
        n["metadata"]["name"]
        for n in nodes
        if (n["metadata"].get("annotations") or {}).get(provisioner.GROUP_ANNOTATION) == GROUP
    }


async def _run_with(
    cluster: LocalCluster, shapes: list[int], pace: float, runtime: float, deadline: float
) -> tuple[list[Gang], int]:
    ns = "with"
    gangs: list[Gang] = []
    made: set[str] = set()

    async def submit() -> None:
        for i, pods in enumerate(shapes):
            gang = Gang(f"g{i}", pods, time.monotonic())
            gangs.append(gang)
            await asyncio.to_thread(
                cluster.rest.create,
                f"/apis/batch/v1/namespaces/{ns}/jobs",
                _job(gang.name, pods, runtime),
            )
            await asyncio.sleep(pace)

    submitting = asyncio.create_task(submit())
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        now = time.monotonic()
        made |= await _group_nodes(cluster)
        requests = (await _get(cluster, REQUESTS.format(ns=ns)))["items"]
        by_gang: dict[str, list[dict[str, Any]]] = {}
        for request in requests:
            owners = request["metadata"].get("ownerReferences") or [{}]
            owner = owners[0].get("name", "")
            by_gang.setdefault(owner, []).append(request)
        bound = await _bound(cluster, ns)
        for gang in gangs:
            mine = by_gang.get(f"job-{gang.name}", [])
            gang.requests |= {r["metadata"]["name"] for r in mine}
            if mine and gang.requested is None:
                gang.requested = now
            provisioned = any(
                c.get("type") == "Provisioned" and c.get("status") == "True"
                for r in mine
                for c in (r.get("status") or {}).get("conditions") or []
            )
            if provisioned and gang.provisioned is None:
                gang.provisioned = now
            if gang.bound is None and bound.get(gang.name, 0) >= gang.pods:
                gang.bound = now
        if submitting.done() and all(g.bound is not None for g in gangs):
            break
        await asyncio.sleep(POLL)
    submitting.cancel()
    return gangs, len(made)


def _spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered):.1f}s  p95 {p95:.1f}s  max {ordered[-1]:.1f}s"


async def _bench(args: argparse.Namespace, cluster: LocalCluster) -> None:
    podgroups = PodGroupSettings(Backend.VOLCANO)
    # The measured configuration, but no waste budget: gangs here run for seconds.
    settings = Settings(core=replace(quota.Config.measured(), waste_budget=None))
    stack = await KohortStack(cluster, settings=settings, podgroups=podgroups).start()
    try:
        rest = cluster.rest
        for ns in ("without", "with"):
            rest.create("/api/v1/namespaces", {"metadata": {"name": ns}}, exist_ok=True)
            stack.enroll(ns)
        objects = _queues(args.max_nodes)
        for obj in objects[:2]:
            plural = "resourceflavors" if obj["kind"] == "ResourceFlavor" else "admissionchecks"
            rest.create(f"/apis/{names.API_VERSION}/{plural}", obj)
        apply_queues(
            rest,
            [
                *objects[2:],
                local_queue("without", "team", "without"),
                local_queue("with", "team", "with"),
            ],
        )
        rng = random.Random(args.seed)
        shapes = [SHAPES[i % len(SHAPES)] for i in range(args.gangs)]
        rng.shuffle(shapes)
        print(await _run_without(cluster, shapes, args.never_after, args.runtime), flush=True)
        gangs, made = await _run_with(cluster, shapes, args.pace, args.runtime, args.deadline)
    finally:
        await stack.stop()
    bound = [g for g in gangs if g.bound is not None]
    asked = [g for g in gangs if g.requests]
    print(f"with the check: {len(bound)} of {len(gangs)} gangs bound, {made} node(s) made,")
    print(
        f"  {sum(len(g.requests) for g in gangs)} request(s) for {len(asked)} gang(s);"
        f" {len(bound) - sum(1 for g in bound if g.requests)} bound with no request"
    )
    print(
        "  submitted -> request made:  "
        + _spread([g.requested - g.submitted for g in gangs if g.requested is not None])
    )
    print(
        "  request -> Provisioned:     "
        + _spread([g.provisioned - g.requested for g in gangs if g.provisioned and g.requested])
    )
    print(
        "  Provisioned -> all bound:   "
        + _spread([g.bound - g.provisioned for g in gangs if g.bound and g.provisioned])
    )
    print(
        "  submitted -> all bound:     "
        + _spread([g.bound - g.submitted for g in gangs if g.bound is not None])
    )
    print(
        f"config: gangs={args.gangs} shapes={sorted(set(shapes))} pods of 8 GPUs pace={args.pace}s"
        f" runtime={args.runtime}s max_nodes={args.max_nodes} seed={args.seed}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gangs", type=int, default=12)
    parser.add_argument("--pace", type=float, default=2.0)
    parser.add_argument("--runtime", type=float, default=20.0)
    parser.add_argument("--never-after", type=float, default=60.0)
    parser.add_argument("--max-nodes", type=int, default=16)
    parser.add_argument("--deadline", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    autoscaler = Autoscaler(
        groups=(NodeGroup(GROUP, max_count=args.max_nodes, gpus=8, cpu="64", memory="512Gi"),),
        scale_down_unneeded_time=30.0,
    )
    options = ClusterOptions(node_pools=(), scheduler="volcano", autoscaler=autoscaler)
    with (
        tempfile.TemporaryDirectory(prefix="bench-autoscaled-") as work,
        LocalCluster(options, Path(work)) as cluster,
    ):
        asyncio.run(_bench(args, cluster))


if __name__ == "__main__":
    main()
