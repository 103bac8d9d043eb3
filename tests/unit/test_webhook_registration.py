"""How requests reach the webhook: labelled objects, opted-in namespaces, opt-outs."""

from __future__ import annotations

from typing import Any

from controller.api import names
from webhook.registration import (
    mutating_configuration,
    url_client,
    validating_configuration,
)

CLIENT = url_client("https://127.0.0.1:9443", b"-----BEGIN CERTIFICATE-----\n")


def by_name(config: dict[str, Any]) -> dict[str, Any]:
    return {w["name"]: w for w in config["webhooks"]}


def test_labelled_objects_go_to_mutate_and_opted_in_namespaces_to_the_default_queue_path() -> None:
    hooks = by_name(mutating_configuration("kohort", CLIENT))
    labelled = hooks["workloads.mutate.kohort.dev"]
    implied = hooks["namespace-default.mutate.kohort.dev"]
    assert labelled["clientConfig"]["url"].endswith("/mutate")
    assert implied["clientConfig"]["url"].endswith("/mutate-default-queue")
    assert implied["namespaceSelector"]["matchLabels"] == {names.NAMESPACE_OPT_IN_LABEL: "true"}
    assert {"key": names.QUEUE_LABEL, "operator": "DoesNotExist"} in implied["objectSelector"][
        "matchExpressions"
    ]
    for hook in (labelled, implied):
        assert hook["reinvocationPolicy"] == "IfNeeded"
        assert {"key": names.OPT_OUT_LABEL, "operator": "NotIn", "values": ["true"]} in hook[
            "objectSelector"
        ]["matchExpressions"]


def test_system_namespaces_are_never_sent_to_the_webhook() -> None:
    for config in (
        mutating_configuration("kohort", CLIENT),
        validating_configuration("kohort", CLIENT),
    ):
        for hook in config["webhooks"]:
            selector = hook.get("namespaceSelector")
            if selector is None:  # the quota objects: cluster-scoped ones included
                continue
            [excluded] = [e for e in selector["matchExpressions"] if e["operator"] == "NotIn"]
            assert {"kube-system", "kube-node-lease"} <= set(excluded["values"])


def test_mutation_fails_open_and_validation_fails_closed() -> None:
    assert {w["failurePolicy"] for w in mutating_configuration("k", CLIENT)["webhooks"]} == {
        "Ignore"
    }
    assert {w["failurePolicy"] for w in validating_configuration("k", CLIENT)["webhooks"]} == {
        "Fail"
    }


def test_updates_are_routed_to_mutation_only_when_asked() -> None:
    def operations(config: dict[str, Any]) -> set[str]:
        hook = by_name(config)["workloads.mutate.kohort.dev"]
        return {op for rule in hook["rules"] for op in rule["operations"]}

    assert operations(mutating_configuration("k", CLIENT)) == {"CREATE"}
    assert operations(mutating_configuration("k", CLIENT, mutate_updates=True)) == {
        "CREATE",
        "UPDATE",
    }


def test_unlabelled_creations_in_opted_in_namespaces_are_validated_only_when_asked() -> None:
    assert len(validating_configuration("k", CLIENT)["webhooks"]) == 2
    config = validating_configuration("k", CLIENT, validate_namespace_default=True)
    implied = by_name(config)["namespace-default.validate.kohort.dev"]
    assert implied["clientConfig"]["url"].endswith("/validate-default-queue")
    assert implied["namespaceSelector"]["matchLabels"] == {names.NAMESPACE_OPT_IN_LABEL: "true"}
    assert {op for rule in implied["rules"] for op in rule["operations"]} == {"CREATE"}
    assert implied["failurePolicy"] == "Fail"
