"""What the decision core reads: queues, nodes, pending and admitted gangs (a Snapshot).

Rule: plain frozen dataclasses, quantities in integer milli-units, times in seconds as floats;
nothing here knows about Kubernetes objects or the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from controller.quota.outcomes import PodPlacement

ReclaimPolicy = Literal["Never", "LowerPriority", "Any"]
WithinQueuePolicy = Literal["Never", "LowerPriority"]
QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]

GPU = "nvidia.com/gpu"
# Counted one per pod (1000 milli-pods) by a queue that has quota of it.
PODS = "pods"

# The flavor of queues that name none (the core's shorthand `QueueSpec.quotas`): any node.
DEFAULT_FLAVOR = ""
# A flavor and a resource: what quota and usage are counted in.
FR = tuple[str, str]
WhenCanBorrow = Literal["MayStopSearch", "TryNextFlavor"]
WhenCanPreempt = Literal["TryNextFlavor", "MayStopSearch"]


@dataclass(frozen=True, slots=True)
class Quota:
    """Quota of one resource in one queue, in milli-units.

    `borrowing_limit` None: may borrow without limit; `lending_limit` None: lends all of its
    unused nominal quota.
    """

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """One flavor's quota, per resource, in a resource group."""

    flavor: str
    quotas: Mapping[str, Quota]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """Resources assigned together, and the flavors that provide them, in order of preference."""

    resources: tuple[str, ...]
    flavors: tuple[FlavorQuota, ...]


@dataclass(frozen=True, slots=True)
class Fungibility:
    """How the flavors of a resource group are tried (Kueue's flavorFungibility).

    when_can_borrow: MayStopSearch takes the first flavor where the gang fits by borrowing;
        TryNextFlavor looks on for one where it fits without borrowing.
    when_can_preempt: TryNextFlavor looks on for a flavor where the gang fits without
        evicting anyone, and evicts only if none does; MayStopSearch evicts on the first
        flavor where evicting makes it fit.
    """

    when_can_borrow: WhenCanBorrow = "MayStopSearch"
    when_can_preempt: WhenCanPreempt = "TryNextFlavor"


def flavor_quotas(groups: Iterable[ResourceGroup]) -> dict[FR, Quota]:
    return {
        (flavor.flavor, resource): quota
        for group in groups
        for flavor in group.flavors
        for resource, quota in flavor.quotas.items()
    }


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A ClusterQueue. `quotas` is the shorthand for one group of the default flavor (any
    node); `groups` names flavors and wins when set."""

    name: str
    quotas: Mapping[str, Quota]
    cohort: str | None = None
    weight: float = 1.0
    reclaim_within_cohort: ReclaimPolicy = "Never"
    within_queue: WithinQueuePolicy = "Never"
    strategy: QueueingStrategy = "BestEffortFIFO"
    # Gangs of this queue that have run for less than this many seconds are never victims.
    min_runtime: float = 0.0
    # Gangs of this queue wait this many seconds before they may evict others: capacity often
    # comes back by itself within minutes, and an eviction throws work away.
    evict_after: float = 0.0
    groups: tuple[ResourceGroup, ...] = ()
    fungibility: Fungibility = Fungibility()
    # Flavors whose pools this queue's gangs may be admitted onto before the nodes exist (a
    # ProvisioningRequest check asks for them).
    provisioned: frozenset[str] = frozenset()

    def resource_groups(self) -> tuple[ResourceGroup, ...]:
        if self.groups:
            return self.groups
        if not self.quotas:
            return ()
        resources = tuple(sorted(self.quotas))
        return (ResourceGroup(resources, (FlavorQuota(DEFAULT_FLAVOR, self.quotas),)),)


@dataclass(frozen=True, slots=True)
class CohortSpec:
    """A cohort of the tree: an optional parent, its own quota (shared by everything below
    it; borrowing and lending limits apply towards its parent), and its fair-sharing weight."""

    name: str
    parent: str | None = None
    groups: tuple[ResourceGroup, ...] = ()
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: str = ""
    # Carried onto pods a flavor releases; matching ignores it.
    seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        if taint.key == PROVISIONABLE and self.key != PROVISIONABLE:
            return False  # (nodes still to be made: only the placement check's own toleration)
        if self.effect and self.effect != taint.effect:
            return False
        if self.key == "" and self.operator == "Exists":
            return True
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class FlavorSpec:
    """A ResourceFlavor: the nodes it stands for (labels, taints), tolerations its pods get, and
    the levels of its topology (node labels, coarsest first; empty: none)."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology: tuple[str, ...] = ()


