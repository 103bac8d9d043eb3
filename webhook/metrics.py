"""The webhook's Prometheus metrics, in a registry of their own (one per server)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def _registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


@dataclass
class WebhookMetrics:
    registry: CollectorRegistry = field(default_factory=_registry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter(
            "kohort_webhook_requests_total",
            "Admission requests by webhook path and HTTP status code.",
            ["webhook", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "kohort_webhook_latency_seconds",
            "Time to answer an admission request, from body read to response.",
            ["webhook"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.patches = Counter(
            "kohort_webhook_patches_total",
            "Admitted objects that the mutating webhook changed, by kind.",
            ["kind"],
            registry=r,
        )
        self.denials = Counter(
            "kohort_webhook_denials_total",
            "Admission requests denied, by webhook path and kind.",
            ["webhook", "kind"],
            registry=r,
        )
        self.certificate_reloads = Counter(
            "kohort_webhook_certificate_reloads_total",
            "Serving certificates loaded (the first load counts).",
            registry=r,
        )
        self.certificate_expiry = Gauge(
            "kohort_webhook_certificate_expiry_timestamp_seconds",
            "When the serving certificate in use expires (Unix time).",
            registry=r,
        )
