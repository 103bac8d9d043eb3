"""Every object the chart renders is valid Kubernetes, named after the release, and wired up.

Schemas: the Kubernetes OpenAPI schemas of the local control plane's minor version, in strict
mode (unknown fields are errors), from the `kubernetes-validate` package. Objects of other
projects' CRDs (cert-manager, Prometheus Operator) have no schema there; their fields are
asserted by the tests that render them. The cluster tests also send every object to a real API
server (server-side dry run).
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tests.chart_support import (
    FOREIGN_KINDS,
    NAMESPACE,
    RELEASE,
    VALUE_SETS,
    Manifest,
    kube_version,
    render,
)

EVERYTHING_ON: dict[str, Any] = {
    "certManager": {"enabled": True, "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "controller": {
        "replicas": 2,
        "podDisruptionBudget": {"enabled": True},
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        "extraArgs": ["--packing=spread"],
    },
    "webhook": {
        "replicas": 3,
        "priorityClassName": "system-cluster-critical",
        "excludedNamespaces": ["monitoring"],
        "releasers": {"groups": ["batch-admins"]},
    },
    "gangScheduler": {"backend": "coscheduling"},
    "imagePullSecrets": [{"name": "regcred"}],
}
ALL_SETS = {**VALUE_SETS, "everything-on": EVERYTHING_ON}
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}


def rendered(name: str) -> Manifest:
    return render(ALL_SETS[name])


def _id(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.parametrize("value_set", ALL_SETS)
def test_every_object_validates_against_the_kubernetes_schemas(value_set: str) -> None:
    errors = []
    for obj in rendered(value_set):
        if obj["kind"] in FOREIGN_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, kube_version().lstrip("v"), strict=True)
        except kubernetes_validate.ValidationError as err:
            errors.append(f"{_id(obj)}: {err.message} at {list(err.path)}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("value_set", ALL_SETS)
def test_names_are_unique_and_namespaced_objects_live_in_the_release_namespace(
    value_set: str,
) -> None:
    seen: set[tuple[str, str]] = set()
    for obj in rendered(value_set):
        key = (obj["kind"], obj["metadata"]["name"])
        assert key not in seen, f"{_id(obj)} rendered twice"
        seen.add(key)
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], _id(obj)
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, _id(obj)


def test_every_name_follows_the_release_name() -> None:
    """Two releases (say, two teams' test installs) never collide on a name."""
    names = {_id(o) for o in render(release="other") if o["kind"] != "CustomResourceDefinition"}
    assert names
    assert all(name.split("/", 1)[1].startswith("other-kohort") for name in names), names


@pytest.mark.parametrize("value_set", ALL_SETS)
def test_selectors_match_their_pods(value_set: str) -> None:
    manifest = rendered(value_set)
    pod_labels = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
        for d in manifest.of_kind("Deployment")
    }
    for name, labels in pod_labels.items():
        selector = manifest.one("Deployment", name)["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items(), name
    for owner in ("Service", "PodDisruptionBudget", "ServiceMonitor"):
        for obj in manifest.of_kind(owner):
            selector = obj["spec"]["selector"]
            selector = selector.get("matchLabels", selector)
            target = (
                [o["metadata"]["labels"] for o in manifest.of_kind("Service")]
                if owner == "ServiceMonitor"
                else list(pod_labels.values())
            )
            matched = [labels for labels in target if selector.items() <= labels.items()]
            assert len(matched) == 1, f"{_id(obj)} selects {len(matched)} targets"


def test_each_service_port_targets_a_named_container_port() -> None:
    manifest = render()
    for service in manifest.of_kind("Service"):
        component = service["spec"]["selector"]["app.kubernetes.io/component"]
        ports = {p["name"] for p in manifest.container(component)["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, f"{_id(service)} port {port['name']}"


def test_components_carry_the_standard_labels() -> None:
    for obj in render():
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/instance") == RELEASE, _id(obj)
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", _id(obj)
