"""Prometheus metrics of the quota controller, on a registry of their own.

Named and labelled after Kueue's where the meaning is the same (`kueue_` becomes `kohort_`;
docs/operations.md has the table), so that a Grafana user's queries carry over.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Collection, Iterator
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from controller.api.quantity import QuantityError, parse_quantity
from controller.api.queues import ClusterQueue
from controller.state.gpus import GpuCounts
from controller.state.objects import LocalQueueFigures, QueueFigures

WAIT_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)
# Kueue's quota and usage series name the ClusterQueue's cohort too ("" when it has none).
QUOTA_LABELS = ["cohort", "cluster_queue", "flavor", "resource"]
# Whose series a labelled child is: a ClusterQueue's (by name) or a LocalQueue's (namespace,
# name); when the queue is deleted, its series go too (as Kueue's do).
CQ, LQ = "ClusterQueue", "LocalQueue"
M = TypeVar("M", bound=MetricWrapperBase)
LOCAL_LABELS = ["name", "namespace"]
# A pending gang is `inadmissible` once its Workload says why it waits, `active` before.
ACTIVE, INADMISSIBLE = "active", "inadmissible"


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.pending = Gauge(
            "kohort_pending_workloads",
            "Workloads waiting for admission, by ClusterQueue and status",
            ["cluster_queue", "status"],
            registry=r,
        )
        self.admitted_active = Gauge(
            "kohort_admitted_active_workloads",
            "Workloads holding quota, by ClusterQueue",
            ["cluster_queue"],
            registry=r,
        )
        self.admissions = Counter(
            "kohort_admitted_workloads_total",
            "Admissions, by ClusterQueue",
            ["cluster_queue"],
            registry=r,
        )
        self.evictions = Counter(
            "kohort_evicted_workloads_total",
            "Evictions of whole gangs, by ClusterQueue and reason",
            ["cluster_queue", "reason"],
            registry=r,
        )
        self.admission_wait = Histogram(
            "kohort_admission_wait_time_seconds",
            "Time from a Workload's creation (or requeue) to its admission",
            ["cluster_queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.weighted_share = Gauge(
            "kohort_cluster_queue_weighted_share",
            "Weighted dominant resource share of a ClusterQueue in its cohort (x1000)",
            ["cluster_queue", "cohort"],
            registry=r,
        )
        self.cohort_weighted_share = Gauge(
            "kohort_cohort_weighted_share",
            "Weighted dominant resource share of a Cohort in its parent (x1000)",
            ["cohort"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "kohort_reconcile_errors_total",
            "Reconcile passes that failed, and writes the API server refused or did not answer",
            registry=r,
        )
        self.reconcile_duration = Histogram(
            "kohort_reconcile_duration_seconds",
            "Duration of one reconcile pass",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.leader = Gauge(
            "kohort_leader", "1 while this replica holds the leader Lease", registry=r
        )
        self._series: dict[tuple[str, object], set[tuple[MetricWrapperBase, tuple[str, ...]]]] = {}
        self._gpus: _Gpus | None = None
        # The cohort each ClusterQueue's series were labelled with, last.
        self._cohorts: dict[str, str] = {}
        # Per flavor and resource of a ClusterQueue (Kueue: metrics.enableClusterQueueResources).
        self.nominal_quota = Gauge(
            "kohort_cluster_queue_nominal_quota",
            "Nominal quota of a ClusterQueue, per flavor and resource (in the resource's units)",
            QUOTA_LABELS,
            registry=r,
        )
        self.borrowing_limit = Gauge(
            "kohort_cluster_queue_borrowing_limit",
            "Borrowing limit of a ClusterQueue, per flavor and resource (absent: no limit)",
            QUOTA_LABELS,
            registry=r,
        )
        self.lending_limit = Gauge(
            "kohort_cluster_queue_lending_limit",
            "Lending limit of a ClusterQueue, per flavor and resource (absent: no limit)",
            QUOTA_LABELS,
            registry=r,
        )
        self.resource_usage = Gauge(
            "kohort_cluster_queue_resource_usage",
            "What the admitted gangs of a ClusterQueue hold, per flavor and resource",
            QUOTA_LABELS,
            registry=r,
        )
        self.resource_borrowed = Gauge(
            "kohort_cluster_queue_resource_borrowed",
            "What a ClusterQueue uses above its nominal quota, from its cohort",
            QUOTA_LABELS,
            registry=r,
        )
        self.local_pending = Gauge(
            "kohort_local_queue_pending_workloads",
            "Workloads waiting for admission, by LocalQueue and status",
            [*LOCAL_LABELS, "status"],
            registry=r,
        )
        self.local_admitted_active = Gauge(
            "kohort_local_queue_admitted_active_workloads",
            "Workloads holding quota, by LocalQueue",
            LOCAL_LABELS,
            registry=r,
        )
        self.local_resource_usage = Gauge(
            "kohort_local_queue_resource_usage",
            "What the admitted gangs of a LocalQueue hold, per flavor and resource",
            [*LOCAL_LABELS, "flavor", "resource"],
            registry=r,
        )
        self.local_admissions = Counter(
            "kohort_local_queue_admitted_workloads_total",
            "Admissions, by LocalQueue",
            LOCAL_LABELS,
            registry=r,
        )
        self.local_admission_wait = Histogram(
            "kohort_local_queue_admission_wait_time_seconds",
            "Time from a Workload's creation (or requeue) to its admission, by LocalQueue",
            LOCAL_LABELS,
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.local_evictions = Counter(
            "kohort_local_queue_evicted_workloads_total",
            "Evictions of whole gangs, by LocalQueue and reason",
            [*LOCAL_LABELS, "reason"],
            registry=r,
        )

    def count_gpus(self, counts: Callable[[], GpuCounts]) -> None:
        """Export `kohort_gpus`, counted by `counts` at each scrape (replacing an earlier one)."""
        if self._gpus is not None:
            self.registry.unregister(self._gpus)
        self._gpus = _Gpus(counts)
        self.registry.register(self._gpus)

    def _of(self, kind: str, owner: object, metric: M, *labels: str) -> M:
        """`metric.labels(*labels)`, remembered as a series of queue `owner`."""
        self._series.setdefault((kind, owner), set()).add((metric, labels))
        return metric.labels(*labels)

    def forget_gone(
        self, cluster_queues: Collection[str], local_queues: Collection[tuple[str, str]]
    ) -> None:
        """Drop the series of the queues that no longer exist."""
        for kind, owner in list(self._series):
            present = cluster_queues if kind == CQ else local_queues
            if owner not in present:
                for metric, labels in self._series.pop((kind, owner)):
                    _remove(metric, labels)
        for name in self._cohorts.keys() - set(cluster_queues):
            del self._cohorts[name]

    def _cohort(self, name: str, queue: ClusterQueue | None) -> str:
        """The cohort of ClusterQueue `name` (the last one known, without its object); when it
        changed, the series labelled with the old one are dropped."""
        before = self._cohorts.get(name)
        cohort = (queue.spec.cohort or "") if queue is not None else before or ""
        if before is not None and before != cohort:
            series = self._series.get((CQ, name), set())
            for metric, labels in [(m, ls) for m, ls in series if m in self._by_cohort]:
                series.discard((metric, labels))
                _remove(metric, labels)
        self._cohorts[name] = cohort
        return cohort

    @property
    def _by_cohort(self) -> tuple[MetricWrapperBase, ...]:
        return (
            self.weighted_share,
            self.nominal_quota,
            self.borrowing_limit,
            self.lending_limit,
            self.resource_usage,
            self.resource_borrowed,
        )

    def admitted(self, queue: str, waited: float, local: tuple[str, str] | None = None) -> None:
        """An admission into ClusterQueue `queue`, from LocalQueue `local` (namespace, name)."""
        self._of(CQ, queue, self.admissions, queue).inc()
        self._of(CQ, queue, self.admission_wait, queue).observe(max(0.0, waited))
        if local is not None:
            namespace, name = local
            self._of(LQ, (namespace, name), self.local_admissions, name, namespace).inc()
            self._of(LQ, (namespace, name), self.local_admission_wait, name, namespace).observe(
                max(0.0, waited)
            )

    def evicted(self, queue: str, reason: str, local: tuple[str, str] | None = None) -> None:
        self._of(CQ, queue, self.evictions, queue, reason).inc()
        if local is not None:
            namespace, name = local
            self._of(LQ, (namespace, name), self.local_evictions, name, namespace, reason).inc()

    def report_queue(
        self, name: str, figures: QueueFigures, queue: ClusterQueue | None = None
    ) -> None:
        cohort = self._cohort(name, queue)
        active = figures.pending - figures.inadmissible
        self._of(CQ, name, self.pending, name, ACTIVE).set(active)
        self._of(CQ, name, self.pending, name, INADMISSIBLE).set(figures.inadmissible)
        self._of(CQ, name, self.admitted_active, name).set(figures.admitted)
        share = figures.weighted_share
        self._of(CQ, name, self.weighted_share, name, cohort).set(
            share if math.isfinite(share) else -1
        )
        usage = figures.usage or {}
        for (flavor, resource), milli in usage.items():
            labels = (cohort, name, flavor, resource)
            self._of(CQ, name, self.resource_usage, *labels).set(milli / 1000)
        if queue is None:
            return
        for group in queue.spec.resource_groups:
            for flavor_quotas in group.flavors:
                for quota in flavor_quotas.resources:
                    labels = (cohort, name, flavor_quotas.name, quota.name)
                    nominal = _units(quota.nominal_quota)
                    self._of(CQ, name, self.nominal_quota, *labels).set(nominal)
                    for gauge, limit in (
                        (self.borrowing_limit, quota.borrowing_limit),
                        (self.lending_limit, quota.lending_limit),
                    ):
                        if limit is None:
                            _remove(gauge, labels)
                        else:
                            self._of(CQ, name, gauge, *labels).set(_units(limit))
                    used = usage.get((flavor_quotas.name, quota.name), 0) / 1000
                    self._of(CQ, name, self.resource_usage, *labels).set(used)
                    self._of(CQ, name, self.resource_borrowed, *labels).set(
                        max(0.0, used - nominal)
                    )

    def report_local_queue(self, namespace: str, name: str, figures: LocalQueueFigures) -> None:
        where = (namespace, name)
        active = figures.pending - figures.inadmissible
        self._of(LQ, where, self.local_pending, name, namespace, ACTIVE).set(active)
        self._of(LQ, where, self.local_pending, name, namespace, INADMISSIBLE).set(
            figures.inadmissible
        )
        self._of(LQ, (namespace, name), self.local_admitted_active, name, namespace).set(
            figures.admitted
        )
        in_use = figures.usage or {}
        usage = {(name, namespace, *fr): milli / 1000 for fr, milli in in_use.items()}
        for metric, labels in self._series.get((LQ, (namespace, name)), set()):
            if metric is self.local_resource_usage and labels not in usage:
                metric.labels(*labels).set(0)  # nothing of that flavor and resource in use now
        for labels, amount in usage.items():
            self._of(LQ, (namespace, name), self.local_resource_usage, *labels).set(amount)

    def report_cohort(self, name: str, share: int | None) -> None:
        """A Cohort's share as its status shows it (-1: weight 0 while borrowing)."""
        self.cohort_weighted_share.labels(name).set(share or 0)


class _Gpus(Collector):
    """`kohort_gpus{state}`: counted when scraped (every gang's pods are looked at, so not on
    every pass). The dashboard exports the same series, counted from the Workloads alone."""

    def __init__(self, counts: Callable[[], GpuCounts]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self._counts()
        family = GaugeMetricFamily(
            "kohort_gpus",
            "GPUs by state: allocated (admitted gangs whose pods all run), held (admitted gangs"
            " whose pods do not all run yet), idle (on Ready nodes, held by no gang)",
            labels=["state"],
        )
        family.add_metric(["allocated"], counts.allocated)
        family.add_metric(["held"], counts.held)
        family.add_metric(["idle"], counts.idle)
        yield family


def _units(quantity: str) -> float:
    try:
        return parse_quantity(quantity) / 1000
    except QuantityError:
        return 0.0


def _remove(metric: MetricWrapperBase, labels: tuple[str, ...]) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
