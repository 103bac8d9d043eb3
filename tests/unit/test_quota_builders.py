"""Keyword builders for decision-core test worlds: GPU nodes, queues in a cohort, gangs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controller.quota import (
    AdmittedGang,
    Decisions,
    Gang,
    Node,
    PodPlacement,
    PodSet,
    QueueSpec,
    Quota,
    Snapshot,
    Taint,
    Toleration,
)
from controller.quota.snapshot import ReclaimPolicy, WithinQueuePolicy

GPU = "nvidia.com/gpu"
G = 1000  # one GPU in milli-units


def node(
    name: str,
    gpus: int = 8,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    used_gpus: int = 0,
) -> Node:
    return Node(
        name,
        {GPU: gpus * G, "cpu": gpus * 4 * G},
        dict(labels or {}),
        tuple(taints),
        {GPU: used_gpus * G, "cpu": used_gpus * 4 * G} if used_gpus else {},
    )


def queue(
    name: str,
    gpus: int,
    *,
    cohort: str | None = "all",
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    reclaim: ReclaimPolicy = "Any",
    within: WithinQueuePolicy = "Never",
    weight: float = 1.0,
    min_runtime: float = 0.0,
    evict_after: float = 0.0,
    strict: bool = False,
) -> QueueSpec:
    def scaled(v: int | None, per: int) -> int | None:
        return None if v is None else v * per

    return QueueSpec(
        name,
        {
            GPU: Quota(gpus * G, scaled(borrowing_limit, G), scaled(lending_limit, G)),
            "cpu": Quota(
                gpus * 4 * G, scaled(borrowing_limit, 4 * G), scaled(lending_limit, 4 * G)
            ),
        },
        cohort=cohort,
        weight=weight,
        reclaim_within_cohort=reclaim,
        within_queue=within,
        strategy="StrictFIFO" if strict else "BestEffortFIFO",
        min_runtime=min_runtime,
        evict_after=evict_after,
    )


def gang(
    name: str,
    queue: str,
    pods: int = 1,
    gpus: int = 8,
    *,
    priority: int = 0,
    created: float = 0.0,
    selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Toleration] = (),
) -> Gang:
    pod_set = PodSet(
        pods, {GPU: gpus * G, "cpu": gpus * 4 * G}, "main", dict(selector or {}), tuple(tolerations)
    )
    return Gang(name, queue, (pod_set,), priority, created)


def running(g: Gang, *nodes: str, at: float = 0.0) -> AdmittedGang:
    """`g` admitted at `at` with one pod on each of `nodes` (a node may repeat)."""
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n] = counts.get(n, 0) + 1
    return AdmittedGang(g, at, tuple(PodPlacement("main", n, c) for n, c in sorted(counts.items())))


def world(
    queues: Sequence[QueueSpec],
    nodes: Sequence[Node],
    pending: Sequence[Gang] = (),
    admitted: Sequence[AdmittedGang] = (),
) -> Snapshot:
    return Snapshot(tuple(queues), tuple(nodes), tuple(pending), tuple(admitted))


def admitted_names(d: Decisions) -> list[str]:
    return [a.gang for a in d.admissions]


def evicted_names(d: Decisions) -> list[str]:
    return sorted(e.gang for e in d.evictions)
