"""Typed outcomes: why a gang waits, why it was admitted, why it was evicted.

Rule: the core decides on these values, never on text. Each outcome renders itself once, with
`describe()`, in words a user can act on; callers show that text (Events, conditions, tables)
and never parse it back.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from controller.api.quantity import format_amount
from controller.api.times import format_time


class PendingCause(enum.Enum):
    """Why a gang is not admitted, most specific cause first in each group."""

    # Decided by the core:
    QUOTA = "quota"  # its queue cannot take the gang's request now
    NO_NODE_FITS = "placement"  # quota allows it, but its pods do not fit on nodes
    STRICT_FIFO = "strict-fifo"  # a StrictFIFO queue waits for an older gang
    HELD_FOR_STARVING = "held-for-starving"  # the quota it needs is held for a starving gang
    NOT_CONSIDERED = "not-considered"  # new since the last cycle
    UNKNOWN_QUEUE = "unknown-queue"  # its ClusterQueue does not exist
    BROKEN_COHORT = "broken-cohort"  # its cohort tree has a cycle of parents
    NO_FLAVOR = "no-flavor"  # no flavor of a resource group suits a pod set
    # Decided by the controller, before the core sees the gang:
    NO_LOCAL_QUEUE = "no-local-queue"
    REQUEUED = "requeued"  # evicted; waiting out its backoff
    INCOMPLETE = "incomplete"  # a plain pod group whose pods are not all there, or not alike
    DEVICES = "devices"  # the devices its pods claim (DRA) cannot be charged
    # Decided by the core, and permanent until the queues or the nodes change:
    NOT_COVERED = "not-covered"  # asks for a resource its queue (and cohort) has no quota for
    NEVER_FITS = "never-fits"  # more than its queue can ever hold, or than the nodes can host
    # Decided by the controller: its ClusterQueue's namespaceSelector leaves its namespace out.
    NAMESPACE_NOT_SELECTED = "namespace-not-selected"


# Causes no amount of waiting cures: reported as Inadmissible.
PERMANENT = frozenset(
    {
        PendingCause.NOT_COVERED,
        PendingCause.NEVER_FITS,
        PendingCause.NAMESPACE_NOT_SELECTED,
        PendingCause.BROKEN_COHORT,
        PendingCause.NO_FLAVOR,
    }
)


class NoFit(enum.Enum):
    """How a gang's pods fail to fit on nodes."""

    UNKNOWN_RESOURCE = "unknown-resource"  # no node offers a requested resource
    NO_MATCHING_NODE = "no-matching-node"  # node selector and tolerations exclude every node
    ALL_RESERVED = "all-reserved"  # every eligible node is held for a starving gang
    TOO_SMALL = "too-small"  # even the emptiest eligible node has too little
    NOT_ENOUGH_FREE = "not-enough-free"  # enough of the scarce resource, but not of the rest
    ONLY_SOME_FIT = "only-some-fit"  # some pods fit, not all
    # Even empty, the nodes could not host it:
    NO_NODE_LARGE_ENOUGH = "no-node-large-enough"  # one pod is larger than any eligible node
    TOO_FEW_NODES = "too-few-nodes"  # all eligible nodes together hold fewer pods than it has
    # The pods' rules among themselves (affinity, spread, host ports, topology) turn nodes away:
    CONSTRAINED = "constrained"  # on the free capacity
    NEVER_CONSTRAINED = "never-constrained"  # even on empty nodes


@dataclass(frozen=True, slots=True)
class QuotaCeiling:
    """A request larger than the most of `resource` the queue can ever hold (milli-units)."""

    queue: str
    resource: str
    need: int
    most: int
    covered: tuple[str, ...]  # the resources the queue has quota for
    in_cohort: bool
    flavor: str = ""
    # Whether the queue lists `resource` under `flavor` (it may cover it under others only).
    flavor_covered: bool = True

    def describe(self) -> str:
        r = self.resource
        if r not in self.covered:
            covers = ", ".join(self.covered) or "nothing"
            lent = " and no queue of its cohort lends it" if self.in_cohort else ""
            return (
                f"ClusterQueue {self.queue} does not cover {r} (it covers {covers}){lent}; add"
                f" {r} to one of its resourceGroups, or remove the request"
            )
        of = f" of flavor {self.flavor}" if self.flavor else ""
        return (
            f"needs {format_amount(r, self.need)} {r}{of}, more than ClusterQueue {self.queue}"
            f" can ever hold ({format_amount(r, self.most)}: its nominal quota plus what it may"
            " borrow); make the gang smaller or raise the quota"
        )


