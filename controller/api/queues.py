"""ClusterQueue, Cohort, LocalQueue and ResourceFlavor of kohort.dev/v1alpha1.

Rule: a model that validates is a queue the decision core can use as is; every rejection names
the offending field path so the webhook can show it to the user unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.config import JsonDict
from pydantic.json_schema import SkipJsonSchema

from controller import defaults
from controller.api import kinds
from controller.api.common import (
    Condition,
    LabelKey,
    LabelSelector,
    Lenient,
    ObjectName,
    Quantity,
    Resource,
    ResourceName,
    Spec,
    Taint,
    Toleration,
    duplicates,
)
from controller.api.kinds import Kind
from controller.api.quantity import exact_quantity

# lendingLimit <= nominalQuota, for the apiserver (CEL's quantity library); a value that is not
# a quantity at all is left to the schema's pattern, which reports it already.
_LENDING_RULE: JsonDict = {
    "rule": (
        "!has(self.lendingLimit) || self.lendingLimit == null"
        " || !isQuantity(string(self.lendingLimit)) || !isQuantity(string(self.nominalQuota))"
        " || quantity(string(self.lendingLimit)).compareTo(quantity(string(self.nominalQuota)))"
        " <= 0"
    ),
    "messageExpression": (
        "'lendingLimit (' + string(self.lendingLimit) + ') of resource ' + self.name"
        " + ' must not exceed its nominalQuota (' + string(self.nominalQuota) + ')'"
    ),
    "fieldPath": ".lendingLimit",
}


class ResourceQuota(Spec):
    """Quota for one resource of one flavor.

    `borrowingLimit`: how much more than nominal the queue may take from its cohort (unset: no
    limit). `lendingLimit`: how much of its unused nominal quota it lends (unset: all of it).
    """

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_LENDING_RULE]})

    name: ResourceName
    nominal_quota: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None

    @model_validator(mode="after")
    def _lending_within_nominal(self) -> ResourceQuota:
        if self.lending_limit is not None and exact_quantity(self.lending_limit) > exact_quantity(
            self.nominal_quota
        ):
            raise ValueError(
                f"lendingLimit ({self.lending_limit}) of resource {self.name!r} must not exceed"
                f" its nominalQuota ({self.nominal_quota})"
            )
        return self


class FlavorQuotas(Spec):
    name: ObjectName
    resources: Annotated[list[ResourceQuota], Field(min_length=1, max_length=64)]

    @model_validator(mode="after")
    def _unique_resources(self) -> FlavorQuotas:
        repeated = duplicates(r.name for r in self.resources)
        if repeated:
            raise ValueError(
                f"resources: duplicate resource name(s) {', '.join(repeated)} in flavor"
                f" {self.name!r}"
            )
        return self


class ResourceGroup(Spec):
    """Resources that are assigned together, and the flavors that can provide them."""

    covered_resources: Annotated[list[ResourceName], Field(min_length=1, max_length=64)]
    flavors: Annotated[list[FlavorQuotas], Field(min_length=1, max_length=16)]

    @model_validator(mode="after")
    def _consistent(self) -> ResourceGroup:
        repeated = duplicates(self.covered_resources)
        if repeated:
            raise ValueError(f"coveredResources: duplicate resource name(s) {', '.join(repeated)}")
        covered = set(self.covered_resources)
        for i, flavor in enumerate(self.flavors):
            extra = sorted({r.name for r in flavor.resources} - covered)
            if extra:
                raise ValueError(
                    f"flavors[{i}].resources: {', '.join(extra)} not listed in coveredResources"
                )
        return self


def _unique_flavors_and_resources(groups: Sequence[ResourceGroup]) -> None:
    """A flavor is listed once, and a resource is covered by one group only."""
    flavor_names = [flavor.name for group in groups for flavor in group.flavors]
    repeated = duplicates(flavor_names)
    if repeated:
        raise ValueError(f"resourceGroups: flavor(s) {', '.join(repeated)} listed more than once")
    repeated = duplicates(r for group in groups for r in group.covered_resources)
    if repeated:
        raise ValueError(
            f"resourceGroups: resource(s) {', '.join(repeated)} covered by more than one group"
        )


class FairSharing(Spec):
    weight: Quantity = "1"


class FlavorFungibility(Spec):
    """How the flavors of a resource group are tried for a gang, in their listed order.

    `whenCanBorrow`: MayStopSearch takes the first flavor where the gang fits, borrowing if it
    must; TryNextFlavor looks on for a flavor where it fits without borrowing first.
    `whenCanPreempt`: TryNextFlavor looks on for a flavor where the gang fits without evicting
    anyone and evicts only when none does; MayStopSearch evicts on the first flavor where
    evicting makes it fit.
    """

    when_can_borrow: Literal["MayStopSearch", "TryNextFlavor"] = "MayStopSearch"
    when_can_preempt: Literal["TryNextFlavor", "MayStopSearch"] = "TryNextFlavor"


class Preemption(Spec):
    """When this queue's pending gangs may evict admitted ones.

    `reclaimWithinCohort`: take back lent quota from borrowing queues of the cohort (Never,
    only from lower-priority gangs, or from any). `withinClusterQueue`: evict lower-priority
    gangs of this queue. `minimumRuntimeSeconds`: gangs of this queue that have run for less
    than this are never chosen as victims. `evictAfterSeconds`: a gang of this queue waits this
    long before it may evict others (capacity often comes back by itself meanwhile). The
    defaults are the measured ones of controller/defaults.py.
    """

    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    within_cluster_queue: Literal["Never", "LowerPriority"] = "Never"
    minimum_runtime_seconds: Annotated[int, Field(ge=0)] = defaults.MINIMUM_RUNTIME_SECONDS
    evict_after_seconds: Annotated[int, Field(ge=0)] = defaults.EVICT_AFTER_SECONDS


class AdmissionCheckReference(Spec):
    """An AdmissionCheck the queue's gangs pass before they are released: only gangs admitted
    on one of `onFlavors` (empty: on any flavor)."""

    name: ObjectName
    on_flavors: Annotated[list[ObjectName], Field(max_length=16)] = Field(default_factory=list)


class ClusterQueueSpec(Spec):
    cohort: ObjectName | None = None
    resource_groups: Annotated[list[ResourceGroup], Field(max_length=16)] = Field(
        default_factory=list
    )
    fair_sharing: FairSharing = Field(default_factory=FairSharing)
    flavor_fungibility: FlavorFungibility = Field(default_factory=FlavorFungibility)
    preemption: Preemption = Field(default_factory=Preemption)
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO"] = "BestEffortFIFO"
    # Unset: every namespace. (Kueue differs: there an unset selector matches no namespace.)
    namespace_selector: LabelSelector | None = Field(
        default=None,
        description=(
            "The namespaces whose workloads may use this queue: a label selector on namespaces"
            " (matchLabels, matchExpressions). Unset: every namespace; {}: every namespace too."
        ),
    )
    admission_checks: Annotated[list[AdmissionCheckReference], Field(max_length=8)] = Field(
        default_factory=list
    )

    @model_validator(mode="after")
    def _cross_field_rules(self) -> ClusterQueueSpec:
        for g, group in enumerate(self.resource_groups):
            for f, flavor in enumerate(group.flavors):
                for r, quota in enumerate(flavor.resources):
                    if quota.borrowing_limit is not None and self.cohort is None:
                        raise ValueError(
                            f"resourceGroups[{g}].flavors[{f}].resources[{r}].borrowingLimit is"
                            " set but the queue has no cohort to borrow from; set spec.cohort or"
                            " remove borrowingLimit"
                        )
        _unique_flavors_and_resources(self.resource_groups)
        repeated = duplicates(check.name for check in self.admission_checks)
        if repeated:
            raise ValueError(f"admissionChecks: {', '.join(repeated)} listed more than once")
        return self

    def checks_on(self, flavor: str) -> list[str]:
        """The AdmissionChecks a gang admitted on `flavor` passes, in the listed order."""
        return [c.name for c in self.admission_checks if not c.on_flavors or flavor in c.on_flavors]

    def selects_namespace(self, labels: Mapping[str, str]) -> bool:
        """Whether workloads of a namespace with `labels` may use this queue."""
        return self.namespace_selector is None or self.namespace_selector.matches(labels)


class ResourceUsage(Lenient):
    name: str
    total: Quantity = "0"
    borrowed: Quantity = "0"


class FlavorUsage(Lenient):
    name: str
    resources: list[ResourceUsage] = Field(default_factory=list)


class PendingWorkload(Lenient):
    """One of the first pending Workloads of a queue, with its positions (from 1)."""

    namespace: str
    name: str
    local_queue: str | None = None
    priority: int = 0
    position_in_cluster_queue: int
    position_in_local_queue: int | None = None
    position_in_cohort: int | None = None


class RecentUsage(Lenient):
    """What fair order remembers of a ClusterQueue's borrowing (the controller's
    --usage-half-life): `weightedShare`, its recent share as fair order adds it to its share
    now (per mille of its cohort's pool, over its weight, rounded up); `share`, the same before
    the weight and unrounded, as of `lastUpdate`: what a restarted controller starts from."""

    weighted_share: int = 0
    share: float = 0.0
    last_update: str | None = None


class ClusterQueueStatus(Lenient):
    conditions: list[Condition] = Field(default_factory=list)
    flavors_usage: list[FlavorUsage] = Field(default_factory=list)
    pending_workloads: int = 0
    admitted_workloads: int = 0
    weighted_share: int | None = None
    # Set while fair order weighs recent usage (a usage half-life above 0).
    recent_usage: RecentUsage | None = None
    # The first pending Workloads in the order they will be considered (a controller setting
    # says how many).
    pending_head: list[PendingWorkload] = Field(default_factory=list)


class ClusterQueue(Resource):
    KIND: ClassVar[Kind] = kinds.CLUSTER_QUEUES

    kind: Literal["ClusterQueue"] = "ClusterQueue"
    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)
    status: ClusterQueueStatus | None = None


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class CohortSpec(Spec):
    """A node of the cohort tree: ClusterQueues (`spec.cohort`) and Cohorts (`spec.parent`)
    below it share its quota and what they lend to it.

    `parent`: the Cohort above (unset: a root). `resourceGroups`: quota the Cohort itself adds
    to its tree, shaped as a ClusterQueue's; `borrowingLimit` caps what it takes from its parent
    and `lendingLimit` what of its subtree's quota it gives to the parent, so both need a
    parent. `fairSharing.weight`: its weight among its parent's members.
    """

    # Not nullable in the CRD (pydantic's None stays out of the schema): the API server prunes
    # an explicit null, so the CRD's rule against a Cohort naming itself (crds.py) only ever
    # sees a name.
    parent: Annotated[ObjectName | SkipJsonSchema[None], Field(json_schema_extra=_no_default)] = (
        None
    )
    resource_groups: Annotated[list[ResourceGroup], Field(max_length=16)] = Field(
        default_factory=list
    )
    fair_sharing: FairSharing = Field(default_factory=FairSharing)

    @model_validator(mode="after")
    def _cross_field_rules(self) -> CohortSpec:
        for g, group in enumerate(self.resource_groups):
            for f, flavor in enumerate(group.flavors):
                for r, quota in enumerate(flavor.resources):
                    for name, value, towards in (
                        ("borrowingLimit", quota.borrowing_limit, "borrow from"),
                        ("lendingLimit", quota.lending_limit, "lend to"),
                    ):
                        if value is not None and self.parent is None:
                            raise ValueError(
                                f"resourceGroups[{g}].flavors[{f}].resources[{r}].{name} is set"
                                f" but the cohort has no parent to {towards}; set spec.parent or"
                                f" remove {name}"
                            )
        _unique_flavors_and_resources(self.resource_groups)
        return self


class CohortResourceUsage(Lenient):
    """One resource of one flavor in a cohort's tree: what its ClusterQueues use (`total`), the
    quota of its subtree (its own nominal quota plus what its members lend to it) and what it
    takes from its parent above that quota (`borrowed`)."""

    name: str
    total: Quantity = "0"
    borrowed: Quantity = "0"
    subtree_quota: Quantity = "0"


class CohortFlavorUsage(Lenient):
    name: str
    resources: list[CohortResourceUsage] = Field(default_factory=list)


class CohortStatus(Lenient):
    conditions: list[Condition] = Field(default_factory=list)
    flavors_usage: list[CohortFlavorUsage] = Field(default_factory=list)
    weighted_share: int | None = None


class Cohort(Resource):
    KIND: ClassVar[Kind] = kinds.COHORTS

    kind: Literal["Cohort"] = "Cohort"
    spec: CohortSpec = Field(default_factory=CohortSpec)
    status: CohortStatus | None = None

    @model_validator(mode="after")
    def _not_its_own_parent(self) -> Cohort:
        # A longer cycle of parents is reported in the Cohorts' status: one object alone does
        # not show it.
        if self.spec.parent is not None and self.spec.parent == self.metadata.name:
            raise ValueError(
                f"spec.parent: a Cohort cannot be its own parent (spec.parent names the Cohort"
                f" itself, {self.metadata.name!r}); name another Cohort or remove spec.parent"
            )
        return self


class LocalQueueSpec(Spec):
    cluster_queue: ObjectName


class LocalQueueResourceUsage(Lenient):
    name: str
    total: Quantity = "0"


class LocalQueueFlavorUsage(Lenient):
    name: str
    resources: list[LocalQueueResourceUsage] = Field(default_factory=list)


class LocalQueueStatus(Lenient):
    """What a team sees of its queue: how many of its gangs wait and run, what the running ones
    hold per flavor and resource, and why the first gang in its line waits."""

    conditions: list[Condition] = Field(default_factory=list)
    pending_workloads: int = 0
    admitted_workloads: int = 0
    flavors_usage: list[LocalQueueFlavorUsage] = Field(default_factory=list)
    pending_reason: str | None = None
    # Its first pending Workloads in the order they will be considered.
    pending_head: list[PendingWorkload] = Field(default_factory=list)


class LocalQueue(Resource):
    KIND: ClassVar[Kind] = kinds.LOCAL_QUEUES

    kind: Literal["LocalQueue"] = "LocalQueue"
    spec: LocalQueueSpec
    status: LocalQueueStatus | None = None


class NodePoolAutoscaling(Spec):
    """The flavor's nodes come from a pool an autoscaler grows on request: up to `maxNodes`
    nodes (those it has now included), each offering `nodeAllocatable`. Gangs of queues with
    a ProvisioningRequest check on the flavor may be admitted onto nodes still to be made."""

    max_nodes: Annotated[int, Field(ge=0, le=10000)]
    node_allocatable: Annotated[dict[ResourceName, Quantity], Field(min_length=1, max_length=32)]


class ResourceFlavorSpec(Spec):
    """Which nodes a flavor stands for: label selector, taints, tolerations to add to pods, and
    the Topology its nodes are arranged in (gangs may then ask to be placed in one domain);
    `autoscaling`: the pool its nodes come from grows on request."""

    node_labels: Annotated[dict[str, str], Field(max_length=8)] = Field(default_factory=dict)
    node_taints: list[Taint] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)
    topology_name: ObjectName | None = None
    autoscaling: NodePoolAutoscaling | None = None


HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
MAX_TOPOLOGY_LEVELS: Final = 8
# What the model checks of the levels, for the apiserver too.
_LEVEL_RULES: list[JsonDict] = [
    {
        "rule": "self.all(l, self.exists_one(m, m.nodeLabel == l.nodeLabel))",
        "message": "each level needs its own node label",
    },
    {
        "rule": (
            f"self.all(l, l.nodeLabel != '{HOSTNAME_LABEL}'"
            f" || self[size(self) - 1].nodeLabel == '{HOSTNAME_LABEL}')"
        ),
        "message": f"{HOSTNAME_LABEL} can only be the last level (a host is the finest domain)",
    },
]


class TopologyLevel(Spec):
    """One level of a topology: the node label whose value names a node's domain there."""

    node_label: LabelKey


class TopologySpec(Spec):
    """How nodes are arranged, coarsest level first (a block, a rack, a host): each level a node
    label. The hostname label may only be the last level."""

    levels: Annotated[
        list[TopologyLevel],
        Field(
            min_length=1,
            max_length=MAX_TOPOLOGY_LEVELS,
            json_schema_extra={"x-kubernetes-validations": _LEVEL_RULES},
        ),
    ]

    @field_validator("levels")
    @classmethod
    def _levels_are_distinct_and_hostname_last(
        cls, levels: list[TopologyLevel]
    ) -> list[TopologyLevel]:
        labels = [level.node_label for level in levels]
        twice = duplicates(labels)
        if twice:
            raise ValueError(f"node label {twice[0]!r} is listed twice; each level needs its own")
        if HOSTNAME_LABEL in labels[:-1]:
            raise ValueError(
                f"{HOSTNAME_LABEL} can only be the last level (a host is the finest domain)"
            )
        return levels


class Topology(Resource):
    """Cluster-scoped: the levels of a ResourceFlavor's nodes (`spec.topologyName`)."""

    KIND: ClassVar[Kind] = kinds.TOPOLOGIES

    kind: Literal["Topology"] = "Topology"
    spec: TopologySpec

    def levels(self) -> tuple[str, ...]:
        return tuple(level.node_label for level in self.spec.levels)


class ResourceFlavor(Resource):
    KIND: ClassVar[Kind] = kinds.RESOURCE_FLAVORS

    kind: Literal["ResourceFlavor"] = "ResourceFlavor"
    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec)
