"""Which adapter handles which kind."""

from __future__ import annotations

from collections.abc import Mapping

from controller.workloads.base import MergedDefaults, WorkloadAdapter
from controller.workloads.job import JobAdapter
from controller.workloads.leaderworkerset import LeaderWorkerSetAdapter
from controller.workloads.pod import PodAdapter
from controller.workloads.statefulset import StatefulSetAdapter

GroupVersionKind = tuple[str, str, str]

_JOB = JobAdapter()

ADAPTERS: Mapping[GroupVersionKind, WorkloadAdapter] = {
    (a.group, a.version, a.kind): a
    for a in (_JOB, StatefulSetAdapter(), LeaderWorkerSetAdapter(), PodAdapter())
}


def adapter_for(group: str, version: str, kind: str) -> WorkloadAdapter | None:
    return ADAPTERS.get((group, version, kind))


# Kinds whose defaults are one merge (see MergedDefaults).
MERGED_DEFAULTS: Mapping[GroupVersionKind, MergedDefaults] = {
    (a.group, a.version, a.kind): a for a in (_JOB,)
}


def merged_defaults_for(group: str, version: str, kind: str) -> MergedDefaults | None:
    return MERGED_DEFAULTS.get((group, version, kind))