@dataclass(frozen=True, slots=True)
class QuotaShortfall:
    """The first resource the queue cannot give: all amounts in milli-units."""

    resource: str
    need: int
    free: int
    nominal: int
    borrowing_limit: int | None
    used: int
    flavor: str = ""

    def describe(self) -> str:
        r = self.resource
        of = f" of flavor {self.flavor}" if self.flavor else ""
        limit = ""
        if self.borrowing_limit is not None:
            limit = f", borrowing limit {format_amount(r, self.borrowing_limit)}"
        return (
            f"needs {format_amount(r, self.need)} {r}{of}, queue can take"
            f" {format_amount(r, max(self.free, 0))} more (nominal"
            f" {format_amount(r, self.nominal)}{limit}, using {format_amount(r, self.used)})"
        )


@dataclass(frozen=True, slots=True)
class PlacementShortfall:
    """Why `pods` pods of `per_pod` `resource` (their scarcest request) do not fit."""

    kind: NoFit
    pods: int
    resource: str
    per_pod: int
    # NO_MATCHING_NODE etc.: unused; TOO_SMALL: the emptiest node's free `resource`.
    largest_free: int = 0
    # NOT_ENOUGH_FREE: the resources short on the emptiest node; UNKNOWN_RESOURCE: the ones
    # no node offers.
    resources: tuple[str, ...] = ()
    # ONLY_SOME_FIT, CONSTRAINED: how many fitted.
    placed: int = 0
    has_selector: bool = False
    # CONSTRAINED, NEVER_CONSTRAINED: the rule that turned nodes away, as a user wrote it.
    constraint: str = ""

    def describe(self) -> str:
        if self.kind is NoFit.UNKNOWN_RESOURCE:
            return f"no node offers {', '.join(self.resources)}"
        amount = format_amount(self.resource, self.per_pod)
        pods = f"{self.pods} pod{'s' if self.pods != 1 else ''} x {amount} {self.resource}"
        if self.kind is NoFit.NO_MATCHING_NODE:
            return f"needs {pods}; no node matches its node selector, node affinity and tolerations"
        if self.kind is NoFit.CONSTRAINED:
            return f"needs {pods}; {self.constraint} lets only {self.placed} fit on free nodes"
        if self.kind is NoFit.NEVER_CONSTRAINED:
            return (
                f"needs {pods}; {self.constraint} lets only {self.placed} fit even on empty nodes"
            )
        if self.kind is NoFit.ALL_RESERVED:
            return f"needs {pods}; every matching node is reserved"
        if self.kind is NoFit.TOO_SMALL:
            where = "node matching its node selector" if self.has_selector else "node"
            largest = format_amount(self.resource, self.largest_free)
            return f"needs {pods}, largest free {where} has {largest}"
        if self.kind is NoFit.NOT_ENOUGH_FREE:
            return f"needs {pods}; no node has enough free {', '.join(self.resources)}"
        if self.kind is NoFit.NO_NODE_LARGE_ENOUGH:
            largest = format_amount(self.resource, self.largest_free)
            return (
                f"needs {pods}, and the largest node that may host them has"
                f" {largest} {self.resource} allocatable"
            )
        if self.kind is NoFit.TOO_FEW_NODES:
            return f"needs {pods}; all nodes that may host them together hold only {self.placed}"
        return f"needs {pods}; only {self.placed} fit on free nodes"


