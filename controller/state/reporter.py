"""What users are told: why each gang waits, and the status of ClusterQueues and Cohorts.

Rule: a report is planned only when what it says changed; a pending reason whose cause stays
the same is written again (its numbers) at most every `reason_refresh` seconds. Reports are
deferred writes: no decision waits for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controller.api.conditions import Reason
from controller.api.queues import ClusterQueue
from controller.quota import Pending, PendingCause
from controller.quota.outcomes import PERMANENT
from controller.quota.quota import QuotaNode, share
from controller.quota.snapshot import flavor_quotas
from controller.settings import Settings
from controller.state import objects
from controller.state.cohorts import cohort_spec, parent_cycle
from controller.state.gangs import GangKey, ManagedGang, id_of
from controller.state.inventory import Inventory
from controller.state.mirror import EngineMirror, Member
from controller.state.objects import CohortFigures, LocalQueueFigures, QueueFigures
from controller.state.positions import PositionReport, PositionReporter
from controller.state.steps import (
    Step,
    WriteCohortStatus,
    WriteLocalQueueStatus,
    WriteQueueStatus,
)
from controller.state.timers import Timers

# How a gang counts in its ClusterQueue's status: (queue, member state, whether its Workload
# says why it waits).
Counted = tuple[str, str, bool]
LocalKey = tuple[str, str]  # (namespace, LocalQueue)


@dataclass(frozen=True)
class InLocalQueue:
    """How a gang counts in its LocalQueue's status: admitted or not, its place in the queue's
    line (priority, then age, then name) and why it waits, as its Workload says."""

    queue: LocalKey
    admitted: bool
    order: tuple[int, float, str]
    reason: str


def in_local_queue(gang: ManagedGang, member: Member | None) -> InLocalQueue | None:
    if member is None or gang.queue is None:
        return None
    core = member.gang
    priority = core.priority if core is not None else 0
    order = (-priority, gang.created(), gang.name)
    admitted = member.state == "admitted"
    return InLocalQueue((gang.namespace, gang.queue), admitted, order, gang.pending_reason())


@dataclass(frozen=True)
class Reported:
    """The pending reason last written for a gang."""

    cause: PendingCause
    at: float


@dataclass(frozen=True)
class QueueReport:
    """A pass's reports of the queues: the statuses to write, and the figures of the
    ClusterQueues and Cohorts looked at (for the metrics)."""

    queue_writes: list[WriteQueueStatus]
    queue_figures: dict[str, QueueFigures]
    cohort_writes: list[WriteCohortStatus]
    cohort_shares: dict[str, int | None]
    local_writes: list[WriteLocalQueueStatus]
    # The ClusterQueues looked at (their quota, for the metrics) and the figures of the
    # LocalQueues looked at.
    queue_objects: dict[str, ClusterQueue] = field(default_factory=dict)
    local_figures: dict[LocalKey, LocalQueueFigures] = field(default_factory=dict)


def counted(gang: ManagedGang, member: Member | None) -> Counted | None:
    if member is None or member.queue is None:
        return None
    return (member.queue, member.state, bool(gang.pending_reason()))


def _queues_below(node: QuotaNode) -> list[QuotaNode]:
    """The ClusterQueues of a cohort's subtree."""
    if node.spec is not None:
        return [node]
    return [leaf for child in node.children for leaf in _queues_below(child)]


