"""The admission cycle over incremental state: queues, pending gangs, admitted gangs, nodes.

Rule: the Engine is the only place that changes state, and only through named transitions
(`_admit`, `_evict`, `_block`); `cycle(now)` reads like the algorithm:

1. if capacity came back since the last cycle (or a timer is due): forget what was blocked,
   and let one starving gang hold the quota it needs, and the nodes once quota allows it (or,
   under `backfill`, reserve the nodes that free up first, which shorter gangs may use);
2. order the queues by the weighted share they would have after admitting their head;
3. take the best queue's head: admit it if quota and placement fit, else try preemption;
4. otherwise mark its equivalence class blocked with the reason, and go on;
5. report. Reservations, the quota hold and blocked classes stand until capacity comes back,
   so a cycle after arrivals only looks at what is new.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from controller import defaults
from controller.quota import flavor_assignment, preemption
from controller.quota.constrained import victim_domains
from controller.quota.domains import DomainChoice
from controller.quota.flavor_assignment import FlavorOption, Shapes
from controller.quota.outcomes import (
    NOT_CONSIDERED,
    Admission,
    Decisions,
    Eviction,
    EvictionCause,
    Pending,
    PendingCause,
    PodPlacement,
    QuotaShortfall,
    Shrink,
)
from controller.quota.placement import NodeIndex, Packing, PlaceFailure, PodShape
from controller.quota.preemption import Candidate, Shortfall
from controller.quota.quota import (
    QuotaNode,
    add_usage,
    available,
    borrow_height,
    borrowing,
    borrowing_any,
    build_tree,
    dominant,
    fair_path,
    path_shares,
    quota_ceiling,
    quota_shortfall,
    share,
    tree_nodes,
    within_nominal,
)
from controller.quota.recent import Recent, advanced, weighted
from controller.quota.runtimes import Runtime, RuntimeHistory, size_class
from controller.quota.snapshot import (
    FR,
    AdmittedGang,
    CohortSpec,
    FlavorSpec,
    Gang,
    HostPort,
    Node,
    QueueSpec,
    admitted_as,
    elastic_pod_set,
)
from controller.quota.state import GangInfo, QueueRuntime, RunningGang, gang_info

# (oldest first?, borrows?, shares from the top of the tree down, priority, age, names)
QueueKey = tuple[int, int, tuple[float, ...], int, float, str, str]

# Seconds before a gang whose victim search found nothing searches again.
PREEMPTION_RETRY = 60.0
# A gang admitted less than this many seconds ago is a victim only when no other will do (its
# pods are still starting: evicting it throws away the admission and its writes for nothing).
FRESH_FOR = 10.0
# A gang evicted less than this many seconds ago, and admitted again since, is a victim only
# when no other will do: the same gang evicted over and over is churn.
EVICTED_RECENTLY_FOR = 600.0
# Room that gangs ending gave back in a cohort tree is "coming back" for this many seconds: a
# gang that needs it waits for it (and it is kept for that gang) rather than evict.
SETTLE_FOR = 1.0
# At most this many seconds of such waiting per gang: room that keeps coming back but never
# reaches it (taken by queues within their nominal quota) no longer holds it back from evicting.
SETTLE_AT_MOST = 30.0

# Backfill: a running gang is taken to end at its median runtime (knowing how long it has run),
# and a gang may use a reservation's nodes only if it ends before the reservation starts even
# at this quantile of its runtime (a declared runtime is both).
RUNNING_QUANTILE = 0.5
BACKFILL_QUANTILE = 0.9

# `consideration_steps` sorts and keys this many queues' lines between two of its steps (about
# a millisecond: the whole set-up took some 20 ms at 1,000 queues and 8,000 pending gangs).
CONSIDER_SLICE = 50

# Where room comes back: a cohort tree by its root cohort's name, or a queue of no cohort.
RootKey = tuple[str, str]
# A node of the cohort tree by kind and name: ("queue", ClusterQueue) or ("cohort", Cohort).
NodeKey = tuple[str, str]

VictimRule = Literal["placement-aware", "naive", "classic"]


@dataclass(frozen=True, slots=True)
class Config:
    """Strategies, chosen once per engine.

    placement: check that the gang fits on concrete nodes before admitting it.
    packing: the rule that picks a node for each pod (see placement.py).
    topology: how a pod set with a topology request is put into domains: kohort's best fit
        (constrained.py) or Kueue's TAS algorithm (kueue_tas.py), a baseline (domains.py).
    victims: the preemption strategy (see preemption.py).
    starvation_after: seconds after which a waiting gang holds quota and nodes (one gang at a
        time: of the lowest-share queue, the highest priority, the oldest): if it fits its
        queue's nominal quota, newer gangs of its queue, and gangs of its cohort that would
        borrow, may not take the quota it needs; once quota allows it, the emptiest nodes it
        needs are hidden from everyone (None: never). How long a gang waits
        before it may evict others is its queue's (`QueueSpec.evict_after`).
    drain: while a gang of a queue under nominal quota waits for its queue's `evict_after`,
        hold nodes for it so that borrowers' gangs finishing there free them for it (reclaim
        by draining).
    waste_budget: the work a placement-aware reclaim may throw away, as a multiple of what the
        preemptor has lost by waiting (its dominant share x seconds waited); None: no limit.
        So an eviction never costs more than the wait it ends, and a long wait buys more.
    oldest_first_after: queue heads that have waited longer than this go before all others,
        oldest first, whatever their queue's share (fair share orders the rest); this bounds
        how long a heavy queue's gangs can be overtaken. None: fair share alone.
    fair_sharing_preemption: a gang whose queue would borrow may evict gangs of borrowing queues
        of its cohort (if its queue's reclaimWithinCohort allows) when its queue's share after
        admission stays at most the victim queue's share after the eviction (Kueue's S2-a).
    usage_half_life: seconds; fair order adds to each queue's and cohort's share its recent
        share, what it borrowed lately averaged with this half-life (recent.py), so a team that
        borrowed much lately waits behind one that did not, at equal share now. 0: the share
        now alone.
    backfill: the starvation guard reserves future capacity instead of holding nodes idle
        (Slurm-style backfill for gangs): the starving gang gets the nodes it would get at the
        earliest instant running gangs' estimated ends make room for it, and a gang may use
        those nodes (or the quota held for it) only if it will be done before then. Runtimes
        are the gangs' declared ones (`Gang.max_runtime`) or learned from their queue's
        finished gangs (`finish(at=...)`); without an estimate for the running gangs that
        matter, the guard holds nodes as it does without backfill, and a gang of no estimate
        never uses a reservation's nodes.
    """

    placement: bool = True
    packing: Packing = "best-fit"
    topology: DomainChoice = "best-fit"
    victims: VictimRule = "placement-aware"
    starvation_after: float | None = None
    drain: bool = False
    waste_budget: float | None = None
    oldest_first_after: float | None = None
    fair_sharing_preemption: bool = False
    usage_half_life: float = 0.0
    backfill: bool = False

    @classmethod
    def measured(cls) -> Config:
        """What the controller and the simulator's `kohort` policy run by default (the field
        defaults above are the bare core's, for tests and baselines)."""
        return cls(
            starvation_after=float(defaults.STARVATION_AFTER_SECONDS) or None,
            waste_budget=defaults.WASTE_BUDGET,
            usage_half_life=float(defaults.USAGE_HALF_LIFE_SECONDS),
            backfill=defaults.STARVATION_BACKFILL,
        )