@dataclass(frozen=True, slots=True)
class Pending:
    """Why a gang waits. Exactly the detail its cause needs is set."""

    cause: PendingCause
    quota: QuotaShortfall | None = None
    placement: PlacementShortfall | None = None
    # NOT_COVERED, and NEVER_FITS by quota.
    ceiling: QuotaCeiling | None = None
    # STRICT_FIFO: the gang it waits behind, and why that one waits; HELD_FOR_STARVING: the
    # starving gang the quota is held for (not named in the text: it may be another team's).
    behind: str | None = None
    blocker: Pending | None = None
    # UNKNOWN_QUEUE: the ClusterQueue; NO_LOCAL_QUEUE: the LocalQueue and its namespace;
    # HELD_FOR_STARVING: the starving gang's ClusterQueue.
    queue: str | None = None
    namespace: str | None = None
    # REQUEUED: when it goes back in the queue (seconds) and why it was evicted.
    until: float | None = None
    eviction: str | None = None
    # INCOMPLETE, DEVICES: what is missing or wrong; NO_NODE_FITS, NEVER_FITS: the nodes
    # autoscaled pools can still add, when they were counted.
    detail: str | None = None
    # Nodes the starvation guard holds free for this gang.
    held_nodes: tuple[str, ...] = ()

    def holding(self, nodes: tuple[str, ...]) -> Pending:
        return replace(self, held_nodes=nodes)

    def describe(self) -> str:
        text = self._describe_cause()
        if self.held_nodes:
            text += f"; holding nodes {', '.join(self.held_nodes)} free for it (starvation guard)"
        return text

    def _describe_cause(self) -> str:
        cause = self.cause
        if cause is PendingCause.QUOTA and self.quota is not None:
            return "Waiting for quota: " + self.quota.describe()
        if cause is PendingCause.NO_NODE_FITS and self.placement is not None:
            text = "Quota ok but no node fits: " + self.placement.describe()
            return f"{text} ({self.detail})" if self.detail else text
        if cause is PendingCause.STRICT_FIFO and self.blocker is not None:
            why = self.blocker.describe()
            return f"StrictFIFO: waiting behind {self.behind} ({why[:1].lower()}{why[1:]})"
        if cause is PendingCause.HELD_FOR_STARVING:
            return (
                "Waiting for quota: the starvation guard holds it for an older gang of"
                f" ClusterQueue {self.queue}, waiting past the starvation limit"
            )
        if cause is PendingCause.UNKNOWN_QUEUE:
            return f"Queue {self.queue!r} does not exist"
        if cause is PendingCause.BROKEN_COHORT:
            return (
                f"Inadmissible: {self.detail}; nothing in that cohort tree is admitted until"
                " a Cohort's spec.parent breaks the cycle"
            )
        if cause is PendingCause.NO_FLAVOR and self.detail:
            return (
                f"Inadmissible: no flavor of ClusterQueue {self.queue} suits a pod set, and"
                f" ResourceFlavor(s) {self.detail} it names do not exist; create them, or"
                " remove them from the queue"
            )
        if cause is PendingCause.NO_FLAVOR:
            return (
                f"Inadmissible: no flavor of ClusterQueue {self.queue} suits a pod set (the"
                " flavors' nodeLabels contradict its nodeSelector, or it does not tolerate their"
                " nodeTaints); change the pod's nodeSelector or tolerations, or the queue's"
                " flavors"
            )
        if cause is PendingCause.NO_LOCAL_QUEUE:
            return f"LocalQueue {self.queue!r} does not exist in namespace {self.namespace}"
        if cause is PendingCause.REQUEUED:
            back = format_time(self.until or 0.0)
            text = f"Requeued after eviction; back in the queue at {back}"
            return f"{text} (evicted: {self.eviction})" if self.eviction else text
        if cause in PERMANENT and self.ceiling is not None:
            return "Inadmissible: " + self.ceiling.describe()
        if cause is PendingCause.NEVER_FITS and self.placement is not None:
            text = "Inadmissible: " + self.placement.describe()
            return f"{text} ({self.detail})" if self.detail else text
        if cause is PendingCause.NAMESPACE_NOT_SELECTED:
            return (
                f"Inadmissible: ClusterQueue {self.queue} does not admit workloads from namespace"
                f" {self.namespace} (its namespaceSelector is {self.detail}); use a LocalQueue of"
                " another ClusterQueue, or label the namespace to match"
            )
        if cause is PendingCause.INCOMPLETE:
            return f"Waiting for its pods: {self.detail}"
        if cause is PendingCause.DEVICES:
            return f"Waiting: the devices its pods claim cannot be charged: {self.detail}"
        return "Not considered yet: the cycle ended before it"


NOT_CONSIDERED = Pending(PendingCause.NOT_CONSIDERED)


class EvictionCause(enum.Enum):
    PREEMPTED = "preempted"  # by a higher-priority gang of the same queue
    RECLAIMED = "reclaimed"  # its queue borrowed quota a lender takes back
    FAIR_SHARING = "fair-sharing"  # a borrowing queue whose share stays lower takes it
    PODS_READY_TIMEOUT = "pods-ready-timeout"  # decided by the controller: pods did not start


