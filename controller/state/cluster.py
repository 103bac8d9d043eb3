"""The controller's picture of the cluster, changed one object at a time, and the engine it feeds.

Rule: `observe` is the informers' listener and only records what changed; `sync` brings the
engine in step with the records of the gangs that changed and plans the writes they need;
`decide` runs one engine cycle and `plan_*` turn its decisions into writes; `report` says what
users see of the queues. Nothing here does I/O, awaits, or reads the clock: `now` is given.
The parts, each with its own rule: the gangs (`gangs.GangIndex`), everything else the cluster
holds (`inventory.Inventory`), the engine (`mirror.EngineMirror`, the only code that changes
it), the writes (`planner`, pure functions), the releases that keep failing
(`releases.ReleaseFailures`) and what users are told (`reporter.Reporter`).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from controller.api import kinds
from controller.api.conditions import Reason
from controller.api.kinds import Kind
from controller.api.times import format_time, parse_time
from controller.api.workload import AdmissionCheckState
from controller.quota import Pending, PendingCause
from controller.quota.engine import Engine
from controller.quota.outcomes import Admission, Decisions, Eviction, EvictionCause, Shrink
from controller.settings import Settings
from controller.state import objects, planner, provisioning
from controller.state.forecasts import Forecaster
from controller.state.gangs import GangIndex, GangKey, ManagedGang, key_of
from controller.state.gpus import GpuCounts, gpu_counts
from controller.state.inventory import Inventory
from controller.state.mirror import EngineMirror, Member, wanted
from controller.state.objects import PodGroupSettings
from controller.state.positions import PositionReport
from controller.state.releases import ReleaseFailure, ReleaseFailures
from controller.state.reporter import QueueReport, Reporter, counted, in_local_queue
from controller.state.steps import CreateObject, FailedWrite, Step
from controller.state.timers import Timers
from controller.workloads.capabilities import RecordOwner
from controller.workloads.registry import REGISTRY, Registry
from controller.workloads.standalone import STANDALONE

log = logging.getLogger("kohort.state")
_NODE_CAUSES = frozenset({PendingCause.NO_NODE_FITS, PendingCause.NEVER_FITS})

Work = dict[GangKey, list[Step]]


@dataclass(frozen=True)
class Synced:
    """What one `sync` found: the writes each changed gang needs (in order), the pending
    reasons to report (no decision waits for them), the gangs among `work` that are new (their
    first write creates their Workload), oldest first, and those that are finishing (done, their
    quota back already, their Workload yet to say so)."""

    work: Work
    reports: Work
    new: list[GangKey] = field(default_factory=list)
    finishing: list[GangKey] = field(default_factory=list)


@dataclass(frozen=True)
class AdmissionPlan:
    """The admissions' records, their releases (each written after its record), how long
    each gang waited, and the gangs that held their quota already (they waited for new nodes
    and now move onto real ones: not admitted again)."""

    records: Work
    releases: Work
    waited: dict[GangKey, float]
    moved: set[GangKey] = field(default_factory=set)


@dataclass(frozen=True)
class Report:
    """The evictions `sync` planned since the last report (gang, ClusterQueue, reason: a
    pods-ready timeout, a release that kept failing), and the queues' and cohorts' status."""

    evictions: list[tuple[GangKey, str, Reason]]
    queues: QueueReport
    positions: PositionReport


class ClusterState:
    """Every object the controller reads, the gangs found from them, and the engine."""

    def __init__(
        self,
        settings: Settings,
        podgroups: PodGroupSettings,
        *,
        registry: Registry = REGISTRY,
        submitted: RecordOwner = STANDALONE,
        namespace_filter: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.podgroups = podgroups
        self.adapters = registry.adapters
        self.rng = rng or random.Random()
        self.index = GangIndex(submitted, settings.device_classes)
        self.inventory = Inventory(self.index, namespace_filter=namespace_filter)
        self.timers = Timers()
        self.mirror = EngineMirror(settings.core)
        self.reporter = Reporter(settings, self.timers, self.inventory, self.mirror)
        self.forecasts = Forecaster(
            settings.forecast_refresh,
            budget_ms=settings.forecast_budget,
            writes=settings.forecast_writes,
            arrivals=settings.forecast_arrivals,
        )
        # New gangs a pass put off to the next (their Workloads were not made).
        self._later: set[GangKey] = set()
        self._evictions: list[tuple[GangKey, str, Reason]] = []
        # Admitted gangs whose release keeps failing.
        self.releases = ReleaseFailures()
        # Admitted gangs not released because a flavor they were admitted on has no
        # ResourceFlavor: looked at again when a ResourceFlavor appears.
        self._unreleased: set[GangKey] = set()
        # Managed gangs whose name a submitted Workload holds (told once, see _bookkeeping).
        self._taken: set[GangKey] = set()
        # Gangs waiting for new nodes whose ProvisioningRequest the API server refused: why.
        self._requests_refused: dict[GangKey, str] = {}

    # -- reading ------------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The decision engine (for tests and benches: the state changes it only through its
        mirror)."""
        return self.mirror.engine

    def gang(self, gang_id: str) -> ManagedGang | None:
        return self.index.get(key_of(gang_id))

    def gpus(self) -> GpuCounts:
        """The GPUs allocated, held by gangs not fully running, and idle, as known now."""
        return gpu_counts(self.index, self.inventory.nodes.values())

    def next_timer(self) -> float | None:
        """The earliest time a pass is due: a gang's timer, or the engine's (time alone may
        change its outcome then: a gang old enough to evict, room no longer coming back), or
        the next step of positions being computed over passes."""
        due = (self.timers.next(), self.engine.recheck_at, self.reporter.positions.next_step())
        times = [t for t in due if t is not None]
        return min(times, default=None)

    def is_done(self, key: GangKey) -> bool:
        """Whether the gang is gone or finished: it charges no quota."""
        gang = self.index.get(key)
        return gang is None or gang.owner is None or gang.finished is not None

    # -- changes (the informers' listener) ----------------------------------------------------

    def observe(self, kind: Kind, old: Any, new: Any) -> None:
        adapter = self.adapters.get(kind)
        if adapter is not None:
            self.index.owner_changed(adapter, old, new)
        if kind == kinds.PODS:
            self.inventory.pod_changed(old, new, self.index.pod_changed(old, new))
        elif kind == kinds.WORKLOADS:
            self.index.workload_changed(old, new)
        elif kind == self.podgroups.kind:
            self.index.podgroup_changed(old, new)
        elif kind == kinds.PROVISIONING_REQUESTS:
            meta = (new or old).metadata
            requests = self.inventory.provisioning_requests
            if new is None:
                requests.pop((meta.namespace, meta.name), None)
            else:
                requests[(meta.namespace, meta.name)] = new
            workload = provisioning.workload_of(meta)
            if workload:
                self.index.dirty.add((meta.namespace, workload))
        elif kind == kinds.RESOURCE_CLAIM_TEMPLATES:
            self.index.template_changed(old, new)
            meta = (new or old).metadata
            self.inventory.template_changed(meta.namespace, meta.name)
        else:
            self.inventory.observe(kind, old, new)
            if kind in (kinds.ADMISSION_CHECKS, kinds.CLUSTER_QUEUES):
                self.index.dirty.update(self.mirror.waiting_for_nodes)  # (their check may go)
            if kind == kinds.RESOURCE_FLAVORS and new is not None:
                self.index.dirty.update(self._unreleased)  # they may be released now
            elif kind == kinds.LOCAL_QUEUES:
                meta = (new or old).metadata
                self.reporter.local_changed([(meta.namespace or "", meta.name)])
            elif kind == kinds.CLUSTER_QUEUES and (old is None or new is None):
                name = (new or old).metadata.name
                local = self.inventory.local_queues
                self.reporter.local_changed([lq for lq, cq in local.items() if cq == name])

    # -- one pass: bring the engine in step and plan the writes -----------------------------

    def begin_pass(self) -> None:
        """At the start of a pass: the gangs put off by the last one are synced again."""
        self.index.dirty |= self._later
        self._later.clear()
        self.releases.begin_pass()

    def put_off(self, keys: Iterable[GangKey]) -> None:
        """Sync these new gangs again next pass (their Workloads were not made this pass)."""
        self._later.update(keys)

    def retry(self, keys: Iterable[GangKey]) -> None:
        """Look at these gangs again next pass (their writes failed): what they were to be
        told is told again."""
        for key in keys:
            self.index.dirty.add(key)
            self.reporter.forget(key)

    def writes_refused(self, refused: Iterable[tuple[GangKey, FailedWrite]], now: float) -> None:
        """The writes the API server refused in a pass: each refused release of an admitted
        gang is counted, and the gang looked at again when it is due to be evicted for it."""
        for key, failure in refused:
            if isinstance(failure.step, CreateObject):
                self._requests_refused[key] = failure.error
                self.index.dirty.add(key)
                continue
            failing = self.releases.failed(key, failure, now)
            evict_at = self._evict_unreleased_at(failing) if failing is not None else None
            if evict_at is not None:
                self.timers.at(key, evict_at)

    def _evict_unreleased_at(self, failing: ReleaseFailure) -> float | None:
        """When a gang whose release keeps failing is evicted for it (None: never)."""
        timeout = self.settings.release_timeout
        return None if timeout is None else failing.since + timeout

    def sync(self, now: float) -> Synced:
        """Take in what changed since the last call; the writes each changed gang needs."""
        self.index.dirty.update(self.timers.due(now))
        self._take_shape()
        work: Work = {}
        reports: Work = {}
        for key in sorted(self.index.take_dirty()):
            steps = self._sync_gang(key, self.index.get(key), now, reports)
            if steps:
                work[key] = steps
        inventory = self.inventory
        admitted = self.mirror.admitted
        for name in sorted(inventory.dirty_nodes):
            self.mirror.take_node_used(
                name, inventory.node_used(name, admitted), inventory.node_ports(name, admitted)
            )
        inventory.dirty_nodes.clear()
        new = sorted((key for key in work if self._is_new(key)), key=self._age)
        finishing = [key for key in work if self._is_finishing(key)]
        return Synced(work, reports, new, finishing)

    def _take_shape(self) -> None:
        """Give the engine the queues, flavors and nodes that changed."""
        inventory, mirror = self.inventory, self.mirror
        if inventory.queues_changed:
            inventory.queues_changed = False
            queues, cohorts = inventory.relevant()
            changed = mirror.take_queues(*inventory.specs(queues, cohorts))
            self._restore_recent(queues)
            self.reporter.looked_after(queues, cohorts, changed=changed)
        if inventory.flavors_changed:
            inventory.flavors_changed = False
            mirror.take_flavors(inventory.flavor_specs())
        if inventory.nodes_changed:
            inventory.nodes_changed = False
            self._take_nodes()

    def _take_nodes(self) -> None:
        """Give the engine every Ready node, and the nodes autoscaled pools can still add."""
        inventory, mirror = self.inventory, self.mirror
        held = mirror.held_new_nodes() if mirror.members else self._recorded_new_nodes()
        mirror.take_nodes(inventory.core_nodes(mirror.admitted) + inventory.pool_nodes(held))
        inventory.dirty_nodes.clear()

    def _recorded_new_nodes(self) -> set[str]:
        """The nodes still to be added that gangs' records plan them on (before the engine
        holds any gang: after a start or a reset)."""
        return {
            p.node
            for gang in self.index
            if gang.reserved and gang.shape is not None
            for p in gang.placement()
            if provisioning.is_new(p.node)
        }

    def _restore_recent(self, queues: Iterable[str]) -> None:
        """A ClusterQueue the engine has no recent usage for yet (this controller has just
        started) starts from what its status kept: fair order goes on where the last leader
        left it. Cohorts' recent usage is not kept: it starts again from nothing."""
        engine = self.mirror.engine
        if engine.config.usage_half_life <= 0:
            return
        kept = {
            ("queue", name): recent
            for name in queues
            if engine.recent(("queue", name)) is None
            and (recent := objects.recorded_recent(self.inventory.cluster_queues.get(name)))
        }
        if kept:
            engine.restore_recent_usage(kept)

    def _sync_gang(
        self, key: GangKey, gang: ManagedGang | None, now: float, reports: Work
    ) -> list[Step]:
        if gang is None or not self.inventory.ours(key[0]):
            self._follow(key, None, None, now)
            self.reporter.forget(key)
            self._unreleased.discard(key)
            return []
        steps = self._bookkeeping(gang, now)
        if steps is not None:
            self._follow(key, None, gang, now)
            return steps
        unseen = objects.shrink_unseen(gang, now) if gang.reserved else None
        if unseen is not None:  # (shrunk moments ago: held at its record's count meanwhile)
            gang = gang.admitted_as(unseen)
        resized = objects.resized(gang) if gang.reserved else None
        steps = self._converge(gang, now, resized)
        if unseen is not None:
            steps = [*objects.shrink_writes(gang, unseen), *steps]
        want = wanted(gang, self.inventory, now, resized=resized is not None)
        if want.wake_at is not None:
            self.timers.at(key, want.wake_at)
        self._follow(key, want.member, gang, now)
        why = want.member.why
        if why is None and want.member.state == "pending":
            why = self.mirror.reason(gang)
            why = self._with_pools(want.member.queue, why)
        if why is not None:
            report = self.reporter.pending(gang, why, now)
            if report:
                reports[key] = report
        return steps

    def _follow(
        self, key: GangKey, member: Member | None, gang: ManagedGang | None, now: float
    ) -> None:
        """The engine holds `member` for the gang; its queue counts it so. An admitted gang
        that finished (not one deleted or evicted: as the simulator, which learns only from
        jobs that ran to their end) tells the forecasts and the engine how long its queue's
        gangs run."""
        old = self.mirror.members.get(key)
        left = old is not None and old.state == "admitted"
        ended = None
        finished = gang is not None and gang.owner is not None and gang.finished is not None
        if left and (member is None or member.state != "admitted") and finished:
            assert old is not None
            self.forecasts.ended(old.queue, old.gang, old.admitted_at, now)
            ended = now
        if self.mirror.follow(key, member, ended_at=ended):
            self._touch_nodes(key)
        self.reporter.count(key, counted(gang, member) if gang is not None else None)
        self.reporter.count_local(key, in_local_queue(gang, member) if gang is not None else None)

    def _touch_nodes(self, key: GangKey) -> None:
        """The nodes of the gang's pods: what others use there is counted again."""
        gang = self.index.get(key)
        if gang is not None:
            self.inventory.dirty_nodes.update(
                p.spec.node_name for p in gang.pods.values() if p.spec.node_name
            )

    def _is_new(self, key: GangKey) -> bool:
        gang = self.index.get(key)
        return gang is not None and gang.workload is None and gang.owner is not None

    def _is_finishing(self, key: GangKey) -> bool:
        gang = self.index.get(key)
        return (
            gang is not None
            and gang.owner is not None
            and gang.finished is not None
            and gang.workload is not None
            and not gang.workload_finished
        )

    def _age(self, key: GangKey) -> float:
        """When the gang's object was created (0 when unknown): older gangs go first."""
        gang = self.index.get(key)
        if gang is None or gang.owner is None:
            return 0.0
        return parse_time(gang.owner.meta.creation_timestamp) or 0.0

    def _bookkeeping(self, gang: ManagedGang, now: float) -> list[Step] | None:
        """A Workload for a new gang, Finished for a done one, an orphan removed, a gang whose
        name a submitted Workload holds told so (once); None when the gang takes part in
        admission."""
        wl, owner = gang.workload, gang.owner
        taken = owner is not None and not gang.runs_itself
        if taken and wl is not None and wl.submitted():
            if gang.key in self._taken:
                return []
            self._taken.add(gang.key)
            return planner.name_taken(gang)
        self._taken.discard(gang.key)
        priority = self.inventory.priority(gang.shape) if gang.shape is not None else 0
        return planner.bookkeeping(gang, priority=priority, now=now, podgroups=self.podgroups)

    def _converge(self, gang: ManagedGang, now: float, resized: str | None) -> list[Step]:
        """A gang that holds quota has its PodGroup and is released; any other is held and has
        none; one `resized` since its admission, whose pods did not all start in time, or whose
        release kept failing for `release_timeout`, is evicted (one whose release fails is told
        so until then). This completes whatever a killed controller left half done."""
        assert gang.shape is not None
        if not gang.reserved:
            self._unreleased.discard(gang.key)
            self.releases.end(gang.key)
            return planner.hold(gang, self.podgroups)
        if resized is not None:
            log.info("evicting %s: %s", gang.id, resized)
            return self._evict(gang, Reason.RESIZED, resized, None, now)
        counts = objects.shrunk(gang)
        shrunk: list[Step] = []
        if counts is not None:  # its quota given back: its ClusterQueue's usage changed
            shrunk = objects.shrunk_record(gang, counts, now, self.podgroups)
            self.reporter.queue_changed([gang.admitted_in() or ""])
        if provisioning.waits_for_nodes(gang.placement()):
            # (no pods-ready deadline: its pods are not released until its nodes exist)
            return [*shrunk, *self._wait_for_nodes(gang, now)]
        timeout = self.settings.pods_ready_timeout
        deadline = planner.pods_ready_deadline(gang, now, timeout)
        failing = self._still_failing(gang)
        evict_at = self._evict_unreleased_at(failing) if failing is not None else None
        # (past its pods-ready deadline too, it is evicted for what kept it from starting)
        if failing is not None and any(t is not None and now >= t for t in (evict_at, deadline)):
            return self._evict_unreleased(gang, failing, now)
        if evict_at is not None:
            self.timers.at(gang.key, evict_at)
        if deadline is not None and now < deadline:
            self.timers.at(gang.key, deadline)
        elif deadline is not None:
            eviction = Eviction(
                gang.id,
                gang.admitted_in() or "",
                "",
                EvictionCause.PODS_READY_TIMEOUT,
                running=gang.running_pods(),
                needed=gang.shape.min_member,
                after=timeout or 0.0,
            )
            self._evictions.append((gang.key, eviction.queue, Reason.PODS_READY_TIMEOUT))
            return self._evict(gang, Reason.PODS_READY_TIMEOUT, eviction.describe(), None, now)
        assigned = gang.admitted_flavors()
        flavors = self.inventory.flavors
        missing = planner.missing_flavors(assigned, flavors)
        steps: list[Step] = []
        if not missing:
            self._unreleased.discard(gang.key)
            steps = planner.release(
                gang,
                assigned,
                flavors=flavors,
                podgroups=self.podgroups,
                node_labels=self.inventory.node_labels,
                checked_devices=self.inventory.checked_devices(),
            )
            self.releases.planned(gang.key, steps)
            if failing is not None and steps:
                told = objects.release_failing(failing.step, failing.error, evict_at)
                steps = planner.release_failing(gang, told) + steps
        elif planner.still_held(gang):
            self._unreleased.add(gang.key)
            return planner.not_released(gang, missing)
        # (released before its flavor was deleted: the flavor's nodes matter no more)
        consume = provisioning.consume_writes(
            gang.workload, gang.pods.values(), self.inventory.request_classes()
        )
        return [*shrunk, *steps, *consume, *planner.started(gang, now)]

    def _wait_for_nodes(self, gang: ManagedGang, now: float) -> list[Step]:
        """A gang admitted onto nodes its flavor's pool has still to add: its
        ProvisioningRequest made, its check's state recorded as the request's conditions say;
        a request that failed or expired, or that the API server refused, sends it back to its
        queue (its quota goes back) for another attempt after a backoff, or, out of attempts,
        to wait for nodes that exist. It is released once it fits whole on real nodes
        (`decide`)."""
        assert gang.shape is not None and gang.workload is not None
        placement = gang.placement()
        queue = gang.admitted_in() or ""
        flavors = sorted(
            {provisioning.flavor_of_new(p.node) for p in placement if provisioning.is_new(p.node)}
        )
        inventory = self.inventory
        check = provisioning.check_for(
            inventory.cluster_queues.get(queue), flavors, inventory.admission_checks
        )
        if check is None:
            why = (
                f"no AdmissionCheck of ClusterQueue {queue} asks for new nodes of flavor(s)"
                f" {', '.join(flavors)} any more"
            )
            return self._evict(gang, Reason.ADMISSION_CHECK, why, None, now)
        wl = gang.workload
        before = provisioning.check_state(wl, check.name)
        retries = before.retry_count if before is not None else 0
        attempts = before.attempts if before is not None else 0
        name = before.request if before is not None else None
        if name is None:
            attempts += 1
            name = provisioning.request_name(gang.name, check.name, attempts)
        request = inventory.provisioning_requests.get((gang.namespace, name))
        refused = self._requests_refused.pop(gang.key, None)
        if refused is not None:
            verdict = provisioning.Verdict("Retry", f"the API server refused it: {refused}")
        else:
            verdict = provisioning.verdict(request)
        if verdict.state == "Retry":
            return self._retry_check(gang, check, name, retries + 1, attempts, verdict.message, now)
        steps: list[Step] = []
        if request is None:
            pod_sets = planner.flavored_pod_sets(gang, inventory.flavors)
            steps += [
                CreateObject(kind, gang.namespace, body)
                for kind, body in provisioning.request_objects(wl, name, check, pod_sets)
            ]
        new = provisioning.new_node_count(placement)
        waiting = (
            f"waiting for {new} new node(s) of flavor(s) {', '.join(flavors)}: AdmissionCheck"
            f" {check.name}, ProvisioningRequest {name}: {verdict.message}"
        )
        state = AdmissionCheckState(
            name=check.name,
            state=verdict.state,
            message=verdict.message,
            retry_count=retries,
            attempts=attempts,
            request=name,
            last_transition_time=(
                before.last_transition_time
                if before is not None and before.state == verdict.state
                else format_time(now)
            ),
        )
        if before != state or (wl.status and wl.status.pending_reason != waiting):
            told = planner.waiting_for_nodes(gang, state, waiting, now, created=request is None)
            steps = [*told, *steps]
        return steps

    def _retry_check(
        self,
        gang: ManagedGang,
        check: provisioning.Check,
        request: str,
        retries: int,
        attempts: int,
        why: str,
        now: float,
    ) -> list[Step]:
        """The request failed: back to the queue after the check's backoff (quota released
        meanwhile, the request and its PodTemplates deleted), or, past its limit, rejected:
        the gang then waits for nodes that exist."""
        limit = check.settings.retry_strategy.backoff_limit_count
        rejected = retries > limit
        delay = 0.0 if rejected else provisioning.backoff(check.settings, retries)
        if rejected:
            text = (
                f"AdmissionCheck {check.name} rejected the gang: ProvisioningRequest {request}"
                f" failed ({why}) after {retries} attempt(s); it now waits for nodes that exist"
            )
        else:
            text = (
                f"AdmissionCheck {check.name}: ProvisioningRequest {request} failed ({why});"
                f" attempt {retries + 1} of {limit + 1} in {delay:.0f}s"
            )
        state = AdmissionCheckState(
            name=check.name,
            state="Rejected" if rejected else "Retry",
            message=text,
            retry_count=retries,
            attempts=attempts,
            request=None,
            last_transition_time=format_time(now),
        )
        log.info("evicting %s: %s", gang.id, text)
        self._evictions.append((gang.key, gang.admitted_in() or "", Reason.ADMISSION_CHECK))
        self.reporter.told(gang.key, PendingCause.REQUEUED, now)
        back = planner.Requeue(float(math.ceil(now + delay)), delay)
        steps = planner.evict(
            gang,
            reason=Reason.ADMISSION_CHECK,
            why=text,
            preempted=None,
            back=back,
            now=now,
            podgroups=self.podgroups,
        )
        assert gang.shape is not None
        gone = provisioning.request_deletes(
            gang.namespace, request, [ps.name for ps in gang.shape.pod_sets]
        )
        return [*planner.with_check_state(steps, state), *gone]

    def _still_failing(self, gang: ManagedGang) -> ReleaseFailure | None:
        """The gang's release failures, while some of it is still held (its failures end once
        what failed has been written)."""
        failing = self.releases.get(gang.key)
        if failing is not None and not planner.still_held(gang):
            self.releases.end(gang.key)
            return None
        return failing

    def _evict_unreleased(
        self, gang: ManagedGang, failing: ReleaseFailure, now: float
    ) -> list[Step]:
        """Evict an admitted gang whose release kept failing: its quota goes back, and it is
        requeued after a backoff."""
        self.releases.end(gang.key)
        why = objects.release_failed(
            failing.step, failing.error, attempts=failing.attempts, after=now - failing.since
        )
        log.warning("evicting %s: %s", gang.id, why)
        self._evictions.append((gang.key, gang.admitted_in() or "", Reason.RELEASE_FAILED))
        return self._evict(gang, Reason.RELEASE_FAILED, why, None, now)

    def _evict(
        self, gang: ManagedGang, reason: Reason, why: str, preempted: Reason | None, now: float
    ) -> list[Step]:
        settings = self.settings
        back = planner.requeue(
            gang,
            reason,
            now,
            base=settings.requeue_base,
            cap=settings.requeue_cap,
            jitter=lambda: self.rng.uniform(1.0, 1.1),
        )
        self.reporter.told(gang.key, PendingCause.REQUEUED, now)
        steps = planner.evict(
            gang,
            reason=reason,
            why=why,
            preempted=preempted,
            back=back,
            now=now,
            podgroups=self.podgroups,
        )
        return steps + self._drop_requests(gang)

    def _drop_requests(self, gang: ManagedGang) -> list[Step]:
        """An evicted gang that waited for new nodes gives up its ProvisioningRequest (its next
        admission makes a new one, for where it goes then)."""
        status = gang.workload.status if gang.workload else None
        if (
            status is None
            or gang.shape is None
            or not provisioning.waits_for_nodes(gang.placement())
        ):
            return []
        pod_sets = [ps.name for ps in gang.shape.pod_sets]
        return [
            step
            for check in status.admission_checks
            if check.request and check.state != "Ready"
            for step in provisioning.request_deletes(gang.namespace, check.request, pod_sets)
        ]

    # -- one cycle's decisions -------------------------------------------------------------------

    def decide(self, now: float) -> Decisions:
        """One engine cycle (the engine holds its decisions from now on; the writes come from
        `plan_*`); first, gangs that waited for new nodes and now fit whole on real ones move
        there, and are released as admissions onto them."""
        settled = self.mirror.settle(now)
        if settled:  # the nodes still to be made they held: no more than the pools can add
            self._take_nodes()
        decisions, touched = self.mirror.decide(now)
        for key in [*touched, *(key_of(a.gang) for a in settled)]:
            self._touch_nodes(key)
        if settled:
            decisions = replace(decisions, admissions=(*settled, *decisions.admissions))
        return decisions

    def plan_evictions(self, evictions: Iterable[Eviction], now: float) -> Work:
        """Each eviction's writes (none for a gang done or gone since the cycle decided: its
        quota is back anyway)."""
        work: Work = {}
        for eviction in evictions:
            key = key_of(eviction.gang)
            gang = self._still_running(key)
            if gang is None:
                work[key] = []
                continue
            same_queue = eviction.cause is EvictionCause.PREEMPTED
            preempted = Reason.IN_CLUSTER_QUEUE if same_queue else Reason.IN_COHORT_RECLAMATION
            work[key] = self._evict(gang, Reason.PREEMPTED, eviction.describe(), preempted, now)
        return work

    def plan_shrinks(self, shrinks: Iterable[Shrink], now: float) -> Work:
        """Each shrink's writes: its object lowered, its record and an Event (none for a gang
        done or gone since the cycle decided: its quota is back anyway)."""
        work: Work = {}
        for shrink in shrinks:
            key = key_of(shrink.gang)
            gang = self._still_running(key)
            work[key] = objects.shrink_steps(gang, shrink, now, self.podgroups) if gang else []
            self.reporter.queue_changed([shrink.queue])
        return work

    def _still_running(self, key: GangKey) -> ManagedGang | None:
        """The gang a decision of this pass is about, unless it is done or gone since."""
        gang = self.index.get(key)
        if gang is None or gang.owner is None or gang.finished is not None:
            return None
        return gang

    def plan_admissions(self, admissions: Iterable[Admission], now: float) -> AdmissionPlan:
        """Each admission's record and release (none for a gang done or gone since the cycle
        decided)."""
        plan = AdmissionPlan({}, {}, {})
        for admission in admissions:
            key = key_of(admission.gang)
            gang = self._still_running(key)
            if gang is None:
                plan.records[key], plan.releases[key] = [], []
                continue
            self.reporter.forget(key)
            checks, dropped = self._checks_on_admission(gang, admission, now)
            writes = planner.admission(
                gang,
                admission,
                now,
                flavors=self.inventory.flavors,
                podgroups=self.podgroups,
                node_labels=self.inventory.node_labels,
                checked_devices=self.inventory.checked_devices(),
                checks=checks,
            )
            writes.release.extend(dropped)
            if writes.missing:
                self._unreleased.add(key)
            else:
                self._unreleased.discard(key)
            self.releases.planned(key, writes.release)
            plan.records[key], plan.releases[key] = writes.record, writes.release
            plan.waited[key] = now - gang.waiting_since()
            if gang.reserved:
                plan.moved.add(key)
        return plan

    def _checks_on_admission(
        self, gang: ManagedGang, admission: Admission, now: float
    ) -> tuple[list[AdmissionCheckState] | None, list[Step]]:
        """The gang's checks' states once admitted, and the requests it needs no more (it
        moved onto real nodes before they were provisioned: they would add nodes for nothing)."""
        status = gang.workload.status if gang.workload else None
        if status is None or not status.admission_checks:
            return None, []
        requests = self.inventory.provisioning_requests
        ns = gang.namespace

        def provisioned(name: str) -> bool:
            found = requests.get((ns, name))
            return found is not None and found.is_true("Provisioned")

        moved = gang.reserved
        states = provisioning.on_admission(
            status.admission_checks,
            waiting=provisioning.waits_for_nodes(admission.placement),
            moved=moved,
            provisioned=provisioned,
            now=format_time(now),
        )
        kept = {s.request for s in states if s.request}
        pod_sets = [ps.name for ps in gang.shape.pod_sets] if gang.shape else []
        dropped: list[Step] = [
            step
            for old in status.admission_checks
            if old.request and old.request not in kept
            for step in provisioning.request_deletes(ns, old.request, pod_sets)
        ]
        return states, dropped

    def plan_reasons(self, reasons: Mapping[str, Pending], now: float) -> Work:
        """The pending reasons that changed, to write (none for a gang done since the cycle
        decided: nothing waits)."""
        work: Work = {}
        for gang_id, why in reasons.items():
            gang = self.gang(gang_id)
            if gang is None or gang.finished is not None:
                work[key_of(gang_id)] = []
            else:
                member = self.mirror.members.get(gang.key)
                told = self._with_pools(member.queue if member else None, why) or why
                work[gang.key] = self.reporter.pending(gang, told, now)
        return work

    def _with_pools(self, queue: str | None, why: Pending | None) -> Pending | None:
        """`why` a gang does not fit on nodes, saying which autoscaled pools were counted."""
        if why is None or queue is None or why.cause not in _NODE_CAUSES:
            return why
        runtime = self.engine.queues.get(queue)
        grown = runtime.spec.provisioned if runtime is not None and runtime.spec else frozenset()
        if not grown:
            return why
        pools = self.inventory.pools(grown)
        return replace(why, detail=f"counting what autoscaled pools can add: {pools}")

    def plan_forecasts(self, now: float) -> Work:
        """The start forecasts that moved, to write, when a refresh is due (none otherwise)."""
        if not self.forecasts.due(now):
            return {}
        return self.forecasts.refresh(self.engine, now, self.gang)

    # -- what users see of the queues -----------------------------------------------------------

    def report(self, now: float) -> Report:
        evictions, self._evictions = self._evictions, []
        positions = self.reporter.report_positions(now, self.index.get)
        return Report(evictions, self.reporter.queues(now), positions)

    def local_queues_changed(self, queues: Iterable[tuple[str, str]]) -> None:
        """Compare these LocalQueues' status again next report (a write failed, or landed)."""
        self.reporter.local_changed(list(queues))

    def queues_changed(self, names: Iterable[str]) -> None:
        """Compare these ClusterQueues' status again next report (a write failed, or landed)."""
        self.reporter.queue_changed(list(names))

    def reset(self) -> None:
        """Forget the engine and everything derived from the records, and build them again
        from the objects on the next sync: after a pass that did not end as planned, or when
        this replica (again) becomes the leader."""
        self.mirror.reset()
        self.reporter.reset()
        self.forecasts.forget()  # a refresh of the engine that was is no forecast of the next
        self.releases = ReleaseFailures()  # failures seen before are no guide to what comes
        self._later.clear()  # every gang is synced again anyway
        inventory = self.inventory
        inventory.queues_changed = inventory.flavors_changed = inventory.nodes_changed = True
        self.index.dirty.update(g.key for g in self.index)
