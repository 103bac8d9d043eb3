"""The async loop that ties cache, decision core and writers together.

Rule: all state lives in the API server; the Workload's status is the durable record of an
admission. One pass, in order:

1. read the cache as one view;
2. bookkeeping: a Workload for every new gang, Finished for gangs that are done, orphans removed;
3. converge: every Workload that holds quota has its PodGroup and is released, every other one
   is held (this completes whatever a killed controller left half done);
4. waitForPodsReady: evict admitted gangs whose pods did not all start in time;
5. decide: build the core's snapshot and run one admission cycle;
6. apply: evictions, then admissions (quota reservation first, then PodGroup, then release),
   then pending reasons;
7. report: ClusterQueue status and metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller import quota
from controller.api.quantity import format_quantity
from controller.cluster.cache import Cache
from controller.cluster.clients import ApiError, JSONDict, Kind
from controller.cluster.snapshots import build_snapshot, queue_spec
from controller.cluster.view import (
    ADMITTED,
    EVICTED,
    FINISHED,
    PODS_READY,
    QUOTA_RESERVED,
    REQUEUE_AT_ANNOTATION,
    REQUEUE_COUNT_ANNOTATION,
    ClusterView,
    GangView,
    format_time,
    gang_priority,
    is_true,
    milli,
    parse_time,
)
from controller.cluster.writers import Writers, set_condition
from controller.metrics import ControllerMetrics
from controller.quota.quota import add_usage, build_cohorts, share
from controller.workloads.edits import lookup

log = logging.getLogger("kohort.reconciler")


@dataclass(frozen=True)
class Settings:
    # Evict a released gang whose pods are not all running after this long (None: never).
    pods_ready_timeout: float | None = 300.0
    # Requeue backoff after a PodsReadyTimeout eviction: base * 2^(n-1), capped, with jitter.
    requeue_base: float = 10.0
    requeue_cap: float = 3600.0
    # A pass runs at least this often (timeouts and backoffs expire without events).
    resync_period: float = 5.0
    # Events arriving within this window are handled by one pass.
    debounce: float = 0.1
    core: quota.Config = field(default_factory=quota.Config)


def explain(reason: str) -> str:
    """The core's pending reason in the words `kubectl describe` shows."""
    if reason.startswith("quota ok; placement: "):
        return "Quota ok but no node fits: " + reason.removeprefix("quota ok; placement: ")
    if reason.startswith("quota: "):
        return "Waiting for quota: " + reason.removeprefix("quota: ")
    return reason[:1].upper() + reason[1:]


class LostLeadership(Exception):
    """This replica lost the Lease in the middle of a pass: it must not write any further."""


@dataclass
class PassStats:
    admitted: int = 0
    evicted: int = 0
    writes: int = 0


