"""Condition types and reasons kohort writes, and the one rule for changing a condition list.

Rule: every condition type and every reason (of a condition or an Event) kohort writes is a
member of one of the enums below; `set_condition` is the only way a list of conditions changes.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from controller.api.common import Condition
from controller.api.times import format_time

# Kubernetes caps a condition's message at 32 KiB.
MESSAGE_LIMIT = 32000


class WorkloadCondition(enum.StrEnum):
    """Conditions of a Workload."""

    QUOTA_RESERVED = "QuotaReserved"  # the durable record of an admission
    ADMITTED = "Admitted"
    EVICTED = "Evicted"
    PREEMPTED = "Preempted"
    PODS_READY = "PodsReady"
    FINISHED = "Finished"
    # False when the placement check left out some of what the pods ask of the scheduler.
    PLACEMENT_CHECKED = "PlacementChecked"
    # True once an admitted elastic gang was shrunk in place for another gang (its reason: as
    # Preempted's; its message: for whom, and to how many pods).
    SHRUNK = "Shrunk"


class QueueCondition(enum.StrEnum):
    """Conditions of a ClusterQueue and of a Cohort."""

    ACTIVE = "Active"


class Reason(enum.StrEnum):
    """Reasons of conditions and of the Events kohort records."""

    QUOTA_RESERVED = "QuotaReserved"
    ADMITTED = "Admitted"
    PENDING = "Pending"
    PREEMPTED = "Preempted"
    PODS_READY_TIMEOUT = "PodsReadyTimeout"
    RESIZED = "Resized"
    # An admitted gang's object asked for fewer pods, and its kind runs on with those it
    # keeps: its admission is kept at the smaller count, the rest of its quota given back.
    SCALED_DOWN = "ScaledDown"
    # An admitted elastic gang was shrunk in place, down to at most its minimum, for another
    # gang instead of being evicted: it runs on with the pods it keeps.
    SHRUNK = "Shrunk"
    INADMISSIBLE = "Inadmissible"
    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    STARTED = "Started"
    # An admitted gang's flavor has no ResourceFlavor: its pods are not released.
    FLAVOR_NOT_FOUND = "FlavorNotFound"
    # Its pods ask the scheduler for what the placement check does not model.
    PLACEMENT_NOT_CHECKED = "PlacementNotChecked"
    # An admitted gang's release (its PodGroup, its unsuspend) keeps failing; past
    # --release-timeout it is evicted for it.
    RELEASE_FAILED = "ReleaseFailed"
    # A gang admitted onto nodes its flavor's pool has still to add waits for them; the
    # request for them failed (the check's Retry and Rejected evict for it); it was released
    # onto them.
    PROVISIONING = "Provisioning"
    ADMISSION_CHECK = "AdmissionCheck"
    PROVISIONED = "Provisioned"
    FINISHED = "Finished"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    READY = "Ready"
    # A ClusterQueue's or Cohort's tree has a cycle of Cohort parents: it admits nothing.
    COHORT_CYCLE = "CohortCycle"
    # A Cohort's parent is no Cohort object: an implicit cohort with no quota of its own.
    PARENT_NOT_FOUND = "ParentNotFound"
    # A LocalQueue's ClusterQueue does not exist: nothing submitted to it is admitted.
    CLUSTER_QUEUE_NOT_FOUND = "ClusterQueueNotFound"


def find(conditions: Sequence[Condition], kind: str) -> Condition | None:
    return next((c for c in conditions if c.type == kind), None)


def is_true(conditions: Sequence[Condition], kind: str) -> bool:
    found = find(conditions, kind)
    return found is not None and found.status == "True"


def set_condition(
    conditions: Sequence[Condition],
    kind: str,
    status: bool,
    reason: str,
    message: str,
    now: float,
) -> list[Condition]:
    """The conditions with `kind` set; its lastTransitionTime moves only when its status does."""
    text = "True" if status else "False"
    old = find(conditions, kind)
    since = format_time(now)
    if old is not None and old.status == text and old.last_transition_time:
        since = old.last_transition_time
    new = Condition(
        type=kind,
        status=text,
        reason=reason,
        message=message[:MESSAGE_LIMIT],
        last_transition_time=since,
    )
    out = [new if c.type == kind else c for c in conditions]
    return out if old is not None else [*out, new]


def without(conditions: Sequence[Condition], *kinds: str) -> list[Condition]:
    return [c for c in conditions if c.type not in kinds]
