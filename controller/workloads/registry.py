"""Which adapter handles which kind: adding a kind is one module plus one line here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.api.kinds import Kind
from controller.workloads.base import MergedDefaults, WorkloadAdapter, owned_by
from controller.workloads.job import JobAdapter
from controller.workloads.jobset import JobSetAdapter
from controller.workloads.leaderworkerset import LeaderWorkerSetAdapter
from controller.workloads.pod import PodAdapter
from controller.workloads.pytorchjob import PyTorchJobAdapter
from controller.workloads.raycluster import RayClusterAdapter
from controller.workloads.rayjob import RayJobAdapter
from controller.workloads.statefulset import StatefulSetAdapter

JOB = JobAdapter()

ADAPTERS: Mapping[Kind, WorkloadAdapter] = {
    a.KIND: a
    for a in (
        JOB,
        StatefulSetAdapter(),
        LeaderWorkerSetAdapter(),
        JobSetAdapter(),
        PyTorchJobAdapter(),
        RayClusterAdapter(),
        RayJobAdapter(),
        PodAdapter(),
    )
}

_BY_GVK = {(k.group, k.version, k.kind): a for k, a in ADAPTERS.items()}


def adapter_for(group: str, version: str, kind: str) -> WorkloadAdapter | None:
    return _BY_GVK.get((group, version, kind))


# Kinds whose defaults are one merge (see MergedDefaults).
_MERGED: Mapping[tuple[str, str, str], MergedDefaults] = {
    gvk: a for gvk, a in _BY_GVK.items() if isinstance(a, MergedDefaults)
}


def merged_defaults_for(group: str, version: str, kind: str) -> MergedDefaults | None:
    return _MERGED.get((group, version, kind))


def part_of_managed_workload(obj: Any) -> bool:
    """Whether a raw object (not a pod) was made for a workload of a kind kohort manages as a
    gang: a JobSet's Job, a RayJob's RayCluster or submitter Job, a LeaderWorkerSet's leader
    StatefulSet, or a worker StatefulSet, which LWS makes owned by its group's leader Pod. Its
    owner's gang holds it, so it is left as its owner's controller made it (in an opted-in
    namespace too)."""
    return isinstance(obj, dict) and any(owned_by(obj, kind) for kind in ADAPTERS)
