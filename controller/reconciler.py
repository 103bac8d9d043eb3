"""The admission cycle: the state's plan, one decision of the core, and the writes, in order.

Rule: all state lives in the API server; the Workload's status is the durable record of an
admission. One pass:

1. settle: the gangs that changed get their bookkeeping (a Workload, orphans removed; a
   Finished record goes out in step 3) and converge (released with a PodGroup if they hold
   quota, held without one otherwise: this completes whatever a killed controller left half
   done), and the engine takes in what changed;
2. decide: one cycle of the long-lived decision engine;
3. apply: evictions first, then admissions (every quota reservation of the pass, then their
   PodGroups and releases), then pending reasons; different gangs' writes go out
   concurrently, and with them the Finished records of gangs that are done (their quota was
   back at step 1) and the Workloads of a burst of new gangs;
4. settle what those writes changed, then report: ClusterQueue and Cohort status, metrics.

The pass waits for the writes decisions rest on (records, holds, releases, PodGroups); the
reports (pending reasons, Events, queue and cohort status) are handed to `DeferredWrites` and
go out while the next pass runs (`reconcile_once(wait=True)` waits for them too).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.api.conditions import Reason
from controller.api.kinds import Kind
from controller.cluster.clients import ApiError, Fenced
from controller.cluster.deferred import DeferredWrites
from controller.cluster.writers import Writers, superseded
from controller.metrics import ControllerMetrics
from controller.quota import Decisions
from controller.settings import Settings
from controller.state.cluster import ClusterState
from controller.state.gangs import GangKey, id_of, key_of
from controller.state.steps import FailedWrite, RecordEvent, Step

log = logging.getLogger("kohort.reconciler")
# Rounds of sync and writes per settle (a write changes its gang once more).
SYNC_ROUNDS = 3
# A pass creates Workloads for at most this many times `concurrent_writes` new gangs.
SETTLE_BUDGET_ROUNDS = 8
# Workers writing the deferred reports.
DEFERRED_WORKERS = 8


class LostLeadership(Exception):
    """This replica lost the Lease in the middle of a pass: it must not write any further."""


@dataclass
class PassStats:
    admitted: int = 0
    evicted: int = 0
    writes: int = 0
    failed: int = 0
    # The writes the API server refused, of which gangs, in order.
    refused: list[tuple[GangKey, FailedWrite]] = field(default_factory=list)


class Reconciler:
    def __init__(
        self,
        state: ClusterState,
        writers: Writers,
        settings: Settings,
        metrics: ControllerMetrics,
        *,
        clock: Callable[[], float] = time.time,
        debounce: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.state, self.writers, self.settings, self.metrics = state, writers, settings, metrics
        metrics.count_gpus(state.gpus)
        self._debounce = debounce
        self.deferred = DeferredWrites(writers, fenced=self._reports_fenced)
        # The fence refused a report (and every queued one was dropped): start afresh.
        self._lost_reports = False
        self.clock = clock
        self._leading: Callable[[], bool] = lambda: True
        self._wake = asyncio.Event()
        # When the pass under way started (time.monotonic()), None between passes: the
        # controller's /healthz tells a stuck pass from a loop waiting for events by it.
        self.pass_started: float | None = None

    def notify(self, kind: Kind, old: Any, new: Any) -> None:
        """Informer listener: record the change, and run a pass soon."""
        self.state.observe(kind, old, new)
        self._wake.set()

    async def run(self, is_leader: Callable[[], bool], synced: Callable[[], bool]) -> None:
        """Passes on changes, on due timers and every resync period, while this replica leads;
        the deferred reports written beside them."""
        workers = [
            asyncio.create_task(self.deferred.work(), name="deferred-writes")
            for _ in range(DEFERRED_WORKERS)
        ]
        try:
            await self._passes(is_leader, synced)
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    def _reset(self) -> None:
        self.deferred.clear()
        self.state.reset()

    def _reports_fenced(self) -> None:
        self._lost_reports = True
        self._wake.set()

    async def _passes(self, is_leader: Callable[[], bool], synced: Callable[[], bool]) -> None:
        self._leading = is_leader
        errors, leading = 0, False
        while True:
            # Changes that came while the last pass ran have waited long enough: the next pass
            # starts at once. Into an idle loop, one change is followed by the rest of its burst.
            busy = self._wake.is_set()
            timer, wait = self.state.next_timer(), self.settings.resync_period
            if timer is not None and leading:
                wait = max(0.0, min(wait, timer - self.clock()))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            if not busy:
                await self._debounce(self.settings.debounce)
            self._wake.clear()
            if not is_leader() or not synced():
                if leading:
                    self.deferred.clear()
                leading = False
                continue
            if not leading or self._lost_reports:
                # What it knew may be stale (another replica led), or what it told was lost.
                self._lost_reports = False
                self._reset()
                leading = True
            start = time.perf_counter()
            self.pass_started = time.monotonic()
            try:
                await self.reconcile_once(wait=False)
                errors = 0
            except LostLeadership:
                log.warning("lost the Lease during a pass; stopped writing")
                self._reset()  # what it decided was not all written
            except Exception:
                errors += 1
                self.metrics.reconcile_errors.inc()
                log.exception("reconcile pass failed")
                self._reset()
                self.pass_started = None  # the backoff is no part of the pass
                await asyncio.sleep(min(10.0, 0.2 * 2**errors) * random.uniform(0.5, 1.0))
                self._wake.set()
            finally:
                self.pass_started = None
                self.metrics.reconcile_duration.observe(time.perf_counter() - start)

    async def reconcile_once(self, *, wait: bool = True) -> PassStats:
        """One pass; with `wait`, also until its deferred reports are written."""
        stats = PassStats()
        self.state.begin_pass()
        now = self.clock()
        aside: dict[GangKey, list[Step]] = {}
        failed = await self._settle(now, stats, aside)
        decisions = self.state.decide(now)
        try:
            async with asyncio.TaskGroup() as group:
                beside = group.create_task(self._perform(aside, stats))
                applied = group.create_task(self._apply(decisions, now, stats))
        except* LostLeadership:
            raise LostLeadership() from None
        failed |= beside.result() | applied.result()
        failed |= await self._settle(now, stats)
        self.state.retry(failed)  # tried again next pass
        self.state.writes_refused(stats.refused, now)
        self._report(now, stats, failed)
        self._forecast(now)
        if stats.admitted or stats.evicted:
            self._wake.set()  # admissions change the picture: look again
        if wait:
            await self.deferred.drain()
        return stats

    async def _settle(
        self,
        now: float,
        stats: PassStats,
        aside: dict[GangKey, list[Step]] | None = None,
    ) -> set[GangKey]:
        """Sync the gangs that changed and write what they need until nothing is left; the
        gangs whose writes failed. New gangs (their Workloads to create) have a budget per
        pass, oldest first: the rest are synced next pass, which comes at once. Gangs that
        have a Workload are never put off: their writes (records, holds, releases) are what
        decisions rest on. With `aside`, the writes no decision of this pass waits for go
        there, to be written beside the decision's: the Finished records of gangs that are
        done (their quota is back already), and the Workloads of a burst of new gangs (more
        than `concurrent_writes`; they are decided next pass, and the others' decisions do
        not wait for them)."""
        failed: set[GangKey] = set()
        budget = self.settings.concurrent_writes * SETTLE_BUDGET_ROUNDS
        for _ in range(SYNC_ROUNDS):
            synced = self.state.sync(now)
            work, reports = synced.work, dict(synced.reports)
            for key in reports.keys() & work.keys():
                work[key] = [*work[key], *reports.pop(key)]  # in order, in this pass
            self._defer_reports(reports)
            new = synced.new
            if len(new) > budget:
                later = new[max(budget, 0) :]
                self.state.put_off(later)
                for key in later:
                    del work[key]
                self._wake.set()
            budget -= len(new)
            if aside is not None:
                burst = len(new) > self.settings.concurrent_writes
                # (a gang set aside in an earlier round that changed since: its newer steps)
                again = [k for k in work if k in aside]
                for key in synced.finishing + (new if burst else []) + again:
                    if key in work:
                        aside[key] = work.pop(key)
            if not work:
                break
            failed |= await self._perform(work, stats)
        return failed

    def _defer_reports(self, reports: Mapping[GangKey, Sequence[Step]]) -> None:
        for key, steps in reports.items():
            # A report a pass drops unwritten is told again next pass, if the gang still waits.
            dropped = functools.partial(self.state.retry, [key])
            self.deferred.defer(key, steps, self._retry_gang(key), dropped=dropped)

    async def _apply(self, decisions: Decisions, now: float, stats: PassStats) -> set[GangKey]:
        """Evictions, then admissions (none if an eviction failed: they counted on the
        victims' quota), then pending reasons; the gangs whose writes failed."""
        state = self.state
        evictions = state.plan_evictions(decisions.evictions, now)
        # Shrinks give back quota as evictions do: admissions count on it too.
        # (a gang shrunk, then evicted for another gang in the same cycle, is evicted)
        shrinks = [s for s in decisions.shrinks if key_of(s.gang) not in evictions]
        evictions.update(state.plan_shrinks(shrinks, now))
        failed = await self._perform(evictions, stats)
        # (one whose gang finished since the pass decided is not written, nor counted)
        written = {key for key, steps in evictions.items() if steps and key not in failed}
        for eviction in (e for e in decisions.evictions if key_of(e.gang) in written):
            stats.evicted += 1
            self.metrics.evicted(
                eviction.queue, Reason.PREEMPTED, self._local_queue_of(eviction.gang)
            )
        # A victim whose creator finished it (or deleted it) meanwhile has its quota back all
        # the same: only victims that may still run hold the admissions back.
        failed = {key for key in failed if not state.is_done(key)}
        plan = state.plan_admissions(decisions.admissions, now)
        recorded: set[GangKey] = set()
        if failed:
            log.warning(
                "an eviction was not written (refused, or its gang changed since the pass"
                " decided); admissions of this pass are skipped"
            )
            failed |= plan.records.keys()
        else:
            # Every admission's record first: a gang is admitted once its record is written,
            # and its release (after it) does not hold up the next gang's record.
            failed |= await self._perform(plan.records, stats, then=plan.releases, written=recorded)
        # (a release that fails is tried again next pass: its gang is admitted all the same)
        for admission in (a for a in decisions.admissions if key_of(a.gang) in recorded):
            if key_of(admission.gang) in plan.moved:
                log.info("%s moved onto new nodes in %s", admission.gang, admission.queue)
                continue
            stats.admitted += 1
            log.info("admitted %s in %s", admission.gang, admission.queue)
            waited = plan.waited.get(key_of(admission.gang), 0.0)
            self.metrics.admitted(admission.queue, waited, self._local_queue_of(admission.gang))
        self._defer_reports(state.plan_reasons(decisions.pending, now))
        return failed

    def _local_queue_of(self, gang_id: str) -> tuple[str, str] | None:
        """The (namespace, LocalQueue) a gang was submitted to, for the metrics."""
        gang = self.state.gang(gang_id)
        if gang is None or gang.queue is None:
            return None
        return (gang.namespace, gang.queue)

    def _forecast(self, now: float) -> None:
        """Pending gangs' start forecasts, when a refresh is due: after the pass's decisions
        are written, deferred under keys of their own (they never replace a gang's report); a
        refused one is written again when the next refresh finds it still moved."""
        for key, steps in self.state.plan_forecasts(now).items():
            self.deferred.defer(("forecast", key), steps, _ignore)

    def _retry_gang(self, key: GangKey) -> Callable[[], None]:
        def failed() -> None:
            self.metrics.reconcile_errors.inc()
            self.state.retry([key])
            self._wake.set()

        return failed

    def _report(self, now: float, stats: PassStats, failed: set[GangKey]) -> None:
        """ClusterQueue and Cohort status (when it changed, deferred) and the metrics of the
        queues and cohorts looked at (a Cohort whose write failed is written again next pass:
        its status is compared with what it shows every pass)."""
        report = self.state.report(now)
        for key, queue, reason in report.evictions:
            if key not in failed:
                stats.evicted += 1
                self.metrics.evicted(queue, reason, self._local_queue_of(id_of(key)))
        for step in report.queues.queue_writes:

            def queue_failed(name: str = step.name) -> None:
                self.metrics.reconcile_errors.inc()
                self.state.queues_changed([name])

            # Once written, compared again with what the API server now holds: a newer change
            # may have been compared, and found equal, while this one waited.
            written = functools.partial(self.state.queues_changed, [step.name])
            self.deferred.defer(("ClusterQueue", step.name), [step], queue_failed, written=written)
        for name, figures in report.queues.queue_figures.items():
            self.metrics.report_queue(name, figures, report.queues.queue_objects.get(name))
        for (namespace, local_name), local_figures in report.queues.local_figures.items():
            self.metrics.report_local_queue(namespace, local_name, local_figures)
        for local in report.queues.local_writes:
            where = (local.namespace, local.name)

            def local_failed(queue: tuple[str, str] = where) -> None:
                self.metrics.reconcile_errors.inc()
                self.state.local_queues_changed([queue])

            local_written = functools.partial(self.state.local_queues_changed, [where])
            key = ("LocalQueue", f"{local.namespace}/{local.name}")
            self.deferred.defer(key, [local], local_failed, written=local_written)
        for cohort_step in report.queues.cohort_writes:
            self.deferred.defer(
                ("Cohort", cohort_step.name), [cohort_step], self.metrics.reconcile_errors.inc
            )
        for name, weighted_share in report.queues.cohort_shares.items():
            self.metrics.report_cohort(name, weighted_share)
        for gang, position in report.positions.writes.items():

            def position_failed(key: GangKey = gang) -> None:
                self.metrics.reconcile_errors.inc()
                self.state.reporter.positions.failed(key)

            self.deferred.defer(("WorkloadPosition", *gang), [position], position_failed)
        inventory = self.state.inventory
        self.metrics.forget_gone(inventory.cluster_queues, inventory.local_queue_objects)

    async def _perform(
        self,
        work: Mapping[GangKey, Sequence[Step]],
        stats: PassStats,
        then: Mapping[GangKey, Sequence[Step]] | None = None,
        written: set[GangKey] | None = None,
    ) -> set[GangKey]:
        """Each entry's steps in order, `concurrent_writes` entries at a time; the entries that
        failed. A failed write (a namespace being deleted, a conflict) stops only its own
        entry. Every write checks the Lease first. With `then`, an entry whose steps were all
        written has its `then` steps written after them, once no entry of `work` is left to
        start (no barrier: they start while the last of `work` are still in flight). `written`
        collects the entries whose steps (not their `then` steps) were all written.
        """
        failed: set[GangKey] = set()
        first = deque((name, steps) for name, steps in work.items() if steps)
        after: deque[tuple[GangKey, Sequence[Step]]] = deque()
        following = then or {}

        async def write(name: GangKey, steps: Sequence[Step]) -> bool:
            await self.deferred.claim(name)
            for step in steps:
                if not self._leading():
                    raise LostLeadership()
                if isinstance(step, RecordEvent):
                    self.deferred.event(step)
                    continue
                try:
                    await self.writers.perform(step)
                except Fenced:
                    raise LostLeadership() from None
                except ApiError as err:
                    failed.add(name)
                    if superseded(step, err):
                        log.info("%s: changed by its creator since this pass decided", name)
                        return False
                    stats.failed += 1
                    stats.refused.append((name, FailedWrite(step, err.summary)))
                    self.metrics.reconcile_errors.inc()
                    log.warning("%s: %s failed: %s", name, type(step).__name__, err)
                    return False
                stats.writes += 1
            return True

        async def worker() -> None:
            while first or after:
                if first:
                    name, steps = first.popleft()
                    if await write(name, steps):
                        if written is not None:
                            written.add(name)
                        if following.get(name):
                            after.append((name, following[name]))
                else:
                    await write(*after.popleft())

        try:
            with self.deferred.foreground():
                async with asyncio.TaskGroup() as group:
                    for _ in range(min(self.settings.concurrent_writes, len(work))):
                        group.create_task(worker())
        except* LostLeadership:
            raise LostLeadership() from None
        return failed


def _ignore() -> None:
    """A write whose failure needs nothing done."""
