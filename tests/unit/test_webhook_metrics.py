"""The request counts and latency histogram, exported as Prometheus text."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from webhook.metrics import WebhookMetrics


def samples(metrics: WebhookMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_answered_requests_are_counted_by_status_and_bucketed_by_latency() -> None:
    metrics = WebhookMetrics()
    mutate = metrics.answered.path("mutate")
    for seconds, status in [(0.0004, 200), (0.003, 200), (0.0005, 400), (7.0, 200)]:
        mutate.observe(seconds, status)
    got = samples(metrics)

    def count(code: str) -> float:
        return got[("kohort_webhook_requests_total", (("code", code), ("webhook", "mutate")))]

    def bucket(le: str) -> float:
        key = ("kohort_webhook_latency_seconds_bucket", (("le", le), ("webhook", "mutate")))
        return got[key]

    assert (count("200"), count("400")) == (3.0, 1.0)
    # Cumulative, a bound counting the requests at or below it, as Prometheus defines `le`.
    assert bucket("0.0005") == 2.0
    assert bucket("0.005") == 3.0
    assert bucket("2.5") == 3.0
    assert bucket("+Inf") == 4.0
    assert got[("kohort_webhook_latency_seconds_count", (("webhook", "mutate"),))] == 4.0
    total = got[("kohort_webhook_latency_seconds_sum", (("webhook", "mutate"),))]
    assert abs(total - 7.0039) < 1e-9


def test_a_path_that_answered_nothing_has_no_counts_and_an_empty_histogram() -> None:
    metrics = WebhookMetrics()
    metrics.answered.path("validate")
    got = samples(metrics)
    assert not any(name == "kohort_webhook_requests_total" for name, _ in got)
    assert got[("kohort_webhook_latency_seconds_count", (("webhook", "validate"),))] == 0.0
