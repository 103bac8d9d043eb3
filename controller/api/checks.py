"""AdmissionCheck of kohort.dev/v1alpha1: what a gang passes between quota and its release.

Rule: a check names its kind by the one member it sets (today only `provisioningRequest`);
the controller reads the check's settings from here and nowhere else.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal

from pydantic import Field

from controller.api import kinds
from controller.api.common import Condition, Lenient, Resource, Spec
from controller.api.kinds import Kind

CHECK_CAPACITY: Final = "check-capacity.autoscaling.x-k8s.io"
BEST_EFFORT_ATOMIC: Final = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"


class RetryStrategy(Spec):
    """How often a failed or expired request is made again: after backoffBaseSeconds, doubled
    each time up to backoffMaxSeconds, at most backoffLimitCount times; then the gang waits for
    nodes that exist."""

    backoff_limit_count: Annotated[int, Field(ge=0, le=100)] = 3
    backoff_base_seconds: Annotated[int, Field(ge=1)] = 60
    backoff_max_seconds: Annotated[int, Field(ge=1)] = 1800


class ProvisioningRequestCheck(Spec):
    """Ask the cluster-autoscaler for a gang's new nodes with one ProvisioningRequest: its
    class, the parameters it passes on, and the retries of a request that fails."""

    provisioning_class_name: Literal[
        "check-capacity.autoscaling.x-k8s.io",
        "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
    ] = BEST_EFFORT_ATOMIC
    parameters: Annotated[dict[str, str], Field(max_length=32)] = Field(default_factory=dict)
    retry_strategy: RetryStrategy = Field(default_factory=RetryStrategy)


class AdmissionCheckSpec(Spec):
    provisioning_request: ProvisioningRequestCheck


class AdmissionCheckStatus(Lenient):
    conditions: list[Condition] = Field(default_factory=list)


class AdmissionCheck(Resource):
    """Cluster-scoped: a check that ClusterQueues name in `spec.admissionChecks`."""

    KIND: ClassVar[Kind] = kinds.ADMISSION_CHECKS

    kind: Literal["AdmissionCheck"] = "AdmissionCheck"
    spec: AdmissionCheckSpec
    status: AdmissionCheckStatus | None = None
