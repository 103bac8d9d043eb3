"""The Workload of kohort.dev/v1alpha1: one gang, admitted whole or not at all.

Rule: a Workload's pod sets say what every pod of the gang needs (count, requests, node
selector, tolerations); the status says whether and where the gang was admitted.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from controller.api import kinds, names
from controller.api.common import (
    Condition,
    Lenient,
    ObjectName,
    Quantity,
    Resource,
    ResourceName,
    Spec,
    Toleration,
    duplicates,
)
from controller.api.kinds import Kind
from controller.api.quantity import parse_quantity

# The most pod sets one Workload (one gang) has.
MAX_POD_SETS = 8


class PodSet(Spec):
    name: Annotated[str, Field(min_length=1, max_length=63)] = "main"
    count: Annotated[int, Field(ge=1)]
    requests: Annotated[dict[ResourceName, Quantity], Field(max_length=64)] = Field(
        default_factory=dict
    )
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    # Partial admission: the fewest pods it may be admitted with (unset: all `count`).
    min_count: Annotated[int | None, Field(ge=1)] = None

    def request_milli(self) -> dict[str, int]:
        """Per-pod requests in milli-units, zero requests dropped."""
        return {k: m for k, v in self.requests.items() if (m := parse_quantity(v)) > 0}


class WorkloadSpec(Spec):
    queue_name: ObjectName
    priority: int = 0
    pod_sets: Annotated[list[PodSet], Field(min_length=1, max_length=MAX_POD_SETS)]

    @model_validator(mode="after")
    def _unique_pod_sets(self) -> WorkloadSpec:
        repeated = duplicates(p.name for p in self.pod_sets)
        if repeated:
            raise ValueError(f"podSets: duplicate pod set name(s) {', '.join(repeated)}")
        return self


class NodeAssignment(Lenient):
    node: str
    count: int


class PodSetAssignment(Lenient):
    name: str
    count: int
    # The ResourceFlavor each resource of the pod set was admitted on: its pods run on that
    # flavor's nodes, and the queue is charged on it (empty: the queue names no flavor).
    flavors: dict[str, str] = Field(default_factory=dict)
    resource_usage: dict[str, Quantity] = Field(default_factory=dict)
    nodes: list[NodeAssignment] = Field(default_factory=list)


class AdmissionRecord(Lenient):
    """Where an admitted gang's pods go, as the Workload's status records its admission."""

    cluster_queue: str
    pod_set_assignments: list[PodSetAssignment] = Field(default_factory=list)
    admitted_at: str | None = None


class RequeueState(Lenient):
    """How often the gang was evicted, how many of those were pods-ready timeouts and how many
    releases that kept failing (the requeue backoff of each doubles with each of its kind), and
    when it may be admitted again."""

    count: int = 0
    pods_ready_timeouts: int = 0
    release_failures: int = 0
    requeue_at: str | None = None


class QueuePosition(Lenient):
    """Where a pending gang stands, counted from 1 (1: the next one considered): in its
    ClusterQueue's line, in its LocalQueue's, and among the gangs of every ClusterQueue of its
    cohort tree in the order the admission cycle takes them (fair sharing included). Exact for
    the first gangs of each queue; further back it may lag (see docs/api.md)."""

    cluster_queue: int
    local_queue: int | None = None
    cohort: int | None = None


class StartForecast(Lenient):
    """When a pending gang is estimated to start (RFC 3339), if every gang ahead runs its median
    runtime and if every one runs its 90th percentile; absent: not within the forecast's reach.
    `basis`: where this gang's queue's runtimes came from (learned from its finished gangs, or
    the default while none has finished)."""

    median: str | None = None
    p90: str | None = None
    computed_at: str
    basis: Literal["declared", "learned", "default"]


class AdmissionCheckState(Lenient):
    """Where a gang admitted on quota stands with one AdmissionCheck of its ClusterQueue:
    Pending (its request is being served), Ready, Retry (the request failed; the quota went
    back and the gang waits out a backoff) or Rejected (out of retries). `request`: the
    ProvisioningRequest of the current attempt; `retryCount`: failed attempts so far;
    `attempts`: requests made so far (the next is named after attempts + 1)."""

    name: str
    state: Literal["Pending", "Ready", "Retry", "Rejected"] = "Pending"
    message: str = ""
    last_transition_time: str | None = None
    retry_count: int = 0
    attempts: int = 0
    request: str | None = None


class WorkloadStatus(Lenient):
    conditions: list[Condition] = Field(default_factory=list)
    admission: AdmissionRecord | None = None
    pending_reason: str | None = None
    requeue_state: RequeueState | None = None
    # Written on its own (WriteWorkloadPosition), never by a whole-status write; absent once
    # the gang is admitted or done.
    position: QueuePosition | None = None
    start_forecast: StartForecast | None = None
    admission_checks: list[AdmissionCheckState] = Field(default_factory=list)


class Workload(Resource):
    KIND: ClassVar[Kind] = kinds.WORKLOADS

    kind: Literal["Workload"] = "Workload"
    spec: WorkloadSpec
    status: WorkloadStatus | None = None

    def submitted(self) -> bool:
        """Whether its creator submitted it: kohort labels every Workload it makes."""
        return self.metadata.labels.get(names.MANAGED_LABEL) != names.MANAGED_VALUE