class Reconciler:
    def __init__(
        self,
        cache: Cache,
        writers: Writers,
        settings: Settings,
        metrics: ControllerMetrics,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.writers = writers
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self._wake = asyncio.Event()
        self.passes = 0
        self.failures = 0
        self._leading: Callable[[], bool] = lambda: True
        self._rng = random.Random()

    @contextlib.contextmanager
    def _isolated(self, what: str) -> Iterator[None]:
        """One gang's failed write (e.g. its namespace is being deleted) must not stop the
        others: log it, count it, and let the next pass try again."""
        try:
            yield
        except ApiError as err:
            self.failures += 1
            self.metrics.reconcile_errors.inc()
            log.warning("%s: %s", what, err)

    def notify(self, kind: Kind, event: str, obj: JSONDict) -> None:
        """Informer listener: something changed, run a pass soon."""
        self._wake.set()

    async def run(self, is_leader: Callable[[], bool]) -> None:
        self._leading = is_leader
        errors = 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.resync_period)
            await asyncio.sleep(self.settings.debounce)
            self._wake.clear()
            if not is_leader() or not self.cache.synced():
                continue
            start = time.perf_counter()
            try:
                await self.reconcile_once()
                errors = 0
            except asyncio.CancelledError:
                raise
            except LostLeadership:
                log.warning("lost the Lease during a pass; stopped writing")
            except Exception:
                errors += 1
                self.metrics.reconcile_errors.inc()
                log.exception("reconcile pass failed")
                await asyncio.sleep(min(10.0, 0.2 * 2**errors) * self._rng.uniform(0.5, 1.0))
                self._wake.set()
            finally:
                self.metrics.reconcile_duration.observe(time.perf_counter() - start)

    # -- one pass --------------------------------------------------------------------------------

    async def reconcile_once(self) -> PassStats:
        stats = PassStats()
        now = self.clock()
        view = self.cache.view()
        if await self._bookkeeping(view, now, stats):
            view = self.cache.view()
        self._check_leading()
        await self._converge(view, stats)
        self._check_leading()
        if await self._pods_ready(view, now, stats):
            view = self.cache.view()
        pending, admitted, waiting = self._classify(view, now)
        parts = build_snapshot(view, now=now, pending=pending, admitted=admitted)
        decisions = quota.decide(parts.snapshot, now, self.settings.core)
        await self._apply(view, decisions, waiting, now, stats)
        await self._report(self.cache.view(), now)
        self.passes += 1
        if stats.admitted or stats.evicted:
            self._wake.set()  # admissions change the picture: look again
        return stats

    # -- 2. bookkeeping ----------------------------------------------------------------------------

    async def _bookkeeping(self, view: ClusterView, now: float, stats: PassStats) -> bool:
        changed = False
        for gang in view.gangs.values():
            with self._isolated(f"bookkeeping of {gang.key}"):
                changed |= await self._bookkeep(gang, view, now, stats)
        for orphan in view.orphans:
            with self._isolated(f"deleting orphaned Workload {orphan['metadata']['name']}"):
                await self._delete_orphan(orphan, stats)
                changed = True
        return changed

    async def _bookkeep(
        self, gang: GangView, view: ClusterView, now: float, stats: PassStats
    ) -> bool:
        if gang.workload is None:
            if gang.finished:
                return False
            gang.workload = await self.writers.create_workload(
                gang, gang_priority(gang, view.priority_classes)
            )
            log.info("created Workload %s", gang.key)
            stats.writes += 1
            return True
        if gang.finished and not gang.workload_finished:
            conditions = gang.workload.get("status", {}).get("conditions") or []
            conditions = set_condition(
                conditions, FINISHED, "True", gang.finished, f"the gang {gang.finished}", now
            )
            for kind in (QUOTA_RESERVED, ADMITTED):
                if is_true(gang.workload, kind):
                    conditions = set_condition(
                        conditions, kind, "False", "Finished", "quota released", now
                    )
            await self.writers.patch_workload_status(gang, {"conditions": conditions})
            await self.writers.event(
                gang, "Finished", f"Gang {gang.finished.lower()}; its quota is released"
            )
            stats.writes += 1
            return True
        return False

    async def _delete_orphan(self, orphan: JSONDict, stats: PassStats) -> None:
        meta = orphan["metadata"]
        namespace = str(meta.get("namespace", ""))
        await self.writers.delete_podgroup(namespace, meta["name"])
        await self.writers.delete_workload(namespace, meta["name"])
        log.info("deleted Workload %s/%s: its owner is gone", namespace, meta["name"])
        stats.writes += 1

    # -- 3. converge ------------------------------------------------------------------------------

    async def _converge(self, view: ClusterView, stats: PassStats) -> None:
        for gang in view.gangs.values():
            if gang.workload is None or gang.finished or gang.workload_finished:
                continue
            with self._isolated(f"converging {gang.key}"):
                if gang.reserved:
                    if gang.key not in view.podgroups:
                        await self.writers.ensure_podgroup(gang)
                        stats.writes += 1
                    stats.writes += await self.writers.release(gang)
                else:
                    if gang.key in view.podgroups:
                        await self.writers.delete_podgroup(gang.namespace, gang.name)
                        stats.writes += 1
                    stats.writes += await self.writers.hold(gang)

    # -- 4. waitForPodsReady ----------------------------------------------------------------------

    async def _pods_ready(self, view: ClusterView, now: float, stats: PassStats) -> bool:
        timeout = self.settings.pods_ready_timeout
        evicted = False
        for gang in view.gangs.values():
            if not gang.reserved or gang.finished or gang.workload is None:
                continue
            ready = gang.running_pods() >= gang.min_member
            if ready:
                if not is_true(gang.workload, PODS_READY):
                    conditions = set_condition(
                        gang.workload.get("status", {}).get("conditions") or [],
                        PODS_READY,
                        "True",
                        "Started",
                        f"{gang.running_pods()} of {gang.min_member} pods running",
                        now,
                    )
                    with self._isolated(f"PodsReady of {gang.key}"):
                        await self.writers.patch_workload_status(gang, {"conditions": conditions})
                        stats.writes += 1
                continue
            if timeout is None or is_true(gang.workload, PODS_READY):
                continue
            admitted_at = gang.admitted_at() or now
            if now - admitted_at < timeout:
                continue
            message = (
                f"only {gang.running_pods()} of {gang.min_member} pods running {timeout:.0f}s "
                "after admission"
            )
            with self._isolated(f"evicting {gang.key}"):
                await self._evict(gang, view, "PodsReadyTimeout", message, None, now)
            stats.evicted += 1
            evicted = True
        return evicted

    # -- 5. decide --------------------------------------------------------------------------------

    def _classify(
        self, view: ClusterView, now: float
    ) -> tuple[list[GangView], list[GangView], dict[str, str]]:
        """Gangs the core should consider, gangs that hold quota, and gangs kept out (why)."""
        pending: list[GangView] = []
        admitted: list[GangView] = []
        waiting: dict[str, str] = {}
        for gang in view.gangs.values():
            if gang.workload is None or gang.finished or gang.workload_finished:
                continue
            if gang.reserved:
                admitted.append(gang)
                continue
            if view.cluster_queue_of(gang) is None:
                waiting[gang.key] = (
                    f"LocalQueue {gang.queue!r} does not exist in namespace {gang.namespace}"
                )
                continue
            requeue_at = gang.requeue_at()
            if requeue_at > now:
                waiting[gang.key] = (
                    f"requeued after eviction; back in the queue at {format_time(requeue_at)}"
                )
                continue
            pending.append(gang)
        return pending, admitted, waiting

    # -- 6. apply ---------------------------------------------------------------------------------

    async def _apply(
        self,
        view: ClusterView,
        decisions: quota.Decisions,
        waiting: Mapping[str, str],
        now: float,
        stats: PassStats,
    ) -> None:
        failures = self.failures
        for eviction in decisions.evictions:
            gang = view.gangs.get(eviction.gang)
            if gang is None:
                continue
            reason = "InClusterQueue" if "same queue" in eviction.reason else "InCohortReclamation"
            with self._isolated(f"evicting {gang.key}"):
                await self._evict(gang, view, "Preempted", eviction.reason, reason, now)
                stats.evicted += 1
        if self.failures > failures:
            # The admissions counted on those victims' quota: decide again next pass.
            log.warning("an eviction failed; admissions of this pass are skipped")
            self._wake.set()
            return
        for admission in decisions.admissions:
            gang = view.gangs.get(admission.gang)
            if gang is None:
                continue
            with self._isolated(f"admitting {gang.key}"):
                await self._admit(gang, admission, now)
                stats.admitted += 1
        reasons = dict(waiting)
        reasons.update(decisions.pending)
        for key, reason in reasons.items():
            gang = view.gangs.get(key)
            if gang is None or gang.workload is None:
                continue
            with self._isolated(f"pending reason of {gang.key}"):
                await self._mark_pending(gang, explain(reason), now)

    def _check_leading(self) -> None:
        """Admissions and evictions are written only while this replica holds the Lease."""
        if not self._leading():
            raise LostLeadership()

    async def _admit(self, gang: GangView, admission: quota.Admission, now: float) -> None:
        assert gang.workload is not None
        self._check_leading()
        assignments: list[JSONDict] = []
        for ps in gang.pod_sets:
            nodes = [
                {"node": p.node, "count": p.count}
                for p in admission.placement
                if p.pod_set == ps.name
            ]
            assignments.append(
                {
                    "name": ps.name,
                    "count": ps.count,
                    "resourceUsage": {
                        r: format_quantity(a * ps.count) for r, a in sorted(ps.requests.items())
                    },
                    "nodes": nodes,
                }
            )
        conditions = gang.workload.get("status", {}).get("conditions") or []
        message = f"Admitted by ClusterQueue {admission.queue}"
        conditions = set_condition(
            conditions, QUOTA_RESERVED, "True", "QuotaReserved", admission.reason, now
        )
        conditions = set_condition(conditions, ADMITTED, "True", "Admitted", message, now)
        if any(c.get("type") == EVICTED for c in conditions):
            conditions = set_condition(conditions, EVICTED, "False", "Admitted", message, now)
        conditions = [c for c in conditions if c.get("type") not in (PODS_READY, "Preempted")]
        # 1. the quota reservation, durable before anything is released
        await self.writers.patch_workload_status(
            gang,
            {
                "conditions": conditions,
                "admission": {
                    "clusterQueue": admission.queue,
                    "podSetAssignments": assignments,
                    "admittedAt": format_time(now),
                },
                "pendingReason": None,
            },
        )
        # 2. the PodGroup, 3. the release
        await self.writers.ensure_podgroup(gang)
        await self.writers.release(gang)
        await self.writers.event(gang, "Admitted", f"{message}: {admission.reason}")
        since = max(
            parse_time(gang.workload["metadata"].get("creationTimestamp")) or now,
            gang.requeue_at(),
        )
        self.metrics.admissions.labels(admission.queue).inc()
        self.metrics.admission_wait.labels(admission.queue).observe(max(0.0, now - since))
        log.info("admitted %s in %s: %s", gang.key, admission.queue, admission.reason)

    async def _evict(
        self,
        gang: GangView,
        view: ClusterView,
        reason: str,
        message: str,
        preempted: str | None,
        now: float,
    ) -> None:
        assert gang.workload is not None
        self._check_leading()
        queue = str(lookup(gang.workload, ["status", "admission", "clusterQueue"]) or "")
        # Requeue with exponential backoff, so an evicted gang cannot thrash its queue.
        count = gang.requeue_count() + 1
        delay = min(self.settings.requeue_cap, self.settings.requeue_base * 2 ** (count - 1))
        delay *= self._rng.uniform(1.0, 1.1)
        message += f"; requeued (attempt {count}), back in the queue in {delay:.0f}s"
        await self.writers.annotate_workload(
            gang,
            {REQUEUE_COUNT_ANNOTATION: str(count), REQUEUE_AT_ANNOTATION: f"{now + delay:.3f}"},
        )
        conditions = gang.workload.get("status", {}).get("conditions") or []
        conditions = set_condition(conditions, EVICTED, "True", reason, message, now)
        if preempted is not None:
            conditions = set_condition(conditions, "Preempted", "True", preempted, message, now)
        conditions = set_condition(
            conditions, QUOTA_RESERVED, "False", "Pending", f"evicted: {message}", now
        )
        conditions = set_condition(conditions, ADMITTED, "False", reason, message, now)
        conditions = [c for c in conditions if c.get("type") != PODS_READY]
        # The record first: from here on the gang counts as pending, and a restart holds it.
        await self.writers.patch_workload_status(
            gang,
            {"conditions": conditions, "admission": None, "pendingReason": f"evicted: {message}"},
        )
        await self.writers.hold(gang)
        await self.writers.delete_podgroup(gang.namespace, gang.name)
        await self.writers.event(gang, reason, f"Evicted: {message}", warning=True)
        self.metrics.evictions.labels(queue, reason).inc()
        log.info("evicted %s (%s): %s", gang.key, reason, message)

    async def _mark_pending(self, gang: GangView, message: str, now: float) -> None:
        assert gang.workload is not None
        before = str(lookup(gang.workload, ["status", "pendingReason"]) or "")
        if before == message:
            return
        conditions = gang.workload.get("status", {}).get("conditions") or []
        conditions = set_condition(conditions, QUOTA_RESERVED, "False", "Pending", message, now)
        await self.writers.patch_workload_status(
            gang, {"conditions": conditions, "pendingReason": message}
        )
        # One Event per kind of reason; the status keeps the exact numbers up to date.
        if before.split(":")[0] != message.split(":")[0]:
            await self.writers.event(gang, "Pending", message)

    # -- 7. report -------------------------------------------------------------------------

    async def _report(self, view: ClusterView, now: float) -> None:
        specs = {str(cq["metadata"]["name"]): queue_spec(cq) for cq in view.cluster_queues}
        states = build_cohorts(specs.values())
        pending: dict[str, int] = dict.fromkeys(specs, 0)
        inadmissible: dict[str, int] = dict.fromkeys(specs, 0)
        admitted: dict[str, int] = dict.fromkeys(specs, 0)
        for gang in view.gangs.values():
            if gang.workload is None or gang.finished or gang.workload_finished:
                continue
            if gang.reserved:
                cq = str(lookup(gang.workload, ["status", "admission", "clusterQueue"]) or "")
                if cq in states:
                    add_usage(states[cq], gang.total_requests(), +1)
                    admitted[cq] += 1
                continue
            cq = view.cluster_queue_of(gang) or ""
            if cq in pending:
                pending[cq] += 1
                if lookup(gang.workload, ["status", "pendingReason"]):
                    inadmissible[cq] += 1
        for queue_obj in view.cluster_queues:
            name = str(queue_obj["metadata"]["name"])
            state = states[name]
            weighted = share(state)
            self.metrics.pending.labels(name, "active").set(pending[name] - inadmissible[name])
            self.metrics.pending.labels(name, "inadmissible").set(inadmissible[name])
            self.metrics.admitted_active.labels(name).set(admitted[name])
            self.metrics.weighted_share.labels(name).set(
                weighted if math.isfinite(weighted) else -1
            )
            status = {
                "pendingWorkloads": pending[name],
                "admittedWorkloads": admitted[name],
                "weightedShare": math.ceil(weighted) if math.isfinite(weighted) else -1,
                "flavorsUsage": _flavors_usage(queue_obj, state.usage),
                "conditions": [
                    {
                        "type": "Active",
                        "status": "True",
                        "reason": "Ready",
                        "message": "Can admit new workloads",
                        "lastTransitionTime": _active_since(queue_obj, now),
                    }
                ],
            }
            if _status_differs(queue_obj.get("status") or {}, status):
                try:
                    await self.writers.patch_cluster_queue_status(name, status)
                except ApiError as err:
                    log.warning("status of ClusterQueue %s not written: %s", name, err)