# Nodes a flavor's pool can still add carry this taint; pods of a gang whose queue has a
# provisioning check on that flavor tolerate it in the placement check (never on real nodes).
PROVISIONABLE = "kohort.dev/provisionable"
PROVISIONABLE_TAINT = Taint(PROVISIONABLE)
PROVISIONABLE_TOLERATION = Toleration(PROVISIONABLE, "Exists", "", "NoSchedule")


Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """One requirement of a required node affinity term, as Kubernetes evaluates it: `In` the
    label is set to one of `values`; `NotIn` unset or none of them; `Exists` / `DoesNotExist`
    set / unset; `Gt` / `Lt` set to an integer greater / less than the one value."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if value is None or len(self.values) != 1:
            return False
        try:
            have, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound


# A required node affinity: nodes that match every requirement of at least one term.
NodeAffinity = tuple[tuple[NodeRequirement, ...], ...]


def affinity_matches(affinity: NodeAffinity, labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` satisfies a required node affinity (none: every node)."""
    return not affinity or any(all(r.matches(labels) for r in term) for term in affinity)


@dataclass(frozen=True, slots=True)
class OwnPodsTerm:
    """A required pod (anti-)affinity term among the gang's own pods: a pod of this pod set goes
    only to a domain of `topology_key` (a node label) that holds (affinity) or holds none
    (anti-affinity) of the gang's pods of `pod_sets`, the pod sets whose pods the term's label
    selector matches."""

    topology_key: str
    pod_sets: tuple[str, ...]
    anti: bool = False


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A topologySpreadConstraint with whenUnsatisfiable DoNotSchedule, among the gang's own
    pods of `pod_sets` (those its label selector matches): a pod goes only to a domain of
    `topology_key` where, with it, the count of those pods exceeds the least count of any
    domain the pod may go to by at most `max_skew`."""

    topology_key: str
    max_skew: int
    pod_sets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HostPort:
    """A host port a pod binds: two pods binding the same port and protocol, on the same host
    address (or either on every address), never share a node."""

    port: int
    protocol: str = "TCP"
    host_ip: str = ""

    def conflicts(self, other: HostPort) -> bool:
        if (self.port, self.protocol) != (other.port, other.protocol):
            return False
        every = ("", "0.0.0.0", "::")
        return self.host_ip in every or other.host_ip in every or self.host_ip == other.host_ip


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """Where a pod set's pods go together: all of them in one domain of `level` (a node label;
    `required`, or preferred: the lowest level of the flavor's topology that can host them, or
    anywhere), and, with `slice_size`, each slice of that many pods in one domain of
    `slice_level`."""

    level: str | None = None
    required: bool = True
    slice_level: str | None = None
    slice_size: int = 0


@dataclass(frozen=True, slots=True)
class PodSet:
    """`count` identical pods, each requesting `requests` (milli-units), and where they may go:
    a node selector, tolerations, a required node affinity, (anti-)affinity and spread among
    the gang's own pods, host ports and a topology request. `unchecked` names what the pods
    ask of the scheduler that this model does not check (it is said when the gang is
    admitted)."""

    count: int
    requests: Mapping[str, int]
    name: str = "main"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    node_affinity: NodeAffinity = ()
    pod_affinity: tuple[OwnPodsTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    topology: TopologyRequest | None = None
    unchecked: tuple[str, ...] = ()
    # The ResourceClaimTemplates each pod names (DRA): the controller adds their devices to
    # `requests` (controller/workloads/devices.py); the core does not read them.
    claim_templates: tuple[str, ...] = ()
    # The part of `requests` that is devices claimed through DRA, per quota resource: charged
    # to quota, but not looked for in nodes' allocatable (a node's devices are in its
    # ResourceSlices, not its capacity).
    devices: Mapping[str, int] = field(default_factory=dict)
    # The same devices by the node resource that counts them per DeviceClass
    # (`devices.kohort.dev/<class>`): what the placement check looks for on nodes that carry
    # that resource (a class it cannot evaluate is on no node, and not looked for).
    claimed: Mapping[str, int] = field(default_factory=dict)
    # The ResourceClaims each pod names directly (shared claims): never charged, so a gang
    # with one is held back by the controller.
    shared_claims: tuple[str, ...] = ()
    # Elastic: the fewest pods of this pod set the gang may start with (None: all `count`).
    # When the whole gang does not fit, it is admitted with the most pods of this pod set,
    # down to `min_count`, that fit; one pod set of a gang at most is elastic.
    min_count: int | None = None


def node_requests(pod_set: PodSet) -> Mapping[str, int]:
    """What one pod of `pod_set` takes of a node's allocatable: its requests but the quota
    resources its claimed devices are charged as."""
    if not pod_set.devices:
        return pod_set.requests
    return {
        r: left
        for r, amount in pod_set.requests.items()
        if (left := amount - pod_set.devices.get(r, 0)) > 0
    }


@dataclass(frozen=True, slots=True)
class Gang:
    """A workload: its pod sets are admitted together or not at all (an elastic pod set with
    fewer pods, see `PodSet.min_count`). `name` is unique.
    `max_runtime`: the most it runs once admitted, if it declares it (a Job's
    activeDeadlineSeconds): the starvation guard's backfill takes it as its runtime."""

    name: str
    queue: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    created: float = 0.0
    max_runtime: float | None = None
    # False: it may not be admitted onto nodes still to be provisioned (its requests failed).
    provision: bool = True


