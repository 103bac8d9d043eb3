"""Which adapter handles which kind."""

from __future__ import annotations

from collections.abc import Mapping

from controller.workloads.base import WorkloadAdapter
from controller.workloads.job import JobAdapter
from controller.workloads.leaderworkerset import LeaderWorkerSetAdapter
from controller.workloads.pod import PodAdapter
from controller.workloads.statefulset import StatefulSetAdapter

GroupVersionKind = tuple[str, str, str]

ADAPTERS: Mapping[GroupVersionKind, WorkloadAdapter] = {
    (a.group, a.version, a.kind): a
    for a in (JobAdapter(), StatefulSetAdapter(), LeaderWorkerSetAdapter(), PodAdapter())
}


def adapter_for(group: str, version: str, kind: str) -> WorkloadAdapter | None:
    return ADAPTERS.get((group, version, kind))
