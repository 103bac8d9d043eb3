"""The FGD allocation protocol on the openb trace, with whole-GPU pods.

Rule: the protocol of the paper, changed only where stated. Pods arrive in trace order and never
leave; after the trace, random copies of trace pods (seeded) arrive until the requested GPUs
reach `tune` times the cluster's GPUs. A pod that cannot be placed when it arrives is dropped.
We record the % of GPUs allocated at each 1% of arrived GPU requests.

Changed: a pod asking for a fraction of a GPU is rounded up to one whole GPU (kohort does not
share GPUs), so "arrived" counts whole GPUs. The published numbers count GPU fractions.

With `flavors`, GPU types are modelled (flavors.py): nodes carry their model, a pod whose
gpu_spec names models runs only on those, and the one queue's GPU quota (twice the cluster's
capacity, so it never binds) is split into one flavor per model. kohort and first-fit then
pick a flavor before a node, in flavor order; kube-default, a model of the kube-scheduler,
knows no flavors and only obeys the pods' node selectors. Without it, as before: one pool of
GPUs, models ignored.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from controller.quota import Config, Engine, FlavorSpec, Gang, Node, PodSet, QueueSpec, Quota
from controller.quota.placement import Packing
from controller.quota.snapshot import GPU
from controller.simulate.flavors import GpuTypes
from controller.simulate.traces import (
    DEFAULT_TRACES,
    GPU_UNIT,
    OpenbPod,
    iter_published_fgd,
    load_openb_nodes,
    load_openb_pods,
)

# Our policies on this protocol: the packing rule each one places pods with.
OPENB_POLICIES: dict[str, Packing] = {
    "kohort": "best-fit",
    "kube-default": "spread",
    "first-fit": "first-fit",
}
# Those that count quota per flavor when GPU types are modelled (not the kube-scheduler's).
OPENB_FLAVORED = frozenset({"kohort", "first-fit"})


@dataclass(frozen=True, slots=True)
class Curve:
    policy: str
    seed: int
    # allocation % of GPUs at 0..int(tune*100) % arrived
    allocated: list[float]
    dropped: int


def arrivals(pods: Sequence[OpenbPod], total_gpus: int, tune: float, seed: int) -> list[OpenbPod]:
    """The trace, then seeded random copies until GPU requests reach tune x capacity."""
    out = list(pods)
    requested = sum(p.gpus for p in out)
    rng = random.Random(seed)
    k = 0
    while requested < tune * total_gpus:
        pick = rng.choice(pods)
        out.append(replace(pick, name=f"{pick.name}-copy{k}"))
        requested += pick.gpus
        k += 1
    return out


def run_curve(
    nodes: Sequence[Node],
    pods: Sequence[OpenbPod],
    policy: str,
    tune: float,
    seed: int,
    types: GpuTypes | None = None,
) -> Curve:
    """One seed of one policy. `types`: GPU types are modelled (nodes labelled by
    `types.label`); pods keep to their models, and OPENB_FLAVORED policies get flavors."""
    total_gpus = sum(n.allocatable.get(GPU, 0) for n in nodes) // GPU_UNIT
    capacity: dict[str, int] = {}
    for node in nodes:
        for r, v in node.allocatable.items():
            capacity[r] = capacity.get(r, 0) + v
    queue = QueueSpec("all", {r: Quota(v * 2) for r, v in capacity.items()})
    flavors: tuple[FlavorSpec, ...] = ()
    if types is not None and policy in OPENB_FLAVORED:
        queue, flavors = types.split(queue), types.flavors()
    engine = Engine([queue], nodes, Config(packing=OPENB_POLICIES[policy]), flavors=flavors)
    selectors: dict[tuple[str, ...], dict[str, str]] = {}
    allocated = 0
    requested = 0
    dropped = 0
    marks = round(tune * 100)
    curve: list[float] = [0.0]
    for k, pod in enumerate(arrivals(pods, total_gpus, tune, seed)):
        requests = {"cpu": pod.cpu, "memory": pod.memory}
        if pod.gpus:
            requests[GPU] = pod.gpus * GPU_UNIT
        selector: dict[str, str] = {}
        if types is not None and pod.models:
            if pod.models not in selectors:
                selectors[pod.models] = types.selector(pod.models)
            selector = selectors[pod.models]
        pod_set = PodSet(1, requests, node_selector=selector)
        engine.add_pending(Gang(pod.name, "all", (pod_set,), 0, float(k)))
        if engine.cycle(float(k)).admissions:
            allocated += pod.gpus
        else:
            engine.remove_pending(pod.name)
            dropped += 1
        requested += pod.gpus
        while len(curve) <= marks and requested * 100 >= len(curve) * total_gpus:
            curve.append(100.0 * allocated / total_gpus)
    while len(curve) <= marks:
        curve.append(100.0 * allocated / total_gpus)
    return Curve(policy, seed, curve, dropped)


def published(
    root: Path = DEFAULT_TRACES, workload: str = "openb_pod_list_default"
) -> dict[str, dict[int, float]]:
    """Median over seeds of the paper's allocation % at each arrived %, per policy."""
    per_policy: dict[str, dict[int, list[float]]] = {}
    for row in iter_published_fgd(root):
        if row["workload"] != workload:
            continue
        name = row["sc_policy"].split("-", 1)[-1]
        series = per_policy.setdefault(name, {})
        for mark in (100, 130):
            value = row.get(str(mark))
            if value:
                series.setdefault(mark, []).append(float(value))
    return {
        name: {mark: statistics.median(vals) for mark, vals in series.items()}
        for name, series in per_policy.items()
    }


def run_openb(
    root: Path = DEFAULT_TRACES,
    *,
    seeds: Sequence[int] = tuple(range(42, 52)),
    tune: float = 1.3,
    policies: Sequence[str] = tuple(OPENB_POLICIES),
    variant: str = "default",
    flavors: bool = False,
    flavor_order: Sequence[str] = (),
) -> dict[str, object]:
    """The FGD protocol per policy over `seeds`; `flavors`: with GPU types (see the module)."""
    nodes = load_openb_nodes(root, typed=flavors)
    pods = load_openb_pods(root, variant=variant)
    types = None
    if flavors:
        types = GpuTypes.of(nodes, order=flavor_order, accepted={p.models for p in pods})
        nodes = types.label(nodes)
    results: dict[str, dict[str, object]] = {}
    for policy in policies:
        curves = [run_curve(nodes, pods, policy, tune, seed, types) for seed in seeds]
        results[policy] = {
            "alloc_at_100_median": statistics.median(c.allocated[100] for c in curves),
            "alloc_at_130_median": statistics.median(c.allocated[-1] for c in curves),
            "dropped_median": statistics.median(c.dropped for c in curves),
            "per_seed_at_130": {c.seed: round(c.allocated[-1], 2) for c in curves},
        }
    return {
        "protocol": "FGD, whole-GPU pods (fractions rounded up), seeds "
        f"{seeds[0]}-{seeds[-1]}, tune {tune}",
        "variant": variant,
        "gpu_types": types.describe() if types is not None else "one pool (models ignored)",
        "pods_naming_a_model": sum(1 for p in pods if p.models),
        "nodes": len(nodes),
        "gpus": sum(n.allocatable.get(GPU, 0) for n in nodes) // GPU_UNIT,
        "fractional_pods_rounded_up": sum(1 for p in pods if p.fractional),
        "ours": results,
        "published_median": published(root, f"openb_pod_list_{variant}"),
    }
