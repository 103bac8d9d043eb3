"""The writes a pass plans, as values: the state decides them, the writers carry them out.

Rule: a gang's steps run in order and stop at the first failure; different gangs' steps run
concurrently. A step names everything its write needs, so carrying it out decides nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.api import kube
from controller.api.conditions import Reason
from controller.api.kinds import Kind
from controller.api.queues import ClusterQueueStatus, CohortStatus, LocalQueueStatus
from controller.api.workload import QueuePosition, Workload, WorkloadStatus
from controller.workloads.base import Delete, Patch


@dataclass(frozen=True)
class CreateWorkload:
    workload: Workload


@dataclass(frozen=True)
class WriteWorkloadStatus:
    namespace: str
    name: str
    status: WorkloadStatus
    # The Workload's resourceVersion the status was computed from, when someone else writes
    # its status too (a standalone Workload's creator): the write must not land on a version
    # changed by them since. Empty: kohort alone writes it.
    based_on: str = ""


@dataclass(frozen=True)
class WriteWorkloadPosition:
    """Write only `status.position` of a Workload (None: remove it); whole-status writes leave
    it alone, so neither undoes the other."""

    namespace: str
    name: str
    position: QueuePosition | None


@dataclass(frozen=True)
class DeleteWorkload:
    namespace: str
    name: str


@dataclass(frozen=True)
class CreatePodGroup:
    kind: Kind
    podgroup: kube.PodGroup | kube.NativeWorkload | kube.NativePodGroupObject


@dataclass(frozen=True)
class DeletePodGroup:
    kind: Kind
    namespace: str
    name: str


@dataclass(frozen=True)
class CreateObject:
    """Create an object kohort made up (a ProvisioningRequest, its PodTemplates); one that
    exists already is left as it is."""

    kind: Kind
    namespace: str
    body: dict[str, Any]


@dataclass(frozen=True)
class RecordEvent:
    """An Event about one object."""

    namespace: str
    about: kube.ObjectReference
    reason: Reason
    message: str
    warning: bool = False


@dataclass(frozen=True)
class WriteQueueStatus:
    name: str
    status: ClusterQueueStatus


@dataclass(frozen=True)
class WriteLocalQueueStatus:
    namespace: str
    name: str
    status: LocalQueueStatus


@dataclass(frozen=True)
class WriteCohortStatus:
    name: str
    status: CohortStatus


Step = (
    CreateWorkload
    | WriteWorkloadStatus
    | WriteWorkloadPosition
    | DeleteWorkload
    | CreatePodGroup
    | DeletePodGroup
    | CreateObject
    | RecordEvent
    | WriteQueueStatus
    | WriteLocalQueueStatus
    | WriteCohortStatus
    | Patch
    | Delete
)


@dataclass(frozen=True)
class FailedWrite:
    """A step the API server refused, and its answer (`HTTP <status>: <message>`)."""

    step: Step
    error: str