@dataclass(frozen=True, slots=True)
class Admission:
    """Admit `gang` into `queue` with its pods on `placement` (empty without a placement check)."""

    gang: str
    queue: str
    placement: tuple[PodPlacement, ...]
    # Gangs evicted in the same decision to make room.
    evicted: int = 0
    # Whether the queue uses more than its nominal quota once the gang is in.
    borrowing: bool = False
    # The flavor given to each resource of each pod set: pod set -> resource -> flavor.
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # An elastic gang's pods admitted per pod set (its elastic one may have fewer than its
    # count); empty for a gang admitted whole.
    counts: Mapping[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        why = (
            f"after evicting {self.evicted} gang(s)" if self.evicted else "quota and placement fit"
        )
        lent = "borrowing" if self.borrowing else "within nominal quota"
        where = ""
        if self.placement:
            nodes = len({p.node for p in self.placement})
            where = f"; {sum(p.count for p in self.placement)} pods on {nodes} node(s)"
        return f"admitted {why} ({lent}){self._on_flavors()}{where}"

    def _on_flavors(self) -> str:
        """`on flavor x` when all is on one flavor, else each pod set's resources and flavors."""
        named = {f for by_resource in self.flavors.values() for f in by_resource.values()}
        if not named:
            return ""
        if len(named) == 1:
            return f" on flavor {next(iter(named))}"
        sets = "; ".join(
            f"{pod_set}: " + ", ".join(f"{r} {f}" for r, f in sorted(self.flavors[pod_set].items()))
            for pod_set in sorted(self.flavors)
            if self.flavors[pod_set]
        )
        return f" on flavors ({sets})"


@dataclass(frozen=True, slots=True)
class Eviction:
    """Evict the whole admitted `gang` of `queue` for `preemptor` of `preemptor_queue`, or
    (PODS_READY_TIMEOUT) because only `running` of its `needed` pods ran `after` seconds
    after its admission."""

    gang: str
    queue: str
    preemptor: str
    cause: EvictionCause
    preemptor_queue: str = ""
    running: int = 0
    needed: int = 0
    after: float = 0.0

    def describe(self) -> str:
        cause = self.cause
        if cause is EvictionCause.PREEMPTED:
            return f"preempted by higher-priority gang {self.preemptor} of the same queue"
        if cause is EvictionCause.FAIR_SHARING:
            return (
                f"preempted for fair sharing: queue {self.preemptor_queue}'s share stays lower"
                f" with gang {self.preemptor}"
            )
        if cause is EvictionCause.PODS_READY_TIMEOUT:
            return (
                f"only {self.running} of {self.needed} pods running {self.after:.0f}s"
                " after admission"
            )
        return (
            f"reclaimed: queue {self.preemptor_queue} takes back lent quota for gang"
            f" {self.preemptor}"
        )


@dataclass(frozen=True, slots=True)
class PodPlacement:
    pod_set: str
    node: str
    count: int


@dataclass(frozen=True, slots=True)
class Shrink:
    """Shrink the admitted elastic `gang` of `queue` in place, its pod set `pod_set` down to
    `count` pods (never below its minimum), for `preemptor` of `preemptor_queue`: it stays
    admitted and runs on with the pods it keeps, the quota of the others given back. `removed`:
    the pods to go, by node (where the preemptor needs the room; the kind's own controller
    may pick other pods, so this is an estimate)."""

    gang: str
    queue: str
    pod_set: str
    count: int
    preemptor: str
    cause: EvictionCause
    preemptor_queue: str = ""
    removed: tuple[PodPlacement, ...] = ()

    def describe(self) -> str:
        why = {
            EvictionCause.PREEMPTED: f"higher-priority gang {self.preemptor} of the same queue",
            EvictionCause.FAIR_SHARING: (
                f"gang {self.preemptor} of queue {self.preemptor_queue} (fair sharing)"
            ),
        }.get(
            self.cause,
            f"gang {self.preemptor} of queue {self.preemptor_queue} reclaiming lent quota",
        )
        return f"shrunk to {self.count} pods of pod set {self.pod_set} for {why}"


@dataclass(frozen=True, slots=True)
class Decisions:
    """One cycle's outcome. `pending` holds the gangs whose reason changed in this cycle (all
    pending gangs, for an engine's first cycle)."""

    admissions: tuple[Admission, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    pending: Mapping[str, Pending] = field(default_factory=dict)
    # Starving gang -> the nodes held free for it this cycle.
    reservations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Admitted elastic gangs shrunk in place, instead of evicted, for gangs admitted after.
    shrinks: tuple[Shrink, ...] = ()
