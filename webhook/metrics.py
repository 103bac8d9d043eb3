"""The webhook's Prometheus metrics, in a registry of their own (one per server)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# The buckets' `le` labels, written as prometheus_client writes them, the last one "+Inf".
_LE: tuple[str, ...] = tuple(
    floatToGoString(bound)  # type: ignore[no-untyped-call]
    for bound in (*LATENCY_BUCKETS, float("inf"))
)


class PathCounts:
    """Requests answered on one webhook path: by status, and their latency in buckets."""

    __slots__ = ("by_bucket", "by_status", "seconds")

    def __init__(self) -> None:
        self.by_bucket = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.by_status: dict[int, int] = {}
        self.seconds = 0.0

    def observe(self, seconds: float, status: int) -> None:
        self.by_bucket[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.seconds += seconds
        self.by_status[status] = self.by_status.get(status, 0) + 1


class AnsweredRequests(Collector):
    """`kohort_webhook_requests_total` and `kohort_webhook_latency_seconds`, kept as plain
    numbers and turned into metric families when scraped.

    Every request is counted twice (status and latency), so this is the hottest metric code:
    it takes no lock, which is safe because requests are answered and metrics scraped on the
    server's one event loop thread.
    """

    def __init__(self) -> None:
        self.paths: dict[str, PathCounts] = {}

    def path(self, webhook: str) -> PathCounts:
        return self.paths.setdefault(webhook, PathCounts())

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "kohort_webhook_requests_total",
            "Admission requests by webhook path and HTTP status code.",
            labels=["webhook", "code"],
        )
        latency = HistogramMetricFamily(
            "kohort_webhook_latency_seconds",
            "Time to answer an admission request, from body read to response.",
            labels=["webhook"],
        )
        for webhook, counts in sorted(self.paths.items()):
            for status, n in sorted(counts.by_status.items()):
                requests.add_metric([webhook, str(status)], n)
            cumulative, running = [], 0
            for le, n in zip(_LE, counts.by_bucket, strict=True):
                running += n
                cumulative.append((le, float(running)))
            latency.add_metric([webhook], cumulative, counts.seconds)
        yield requests
        yield latency


def _registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


@dataclass
class WebhookMetrics:
    registry: CollectorRegistry = field(default_factory=_registry)

    def __post_init__(self) -> None:
        r = self.registry
        self.answered = AnsweredRequests()
        r.register(self.answered)
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
