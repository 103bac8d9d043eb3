"""The chart passes `helm lint --strict`, and values.schema.json refuses values that would break it.

Helm checks values.schema.json on lint, template, install and upgrade alike, so a refusal here
is a refusal before anything reaches a cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart_support import VALUE_SETS, lint, render_error


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_chart_lints_strictly(values: dict[str, Any]) -> None:
    result = lint(values)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout
    assert "[ERROR]" not in result.stdout


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "misspelt top-level key": ({"webhok": {"replicas": 2}}, "webhok"),
    "misspelt nested key": ({"webhook": {"replica": 2}}, "replica"),
    "unknown failure policy": ({"webhook": {"failurePolicy": {"mutating": "Maybe"}}}, "mutating"),
    "timeout above the API server's 30 s": ({"webhook": {"timeoutSeconds": 31}}, "timeoutSeconds"),
    "zero webhook replicas": ({"webhook": {"replicas": 0}}, "replicas"),
    "two controllers without leader election": (
        {"controller": {"replicas": 2, "leaderElection": {"enabled": False}}},
        "enabled",
    ),
    "unknown gang scheduler": ({"gangScheduler": {"backend": "yunikorn"}}, "backend"),
    "plain-HTTP webhook URL": ({"webhook": {"urlOverride": "http://127.0.0.1:9443"}}, "url"),
    "excluded namespace that is no name": (
        {"webhook": {"excludedNamespaces": ["Not A Namespace"]}},
        "excludedNamespaces",
    ),
    "digest that is no sha256": ({"image": {"digest": "latest"}}, "digest"),
    "cluster issuer kind misspelt": (
        {"certManager": {"enabled": True, "issuerRef": {"name": "x", "kind": "ClusterIsuer"}}},
        "kind",
    ),
}


@pytest.mark.parametrize(("values", "mentions"), REFUSED.values(), ids=REFUSED.keys())
def test_values_schema_refuses(values: dict[str, Any], mentions: str) -> None:
    error = render_error(values)
    assert "schema" in error.lower()
    assert mentions.lower() in error.lower()
