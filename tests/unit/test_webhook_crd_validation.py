"""kohort.dev quota objects that make no sense are denied with a message naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.reviews import make_review
from webhook.settings import Settings
from webhook.validation import validate

SETTINGS = Settings()


def cluster_queue(cohort: str | None = None, **quota: str) -> dict[str, Any]:
    resource: dict[str, Any] = {"name": "cpu", "nominalQuota": "8"}
    resource |= quota
    spec: dict[str, Any] = {
        "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [resource]}]}
        ]
    }
    if cohort is not None:
        spec["cohort"] = cohort
    return {
        "apiVersion": "kohort.dev/v1alpha1",
        "kind": "ClusterQueue",
        "metadata": {"name": "research"},
        "spec": spec,
    }


def with_spec(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    obj["spec"] |= fields
    return obj


def duplicate_resources() -> dict[str, Any]:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"].append(
        {"name": "cpu", "nominalQuota": "2"}
    )
    return obj


def covering(name: str) -> dict[str, Any]:
    obj = cluster_queue()
    group = obj["spec"]["resourceGroups"][0]
    group["coveredResources"] = [name]
    group["flavors"][0]["resources"][0]["name"] = name
    return obj


def negative_integer_quota() -> dict[str, Any]:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = -1
    return obj


DENIED: dict[str, tuple[dict[str, Any], list[str]]] = {
    "negative nominal quota": (
        cluster_queue(nominalQuota="-1"),
        ["resources[0].nominalQuota", "negative"],
    ),
    "negative integer nominal quota": (
        negative_integer_quota(),
        ["resources[0].nominalQuota", "must not be negative"],
    ),
    "unknown resource name": (
        covering("gpus"),
        [
            "spec.resourceGroups[0].coveredResources[0]",
            "resources[0].name",
            "domain-qualified extended resource",
            "did you mean nvidia.com/gpu?",
        ],
    ),
    "selector In without values": (
        with_spec(
            cluster_queue(),
            namespaceSelector={"matchExpressions": [{"key": "env", "operator": "In"}]},
        ),
        ["spec.namespaceSelector.matchExpressions[0].values", "non-empty when operator is In"],
    ),
    "selector as a plain label map": (
        with_spec(cluster_queue(), namespaceSelector={"team": "a"}),
        ["spec.namespaceSelector.team", "unknown field"],
    ),
    "borrowing limit without cohort": (
        cluster_queue(borrowingLimit="4"),
        ["borrowingLimit", "cohort"],
    ),
    "lending limit above nominal": (
        cluster_queue(cohort="all", lendingLimit="16"),
        ["lendingLimit", "nominalQuota"],
    ),
    "unknown field": (with_spec(cluster_queue(), colour="red"), ["spec.colour", "unknown field"]),
    "duplicate resource names": (duplicate_resources(), ["duplicate", "cpu"]),
    "local queue without cluster queue": (
        {
            "apiVersion": "kohort.dev/v1alpha1",
            "kind": "LocalQueue",
            "metadata": {"name": "q"},
            "spec": {},
        },
        ["spec.clusterQueue"],
    ),
}


@pytest.mark.parametrize(("obj", "words"), DENIED.values(), ids=DENIED.keys())
def test_invalid_quota_objects_are_denied_naming_the_field(
    obj: dict[str, Any], words: list[str]
) -> None:
    response = validate(make_review(obj), SETTINGS)["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    for word in words:
        assert word in response["status"]["message"]


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_valid_cluster_queue_is_allowed(operation: str) -> None:
    obj = cluster_queue(cohort="all", borrowingLimit="4", lendingLimit="2")
    obj["spec"]["namespaceSelector"] = {
        "matchLabels": {"team": "a"},
        "matchExpressions": [{"key": "legacy", "operator": "DoesNotExist"}],
    }
    review = make_review(obj, operation=operation, old=obj)
    assert validate(review, SETTINGS)["response"]["allowed"] is True


def test_the_controller_gets_no_exemption_from_quota_validation() -> None:
    review = make_review(
        cluster_queue(nominalQuota="-1"),
        user="system:serviceaccount:kohort-system:kohort-controller",
    )
    assert validate(review, SETTINGS)["response"]["allowed"] is False
