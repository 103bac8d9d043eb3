"""The chart's dashboard, Grafana dashboard and alerts: off by default; when on, the dashboard
only reads, and every query of the Grafana dashboard and of the alerts names a series kohort
exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kohort.cli import build_parser
from tests.chart_support import CHART_DIR, NAMESPACE, RELEASE, VALUE_SETS, render
from tests.unit.test_chart_rbac import permissions

REPO = Path(__file__).resolve().parents[2]
EXPORTERS = ("controller/metrics.py", "webhook/metrics.py", "dashboard/metrics.py")
GRAFANA_JSON = CHART_DIR / "dashboards" / "kohort.json"
ON = VALUE_SETS["dashboard-and-monitoring"]
# Histograms are queried by their _bucket, _count and _sum series.
SERIES_SUFFIXES = ("_bucket", "_count", "_sum")


def exported() -> set[str]:
    code = "\n".join((REPO / path).read_text() for path in EXPORTERS)
    return set(re.findall(r'"(kohort_[a-z_]+)"', code))


def series_in(query: str) -> set[str]:
    names = set(re.findall(r"\bkohort_[a-z_]*[a-z]\b", query))
    return {next((n.removesuffix(s) for s in SERIES_SUFFIXES if n.endswith(s)), n) for n in names}


def grafana_queries() -> list[tuple[str, str]]:
    board = json.loads(GRAFANA_JSON.read_text())
    return [
        (panel["title"], target["expr"]) for panel in board["panels"] for target in panel["targets"]
    ]


def test_every_panel_of_the_grafana_dashboard_queries_series_kohort_exports() -> None:
    board = json.loads(GRAFANA_JSON.read_text())
    assert board["panels"], "a dashboard of no panels"
    known = exported()
    for panel in board["panels"]:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
    for title, query in grafana_queries():
        named = series_in(query)
        assert named, f"panel {title!r} queries no kohort series: {query}"
        assert named <= known, (
            f"panel {title!r} queries series no component exports: {named - known}"
        )


def test_the_variables_of_the_grafana_dashboard_query_exported_series() -> None:
    board = json.loads(GRAFANA_JSON.read_text())
    queries = [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    assert queries
    for query in queries:
        assert series_in(query) and series_in(query) <= exported(), query


def test_the_alerts_query_series_kohort_exports() -> None:
    rule = render(ON).one("PrometheusRule")
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert set(alerts) == {"KohortQueueStuck", "KohortGpusHeldByPartialGangs"}
    for alert in alerts.values():
        named = series_in(alert["expr"])
        assert named and named <= exported(), alert["expr"]
    assert alerts["KohortQueueStuck"]["for"] == "60m"
    assert 'kohort_gpus{state="held"}' in alerts["KohortGpusHeldByPartialGangs"]["expr"]


def test_the_alerts_need_only_the_controller_scraped() -> None:
    """The chart's default scrape is the controller's: every series an alert reads is one the
    controller exports (the GPUs held by partial gangs too, not only the dashboard)."""
    rule = render(ON).one("PrometheusRule")
    controller = set(re.findall(r'"(kohort_[a-z_]+)"', (REPO / EXPORTERS[0]).read_text()))
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            assert series_in(alert["expr"]) <= controller, alert["alert"]


def test_the_grafana_config_map_holds_the_dashboard_as_the_chart_ships_it() -> None:
    config_map = render(ON).one("ConfigMap", f"{RELEASE}-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["kohort.json"]) == json.loads(GRAFANA_JSON.read_text())


def test_dashboard_grafana_and_alerts_are_off_by_default() -> None:
    manifest = render()
    assert "PrometheusRule" not in manifest.kinds()
    assert "ConfigMap" not in manifest.kinds()
    assert all(
        d["metadata"]["name"] != f"{RELEASE}-dashboard" for d in manifest.of_kind("Deployment")
    )


def test_the_dashboard_runs_the_real_command_and_serves_https_on_its_service() -> None:
    manifest = render(ON)
    container = manifest.container("dashboard")
    args = build_parser().parse_args(container["args"])
    assert (args.command, args.port, args.gpu_resource) == ("dashboard", 8443, "nvidia.com/gpu")
    assert args.cert_dir is None
    service = manifest.one("Service", f"{RELEASE}-dashboard")
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}
    ]
    probe: Any = container["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["scheme"]) == ("/healthz", "HTTPS")


def test_a_tls_secret_is_mounted_where_the_dashboard_reads_its_certificate() -> None:
    manifest = render({**ON, "dashboard": {"enabled": True, "tlsSecret": "dashboard-tls"}})
    container = manifest.container("dashboard")
    args = build_parser().parse_args(container["args"])
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[str(args.cert_dir)] == "tls"


def test_the_dashboard_may_only_read_what_the_page_shows() -> None:
    got = permissions(render(ON), f"{RELEASE}-dashboard")
    assert {verb for _, _, verb in got} == {"get", "list", "watch"}
    assert {(group, resource) for group, resource, _ in got} == {
        ("kohort.dev", "clusterqueues"),
        ("kohort.dev", "cohorts"),
        ("kohort.dev", "localqueues"),
        ("kohort.dev", "workloads"),
        ("", "nodes"),
    }


@pytest.mark.parametrize("value_set", ["defaults", "dashboard-and-monitoring"])
def test_the_dashboard_service_monitor_scrapes_https_only_when_the_dashboard_runs(
    value_set: str,
) -> None:
    values = {**VALUE_SETS[value_set], "metrics": {"serviceMonitor": {"enabled": True}}}
    monitors = {m["metadata"]["name"]: m for m in render(values).of_kind("ServiceMonitor")}
    dashboard = monitors.get(f"{RELEASE}-dashboard")
    if value_set == "defaults":
        assert dashboard is None
    else:
        assert dashboard is not None
        assert dashboard["spec"]["endpoints"][0]["scheme"] == "https"
        assert dashboard["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