class Reporter:
    def __init__(
        self, settings: Settings, timers: Timers, inventory: Inventory, mirror: EngineMirror
    ) -> None:
        self._settings = settings
        self._timers = timers
        self._inventory = inventory
        self._mirror = mirror
        self._reported: dict[GangKey, Reported] = {}
        self._counted: dict[GangKey, Counted] = {}
        # ClusterQueue -> [pending, inadmissible, admitted]
        self._figures: dict[str, list[int]] = {}
        self._dirty_queues: set[str] = set()
        # The ClusterQueues and Cohorts this controller looks after (see Inventory.relevant).
        self._queues: set[str] = set()
        self._cohorts: set[str] = set()
        # Each LocalQueue's gangs, and the LocalQueues whose status to compare again.
        self._in_local: dict[GangKey, InLocalQueue] = {}
        self._local: dict[LocalKey, dict[GangKey, InLocalQueue]] = {}
        self._dirty_local: set[LocalKey] = set()
        # ClusterQueue -> the recent share its status was last compared with (usage half-life).
        self._recent_shown: dict[str, int | None] = {}
        self.positions = PositionReporter(settings)

    def reset(self) -> None:
        """Forget what was told and counted: everything is told and counted again."""
        self._reported.clear()
        self._counted.clear()
        self._figures.clear()
        self._dirty_queues.update(self._queues)
        self._in_local.clear()
        self._local.clear()
        self._dirty_local.update(self._inventory.local_queue_objects)
        self.positions.reset()

    # -- pending reasons ------------------------------------------------------------------------

    def pending(self, gang: ManagedGang, why: Pending, now: float) -> list[Step]:
        """Write why the gang waits when it changed: at once when its cause changed (with an
        Event), otherwise at most every `reason_refresh` seconds (the numbers in it)."""
        text = why.describe()
        if text == gang.pending_reason():
            return []
        last = self._reported.get(gang.key)
        refresh = self._settings.reason_refresh
        if last is not None and last.cause is why.cause and now - last.at < refresh:
            self._timers.at(gang.key, last.at + refresh)
            return []
        self._reported[gang.key] = Reported(why.cause, now)
        permanent = why.cause in PERMANENT
        reason = Reason.INADMISSIBLE if permanent else Reason.PENDING
        status = objects.pending_status(gang, text, now, reason)
        steps: list[Step] = [objects.status_write(gang, status)]
        if last is None or last.cause is not why.cause:
            steps.append(objects.event(gang, reason, text, warning=permanent))
        return steps

    def told(self, key: GangKey, cause: PendingCause, now: float) -> None:
        """A write other than a pending reason (an eviction's record) told the gang `cause`."""
        self._reported[key] = Reported(cause, now)

    def forget(self, key: GangKey) -> None:
        """The gang no longer waits (admitted, or gone), or what it was told may be lost: its
        next reason is told in full."""
        self._reported.pop(key, None)

    # -- ClusterQueues ----------------------------------------------------------------------------

    def count(self, key: GangKey, now: Counted | None) -> None:
        """Keep each ClusterQueue's pending, inadmissible and admitted counts."""
        before = self._counted.get(key)
        if before == now:
            return
        for entry, sign in ((before, -1), (now, +1)):
            if entry is None:
                continue
            queue, state, inadmissible = entry
            figures = self._figures.setdefault(queue, [0, 0, 0])
            if state == "admitted":
                figures[2] += sign
            else:
                figures[0] += sign
                figures[1] += sign * inadmissible
            self._dirty_queues.add(queue)
        if now is None:
            self._counted.pop(key, None)
        else:
            self._counted[key] = now

    def count_local(self, key: GangKey, now: InLocalQueue | None) -> None:
        """Keep each LocalQueue's gangs (admitted or not, their line, why they wait)."""
        before = self._in_local.get(key)
        if before == now:
            return
        if before is not None:
            self._local.get(before.queue, {}).pop(key, None)
            self._dirty_local.add(before.queue)
        if now is None:
            self._in_local.pop(key, None)
            return
        self._in_local[key] = now
        self._local.setdefault(now.queue, {})[key] = now
        self._dirty_local.add(now.queue)

    def local_changed(self, queues: list[LocalKey]) -> None:
        """Compare these LocalQueues' status again (their spec, or their ClusterQueue, changed;
        or a write of it failed, or landed)."""
        self._dirty_local.update(queues)

    def local_queue_figures(self, queue: LocalKey) -> LocalQueueFigures:
        gangs = self._local.get(queue, {})
        running = self._mirror.engine.running
        usage: dict[tuple[str, str], int] = {}
        pending = [g for g in gangs.values() if not g.admitted]
        for key, entry in gangs.items():
            if not entry.admitted:
                continue
            found = running.get(id_of(key))
            for fr, amount in (found[1].charge if found else {}).items():
                usage[fr] = usage.get(fr, 0) + amount
        head = min(pending, key=lambda g: g.order, default=None)
        reason = head.reason or None if head is not None else None
        first = self.positions.local_head(queue)
        inadmissible = sum(1 for g in pending if g.reason)
        return LocalQueueFigures(
            len(pending), len(gangs) - len(pending), usage, reason, first, inadmissible
        )

    def _local_report(
        self, now: float
    ) -> tuple[list[WriteLocalQueueStatus], dict[LocalKey, LocalQueueFigures]]:
        inventory = self._inventory
        writes: list[WriteLocalQueueStatus] = []
        looked_at: dict[LocalKey, LocalQueueFigures] = {}
        for queue in sorted(self._dirty_local):
            lq = inventory.local_queue_objects.get(queue)
            if lq is None or not inventory.ours(queue[0]):
                continue
            cq_exists = lq.spec.cluster_queue in inventory.cluster_queues
            looked_at[queue] = figures = self.local_queue_figures(queue)
            status = objects.local_queue_status(lq, figures, cq_exists, now)
            if objects.local_queue_status_differs(lq.status, status):
                writes.append(WriteLocalQueueStatus(queue[0], queue[1], status))
        self._dirty_local.clear()
        return writes, looked_at

    def looked_after(self, queues: set[str], cohorts: set[str], *, changed: bool) -> None:
        """The ClusterQueues and Cohorts to report on; with `changed`, their quota changed."""
        self._queues, self._cohorts = queues, cohorts
        if changed:
            self._dirty_queues.update(queues)

    def queue_changed(self, names: set[str] | list[str]) -> None:
        """Compare these ClusterQueues' status with what they should show again."""
        self._dirty_queues.update(names)

    def queue_figures(self, name: str) -> QueueFigures:
        pending, inadmissible, admitted = self._figures.get(name, [0, 0, 0])
        runtime = self._mirror.engine.queues.get(name)
        usage = dict(runtime.state.usage) if runtime else {}
        weighted = share(runtime.state) if runtime else 0.0
        broken = runtime.state.broken if runtime else None
        head = self.positions.head(name)
        recent = self._mirror.engine.recent(("queue", name))
        weight = runtime.state.weight if runtime else 1.0
        return QueueFigures(
            pending, admitted, usage, weighted, inadmissible, broken, head, recent, weight
        )

    def report_positions(
        self, now: float, lookup: Callable[[GangKey], ManagedGang | None]
    ) -> PositionReport:
        """Every pending gang's positions: the Workload writes they need; the queues whose
        first gangs changed are compared again in the next `queues`."""
        local = {key: (entry.queue, entry.admitted) for key, entry in self._in_local.items()}
        report = self.positions.report(self._mirror.engine, now, local, lookup)
        self._dirty_queues.update(report.queues)
        self._dirty_local.update(report.local_queues)
        return report

    def queues(self, now: float) -> QueueReport:
        """The ClusterQueue statuses that changed and the Cohort statuses that changed, with
        the figures of every queue and Cohort looked at."""
        self._recent_moved()
        names = sorted(self._dirty_queues & self._queues)
        self._dirty_queues.clear()
        writes: list[WriteQueueStatus] = []
        figures: dict[str, QueueFigures] = {}
        queue_objects: dict[str, ClusterQueue] = {}
        for name in names:
            figures[name] = self.queue_figures(name)
            cq = self._inventory.cluster_queues.get(name)
            if cq is None:
                continue
            queue_objects[name] = cq
            status = objects.queue_status(cq, figures[name], now)
            if objects.queue_status_differs(cq.status, status):
                writes.append(WriteQueueStatus(name, status))
        cohort_writes, shares = self._cohorts_report(now)
        local_writes, local_figures = self._local_report(now)
        return QueueReport(
            writes, figures, cohort_writes, shares, local_writes, queue_objects, local_figures
        )

    def _recent_moved(self) -> None:
        """Compare again the ClusterQueues whose recent share, as their status shows it, moved
        since the last report (it moves with time alone, not with any event)."""
        engine = self._mirror.engine
        for name in self._queues:
            shown = engine.recent_share(name)
            now = None if shown is None else objects.share_shown(shown)
            if self._recent_shown.get(name) != now:
                self._recent_shown[name] = now
                self._dirty_queues.add(name)

    # -- Cohorts ----------------------------------------------------------------------------------

    def cohort_figures(
        self, name: str, nodes: Mapping[str, QuotaNode] | None = None
    ) -> CohortFigures:
        """What a Cohort's status reports: its tree's usage and quota from the engine (nothing
        when no ClusterQueue is below it), and what is wrong with its parents."""
        inventory = self._inventory
        if nodes is None:
            nodes = {n.name: n for n in self._mirror.engine.cohort_nodes}
        node = nodes.get(name)
        parents = inventory.parents()
        parent = parents.get(name)
        missing = parent if parent is not None and parent not in inventory.cohorts else None
        cycle = parent_cycle(name, parents)
        if node is None:
            cohort = inventory.cohorts.get(name)
            own = cohort_spec(cohort).groups if cohort is not None else ()
            subtree = {fr: q.nominal for fr, q in flavor_quotas(own).items()}
            return CohortFigures({}, {}, subtree, 0.0, cycle, missing)
        total: dict[tuple[str, str], int] = {}
        for leaf in _queues_below(node):
            for fr, amount in leaf.usage.items():
                total[fr] = total.get(fr, 0) + amount
        borrowed = {
            fr: used - node.subtree.get(fr, 0)
            for fr, used in node.usage.items()
            if used > node.subtree.get(fr, 0)
        }
        return CohortFigures(total, borrowed, dict(node.subtree), share(node), cycle, missing)

    def _cohorts_report(self, now: float) -> tuple[list[WriteCohortStatus], dict[str, int | None]]:
        """The Cohort statuses that changed, and the weighted share of every Cohort looked at
        (those of our trees). Cheap enough to look at every pass: there are few Cohorts."""
        cohorts = self._inventory.cohorts
        nodes = {n.name: n for n in self._mirror.engine.cohort_nodes}
        shares: dict[str, int | None] = {}
        writes: list[WriteCohortStatus] = []
        for name in sorted(self._cohorts & cohorts.keys()):
            cohort = cohorts[name]
            status = objects.cohort_status(cohort, self.cohort_figures(name, nodes), now)
            shares[name] = status.weighted_share
            if objects.cohort_status_differs(cohort.status, status):
                writes.append(WriteCohortStatus(name, status))
        return writes, shares