@dataclass(frozen=True, slots=True)
class _QuotaHold:
    """The quota the starvation guard holds for `info`, the gang it chose among those waiting
    past the limit."""

    queue: QueueRuntime
    info: GangInfo
    charge: Mapping[FR, int]


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes the starvation guard reserves for pending gang `gang` from `start` on (seconds,
    the engine's clock: when running gangs' estimated ends make room for it there); until
    then only gangs that will be done by `start` may use them."""

    gang: str
    start: float
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Backfill:
    info: GangInfo
    start: float
    nodes: tuple[int, ...]


@dataclass(slots=True)
class _Log:
    admissions: list[Admission] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    shrinks: list[Shrink] = field(default_factory=list)
    reservations: dict[str, tuple[str, ...]] = field(default_factory=dict)


Plan = list[tuple[int, int, int]]  # (pod set index, node index, pod count)


# The classes of a gang's flavor options (`Engine.classify`), each with what acting on it needs.


@dataclass(frozen=True, slots=True)
class OptionFits:
    """Fits now, quota and nodes, and its queue takes it as it is. Its pods are placed on
    `plan`, whose capacity is taken."""

    option: FlavorOption
    plan: Plan


@dataclass(frozen=True, slots=True)
class OptionBorrows:
    """Fits now by borrowing, where its queue looks on for an option within nominal quota
    (whenCanBorrow TryNextFlavor); `height`: how far up the cohort tree the borrowing reaches
    (the lower, the more local)."""

    option: FlavorOption
    height: int


@dataclass(frozen=True, slots=True)
class OptionHeld:
    """Would take quota the starvation guard holds for another gang (HELD_FOR_STARVING)."""

    reason: Pending


@dataclass(frozen=True, slots=True)
class OptionNeverFits:
    """No wait and no eviction lets it in: NEVER_FITS (more than its queue can ever get, or
    pods no empty node could host) or NOT_COVERED (a resource no flavor offers)."""

    reason: Pending


@dataclass(frozen=True, slots=True)
class OptionPreemptable:
    """Could fit once capacity is freed, by evicting or by waiting; `reason`: why it waits now,
    QUOTA (its queue is short of quota) or NO_NODE_FITS (quota allows it, nodes do not)."""

    option: FlavorOption
    reason: Pending


OptionClass = OptionFits | OptionBorrows | OptionHeld | OptionNeverFits | OptionPreemptable


@dataclass(slots=True)
class _Search:
    """What a search through a gang's option classes found besides an option to admit it on,
    and whether the gang may evict now: judged by `judge_evict` once, when first needed (the
    judgement may set a recheck, so it is not made when no option needs it)."""

    judge_evict: Callable[[], bool]
    # The most local borrowing option, the first among equally local ones.
    borrowing: OptionBorrows | None = None
    preemptable: list[OptionPreemptable] = field(default_factory=list)
    held: Pending | None = None  # the reason of the first option held back
    permanent: Pending | None = None  # the reason of the first option that never fits
    evict: bool | None = None

    def may_evict(self) -> bool:
        if self.evict is None:
            self.evict = self.judge_evict()
        return self.evict

    def note(self, found: OptionBorrows | OptionHeld | OptionNeverFits | OptionPreemptable) -> None:
        if isinstance(found, OptionBorrows):
            if self.borrowing is None or found.height < self.borrowing.height:
                self.borrowing = found
        elif isinstance(found, OptionPreemptable):
            self.preemptable.append(found)
        elif isinstance(found, OptionHeld):
            self.held = self.held or found.reason
        else:
            self.permanent = self.permanent or found.reason

    def waiting_reason(self) -> Pending:
        """Why the gang waits: the first preemptable option's reason; without one, being held
        back comes before never fitting."""
        if self.preemptable:
            return self.preemptable[0].reason
        reason = self.held or self.permanent
        assert reason is not None
        return reason


class Engine:
    """The decision state of one cluster, kept across cycles and changed only by its methods.

    The controller and the simulator both keep one Engine alive and feed it what changed:
    gangs arriving and leaving, admitted gangs finishing or moving, nodes and queues changing.
    What it remembers between cycles (classes that did not fit, nodes held for a starving
    gang, when a fruitless victim search may run again) is part of the policy they measure.
    """

    def __init__(
        self,
        queues: Iterable[QueueSpec],
        nodes: Iterable[Node],
        config: Config | None = None,
        *,
        flavors: Iterable[FlavorSpec] = (),
        cohorts: Iterable[CohortSpec] = (),
        require_flavors: bool = False,
    ) -> None:
        """`require_flavors`: a flavor a queue names is taken only once its FlavorSpec is known
        (the controller: a ClusterQueue may name a ResourceFlavor that does not exist)."""
        self.config = config or Config()
        self._require_flavors = require_flavors
        self._flavors = {f.name: f for f in flavors}
        self._cohorts = tuple(cohorts)
        self._strategy = preemption.STRATEGIES[self.config.victims]
        self._floor_guard = self.config.victims == "placement-aware"
        # kohort's reclaim also waits for room coming back by itself rather than evict (see
        # `_settles`); the baselines' victim rules evict as they always did.
        self._settle = self.config.victims == "placement-aware"
        self.pending: dict[str, tuple[QueueRuntime | None, GangInfo]] = {}
        self.running: dict[str, tuple[QueueRuntime | None, RunningGang]] = {}
        self._nodes = {n.name: n for n in nodes}
        self.index = NodeIndex(self._nodes.values(), topology=self.config.topology)
        self.queues: dict[str, QueueRuntime] = {}
        self._members: dict[int, list[QueueRuntime]] = {}
        self._build_queues(queues)
        # Gang -> the nodes held for it: `_holding` in this round of cycles, `_held` in the
        # last one. A gang keeps its nodes from round to round, so they drain.
        self._held: dict[str, tuple[str, ...]] = {}
        self._holding: dict[str, tuple[str, ...]] = {}
        self._last_reservations: dict[str, tuple[str, ...]] = {}
        # Whether capacity was given back since the last cycle; if not, what did not fit then
        # still does not fit, and the cycle only looks at classes it has not judged yet.
        self._freed = True
        # When time alone may change an outcome (a gang old enough to evict, a victim old
        # enough to be taken, a gang starving): the first cycle from then judges everything.
        self._recheck_at = math.inf
        # Gang -> when a victim search for it last found nothing; searched again only after
        # PREEMPTION_RETRY seconds (a full search is the most expensive step of a cycle).
        self._no_victims_at: dict[str, float] = {}
        self._now = 0.0
        # Gangs admitted in the running cycle: never victims in the same cycle.
        self._admitted_now: set[str] = set()
        # Gangs shrunk in the running cycle: not shrunk or evicted again in it (one shrink of a
        # gang a cycle, which the controller carries out as one write).
        self._shrunk_now: set[str] = set()
        # Pending gangs whose reason has not been reported since they arrived.
        self._fresh: set[str] = set()
        # Set by the starvation guard at a full recheck, kept until the next one.
        self._hold: _QuotaHold | None = None
        self._backfill: _Backfill | None = None
        # Gang -> the earliest start planned for it and the nodes it was last given (forgotten
        # when it is admitted or leaves).
        self._planned: dict[str, tuple[float, tuple[str, ...]]] = {}
        # The runtimes of each queue's finished gangs (backfill's estimates).
        self.runtimes = RuntimeHistory()
        # Flavors and resources that gangs ending since the last cycle gave back, by cohort
        # tree (`_ended`), and when each was last given back (`_ended_at`, the time of the
        # cycle that saw it): a gang that needs them waits for that room rather than evict.
        self._ended: dict[RootKey, set[FR]] = {}
        self._ended_at: dict[RootKey, dict[FR, float]] = {}
        # Quota kept, for the rest of the running cycle, for gangs waiting for that room, and
        # when each such gang first waited for it (forgotten when it is admitted or leaves).
        self._keeping: list[_QuotaHold] = []
        self._settling_since: dict[str, float] = {}
        # Admitted gangs whose work is done (all their pods finished) though their record does
        # not say so yet: never victims, and the room they hold comes back soon.
        self._done: set[str] = set()
        # Gang -> when this engine last evicted it (forgotten when it ends or leaves).
        self._evicted_at: dict[str, float] = {}
        # Queues' and cohorts' recent shares (usage_half_life), as of the last cycle, and the
        # share each held at the end of it (what it is taken to hold until the next one).
        self._recent_shares: dict[NodeKey, Recent] = {}
        self._recent_samples: dict[NodeKey, float] = {}

    # -- the cluster's shape ------------------------------------------------------------------

    def _build_queues(self, specs: Iterable[QueueSpec]) -> None:
        before = getattr(self, "queues", {})
        tree = build_tree(specs, self._cohorts)
        self.queues = {name: QueueRuntime(state) for name, state in tree.items()}
        for name, queue in self.queues.items():
            if name in before:  # the reasons reported so far stay reported
                queue.reported = before[name].reported
        self._members = {}
        # The recent shares fair order adds (weighted), and the clock they are for.
        self._recent_order: tuple[float, dict[NodeKey, float]] = (math.nan, {})
        for runtime in self.queues.values():
            if runtime.state.parent is not None:
                self._members.setdefault(id(runtime.state.root()), []).append(runtime)
        # Every queue and cohort of the tree by its key (recent usage walks them each cycle).
        self._tree_nodes: list[tuple[NodeKey, QuotaNode]] = [
            *((("queue", q.name), q.state) for q in self.queues.values()),
            *((("cohort", c.name), c) for c in self.cohort_nodes),
        ]

    def set_queues(
        self, specs: Iterable[QueueSpec], cohorts: Iterable[CohortSpec] | None = None
    ) -> None:
        """Queues (or cohorts) were added, removed or changed: rebuild quota state, keeping
        every gang."""
        pending, running = self._gangs()
        if cohorts is not None:
            self._cohorts = tuple(cohorts)
        self._build_queues(specs)
        self._rebuild(pending, running)

    def set_flavors(self, flavors: Iterable[FlavorSpec]) -> None:
        """ResourceFlavors were added, removed or changed: judge every gang's flavors again."""
        self._flavors = {f.name: f for f in flavors}
        pending, running = self._gangs()
        self._build_queues([queue.spec for queue in self.queues.values() if queue.spec])
        self._rebuild(pending, running)

    @property
    def cohort_nodes(self) -> list[QuotaNode]:
        """Every cohort above the queues, each once."""
        return tree_nodes(q.state for q in self.queues.values())

    def set_nodes(self, nodes: Iterable[Node]) -> None:
        """Nodes were added, removed or changed: rebuild the node index, keeping every gang."""
        pending, running = self._gangs()
        self._nodes = {n.name: n for n in nodes}
        self._build_queues([queue.spec for queue in self.queues.values() if queue.spec])
        self._rebuild(pending, running)

    def fork(self, *, gangs: bool = True) -> Engine:
        """A new engine with this one's queues, nodes and gangs (`gangs=False`: none yet, to be
        taken with `add_admitted` and `adopt`), and none of its memory of past cycles but the
        queues' recent usage (fair order): for looking ahead (forecast.py) without touching
        this one."""
        running = self._gangs()[1] if gangs else []
        copy = Engine(
            [queue.spec for queue in self.queues.values() if queue.state.spec],
            self._nodes.values(),
            self.config,
            flavors=self._flavors.values(),
            cohorts=self._cohorts,
            require_flavors=self._require_flavors,
        )
        for admitted in running:
            copy.add_admitted(admitted)
        if gangs:
            copy.adopt(info for _, info in self.pending.values())
        # Fair order and backfill look ahead as this engine orders and estimates.
        copy._recent_shares = dict(self._recent_shares)
        copy._recent_samples = dict(self._recent_samples)
        copy.runtimes = self.runtimes
        return copy

    def quota_fork(self) -> Engine:
        """A fork without gangs (`fork(gangs=False)`) whose queues are charged what this
        engine's admitted gangs charge now (their usage, copied), the gangs themselves left
        out: enough to order pending gangs as this engine does (positions.py), for a fraction
        of what taking the admitted gangs costs (placing each on its nodes)."""
        copy = self.fork(gangs=False)
        for name, queue in self.queues.items():
            mine = copy.queues.get(name)
            if mine is not None:
                add_usage(mine.state, queue.state.usage, +1)
        return copy

    def admitted_gangs(self) -> Callable[[int], list[AdmittedGang]]:
        """The admitted gangs as they are now, described a slice at a time: each call of the
        answer gives the next `n` (an empty list once all are given). Later changes to this
        engine do not show (forecast.py spreads taking them into a fork over many calls)."""
        running = [r for _, r in self.running.values()]
        names = self.index.names

        def take(n: int) -> list[AdmittedGang]:
            part = running[-n:] if n < len(running) else running[:]
            del running[len(running) - len(part) :]
            return [
                AdmittedGang(r.info.gang, r.admitted_at, _placement(r, names), r.flavors)
                for r in part
            ]

        return take

    def adopt(self, infos: Iterable[GangInfo]) -> None:
        """Take pending gangs of the engine this one was forked from. Its node index is built
        from the same nodes, so their precomputed shapes and flavor options hold here too and
        are shared (they are never changed once computed)."""
        for info in infos:
            self._add_pending(info)

    def _gangs(self) -> tuple[list[Gang], list[AdmittedGang]]:
        pending = [info.gang for _, info in self.pending.values()]
        running = [
            AdmittedGang(r.info.gang, r.admitted_at, self._placement_of(r), r.flavors)
            for _, r in self.running.values()
        ]
        return pending, running

    def _rebuild(self, pending: list[Gang], running: list[AdmittedGang]) -> None:
        """Put every gang back on fresh queues and nodes (O(gangs): queues and nodes change
        rarely); then judge everything again. Only reasons that change are reported."""
        fresh = set(self._fresh)
        self.index = NodeIndex(self._nodes.values(), topology=self.config.topology)
        self.pending.clear()
        self.running.clear()
        for gang in pending:
            self.add_pending(gang)
        for admitted in running:
            self.add_admitted(admitted)
        self._fresh = fresh
        self._freed = True

    def set_node_used(self, name: str, used: Mapping[str, int]) -> None:
        """What pods outside admitted gangs use on node `name` now."""
        node = self._nodes.get(name)
        i = self.index.by_name.get(name)
        if node is None or i is None or dict(node.used) == dict(used):
            return
        before, after = self.index.vector(node.used), self.index.vector(used)
        self._nodes[name] = replace(node, used=dict(used))
        self.index.take(i, tuple(a - b for a, b in zip(after, before, strict=True)))
        if any(a < b for a, b in zip(after, before, strict=True)):
            self._freed = True

    def set_node_ports(self, name: str, ports: Iterable[HostPort]) -> None:
        """The host ports pods outside admitted gangs bind on node `name` now."""
        node = self._nodes.get(name)
        i = self.index.by_name.get(name)
        bound = tuple(ports)
        if node is None or i is None or node.ports == bound:
            return
        self._nodes[name] = replace(node, ports=bound)
        self.index.ports[i] = bound
        if set(node.ports) - set(bound):
            self._freed = True

    # -- gangs --------------------------------------------------------------------------------

    def add_pending(self, gang: Gang) -> None:
        self._add_pending(gang_info(gang, self.index))

    def _add_pending(self, info: GangInfo) -> None:
        queue = self.queues.get(info.gang.queue)
        self.pending[info.name] = (queue, info)
        self._fresh.add(info.name)
        if queue is not None:
            queue.add_pending(info)

    def remove_pending(self, name: str) -> None:
        self._no_victims_at.pop(name, None)
        self._evicted_at.pop(name, None)
        self._settling_since.pop(name, None)
        self._fresh.discard(name)
        queue, info = self.pending.pop(name)
        if self._hold is not None and self._hold.info.name == name:
            self._hold = None
            self._freed = True  # the gangs held back for it may go now
        self._planned.pop(name, None)
        if self._backfill is not None and self._backfill.info.name == name:
            self._backfill = None
            self._freed = True
        if queue is not None:
            queue.remove_pending(info)
            if queue.spec.strategy == "StrictFIFO":
                self._freed = True  # the gangs it held up may go now

    def add_admitted(self, admitted: AdmittedGang) -> None:
        """Take an already admitted gang into account (quota and the nodes it runs on)."""
        queue = self.queues.get(admitted.gang.queue)
        info = gang_info(admitted.gang, self.index)
        plan = self._plan_of(info, admitted.placement)
        for ps, node, n in plan:
            self.index.take(node, info.shapes[ps][1].request, n)
        groups = queue.spec.resource_groups() if queue and queue.spec else ()
        charge = flavor_assignment.recorded(admitted.gang, groups, admitted.flavors)
        flavors = flavor_assignment.recorded_flavors(admitted.gang, groups, admitted.flavors)
        running = self._running(info, admitted.admitted_at, plan, charge, flavors)
        self._bind_ports(running, +1)
        self.running[info.name] = (queue, running)
        if queue is not None:
            add_usage(queue.state, charge, +1)
            queue.running[info.name] = running

    def move(self, name: str, placement: Iterable[PodPlacement]) -> None:
        """An admitted gang's pods are on other nodes than planned (where they were bound)."""
        queue, running = self.running[name]
        plan = self._plan_of(running.info, placement)
        if sorted(plan) == sorted(running.plan):
            return
        self.index.release(running.on_nodes())
        self._bind_ports(running, -1)
        for ps, node, n in plan:
            self.index.take(node, running.info.shapes[ps][1].request, n)
        moved = self._running(
            running.info, running.admitted_at, plan, running.charge, running.flavors
        )
        self._bind_ports(moved, +1)
        self.running[name] = (queue, moved)
        if queue is not None:
            queue.running[name] = moved
        self._freed = True

    def regard(self, name: str, gang: Gang) -> None:
        """Admitted gang `name` is `gang` now: the same pods, with another elastic minimum (what
        a victim search may shrink it to); its quota and nodes stay as they are."""
        queue, running = self.running[name]
        info = gang_info(gang, self.index)
        kept = self._running(
            info, running.admitted_at, running.plan, running.charge, running.flavors
        )
        self.running[name] = (queue, kept)
        if queue is not None:
            queue.running[name] = kept

    def placement(self, name: str) -> tuple[PodPlacement, ...]:
        """Where admitted gang `name`'s pods are, as this engine holds them."""
        return self._placement_of(self.running[name][1])

    def place_on_existing(self, name: str, now: float) -> tuple[PodPlacement, ...] | None:
        """Move admitted gang `name` whole onto nodes that exist (not ones a pool has still to
        add), keeping its quota and flavors, when it fits there now: its new placement, or None
        (it stays where it was). It counts as admitted `now` (when it can start)."""
        queue, running = self.running[name]
        gang = running.info.gang
        shapes: Shapes = []
        for i, pod_set in enumerate(gang.pod_sets):
            chosen = sorted(set(running.flavors.get(pod_set.name, {}).values()))
            specs = [self._flavors.get(f) for f in chosen]
            shape = flavor_assignment.flavored_shape(self.index, pod_set, specs)
            shapes.append((i, shape, pod_set.count))
        self.index.release(running.on_nodes())
        self._bind_ports(running, -1)
        plan, failure = self._place(shapes)
        if failure is not None:
            for ps, node, n in running.plan:
                self.index.take(node, running.info.shapes[ps][1].request, n)
            self._bind_ports(running, +1)
            return None
        moved = self._running(running.info, now, plan, running.charge, running.flavors)
        self._bind_ports(moved, +1)
        self.running[name] = (queue, moved)
        if queue is not None:
            queue.running[name] = moved
        self._freed = True
        return self._placement_of(moved)

    def finish(self, name: str, at: float | None = None) -> None:
        """An admitted gang ended (or lost its admission): give back its quota and nodes. Until
        the next cycle has run, gangs that need that room wait for it rather than evict. `at`:
        when it ended, if its work is done: its queue's learned runtimes take how long it ran."""
        queue, running = self.running[name]
        if at is not None:
            gang = running.info.gang
            self.runtimes.add(gang.queue, at - running.admitted_at, size_class(gang))
        if queue is not None:
            freed = {fr for fr, amount in running.charge.items() if amount > 0}
            self._ended.setdefault(self._root_key(queue), set()).update(freed)
        self._evicted_at.pop(name, None)
        self._drop(name)

    def work_done(self, name: str, done: bool = True) -> None:
        """Admitted gang `name` has done its work (all its pods finished) though it does not
        hold its quota any less yet (its record is not finished): it is never a victim, and
        gangs that need its room wait for it rather than evict."""
        if name not in self.running:
            return
        if done:
            self._done.add(name)
        else:
            self._done.discard(name)

    def _root_key(self, queue: QueueRuntime) -> RootKey:
        state = queue.state
        if state.parent is None:
            return ("queue", queue.name)
        return ("cohort", state.root().name)

    def _drop(self, name: str) -> None:
        """Give back an admitted gang's quota and nodes."""
        self._freed = True
        self._done.discard(name)
        queue, running = self.running.pop(name)
        if queue is not None:
            del queue.running[name]
            add_usage(queue.state, running.charge, -1)
        self.index.release(running.on_nodes())
        self._bind_ports(running, -1)

    def _bind_ports(self, running: RunningGang, sign: int) -> None:
        """Count the host ports of an admitted gang's pods on their nodes (sign +1), or stop
        counting them (-1)."""
        for ps, node, n in running.plan:
            rules = running.info.shapes[ps][1].rules
            if rules is not None and rules.ports:
                self.index.bind_ports(node, rules.ports, sign * n)

    def _plan_of(self, info: GangInfo, placement: Iterable[PodPlacement]) -> Plan:
        sets = {ps.name: i for i, ps in enumerate(info.gang.pod_sets)}
        return [
            (sets[p.pod_set], self.index.by_name[p.node], p.count)
            for p in placement
            if p.pod_set in sets and p.node in self.index.by_name
        ]

    def _placement_of(self, running: RunningGang) -> tuple[PodPlacement, ...]:
        return _placement(running, self.index.names)

    def _dominant(self, info: GangInfo) -> float:
        """The gang's largest fraction of any resource of the whole cluster."""
        capacity = self.index.capacity
        return max(
            (amount / capacity[r] for r, amount in info.total.items() if capacity.get(r)),
            default=0.0,
        )

    def _running(
        self,
        info: GangInfo,
        admitted_at: float,
        plan: Plan,
        charge: dict[FR, int],
        flavors: dict[str, dict[str, str]],
    ) -> RunningGang:
        nodes = tuple(sorted({node for _, node, _ in plan}))
        return RunningGang(
            info,
            admitted_at,
            plan,
            charge=charge,
            flavors=flavors,
            dominant=self._dominant(info),
            nodes=nodes,
        )

    def _options(self, queue: QueueRuntime, info: GangInfo) -> list[FlavorOption]:
        """The gang's flavor options in its queue, computed once per gang."""
        if info.options is None:
            spec = queue.spec
            groups = spec.resource_groups() if spec is not None else ()
            info.options = flavor_assignment.options(
                info.gang,
                groups,
                self._flavors,
                self.index,
                known_only=self._require_flavors,
                provisioned=spec.provisioned if spec is not None else frozenset(),
            )
        return info.options

    def _charge(self, queue: QueueRuntime, info: GangInfo) -> dict[FR, int]:
        """What the gang charges on its preferred flavors (its resources as they are when no
        flavor may take them)."""
        opts = self._options(queue, info)
        if opts:
            return opts[0].charge
        return flavor_assignment.recorded(info.gang, (), {})

    # -- the cycle ----------------------------------------------------------------------------

    def cycle(
        self, now: float, *, report: bool = True, max_admissions: int | None = None
    ) -> Decisions:
        """Admit (and evict) what the state allows at `now`. For a forward run of forecast.py,
        which reads only admissions and evictions: `report=False` leaves out which pending
        gangs' reasons changed; `max_admissions` ends the cycle once it has made that many
        (another cycle at the same instant goes on: what it judged blocked stays blocked, as
        nothing was given back)."""
        log = _Log()
        self._now = now
        self._age_recent(now)
        self._admitted_now.clear()
        self._shrunk_now.clear()
        for root, frs in self._ended.items():
            stamps = self._ended_at.setdefault(root, {})
            for fr in frs:
                stamps[fr] = now
        self._ended = {}
        self._keeping = []
        reserved_before = self._last_reservations
        if self._freed or now >= self._recheck_at:
            self.index.unreserve_all()
            self._held, self._holding = self._holding, {}
            for queue in self.queues.values():
                queue.blocked.clear()
            self._last_reservations = {}
            self._recheck_at = math.inf
            self._hold = None
            self._backfill = None
            self._guard_starving(now, log)
        self._freed = False
        heap = [k for q in self.queues.values() if (k := self._queue_key(q)) is not None]
        heapq.heapify(heap)
        limit = math.inf if max_admissions is None else max_admissions
        while heap and len(log.admissions) < limit:
            queue = self.queues[heapq.heappop(heap)[-1]]
            info = queue.head()
            if info is None:
                continue
            reason = self._try(queue, info, now, log)
            if reason is not None:
                self._block(queue, info, reason)
            key = self._queue_key(queue)
            if key is not None:
                heapq.heappush(heap, key)
        self._last_reservations = {**self._last_reservations, **log.reservations}
        self._sample_recent()
        pending = self._changed_reasons(reserved_before) if report else {}
        return Decisions(
            tuple(log.admissions),
            tuple(log.evictions),
            pending,
            log.reservations,
            tuple(log.shrinks),
        )

    def _class_reason(self, name: str) -> Pending:
        queue, info = self.pending[name]
        if queue is None:
            return Pending(PendingCause.UNKNOWN_QUEUE, queue=info.gang.queue)
        return queue.blocked.get(info.class_key, NOT_CONSIDERED)

    def reason(self, name: str) -> Pending:
        """Why pending gang `name` waits, as of the last cycle."""
        held = self._last_reservations.get(name)
        why = self._class_reason(name)
        return why.holding(held) if held else why

    def judged(self, name: str) -> bool:
        """Whether a cycle has looked at pending gang `name` since it arrived."""
        return name in self.pending and name not in self._fresh

    def _changed_reasons(
        self, reserved_before: Mapping[str, tuple[str, ...]]
    ) -> dict[str, Pending]:
        """Pending gangs whose reason differs from the one reported after the last cycle.

        A class's members share its reason, so only classes whose reason changed, gangs new
        since the last report, and gangs gaining or losing held nodes are looked at.
        """
        changed: set[str] = set()
        for queue in self.queues.values():
            for key, cls in queue.classes.items():
                why = queue.blocked.get(key, NOT_CONSIDERED)
                if queue.reported.get(key) != why:
                    queue.reported[key] = why
                    changed.update(name for _, name, _ in cls.gangs)
        changed.update(self._fresh)
        self._fresh.clear()
        reserved = self._last_reservations
        changed.update(
            name
            for name in reserved_before.keys() | reserved.keys()
            if reserved_before.get(name) != reserved.get(name)
        )
        return {name: self.reason(name) for name in sorted(changed) if name in self.pending}

    @property
    def recheck_at(self) -> float | None:
        """When time alone may change an outcome (a cycle then judges everything again)."""
        return None if self._recheck_at == math.inf else self._recheck_at

    def _recheck_by(self, when: float) -> None:
        """Judge everything again at `when`: time alone may change an outcome then."""
        if when > self._now:
            self._recheck_at = min(self._recheck_at, when)

    def _queue_key(self, queue: QueueRuntime) -> QueueKey | None:
        """Queue order: heads waiting beyond `oldest_first_after` first, oldest first; then
        heads within their queue's nominal quota (on the flavors they would get: borrowing on
        one flavor never delays a gang owed another); then the weighted shares at every level
        of the cohort tree from the top down (the cohorts' as they are, the queue's after
        admitting the head: queues of one cohort tie above it and are compared on their own);
        priority, age; names break ties."""
        info = queue.head()
        if info is None:
            return None
        return self.head_key(queue, info, self._now)

    def head_key(self, queue: QueueRuntime, info: GangInfo, now: float) -> QueueKey:
        """The queue's place in the order of queues (`_queue_key`) with `info` at its head."""
        gang = info.gang
        limit = self.config.oldest_first_after
        if limit is not None and now - gang.created >= limit:
            return (0, 0, (gang.created,), -gang.priority, 0.0, gang.name, queue.name)
        state = queue.state
        charge = self._expected_charge(queue, info)
        borrows = 0 if within_nominal(state, charge) else 1
        shares = path_shares(state, charge)
        if self.config.usage_half_life > 0:
            recent = self._recent_at(now)
            shares = tuple(
                share_now + recent.get(_node_key(node), 0.0)
                for share_now, node in zip(shares, fair_path(state), strict=True)
            )
        return (1, borrows, shares, -gang.priority, gang.created, gang.name, queue.name)

    # -- recent usage (usage_half_life) -------------------------------------------------------

    def _advanced(self, key: NodeKey, node: QuotaNode, now: float) -> Recent:
        """The node's recent share moved on to `now`: it held its sample since the last cycle
        (its share now when it has none: new, or restored after a restart)."""
        sampled = self._recent_samples.get(key)
        if sampled is None:
            sampled = _finite(dominant(node))
        return advanced(self._recent_shares.get(key), sampled, now, self.config.usage_half_life)

    def _age_recent(self, now: float) -> None:
        """At a cycle's start: every node's recent share moved on to `now` (nodes no longer in
        the tree are forgotten)."""
        if self.config.usage_half_life <= 0:
            return
        self._recent_shares = {
            key: self._advanced(key, node, now) for key, node in self._tree_nodes
        }
        self._recent_order = (math.nan, {})

    def _sample_recent(self) -> None:
        """At a cycle's end: the share each node holds until the next cycle."""
        if self.config.usage_half_life <= 0:
            return
        self._recent_samples = {key: _finite(dominant(node)) for key, node in self._tree_nodes}
        self._recent_order = (math.nan, {})

    def _recent_at(self, now: float) -> dict[NodeKey, float]:
        """Every node's recent share at `now`, divided by its weight, as fair order adds it to
        the node's share (the state is left unchanged)."""
        at, known = self._recent_order
        if at == now:
            return known
        known = {
            key: weighted(self._advanced(key, node, now), node.weight)
            for key, node in self._tree_nodes
        }
        self._recent_order = (now, known)
        return known

    def recent_usage(self) -> dict[NodeKey, Recent]:
        """Every queue's and cohort's recent share as of the last cycle (unweighted): what a
        restarted engine needs to order as this one does (`restore_recent_usage`)."""
        return dict(self._recent_shares)

    def restore_recent_usage(self, values: Mapping[NodeKey, Recent]) -> None:
        """Take recent shares kept elsewhere (a ClusterQueue's status, say) as this engine's
        own: each node is taken to have held its share now since the value's clock."""
        for key, value in values.items():
            self._recent_shares[key] = value
            self._recent_samples.pop(key, None)
        self._recent_order = (math.nan, {})

    def recent(self, key: NodeKey) -> Recent | None:
        """One node's recent share as of the last cycle (None: half-life 0, or none yet)."""
        if self.config.usage_half_life <= 0:
            return None
        return self._recent_shares.get(key)

    def recent_share(self, queue: str) -> float | None:
        """The ClusterQueue's recent share as fair order weighs it (None: half-life 0, or no
        such queue)."""
        if self.config.usage_half_life <= 0 or queue not in self.queues:
            return None
        node = self.queues[queue].state
        return weighted(self._recent_shares.get(("queue", queue)), node.weight)

    def consideration_order(self, now: float) -> list[tuple[QueueRuntime, GangInfo]]:
        """Every pending gang of a known queue, in the order a cycle at `now` would consider
        them if each one quota allows were admitted in turn: the cycle's own loop (the queue
        with the smallest `head_key` gives its head; its key is computed again after that
        head, the others' keys stay as they were), each queue's gangs in `GangInfo.order_key`
        order, blocked classes included. A gang counts as admitted (its queue is charged what
        `_expected_charge` says) when its quota allows it then, nodes aside; one short of quota
        is passed over, as a cycle passes over a blocked class. The state is left unchanged.
        """
        charged: list[tuple[QueueRuntime, dict[FR, int]]] = []
        try:
            return [step for step in self._considered(now, charged) if step is not None]
        finally:
            for queue, charge in reversed(charged):
                add_usage(queue.state, charge, -1)

    def consideration_steps(self, now: float) -> Iterator[tuple[QueueRuntime, GangInfo] | None]:
        """`consideration_order` a gang at a time, for an engine of which the caller is the
        only user (a fork: positions.py): each gang counted as admitted stays charged to its
        queue, so the queues' usage is changed for good. The set-up (each queue's line sorted
        and its head keyed) yields None after every `CONSIDER_SLICE` queues, so that every
        step costs about as little as the next gang's."""
        return self._considered(now, None)

    def _considered(
        self, now: float, charged: list[tuple[QueueRuntime, dict[FR, int]]] | None
    ) -> Iterator[tuple[QueueRuntime, GangInfo] | None]:
        """The consideration order (None: a slice of the set-up made); each charge made is
        noted in `charged` (None: not noted)."""
        lines: dict[str, list[GangInfo]] = {}
        heap: list[QueueKey] = []
        for i, (name, queue) in enumerate(self.queues.items(), 1):
            line = lines[name] = sorted(
                (info for cls in queue.classes.values() for _, _, info in cls.gangs),
                key=GangInfo.order_key,
                reverse=True,  # popped from the end: the first in line last
            )
            if line:
                heap.append(self.head_key(queue, line[-1], now))
            if i % CONSIDER_SLICE == 0:
                yield None
        heapq.heapify(heap)
        while heap:
            queue = self.queues[heapq.heappop(heap)[-1]]
            line = lines[queue.name]
            info = line.pop()
            charge = self._expected_charge(queue, info)
            if self._untried(queue, info) is None and quota_shortfall(queue.state, charge) is None:
                add_usage(queue.state, charge, +1)
                if charged is not None:
                    charged.append((queue, charge))
            if line:
                heapq.heappush(heap, self.head_key(queue, line[-1], now))
            yield queue, info

    def _expected_charge(self, queue: QueueRuntime, info: GangInfo) -> dict[FR, int]:
        """What the gang would charge on the option `_try` takes if quota allows one (nodes
        aside): the first that fits, or under TryNextFlavor the first that fits within nominal
        quota; else its preferred option's."""
        opts = self._options(queue, info)
        if not opts:
            return self._charge(queue, info)
        state = queue.state
        try_next = queue.spec.fungibility.when_can_borrow == "TryNextFlavor"
        fitting: dict[FR, int] | None = None
        for opt in opts:
            if quota_shortfall(state, opt.charge) is None:
                if not try_next or within_nominal(state, opt.charge):
                    return opt.charge
                fitting = fitting or opt.charge
        return fitting or opts[0].charge

    def _block(self, queue: QueueRuntime, info: GangInfo, reason: Pending) -> None:
        if queue.spec.strategy == "StrictFIFO":
            behind = Pending(PendingCause.STRICT_FIFO, behind=info.name, blocker=reason)
            for key in queue.classes:
                queue.blocked.setdefault(key, behind)
        queue.blocked[info.class_key] = reason

    def _may_preempt(self, queue: QueueRuntime) -> bool:
        spec = queue.spec
        assert spec is not None
        return spec.within_queue != "Never" or (
            spec.reclaim_within_cohort != "Never" and queue.state.parent is not None
        )

    def _try(self, queue: QueueRuntime, info: GangInfo, now: float, log: _Log) -> Pending | None:
        """`_try_admit`, on a backfill reservation's nodes too if `info` will be done before
        the reservation starts."""
        lifted = self._lift_for(info)
        try:
            return self._try_admit(queue, info, now, log)
        finally:
            for node in lifted:
                self.index.reserve(node)

    def _try_admit(
        self, queue: QueueRuntime, info: GangInfo, now: float, log: _Log
    ) -> Pending | None:
        """Admit `info` on a flavor option its queue's fungibility takes (evicting victims if
        that makes it fit); None if admitted, else why not.

        The options are searched in order, each acted on as soon as it is classified (see
        `classify`); then the most local borrowing option is taken, else preemption is tried.
        """
        untried = self._untried(queue, info)
        if untried is not None:
            return untried
        search = _Search(lambda: self._may_evict(queue, info, now))
        if self._search(queue, info, search, now, log):
            return None
        if search.borrowing is not None:
            self._admit_borrowing(queue, info, search.borrowing, now, log)
            return None
        if self._admit_partially(queue, info, now, log):
            return None
        if not search.preemptable:
            return search.waiting_reason()
        return self._preempt_or_wait(queue, info, search, now, log)

    def _untried(self, queue: QueueRuntime, info: GangInfo) -> Pending | None:
        """Why no option of `info` can be tried at all: its cohort tree is broken, or no flavor
        of its queue suits one of its pod sets."""
        if queue.state.broken is not None:
            return Pending(PendingCause.BROKEN_COHORT, detail=queue.state.broken)
        if self._options(queue, info):
            return None
        absent = flavor_assignment.missing(queue.spec.resource_groups(), self._flavors)
        detail = ", ".join(absent) if self._require_flavors and absent else None
        return Pending(PendingCause.NO_FLAVOR, queue=queue.name, detail=detail)

    def classify(self, queue: QueueRuntime, info: GangInfo) -> Iterator[OptionClass]:
        """The class of each flavor option of `info` in `queue`, in the options' order: held
        back if admitting it there would take quota the starvation guard holds for another
        gang, else as `_classify_option` finds it.

        Lazy: an option is classified only when the next class is asked for, against the state
        as it is then, so what the caller did with the classes before (an eviction, say) counts.
        An `OptionFits` holds capacity on its nodes: admit on it or give them back.
        """
        for opt in self._options(queue, info):
            held = self._held_by(queue, info, opt)
            if held is not None:
                yield OptionHeld(held)
            else:
                yield self._classify_option(queue, opt)

    def _held_by(self, queue: QueueRuntime, info: GangInfo, opt: FlavorOption) -> Pending | None:
        """Why admitting `info` on `opt` would take quota held for another gang: by the
        starvation guard, or for a gang waiting in this cycle for ending gangs' room (told as
        the quota it is short of with that gang counted in)."""
        hold = self._hold
        if (
            hold is not None
            and hold.info.name != info.name
            and self._held_back(hold, queue, info, opt)
        ):
            return Pending(
                PendingCause.HELD_FOR_STARVING, behind=hold.info.name, queue=hold.queue.name
            )
        for keep in self._keeping:
            short = self._kept_from(keep, queue, info, opt)
            if short is not None:
                return Pending(PendingCause.QUOTA, quota=short)
        return None

    def _kept_from(
        self, keep: _QuotaHold, queue: QueueRuntime, info: GangInfo, opt: FlavorOption
    ) -> QuotaShortfall | None:
        """What `info` would be short of on `opt` with the quota kept for a gang that waits for
        ending gangs' room (as if that gang were admitted), if it is one the waiting gang could
        evict once admitted: of its queue and of lower priority, or of a queue of its cohort
        tree that would borrow; None if it is not held back."""
        if keep.info.name == info.name:
            return None
        if queue is keep.queue:
            if info.gang.priority >= keep.info.gang.priority:
                return None
        elif (
            queue.state.parent is None
            or keep.queue.state.parent is None
            or queue.state.root() is not keep.queue.state.root()
            or within_nominal(queue.state, opt.charge)
        ):
            return None
        add_usage(keep.queue.state, keep.charge, +1)
        try:
            return quota_shortfall(queue.state, opt.charge)
        finally:
            add_usage(keep.queue.state, keep.charge, -1)

    def _classify_option(self, queue: QueueRuntime, opt: FlavorOption) -> OptionClass:
        """Within the quota `queue` may use now and placed on nodes: fits if the queue takes it
        as it is (within nominal quota, or borrowing under whenCanBorrow MayStopSearch), else
        borrows, its placement undone. Short of quota: never fits if more than the queue can
        ever get (not covered if no flavor offers a resource), else preemptable for quota.
        Within quota but not placed: never fits if no empty node could host it, else
        preemptable for nodes."""
        state = queue.state
        short = quota_shortfall(state, opt.charge)
        if short is not None:
            ceiling = quota_ceiling(state, opt.charge)
            if ceiling is None:
                return OptionPreemptable(opt, Pending(PendingCause.QUOTA, quota=short))
            covered = ceiling.flavor_covered
            cause = PendingCause.NEVER_FITS if covered else PendingCause.NOT_COVERED
            return OptionNeverFits(Pending(cause, ceiling=ceiling))
        plan, failure = self._place(opt.shapes)
        if failure is not None:
            never = self.index.never_fits(opt.shapes)
            if never is not None:
                return OptionNeverFits(Pending(PendingCause.NEVER_FITS, placement=never[1]))
            placement = failure.why
            return OptionPreemptable(opt, Pending(PendingCause.NO_NODE_FITS, placement=placement))
        stop_at_borrow = queue.spec.fungibility.when_can_borrow == "MayStopSearch"
        if stop_at_borrow or within_nominal(state, opt.charge):
            return OptionFits(opt, plan)
        self._unplace(opt, plan)
        return OptionBorrows(opt, borrow_height(state, opt.charge))

    def _search(
        self, queue: QueueRuntime, info: GangInfo, search: _Search, now: float, log: _Log
    ) -> bool:
        """Go through the options' classes in order and admit `info` on the first that fits;
        under whenCanPreempt MayStopSearch, also on the first preemptable option where evicting
        makes it fit, as soon as it is met, unless a borrowing option came before it. True if
        admitted; else `search` has noted every class."""
        stop_at_preempt = queue.spec.fungibility.when_can_preempt == "MayStopSearch"
        for found in self.classify(queue, info):
            if isinstance(found, OptionFits):
                self._admit(queue, info, found.option, found.plan, now, log, evicted=0)
                return True
            search.note(found)
            if (
                isinstance(found, OptionPreemptable)
                and stop_at_preempt
                and search.borrowing is None
                and search.may_evict()
                and not self._settles(queue, info, [found])
                and self._preempt(queue, info, found.option, now, log)
            ):
                return True
        return False

    def _admit_partially(self, queue: QueueRuntime, info: GangInfo, now: float, log: _Log) -> bool:
        """Admit an elastic gang whose whole size does not fit with the most pods of its
        elastic pod set, down to its minimum, that fit now without evicting anyone (quota
        and nodes, on any option its queue takes); False if not even the minimum does.

        The count is found by bisection, each probe classifying the reduced gang's options
        and giving back what it placed: fitting is taken as monotone in the count (fewer
        identical pods fit where more do)."""
        elastic = elastic_pod_set(info.gang)
        if elastic is None:
            return False
        index, low = elastic
        high = info.gang.pod_sets[index].count - 1
        best: GangInfo | None = None
        while low <= high:
            middle = (low + high) // 2
            count = {info.gang.pod_sets[index].name: middle}
            trial = gang_info(admitted_as(info.gang, count), self.index)
            if self._fits_now(queue, trial):
                best, low = trial, middle + 1
            else:
                high = middle - 1
        if best is None:
            return False
        search = _Search(lambda: False)
        if self._search(queue, best, search, now, log):
            return True
        assert search.borrowing is not None, "a count that fit no longer fits"
        self._admit_borrowing(queue, best, search.borrowing, now, log)
        return True

    def _fits_now(self, queue: QueueRuntime, info: GangInfo) -> bool:
        """Whether one of the options of `info` fits now, within nominal quota or borrowing,
        without evicting; the state is left unchanged."""
        for found in self.classify(queue, info):
            if isinstance(found, OptionFits):
                self._unplace(found.option, found.plan)
                return True
            if isinstance(found, OptionBorrows):
                return True
        return False

    def _admit_borrowing(
        self, queue: QueueRuntime, info: GangInfo, found: OptionBorrows, now: float, log: _Log
    ) -> None:
        """Admit `info` on the borrowing option the search chose (its placement was undone
        when it was classified: it is placed again)."""
        plan, failure = self._place(found.option.shapes)
        assert failure is None
        self._admit(queue, info, found.option, plan, now, log, evicted=0)

    def _preempt_or_wait(
        self, queue: QueueRuntime, info: GangInfo, search: _Search, now: float, log: _Log
    ) -> Pending | None:
        """Evict for the first preemptable option, in order, where that makes `info` fit, if it
        may evict now (under whenCanPreempt MayStopSearch the search tried each already); None
        if admitted, else the first preemptable option's reason. A gang that may not evict yet
        may have nodes held for it to drain; a fruitless search is not repeated before
        PREEMPTION_RETRY seconds."""
        first = search.preemptable[0]
        if not search.may_evict():
            self._drain_for(queue, info, first, now, log)
            return first.reason
        if self._settles(queue, info, search.preemptable):
            # Gangs ending give back what it needs: it waits for that room, kept from the
            # gangs it could evict, instead of evicting in the same instant.
            self._keeping.append(_QuotaHold(queue, info, first.option.charge))
            return first.reason
        if queue.spec.fungibility.when_can_preempt != "MayStopSearch":
            for found in search.preemptable:
                if self._preempt(queue, info, found.option, now, log):
                    return None
        self._no_victims_at[info.name] = now
        if self.config.waste_budget is not None:  # it grows with the wait
            self._recheck_by(now + PREEMPTION_RETRY)
        return first.reason

    def _settles(
        self, queue: QueueRuntime, info: GangInfo, preemptable: Iterable[OptionPreemptable]
    ) -> bool:
        """Whether `info` waits for room coming back by itself rather than evict (placement-aware
        victims only): room one of these options needs comes back in its cohort tree (see
        `_coming_back`), and it has not waited so for SETTLE_AT_MOST seconds. A recheck is set
        for when that room stops counting as coming back."""
        if not self._settle:
            return False
        now = self._now
        until = self._coming_back(queue, preemptable)
        if until is None:
            return False
        since = self._settling_since.setdefault(info.name, now)
        if now - since >= SETTLE_AT_MOST:
            return False
        self._recheck_by(min(until, since + SETTLE_AT_MOST))
        return True

    def _coming_back(
        self, queue: QueueRuntime, preemptable: Iterable[OptionPreemptable]
    ) -> float | None:
        """Until when room one of these options needs counts as coming back in the gang's
        cohort tree by itself: a flavor and resource it charges that gangs there gave back at
        their end less than SETTLE_FOR seconds ago, or hold though their work is done; None
        if none does."""
        root = self._root_key(queue)
        now = self._now
        back = {
            fr: at + SETTLE_FOR
            for fr, at in self._ended_at.get(root, {}).items()
            if now - at < SETTLE_FOR
        }
        for name in self._done:
            owner, running = self.running[name]
            if owner is not None and self._root_key(owner) == root:
                back.update((fr, now + SETTLE_FOR) for fr, n in running.charge.items() if n > 0)
        needed = [
            back[fr]
            for found in preemptable
            for fr, amount in found.option.charge.items()
            if amount > 0 and fr in back
        ]
        return max(needed) if needed else None

    def _drain_for(
        self, queue: QueueRuntime, info: GangInfo, first: OptionPreemptable, now: float, log: _Log
    ) -> None:
        """Under `drain`, hold nodes for `info` while it waits its queue's evict_after for
        nodes alone, on quota its queue takes back from lenders: borrowers' gangs finishing
        there free them for it."""
        if (
            self.config.drain
            and now - info.gang.created < queue.spec.evict_after
            and self._reclaimer(queue, first.option.charge)
            and first.reason.cause is PendingCause.NO_NODE_FITS
        ):
            self._hold_nodes(info, first.option.shapes, log)

    def _may_evict(self, queue: QueueRuntime, info: GangInfo, now: float) -> bool:
        """Whether `info` may look for victims now: it has waited its queue's evict_after (if
        not, a recheck is set for then), and a fruitless search is not too recent."""
        evict_after = queue.spec.evict_after
        if now - info.gang.created < evict_after:
            if self._may_preempt(queue):
                self._recheck_by(info.gang.created + evict_after)
            return False
        last = self._no_victims_at.get(info.name)
        return last is None or now - last >= PREEMPTION_RETRY

    def _preempt(
        self, queue: QueueRuntime, info: GangInfo, opt: FlavorOption, now: float, log: _Log
    ) -> bool:
        """Shrink the elastic gangs, or else evict the victims, that make `info` fit on `opt`,
        and admit it; False if neither does."""
        shrinks = self._choose_shrinks(queue, info, opt, now)
        if shrinks:
            self._no_victims_at.pop(info.name, None)
            self._shrink(shrinks, info, opt, queue, log)
            plan, failure = self._place(opt.shapes)
            if failure is not None or quota_shortfall(queue.state, opt.charge) is not None:
                raise AssertionError(f"shrinks chosen for {info.name} do not make it fit")
            self._admit(queue, info, opt, plan, now, log, evicted=0)
            return True
        victims = self._choose_victims(queue, info, opt, now)
        if victims is None:
            return False
        self._no_victims_at.pop(info.name, None)
        for victim in victims:
            self._evict(victim, info, opt, queue, log)
        plan, failure = self._place(opt.shapes)
        if failure is not None or quota_shortfall(queue.state, opt.charge) is not None:
            raise AssertionError(f"victims chosen for {info.name} do not make it fit")
        self._admit(queue, info, opt, plan, now, log, evicted=len(victims))
        return True

    def _unplace(self, opt: FlavorOption, plan: Plan) -> None:
        self.index.release((opt.shapes[ps][1].request, node, n) for ps, node, n in plan)

    def _place(self, shapes: Shapes) -> tuple[Plan, PlaceFailure | None]:
        if not self.config.placement:
            return [], None
        return self.index.place(shapes, self.config.packing)

    def _admit(
        self,
        queue: QueueRuntime,
        info: GangInfo,
        opt: FlavorOption,
        plan: Plan,
        now: float,
        log: _Log,
        *,
        evicted: int,
    ) -> None:
        # `info` is the pending gang, or a smaller one of the same name (partial admission).
        queue.remove_pending(self.pending.pop(info.name)[1])
        self._fresh.discard(info.name)
        self._planned.pop(info.name, None)
        if self._backfill is not None and self._backfill.info.name == info.name:
            for node in self._backfill.nodes:  # its reservation is over
                self.index.unreserve(node)
            self._backfill = None
        self._no_victims_at.pop(info.name, None)
        self._settling_since.pop(info.name, None)
        flavors = opt.by_pod_set(info.gang)
        running = self._running(info, now, plan, dict(opt.charge), flavors)
        self._bind_ports(running, +1)
        self._admitted_now.add(info.name)
        add_usage(queue.state, opt.charge, +1)
        queue.running[info.name] = running
        self.running[info.name] = (queue, running)
        log.admissions.append(
            Admission(
                info.name,
                queue.name,
                self._placement_of(running),
                evicted=evicted,
                borrowing=borrowing(queue.state),
                flavors=flavors,
                counts=_counts(info.gang),
            )
        )

    def _evict(
        self,
        victim: RunningGang,
        preemptor: GangInfo,
        opt: FlavorOption,
        by: QueueRuntime,
        log: _Log,
    ) -> None:
        queue, _ = self.running[victim.name]
        assert queue is not None
        cause = EvictionCause.PREEMPTED
        if queue is not by:
            reclaim = self._reclaimer(by, opt.charge)
            cause = EvictionCause.RECLAIMED if reclaim else EvictionCause.FAIR_SHARING
        self._drop(victim.name)
        self._evicted_at[victim.name] = self._now
        log.evictions.append(Eviction(victim.name, queue.name, preemptor.name, cause, by.name))

    def _shrink(
        self,
        pods: Sequence[Candidate],
        preemptor: GangInfo,
        opt: FlavorOption,
        by: QueueRuntime,
        log: _Log,
    ) -> None:
        """Shrink each gang `pods` (surplus pods, see preemption.shrink) come from by those pods:
        it stays admitted with the others, its charge and nodes less theirs."""
        gone: dict[str, list[Candidate]] = {}
        for pod in pods:
            gone.setdefault(pod.victim.name, []).append(pod)
        for name, its in gone.items():
            queue, running = self.running[name]
            assert queue is not None
            elastic = elastic_pod_set(running.info.gang)
            assert elastic is not None
            index = elastic[0]
            pod_set = running.info.gang.pod_sets[index]
            count = pod_set.count - len(its)
            by_node: dict[int, int] = {}
            for pod in its:
                by_node[pod.nodes[0]] = by_node.get(pod.nodes[0], 0) + 1
            plan = []
            for ps, node, n in running.plan:
                off = min(n, by_node.get(node, 0)) if ps == index else 0
                if off:
                    by_node[node] -= off
                if n - off:
                    plan.append((ps, node, n - off))
            charge = dict(running.charge)
            for pod in its:
                for fr, amount in pod.victim.charge.items():
                    charge[fr] = charge.get(fr, 0) - amount
            self._drop(name)
            gang = admitted_as(running.info.gang, {pod_set.name: count})
            info = gang_info(gang, self.index)
            for ps, node, n in plan:
                self.index.take(node, info.shapes[ps][1].request, n)
            kept = self._running(info, running.admitted_at, plan, charge, running.flavors)
            self._bind_ports(kept, +1)
            self.running[name] = (queue, kept)
            queue.running[name] = kept
            add_usage(queue.state, charge, +1)
            self._shrunk_now.add(name)
            cause = EvictionCause.PREEMPTED
            if queue is not by:
                reclaim = self._reclaimer(by, opt.charge)
                cause = EvictionCause.RECLAIMED if reclaim else EvictionCause.FAIR_SHARING
            names = self.index.names
            removed: dict[str, int] = {}
            for node in (pod.nodes[0] for pod in its if pod.nodes[0] >= 0):
                removed[names[node]] = removed.get(names[node], 0) + 1
            log.shrinks.append(
                Shrink(
                    name,
                    queue.name,
                    pod_set.name,
                    count,
                    preemptor.name,
                    cause,
                    by.name,
                    tuple(PodPlacement(pod_set.name, n, k) for n, k in sorted(removed.items())),
                )
            )

    # -- preemption -----------------------------------------------------------------------------

    def _reclaimer(self, queue: QueueRuntime, charge: Mapping[FR, int]) -> bool:
        """Whether a gang charging `charge` may take lent quota back: its queue stays within
        nominal with it, on the flavors it would get (borrowing elsewhere does not count)."""
        spec = queue.spec
        return (
            spec is not None
            and spec.reclaim_within_cohort != "Never"
            and queue.state.parent is not None
            and within_nominal(queue.state, charge)
        )

    def _candidates(
        self, queue: QueueRuntime, info: GangInfo, charge: Mapping[FR, int], now: float
    ) -> list[Candidate]:
        """Admitted gangs that may be evicted for `info` (charging `charge`), before any choice
        among them: in its queue, or anywhere in its cohort tree in a queue that borrows on
        an FR it needs.

        A gang too young to be a victim now makes the engine look again once it is old enough.
        """
        spec = queue.spec
        assert spec is not None
        prio = info.gang.priority
        # (queue, victims are in another queue, victims are taken for fair sharing)
        pools: list[tuple[QueueRuntime, bool, bool]] = []
        if spec.within_queue == "LowerPriority":
            pools.append((queue, False, False))
        if queue.state.parent is not None and spec.reclaim_within_cohort != "Never":
            reclaim = self._reclaimer(queue, charge)
            if reclaim or self.config.fair_sharing_preemption:
                pools.extend(
                    (other, True, not reclaim)
                    for other in self._members[id(queue.state.root())]
                    if other is not queue and other.running and borrowing_any(other.state, charge)
                )
        lower_only = spec.reclaim_within_cohort == "LowerPriority"
        out: list[Candidate] = []
        for pool, other, fair in pools:
            min_runtime = pool.spec.min_runtime
            for running in pool.running.values():
                gang_prio = running.info.gang.priority
                if running.name in self._admitted_now or running.name in self._done:
                    continue
                if running.name in self._shrunk_now:
                    continue
                if (not other or lower_only) and gang_prio >= prio:
                    continue
                if running.admitted_at > now - min_runtime:
                    self._recheck_by(running.admitted_at + min_runtime)
                    continue
                lost = max(0.0, now - running.admitted_at) * running.dominant
                out.append(
                    Candidate(
                        running, pool.name, other, lost, running.nodes, fair, self._recent(running)
                    )
                )
        return out

    def _recent(self, running: RunningGang) -> bool:
        """Whether a gang was admitted moments ago, or evicted recently (and admitted again):
        a victim only when no other will do."""
        now = self._now
        evicted = self._evicted_at.get(running.name)
        return now - running.admitted_at < FRESH_FOR or (
            evicted is not None and now - evicted < EVICTED_RECENTLY_FOR
        )

    def _choose_victims(
        self, queue: QueueRuntime, info: GangInfo, opt: FlavorOption, now: float
    ) -> list[RunningGang] | None:
        candidates = self._candidates(queue, info, opt.charge, now)
        if not candidates:
            return None
        budget = math.inf
        if self.config.waste_budget is not None:
            waited = max(0.0, now - info.gang.created)
            budget = self.config.waste_budget * waited * self._dominant(info)
        domains = victim_domains(self.index, opt.shapes) if self._floor_guard else None
        if domains is None:
            return self._strategy(_Trial(self, queue, info, opt, budget), info, candidates)
        return self._victims_in_one_domain(queue, info, opt, budget, candidates, domains)

    def _choose_shrinks(
        self, queue: QueueRuntime, info: GangInfo, opt: FlavorOption, now: float
    ) -> list[Candidate] | None:
        """Surplus pods of admitted elastic gangs whose removal lets `info` in on `opt` (the
        placement-aware victim rule only, and not for a gang that must fit in one domain)."""
        if not self._floor_guard or victim_domains(self.index, opt.shapes) is not None:
            return None
        surplus = [
            s
            for c in self._candidates(queue, info, opt.charge, now)
            if (s := self._surplus(c)) is not None
        ]
        if not surplus:
            return None
        trial = _Trial(self, queue, info, opt, math.inf)
        return preemption.shrink(trial, info, surplus)

    def _surplus(self, candidate: Candidate) -> preemption.Surplus | None:
        """A candidate's pods beyond its elastic pod set's minimum, one Candidate each (its
        charge that of one pod), from its nodes' last pods first; None if it has none."""
        running = candidate.victim
        gang = running.info.gang
        elastic = elastic_pod_set(gang)
        if elastic is None:
            return None
        index, low = elastic
        pod_set = gang.pod_sets[index]
        queue = self.queues.get(gang.queue)
        groups = queue.spec.resource_groups() if queue is not None and queue.spec else ()
        whole = flavor_assignment.recorded(gang, groups, running.flavors)
        less = flavor_assignment.recorded(
            admitted_as(gang, {pod_set.name: pod_set.count - 1}), groups, running.flavors
        )
        charge = {fr: a - less.get(fr, 0) for fr, a in whole.items() if a - less.get(fr, 0)}
        nodes = [node for ps, node, n in running.plan if ps == index for _ in range(n)]
        if not self.config.placement or len(nodes) != pod_set.count:
            nodes = [-1] * pod_set.count  # (no placement: the pods are nowhere in particular)
        pods = tuple(
            replace(
                candidate,
                victim=RunningGang(
                    running.info,
                    running.admitted_at,
                    [] if node < 0 else [(index, node, 1)],
                    charge=charge,
                    flavors=running.flavors,
                    nodes=() if node < 0 else (node,),
                ),
                lost_work=0.0,
                nodes=(node,),
            )
            for node in reversed(nodes)
        )
        return preemption.Surplus(candidate, pods, pod_set.count - low)

    def _victims_in_one_domain(
        self,
        queue: QueueRuntime,
        info: GangInfo,
        opt: FlavorOption,
        budget: float,
        candidates: list[Candidate],
        domains: list[set[int]],
    ) -> list[RunningGang] | None:
        """For a gang that must be inside one domain: the cheapest victims that free one domain
        it fits in (least work lost, then fewest victims, then the domain's order), not
        capacity scattered over several."""
        lost = {c.victim.name: c.lost_work for c in candidates}
        best: tuple[tuple[float, int, int], list[RunningGang]] | None = None
        for rank, nodes in enumerate(domains):
            trial = _Trial(self, queue, info, opt, budget, within=nodes)
            victims = self._strategy(trial, info, candidates)
            if victims is None:
                continue
            cost = (sum(lost[v.name] for v in victims), len(victims), rank)
            if best is None or cost < best[0]:
                best = (cost, victims)
        return best[1] if best is not None else None

    # -- starvation guard -----------------------------------------------------------------------

    def _guard_starving(self, now: float, log: _Log) -> None:
        """Admit the gang waiting beyond `starvation_after` that comes first (its queue's share,
        its priority, its age), or hold quota and nodes for it: one gang at a time, and never
        one that no amount of waiting lets in.

        Quota is held only for a gang within its queue's nominal quota, which is owed to it: one
        that needs borrowed quota could hold its queue idle for as long as the lenders use their
        own. Nodes are held once quota allows it.
        """
        limit = self.config.starvation_after
        if limit is None:
            return
        chosen: tuple[tuple[float, ...], int, float, str, QueueRuntime, GangInfo] | None = None
        for queue in self.queues.values():
            queue_share = path_shares(queue.state)
            for cls in queue.classes.values():
                head = cls.head()
                if head is None:
                    continue
                if now - head.gang.created < limit:
                    self._recheck_by(head.gang.created + limit)
                    continue
                gang = head.gang
                key = (queue_share, -gang.priority, gang.created, head.name)
                if chosen is not None and key >= chosen[:4]:
                    continue
                opts = self._options(queue, head)
                if queue.state.broken is not None or not any(
                    quota_ceiling(queue.state, o.charge) is None
                    and (not self.config.placement or self.index.never_fits(o.shapes) is None)
                    for o in opts
                ):
                    continue
                chosen = (*key, queue, head)
        if chosen is None:
            return
        *_, queue, info = chosen
        reason = self._try(queue, info, now, log)
        if reason is None:
            return
        self._block(queue, info, reason)
        first = self._options(queue, info)[0]
        within = all(amount <= queue.state.quota(fr).nominal for fr, amount in first.charge.items())
        if within:
            self._hold = _QuotaHold(queue, info, first.charge)
        # (nodes are reserved, as quota is held, only for a gang its own quota takes, or one
        # only nodes keep out: never against a lender's nominal quota)
        ahead = within or reason.cause is PendingCause.NO_NODE_FITS
        if self.config.backfill and ahead and self._reserve_ahead(queue, info, first, log):
            return
        if self.config.placement and reason.cause is PendingCause.NO_NODE_FITS:
            self._hold_nodes(info, first.shapes, log)

    # -- backfill reservations -----------------------------------------------------------------

    @property
    def reservation(self) -> Reservation | None:
        """The starvation guard's backfill reservation as of the last full recheck, if any."""
        found = self._backfill
        if found is None:
            return None
        names = tuple(sorted(self.index.names[i] for i in found.nodes))
        return Reservation(found.info.name, found.start, names)

    def _runtime(self, gang: Gang) -> Runtime | None:
        """What is known of `gang`'s runtime: declared, or learned from its queue (None: no
        finished gang of its queue yet)."""
        if gang.max_runtime is not None:
            return Runtime(declared=gang.max_runtime)
        runtime = self.runtimes.runtime(gang.queue, size=size_class(gang))
        return runtime if runtime.samples else None

    def _backfills(self, info: GangInfo) -> bool:
        """Whether `info`, admitted now, will be done before the backfill reservation starts
        (at its BACKFILL_QUANTILE runtime), so that it may use what is reserved."""
        found = self._backfill
        if found is None or found.info is info:
            return False
        runtime = self._runtime(info.gang)
        if runtime is None:
            return False
        return self._now + runtime.quantile(BACKFILL_QUANTILE) <= found.start

    def _lift_for(self, info: GangInfo) -> tuple[int, ...]:
        """Show the backfill reservation's nodes to `info` if it backfills (the caller reserves
        them again); the nodes shown."""
        if not self._backfills(info):
            return ()
        assert self._backfill is not None
        lifted = tuple(i for i in self._backfill.nodes if i in self.index.reserved)
        for node in lifted:
            self.index.unreserve(node)
        return lifted

    def _ends(self) -> list[tuple[float, list[RunningGang]]] | None:
        """The running gangs by estimated end, soonest first, grouped by instant (a gang past
        its estimate ends now); None if a running gang has no estimate (the guard cannot tell
        what frees first)."""
        now = self._now
        ends: dict[float, list[RunningGang]] = {}
        for _, running in self.running.values():
            runtime = self._runtime(running.info.gang)
            if runtime is None:
                return None
            ran = max(0.0, now - running.admitted_at)
            end = running.admitted_at + runtime.quantile(RUNNING_QUANTILE, ran)
            ends.setdefault(max(end, now), []).append(running)
        return sorted(ends.items(), key=lambda item: item[0])

    def _set_running(self, gangs: Iterable[RunningGang], sign: int) -> None:
        """Take running gangs out of quota and nodes (sign -1), or put them back (+1), for a
        look ahead."""
        for running in gangs:
            owner, _ = self.running[running.name]
            if owner is not None:
                add_usage(owner.state, running.charge, sign)
            if sign < 0:
                self.index.release(running.on_nodes())
            else:
                for request, node, n in running.on_nodes():
                    self.index.take(node, request, n)
            self._bind_ports(running, sign)

    def _reserve_ahead(
        self, queue: QueueRuntime, info: GangInfo, opt: FlavorOption, log: _Log
    ) -> bool:
        """Reserve for starving `info` the nodes it would get on `opt` at the earliest estimated
        end of running gangs where it fits, quota and nodes, had the gangs ending by then
        ended; False if no running gang's end gives it room (or one has no estimate).

        A gang keeps the nodes it was given while it still fits there by some estimated end
        (so they drain, rather than the reservation wandering as estimates change), and its
        start never moves later than first planned: once a start has passed with the gang
        still waiting (runtimes were longer than estimated), nothing backfills any more and
        the reservation holds its nodes as the plain guard does.
        """
        ends = self._ends()
        if not ends:
            return False
        before = self._planned.get(info.name)
        found = None
        if before is not None:
            kept = {self.index.by_name[n] for n in before[1] if n in self.index.by_name}
            if kept:
                found = self._earliest(queue, opt, ends, only=kept)
        if found is None:
            found = self._earliest(queue, opt, ends)
        if found is None:
            return False
        start, nodes = found
        if before is not None:
            start = min(start, before[0])
        for node in nodes:
            self.index.reserve(node)
        self._backfill = _Backfill(info, start, nodes)
        names = tuple(sorted(self.index.names[i] for i in nodes))
        self._planned[info.name] = (start, names)
        self._holding[info.name] = names
        if names:
            log.reservations[info.name] = names
        return True

    def _earliest(
        self,
        queue: QueueRuntime,
        opt: FlavorOption,
        ends: list[tuple[float, list[RunningGang]]],
        *,
        only: set[int] | None = None,
    ) -> tuple[float, tuple[int, ...]] | None:
        """The first of `ends` by which `opt` fits, quota and nodes (on nodes `only` if given),
        had the running gangs ending by then ended, and the nodes it would take then; None if
        it fits by none. The state is left as it was."""
        index = self.index
        hidden = []
        if only is not None:
            hidden = [
                i for i in range(len(index.names)) if i not in only and i not in index.reserved
            ]
            for node in hidden:
                index.reserve(node)
        done = 0  # how many groups of `ends` are taken out

        def fits_after(k: int) -> Plan | None:
            nonlocal done
            while done < k:
                self._set_running(ends[done][1], -1)
                done += 1
            while done > k:
                done -= 1
                self._set_running(ends[done][1], +1)
            if quota_shortfall(queue.state, opt.charge) is not None:
                return None
            plan, failure = self._place(opt.shapes)
            if failure is not None:
                return None
            self._unplace(opt, plan)
            return plan

        try:
            # Room only grows as gangs end: gallop, then halve, to the first group that fits.
            low, high = 0, 1
            while high <= len(ends) and fits_after(high) is None:
                low, high = high, high * 2
            if high > len(ends):
                if fits_after(len(ends)) is None:
                    return None
                high = len(ends)
            while high - low > 1:
                middle = (low + high) // 2
                if fits_after(middle) is None:
                    low = middle
                else:
                    high = middle
            plan = fits_after(high)
            assert plan is not None
        finally:
            fits_after(0)
            for node in hidden:
                index.unreserve(node)
        return ends[high - 1][0], tuple(sorted({node for _, node, _ in plan}))

    def _hold_nodes(self, info: GangInfo, shapes: Shapes, log: _Log) -> None:
        """Reserve nodes for `info` (see `_reserve_for`) and report them, if any."""
        nodes = self._reserve_for(info, shapes)
        if nodes:
            log.reservations[info.name] = nodes

    def _held_back(
        self, hold: _QuotaHold, queue: QueueRuntime, info: GangInfo, opt: FlavorOption
    ) -> bool:
        """Whether admitting `info` on `opt` would take quota the starvation guard holds.

        Gangs newer than the starving gang and of no higher priority are judged as if it were
        admitted already: those of its queue, and those of its cohort that would borrow. A gang
        of another queue within that queue's nominal quota takes nothing the starving gang is
        owed, so it is never held back.
        """
        starving = hold.info.gang
        if info.gang.created < starving.created or info.gang.priority > starving.priority:
            return False
        if self._backfills(info):
            return False
        charge = opt.charge
        if queue is not hold.queue:
            if hold.queue.state.parent is None or queue.state.parent is None:
                return False
            if queue.state.root() is not hold.queue.state.root():
                return False
            if within_nominal(queue.state, charge):
                return False
        add_usage(hold.queue.state, hold.charge, +1)
        try:
            return quota_shortfall(queue.state, charge) is not None
        finally:
            add_usage(hold.queue.state, hold.charge, -1)

    def _reserve_for(self, info: GangInfo, shapes: Shapes) -> tuple[str, ...]:
        """Hide from everyone else the emptiest eligible nodes, one per pod of the gang.

        The same gang keeps the same nodes from cycle to cycle, so they drain instead of the
        reservation wandering to whichever nodes happen to be emptiest.
        """
        index = self.index
        last = self._held.get(info.name)
        kept = [index.by_name[n] for n in last or () if n in index.by_name]
        if last is not None and not any(i in index.reserved for i in kept):
            for node in kept:
                index.reserve(node)
            names = tuple(sorted(index.names[i] for i in kept))
            self._holding[info.name] = names
            return names
        held: list[int] = []
        for _, shape, count in shapes:
            for _ in range(count):
                best = None
                for cls in index.eligible(shape):
                    if cls.entries and (best is None or cls.entries[-1] > best):
                        best = cls.entries[-1]
                if best is None:
                    break
                index.reserve(best[1])
                held.append(best[1])
        names = tuple(sorted(index.names[i] for i in held))
        self._holding[info.name] = names
        return names


