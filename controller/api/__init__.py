"""The kohort.dev/v1alpha1 API: pydantic models of the CRDs, quantities and shared names.

Rule: this package imports nothing else of kohort; everything else may import it.
"""

from controller.api.common import Condition, Taint, Toleration
from controller.api.quantity import QuantityError, format_quantity, parse_quantity
from controller.api.queues import (
    ClusterQueue,
    ClusterQueueSpec,
    Cohort,
    CohortSpec,
    FairSharing,
    FlavorFungibility,
    FlavorQuotas,
    LocalQueue,
    LocalQueueSpec,
    Preemption,
    ResourceFlavor,
    ResourceFlavorSpec,
    ResourceGroup,
    ResourceQuota,
)
from controller.api.workload import PodSet, Workload, WorkloadSpec, WorkloadStatus

__all__ = [
    "ClusterQueue",
    "ClusterQueueSpec",
    "Cohort",
    "CohortSpec",
    "Condition",
    "FairSharing",
    "FlavorFungibility",
    "FlavorQuotas",
    "LocalQueue",
    "LocalQueueSpec",
    "PodSet",
    "Preemption",
    "QuantityError",
    "ResourceFlavor",
    "ResourceFlavorSpec",
    "ResourceGroup",
    "ResourceQuota",
    "Taint",
    "Toleration",
    "Workload",
    "WorkloadSpec",
    "WorkloadStatus",
    "format_quantity",
    "parse_quantity",
]
