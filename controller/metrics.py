"""Prometheus metrics of the quota controller, on a registry of their own."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.state.objects import QueueFigures

WAIT_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)


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
            ["cluster_queue"],
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

    def admitted(self, queue: str, waited: float) -> None:
        self.admissions.labels(queue).inc()
        self.admission_wait.labels(queue).observe(max(0.0, waited))

    def report_queue(self, name: str, figures: QueueFigures) -> None:
        self.pending.labels(name, "active").set(figures.pending - figures.inadmissible)
        self.pending.labels(name, "inadmissible").set(figures.inadmissible)
        self.admitted_active.labels(name).set(figures.admitted)
        share = figures.weighted_share
        self.weighted_share.labels(name).set(share if math.isfinite(share) else -1)

    def report_cohort(self, name: str, share: int | None) -> None:
        """A Cohort's share as its status shows it (-1: weight 0 while borrowing)."""
        self.cohort_weighted_share.labels(name).set(share or 0)