def elastic_pod_set(gang: Gang) -> tuple[int, int] | None:
    """The index and minimum count of the gang's elastic pod set, the first that declares a
    minimum below its count (None: the gang is admitted whole or not at all)."""
    for i, pod_set in enumerate(gang.pod_sets):
        low = pod_set.min_count
        if low is not None and 0 < low < pod_set.count:
            return i, low
    return None


def with_counts(pod_sets: tuple[PodSet, ...], counts: Mapping[str, int]) -> tuple[PodSet, ...]:
    """`pod_sets` with each elastic one at the count `counts` gives it (pod set name -> pods
    admitted) when that is between its minimum and its count; the others as they are."""
    return tuple(
        replace(ps, count=n)
        if ps.min_count is not None
        and ps.min_count <= (n := counts.get(ps.name, ps.count)) < ps.count
        else ps
        for ps in pod_sets
    )


def admitted_as(gang: Gang, counts: Mapping[str, int]) -> Gang:
    """`gang` as admitted with `counts` pods of its elastic pod set (see `with_counts`)."""
    return replace(gang, pod_sets=with_counts(gang.pod_sets, counts))


@dataclass(frozen=True, slots=True)
class AdmittedGang:
    """A gang holding quota since `admitted_at`, with its pods on `placement` (may be empty),
    and the flavor given to each resource of each pod set (`flavors`: pod set -> resource ->
    flavor; empty: each resource's first flavor in its queue)."""

    gang: Gang
    admitted_at: float
    placement: tuple[PodPlacement, ...] = ()
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Node:
    """A node: `used` counts pods that are not part of any admitted gang of the snapshot, and
    `ports` the host ports they bind."""

    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    used: Mapping[str, int] = field(default_factory=dict)
    ports: tuple[HostPort, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    queues: tuple[QueueSpec, ...]
    nodes: tuple[Node, ...]
    pending: tuple[Gang, ...] = ()
    admitted: tuple[AdmittedGang, ...] = ()
    flavors: tuple[FlavorSpec, ...] = ()
    cohorts: tuple[CohortSpec, ...] = ()