def _active_since(cq: JSONDict, now: float) -> str:
    for cond in lookup(cq, ["status", "conditions"]) or []:
        if cond.get("type") == "Active" and cond.get("lastTransitionTime"):
            return str(cond["lastTransitionTime"])
    return format_time(now)


def _flavors_usage(cq: JSONDict, usage: Mapping[str, int]) -> list[JSONDict]:
    """Usage per flavor and resource: a resource's usage is shown on the first flavor listing it."""
    out: list[JSONDict] = []
    seen: set[str] = set()
    spec = cq.get("spec") or {}
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            resources = []
            for res in flavor.get("resources") or []:
                name = str(res["name"])
                used = usage.get(name, 0) if name not in seen else 0
                seen.add(name)
                nominal = milli(res.get("nominalQuota", "0"))
                resources.append(
                    {
                        "name": name,
                        "total": format_quantity(max(used, 0)),
                        "borrowed": format_quantity(max(0, used - nominal)),
                    }
                )
            out.append({"name": str(flavor["name"]), "resources": resources})
    return out


def _status_differs(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    for key, value in new.items():
        if key == "conditions":
            old_types = [(c.get("type"), c.get("status")) for c in old.get(key) or []]
            if old_types != [(c["type"], c["status"]) for c in value]:
                return True
            continue
        if old.get(key) != value:
            return True
    return False
