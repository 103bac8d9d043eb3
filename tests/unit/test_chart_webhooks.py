"""The chart's webhook configurations: what the API server sends to kohort, and what it skips.

The configurations are the ones webhook/registration.py builds (compared field by field), with
the release namespace excluded, timeouts and failure policies from values, and the client
config pointing at the chart's Service (or at `webhook.urlOverride`).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart_support import NAMESPACE, RELEASE, VALUE_SETS, render
from webhook import registration
from webhook.server import (
    MUTATE_DEFAULT_QUEUE_PATH,
    MUTATE_PATH,
    VALIDATE_DEFAULT_QUEUE_PATH,
    VALIDATE_PATH,
)

KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
HANDLED = {
    ("batch", "jobs"),
    ("apps", "statefulsets"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    ("jobset.x-k8s.io", "jobsets"),
    ("kubeflow.org", "pytorchjobs"),
    ("ray.io", "rayclusters"),
    ("ray.io", "rayjobs"),
    ("", "pods"),
}


def webhooks(values: dict[str, Any] | None = None, kind: str | None = None) -> list[Any]:
    manifest = render(values)
    return [w for k in ([kind] if kind else KINDS) for w in manifest.one(k)["webhooks"]]


def without_client_config(config: dict[str, Any]) -> list[Any]:
    return [{k: v for k, v in w.items() if k != "clientConfig"} for w in config["webhooks"]]


def test_configurations_are_the_ones_webhook_registration_builds() -> None:
    manifest = render()
    selector = registration.default_namespace_selector(excluded=[NAMESPACE])
    client = registration.service_client(f"{RELEASE}-webhook", NAMESPACE)
    controller = [registration.service_account_user(NAMESPACE, f"{RELEASE}-controller")]
    want_mutating = registration.mutating_configuration(
        RELEASE,
        client,
        namespace_selector=selector,
        mutate_updates=True,
        controller_users=controller,
    )
    want_validating = registration.validating_configuration(
        RELEASE,
        client,
        namespace_selector=selector,
        validate_namespace_default=True,
        controller_users=controller,
    )
    for kind, want in zip(KINDS, (want_mutating, want_validating), strict=True):
        got = manifest.one(kind, RELEASE)
        assert without_client_config(got) == without_client_config(want), kind
        assert [w["clientConfig"] for w in got["webhooks"]] == [
            w["clientConfig"] for w in want["webhooks"]
        ], kind


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_webhook_is_side_effect_free_v1_equivalent_and_bounded(value_set: str) -> None:
    for webhook in webhooks(VALUE_SETS[value_set]):
        assert webhook["sideEffects"] == "None"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["matchPolicy"] == "Equivalent"
        assert 1 <= webhook["timeoutSeconds"] <= 5


def test_mutating_webhooks_are_reinvoked_when_another_mutator_changes_the_object() -> None:
    for webhook in webhooks(kind="MutatingWebhookConfiguration"):
        assert webhook["reinvocationPolicy"] == "IfNeeded"


def test_mutation_fails_open_and_validation_fails_closed_by_default() -> None:
    assert {w["failurePolicy"] for w in webhooks(kind="MutatingWebhookConfiguration")} == {"Ignore"}
    assert {w["failurePolicy"] for w in webhooks(kind="ValidatingWebhookConfiguration")} == {"Fail"}


def test_failure_policies_and_timeout_come_from_values() -> None:
    values = {
        "webhook": {
            "timeoutSeconds": 3,
            "failurePolicy": {"mutating": "Fail", "validating": "Ignore"},
        }
    }
    mutating = webhooks(values, "MutatingWebhookConfiguration")
    validating = webhooks(values, "ValidatingWebhookConfiguration")
    assert {w["failurePolicy"] for w in mutating} == {"Fail"}
    assert {w["failurePolicy"] for w in validating} == {"Ignore"}
    assert {w["timeoutSeconds"] for w in mutating + validating} == {3}


def excluded_namespaces(webhook: dict[str, Any]) -> set[str]:
    [expression] = [
        e
        for e in webhook["namespaceSelector"]["matchExpressions"]
        if e["key"] == "kubernetes.io/metadata.name"
    ]
    assert expression["operator"] == "NotIn"
    return set(expression["values"])


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_namespaced_webhooks_skip_system_namespaces_and_the_release_namespace(
    value_set: str,
) -> None:
    namespaced = [w for w in webhooks(VALUE_SETS[value_set]) if "namespaceSelector" in w]
    assert len(namespaced) == 5
    for webhook in namespaced:
        assert {"kube-system", "kube-node-lease", NAMESPACE} <= excluded_namespaces(webhook)


def test_excluded_namespaces_add_to_the_built_in_ones() -> None:
    for webhook in webhooks({"webhook": {"excludedNamespaces": ["monitoring"]}}):
        if "namespaceSelector" in webhook:
            assert {"monitoring", "kube-system", NAMESPACE} <= excluded_namespaces(webhook)


def test_unheld_creations_in_opted_in_namespaces_are_refused_unless_turned_off() -> None:
    def names(values: dict[str, Any]) -> list[str]:
        return [w["name"] for w in webhooks(values, "ValidatingWebhookConfiguration")]

    assert "namespace-default.validate.kohort.dev" in names({})
    off = names({"webhook": {"validateNamespaceDefault": False}})
    assert off == [
        "workloads.validate.kohort.dev",
        "queues.validate.kohort.dev",
        "podgroups.validate.kohort.dev",
    ]


def test_the_cluster_scoped_queue_webhook_only_sees_kohort_resources() -> None:
    [queues] = [w for w in webhooks() if w["name"] == "queues.validate.kohort.dev"]
    assert [rule["apiGroups"] for rule in queues["rules"]] == [["kohort.dev"]]


def test_workload_rules_cover_exactly_the_kinds_kohort_holds() -> None:
    for webhook in webhooks():
        if webhook["name"] in ("queues.validate.kohort.dev", "podgroups.validate.kohort.dev"):
            continue
        covered = {
            (group, resource)
            for rule in webhook["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
        }
        assert covered == HANDLED, webhook["name"]
        assert all("*" not in rule["operations"] for rule in webhook["rules"])


def test_updates_are_mutated_unless_turned_off_and_pods_only_on_create() -> None:
    def operations(values: dict[str, Any]) -> dict[str, list[str]]:
        return {
            rule["resources"][0]: rule["operations"]
            for webhook in webhooks(values, "MutatingWebhookConfiguration")
            for rule in webhook["rules"]
        }

    assert operations({})["jobs"] == ["CREATE", "UPDATE"]
    assert operations({})["pods"] == ["CREATE"]
    assert operations({"webhook": {"mutateUpdates": False}})["jobs"] == ["CREATE"]


def test_objects_labelled_opt_out_are_never_mutated() -> None:
    for webhook in webhooks(kind="MutatingWebhookConfiguration"):
        assert {
            "key": "kohort.dev/opt-out",
            "operator": "NotIn",
            "values": ["true"],
        } in webhook["objectSelector"]["matchExpressions"]


def test_unlabelled_objects_are_mutated_only_in_namespaces_that_opted_in() -> None:
    [implied] = [w for w in webhooks() if w["name"] == "namespace-default.mutate.kohort.dev"]
    assert implied["namespaceSelector"]["matchLabels"] == {"kohort.dev/managed": "true"}
    assert {"key": "kohort.dev/queue-name", "operator": "DoesNotExist"} in implied[
        "objectSelector"
    ]["matchExpressions"]


def test_client_config_points_at_the_service_port_443_and_the_real_paths() -> None:
    manifest = render()
    service = manifest.one("Service", f"{RELEASE}-webhook")
    [https] = [p for p in service["spec"]["ports"] if p["name"] == "https"]
    assert https["port"] == 443
    paths = set()
    for webhook in webhooks():
        ref = webhook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"], ref["port"]) == (
            service["metadata"]["name"],
            NAMESPACE,
            443,
        )
        assert "caBundle" not in webhook["clientConfig"], "the rotator owns caBundle"
        paths.add(ref["path"])
    assert paths == {
        MUTATE_PATH,
        MUTATE_DEFAULT_QUEUE_PATH,
        VALIDATE_PATH,
        VALIDATE_DEFAULT_QUEUE_PATH,
    }


def test_url_override_reaches_a_webhook_outside_the_cluster() -> None:
    url = "https://127.0.0.1:9443/"
    for webhook in webhooks({"webhook": {"urlOverride": url}}):
        client = webhook["clientConfig"]
        assert "service" not in client
        assert client["url"].startswith("https://127.0.0.1:9443/")
        assert "//" not in client["url"].removeprefix("https://")


def test_cert_manager_injects_the_ca_of_the_certificate_the_webhook_serves() -> None:
    manifest = render({"certManager": {"enabled": True}})
    certificate = manifest.one("Certificate")
    source = f"{NAMESPACE}/{certificate['metadata']['name']}"
    for kind in KINDS:
        annotations = manifest.one(kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == source
    service = f"{RELEASE}-webhook"
    assert f"{service}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    volumes = manifest.deployment("webhook")["spec"]["template"]["spec"]["volumes"]
    secrets = [v["secret"]["secretName"] for v in volumes if "secret" in v]
    assert secrets == [certificate["spec"]["secretName"]]
    assert manifest.one("Issuer")["spec"] == {"selfSigned": {}}


def test_cert_manager_with_an_existing_issuer_creates_none() -> None:
    manifest = render(
        {"certManager": {"enabled": True, "issuerRef": {"name": "corp", "kind": "ClusterIssuer"}}}
    )
    assert not manifest.of_kind("Issuer")
    assert manifest.one("Certificate")["spec"]["issuerRef"] == {
        "name": "corp",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }


def test_the_rotator_starts_from_a_secret_whose_data_the_chart_never_renders() -> None:
    """What the chart renders, `helm upgrade` resets: rendering no data keeps the certificates."""
    secret = render().one("Secret", f"{RELEASE}-webhook-tls")
    assert "data" not in secret and "stringData" not in secret
    assert not render({"certManager": {"enabled": True}}).of_kind("Secret")


def test_the_controllers_own_requests_never_wait_for_the_workload_webhooks() -> None:
    """While no webhook replica answers, the controller still releases and evicts gangs."""
    controller = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-controller"
    for webhook in webhooks():
        conditions = {c["name"]: c["expression"] for c in webhook.get("matchConditions", [])}
        if webhook["name"] == "queues.validate.kohort.dev":
            assert conditions == {}, "kohort.dev objects are validated for everyone"
            continue
        assert conditions["not-kohort-controller"] == (
            f"request.userInfo.username != '{controller}'"
        ), webhook["name"]


def test_a_renamed_controller_service_account_is_the_one_skipped() -> None:
    values = {"controller": {"serviceAccount": {"create": False, "name": "batch-admin"}}}
    for webhook in webhooks(values):
        for condition in webhook.get("matchConditions", []):
            if condition["name"] == "not-kohort-controller":
                assert f"system:serviceaccount:{NAMESPACE}:batch-admin'" in condition["expression"]


def test_only_validation_skips_the_creation_of_a_released_jobs_pods() -> None:
    def skips_job_pods(kind: str) -> set[bool]:
        return {
            any(c["name"] == "not-a-job-pod-creation" for c in w.get("matchConditions", []))
            for w in webhooks(kind=kind)
            if w["name"] not in ("queues.validate.kohort.dev", "podgroups.validate.kohort.dev")
        }

    assert skips_job_pods("ValidatingWebhookConfiguration") == {True}
    # Mutation fails open: a Job's pods that it cannot answer for are created as they are.
    assert skips_job_pods("MutatingWebhookConfiguration") == {False}


def test_only_podgroups_that_are_or_become_kohorts_reach_the_webhook() -> None:
    [podgroups] = [w for w in webhooks() if w["name"] == "podgroups.validate.kohort.dev"]
    assert {
        (g, r) for rule in podgroups["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    } == {
        ("scheduling.volcano.sh", "podgroups"),
        ("scheduling.x-k8s.io", "podgroups"),
    }
    [kohorts] = [c for c in podgroups["matchConditions"] if c["name"] == "kohorts-podgroups"]
    assert "spec.queue == 'kohort'" in kohorts["expression"]
    assert "oldObject != null" in kohorts["expression"]
    assert podgroups["failurePolicy"] == "Fail"
