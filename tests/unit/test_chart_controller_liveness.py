"""The chart's controller is restarted when its /healthz says it admits nothing any more.

/healthz fails when the reconcile loop has stopped or one pass has run for longer than
`--stuck-after` (controller/main.py); the livenessProbe asks it, and gives a busy event loop
(a long pass) a minute before it counts as dead.
"""

from __future__ import annotations

from tests.chart_support import render
from tests.unit.test_chart_deployments import parsed


def test_the_liveness_probe_asks_healthz_on_the_health_port() -> None:
    manifest = render()
    container = manifest.container("controller")
    probe = container["livenessProbe"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert probe["httpGet"]["path"] == "/healthz"
    assert ports[probe["httpGet"]["port"]] == parsed(manifest, "controller").health_port


def test_a_minute_of_failed_or_missing_answers_restarts_the_controller() -> None:
    probe = render().container("controller")["livenessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == 60
    assert probe["timeoutSeconds"] >= 5, "a pass may keep the event loop busy for seconds"


def test_a_pass_counts_as_stuck_after_five_minutes_unless_extra_args_say_otherwise() -> None:
    assert parsed(render(), "controller").stuck_after == 300.0
    values = {"controller": {"extraArgs": ["--stuck-after=900"]}}
    assert parsed(render(values), "controller").stuck_after == 900.0
