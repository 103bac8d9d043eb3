"""The Helm chart as the tests see it: rendered by the real `helm` binary, parsed into objects.

`render(values)` runs `helm template` (cached per value set, so many small assertions cost one
render); `Manifest` finds objects by kind and name. The value sets every chart test renders are
defined once here: the defaults, cert-manager, and a highly available install.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import testenv

REPO = Path(__file__).resolve().parent.parent
CHART_DIR = REPO / "charts" / "kohort"
RELEASE = "kohort"
NAMESPACE = "kohort-system"

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": {"certManager": {"enabled": True}},
    "ha": {
        "controller": {"replicas": 2, "podDisruptionBudget": {"enabled": True}},
        "webhook": {"replicas": 3},
    },
    "kube-scheduler-gangs": {"gangScheduler": {"backend": "kubernetes"}},
    "dashboard-and-monitoring": {
        "dashboard": {"enabled": True},
        "grafana": {"dashboard": {"enabled": True}},
        "prometheusRule": {"enabled": True},
        "metrics": {"serviceMonitor": {"enabled": True}},
    },
}

# Kinds whose schemas live in CRDs of other projects (cert-manager, Prometheus Operator).
FOREIGN_KINDS = {"Issuer", "Certificate", "ServiceMonitor", "PrometheusRule"}

Object = dict[str, Any]


def helm() -> Path:
    """The helm binary built by hack/build-testenv.sh; skips outside CI when it is not built."""
    try:
        return testenv.binary("helm")
    except testenv.TestenvMissing as err:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{err} (bash hack/build-testenv.sh helm)")


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm()), *args],
        check=check,
        capture_output=True,
        text=True,
        # No repository cache or config of the user's: the chart has no dependencies.
        env={
            **os.environ,
            "HELM_CACHE_HOME": str(Path(tempfile.gettempdir()) / "kohort-helm-cache"),
            "HELM_CONFIG_HOME": str(Path(tempfile.gettempdir()) / "kohort-helm-config"),
            "HELM_DATA_HOME": str(Path(tempfile.gettempdir()) / "kohort-helm-data"),
        },
    )


def values_file(values: Mapping[str, Any], directory: Path) -> Path:
    path = directory / "values.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return path


@dataclass(frozen=True)
class Manifest:
    """The objects of one render, in the order helm printed them."""

    objects: tuple[Object, ...]

    def __iter__(self) -> Iterator[Object]:
        return iter(self.objects)

    def of_kind(self, kind: str) -> list[Object]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> Object:
        found = [o for o in self.of_kind(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
        return found[0]

    def kinds(self) -> set[str]:
        return {o["kind"] for o in self.objects}

    def deployment(self, component: str) -> Object:
        return self.one("Deployment", f"{RELEASE}-{component}")

    def container(self, component: str) -> Object:
        containers = self.deployment(component)["spec"]["template"]["spec"]["containers"]
        assert len(containers) == 1
        return dict(containers[0])


def kube_version() -> str:
    """The Kubernetes version of the local control plane; helm renders for it."""
    return testenv.versions()["K8S_VERSION"]


def with_values(
    *args: str, values: Mapping[str, Any], namespace: str = NAMESPACE
) -> subprocess.CompletedProcess[str]:
    """`helm ARGS --namespace NS --kube-version V --values FILE`, never raising on failure."""
    with tempfile.TemporaryDirectory() as tmp:
        return run_helm(
            *args,
            "--namespace",
            namespace,
            "--kube-version",
            kube_version(),
            "--values",
            str(values_file(values, Path(tmp))),
            check=False,
        )


@cache
def _render(values_json: str, release: str, namespace: str) -> tuple[Object, ...]:
    values = json.loads(values_json)
    out = with_values("template", release, str(CHART_DIR), values=values, namespace=namespace)
    assert out.returncode == 0, out.stderr
    return tuple(doc for doc in yaml.safe_load_all(out.stdout) if doc)


def render(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> Manifest:
    return Manifest(_render(json.dumps(values or {}, sort_keys=True), release, namespace))


def render_error(values: Mapping[str, Any]) -> str:
    """helm's error output for a value set that must be refused (fails if it renders)."""
    out = with_values("template", RELEASE, str(CHART_DIR), values=values)
    assert out.returncode != 0, f"helm rendered values it should refuse: {dict(values)}"
    return out.stderr


def lint(values: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
    return with_values("lint", "--strict", str(CHART_DIR), values=values)
