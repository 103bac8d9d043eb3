"""What the dashboard exports to Prometheus: the GPUs as it counts them (dashboard/view.py).

The controller's own metrics (controller/metrics.py) count gangs and quota; GPUs held by gangs
whose pods do not all run are seen here, where Workloads and Nodes are watched together.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from dashboard.view import GpuSample


class DashboardMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.gpus = Gauge(
            "kohort_gpus",
            "GPUs by state: allocated (gangs whose pods all run), held (admitted gangs whose"
            " pods do not all run yet), idle (on Ready nodes, held by no gang)",
            ["state"],
            registry=self.registry,
        )

    def report(self, sample: GpuSample) -> None:
        self.gpus.labels("allocated").set(sample.allocated)
        self.gpus.labels("held").set(sample.held)
        self.gpus.labels("idle").set(sample.idle)