class _Trial:
    """Trial-and-undo view of the engine for a preemption strategy."""

    def __init__(
        self,
        engine: Engine,
        queue: QueueRuntime,
        info: GangInfo,
        opt: FlavorOption,
        budget: float,
        *,
        within: set[int] | None = None,
    ) -> None:
        """`within`: clear nodes only there (one domain a gang must fit in)."""
        self.engine = engine
        self.queue = queue
        self.info = info
        self.charge = opt.charge
        self.shapes = opt.shapes
        self.budget = budget
        self.within = within

    def remove(self, victim: RunningGang) -> None:
        owner, _ = self.engine.running[victim.name]
        assert owner is not None
        add_usage(owner.state, victim.charge, -1)
        self.engine.index.release(victim.on_nodes())
        self.engine._bind_ports(victim, -1)

    def restore(self, victim: RunningGang) -> None:
        owner, _ = self.engine.running[victim.name]
        assert owner is not None
        add_usage(owner.state, victim.charge, +1)
        for request, node, n in victim.on_nodes():
            self.engine.index.take(node, request, n)
        self.engine._bind_ports(victim, +1)
        self.engine._freed = False

    def shortfall(self, info: GangInfo) -> Shortfall | None:
        """What keeps `info` out: placement first (clearing nodes frees quota too), then quota."""
        engine = self.engine
        if engine.config.placement:
            plan, failure = engine.index.place(self.shapes, engine.config.packing)
            if failure is not None:
                return Shortfall(shape=failure.shape, held=failure.held)
            engine.index.release((self.shapes[ps][1].request, node, n) for ps, node, n in plan)
        if self.quota_fits(info):
            return None
        state = self.queue.state
        charge = self.charge
        return Shortfall(
            quota=tuple(fr for fr in sorted(charge) if charge[fr] > available(state, fr))
        )

    def quota_fits(self, info: GangInfo) -> bool:
        state = self.queue.state
        return all(amount <= available(state, fr) for fr, amount in self.charge.items())

    def may_take(self, candidate: Candidate) -> bool:
        owner = self.engine.queues[candidate.queue].state
        if not candidate.other_queue:
            return True
        victim = candidate.victim
        if candidate.fair:
            # Kueue's S2-a: the preemptor's share after admission stays at most the victim
            # queue's share after the eviction.
            removed = {fr: -v for fr, v in victim.charge.items()}
            return borrowing(owner) and share(self.queue.state, self.charge) <= share(
                owner, removed
            )
        if not self.engine._floor_guard:
            return borrowing(owner)
        return self._above_guarantee(owner, victim)

    def _above_guarantee(self, owner: QuotaNode, victim: RunningGang) -> bool:
        """Whether evicting `victim` takes only borrowed quota: every node from its queue up to
        (not including) the cohort it shares with the preemptor borrows an FR the victim holds,
        and stays at or above its quota on each such FR once the victim is gone. So no lender,
        and no subtree, is pushed below what it is guaranteed."""
        shared = {id(n) for n in self.queue.state.path()}
        path: list[QuotaNode] = []
        for node in owner.path():
            if id(node) in shared:
                break
            path.append(node)
        before = [{fr: n.usage.get(fr, 0) for fr in victim.charge} for n in path]
        add_usage(owner, victim.charge, -1)
        try:
            for node, used in zip(path, before, strict=True):
                borrowed = [fr for fr, u in used.items() if u > node.subtree.get(fr, 0)]
                if not borrowed or any(
                    node.usage.get(fr, 0) < node.subtree.get(fr, 0) for fr in borrowed
                ):
                    return False
            return True
        finally:
            add_usage(owner, victim.charge, +1)

    def freed_on(self, victim: RunningGang, node: int) -> tuple[int, ...]:
        freed = [0] * len(self.engine.index.order)
        for ps, on, n in victim.plan:
            if on == node:
                for k, q in enumerate(victim.info.shapes[ps][1].request):
                    freed[k] += q * n
        return tuple(freed)

    def free_on(self, node: int) -> tuple[int, ...]:
        return self.engine.index.free[node]

    def may_host(self, shape: PodShape, node: int) -> bool:
        index = self.engine.index
        if self.within is not None and node not in self.within:
            return False
        return node not in index.reserved and index.class_of[node] in index.eligible(shape)


def _node_key(node: QuotaNode) -> NodeKey:
    return ("queue" if node.spec is not None else "cohort", node.name)


def _finite(value: float) -> float:
    """A share as recent usage counts it: an infinite one (a resource its parent has none of)
    ranks last by the share now already and is not remembered."""
    return value if math.isfinite(value) else 0.0


def _placement(running: RunningGang, names: Sequence[str]) -> tuple[PodPlacement, ...]:
    """Where an admitted gang's pods are, by node name (`names`: of its engine's node index)."""
    sets = running.info.gang.pod_sets
    return tuple(PodPlacement(sets[ps].name, names[node], n) for ps, node, n in running.plan)


def _counts(gang: Gang) -> dict[str, int]:
    """The pods admitted of each pod set of an elastic gang (empty for other gangs)."""
    if not any(ps.min_count is not None for ps in gang.pod_sets):
        return {}
    return {ps.name: ps.count for ps in gang.pod_sets}
