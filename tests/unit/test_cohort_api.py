"""The Cohort kind and a ClusterQueue's flavorFungibility: what the webhook and the CRDs refuse,
and what the chart lets the controller do with Cohorts."""

from __future__ import annotations

import re
from typing import Any

import pytest

from controller.api import kinds
from controller.api.crds import crd
from controller.api.queues import ClusterQueue, Cohort
from controller.cluster.cache import models
from controller.workloads.registry import REGISTRY
from tests.chart_support import CHART_DIR
from tests.fakes.reviews import make_review
from webhook.registration import QUOTA_RESOURCES
from webhook.settings import Settings
from webhook.validation import validate

Schema = dict[str, Any]


def cohort(name: str = "research", parent: str | None = None, **limits: str) -> Schema:
    spec: Schema = {
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "h100",
                        "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8", **limits}],
                    }
                ],
            }
        ],
        "fairSharing": {"weight": "2"},
    }
    if parent is not None:
        spec["parent"] = parent
    return {
        "apiVersion": "kohort.dev/v1alpha1",
        "kind": "Cohort",
        "metadata": {"name": name},
        "spec": spec,
    }


def answer(obj: Schema) -> Schema:
    response: Schema = validate(make_review(obj), Settings())["response"]
    return response


def refusal(obj: Schema) -> str:
    response = answer(obj)
    assert response["allowed"] is False and response["status"]["code"] == 422
    message: str = response["status"]["message"]
    return message


def test_a_cohort_with_a_parent_quota_limits_and_a_weight_is_allowed() -> None:
    obj = cohort(parent="company", borrowingLimit="4", lendingLimit="2")

    assert answer(obj)["allowed"] is True
    parsed = Cohort.model_validate(obj)
    assert parsed.spec.parent == "company"
    assert parsed.spec.fair_sharing.weight == "2"


def test_a_cohort_that_names_itself_as_its_parent_is_refused() -> None:
    message = refusal(cohort("research", parent="research"))

    assert "spec.parent" in message
    assert "cannot be its own parent" in message


@pytest.mark.parametrize(
    ("field", "towards"), [("borrowingLimit", "borrow from"), ("lendingLimit", "lend to")]
)
def test_limits_of_a_cohort_without_a_parent_are_refused_naming_the_field(
    field: str, towards: str
) -> None:
    message = refusal(cohort(**{field: "2"}))

    assert f"spec: resourceGroups[0].flavors[0].resources[0].{field} is set" in message
    assert f"no parent to {towards}; set spec.parent or remove {field}" in message


def test_a_flavor_listed_twice_in_a_cohort_is_refused() -> None:
    obj = cohort()
    group = obj["spec"]["resourceGroups"][0]
    group["flavors"].append(dict(group["flavors"][0]))

    assert "flavor(s) h100 listed more than once" in refusal(obj)


def cluster_queue(**fungibility: str) -> Schema:
    return {
        "apiVersion": "kohort.dev/v1alpha1",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a"},
        "spec": {"flavorFungibility": fungibility},
    }


def test_flavor_fungibility_defaults_and_allowed_values() -> None:
    spec = ClusterQueue.model_validate(cluster_queue()).spec
    assert (spec.flavor_fungibility.when_can_borrow, spec.flavor_fungibility.when_can_preempt) == (
        "MayStopSearch",
        "TryNextFlavor",
    )
    allowed = cluster_queue(whenCanBorrow="TryNextFlavor", whenCanPreempt="MayStopSearch")
    assert answer(allowed)["allowed"] is True

    message = refusal(cluster_queue(whenCanBorrow="Borrow"))

    assert "spec.flavorFungibility.whenCanBorrow" in message
    assert "'MayStopSearch' or 'TryNextFlavor'" in message


def openapi(resource: type[ClusterQueue] | type[Cohort]) -> Schema:
    root: Schema = crd(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return root


def columns(resource: type[ClusterQueue] | type[Cohort]) -> dict[str, str]:
    version = crd(resource)["spec"]["versions"][0]
    return {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}


def test_the_cohort_crd_refuses_a_cohort_naming_itself_without_the_webhook() -> None:
    definition = crd(Cohort)
    root = openapi(Cohort)

    assert definition["spec"]["scope"] == "Cluster"
    assert definition["spec"]["names"]["shortNames"] == ["coh"]
    [rule] = root["x-kubernetes-validations"]
    assert "self.spec.parent != self.metadata.name" in rule["rule"]
    assert rule["fieldPath"] == ".spec.parent"
    # Not nullable: the API server prunes an explicit null, so the rule only sees names.
    assert "nullable" not in root["properties"]["spec"]["properties"]["parent"]


def test_kubectl_get_shows_a_cohorts_parent_share_and_usage_per_flavor() -> None:
    assert columns(Cohort) == {
        "Parent": ".spec.parent",
        "Active": '.status.conditions[?(@.type=="Active")].status',
        "Weight": ".spec.fairSharing.weight",
        "Share": ".status.weightedShare",
        "Flavors": ".status.flavorsUsage[*].name",
        "Resources": ".status.flavorsUsage[*].resources[*].name",
        "Usage": ".status.flavorsUsage[*].resources[*].total",
        "Quota": ".status.flavorsUsage[*].resources[*].subtreeQuota",
        "Borrowed": ".status.flavorsUsage[*].resources[*].borrowed",
        "Age": ".metadata.creationTimestamp",
    }
    assert columns(ClusterQueue)["Flavors"] == ".status.flavorsUsage[*].name"


def test_the_cluster_queue_crd_knows_flavor_fungibility() -> None:
    fields = openapi(ClusterQueue)["properties"]["spec"]["properties"]["flavorFungibility"]
    borrow, preempt = fields["properties"]["whenCanBorrow"], fields["properties"]["whenCanPreempt"]

    assert (borrow["enum"], borrow["default"]) == (
        ["MayStopSearch", "TryNextFlavor"],
        "MayStopSearch",
    )
    assert (preempt["enum"], preempt["default"]) == (
        ["TryNextFlavor", "MayStopSearch"],
        "TryNextFlavor",
    )


def test_the_webhook_validates_cohorts_like_every_kohort_kind() -> None:
    assert kinds.COHORTS.plural in QUOTA_RESOURCES
    chart = (CHART_DIR / "templates" / "webhook" / "configurations.yaml").read_text()
    assert '"cohorts"' in chart


def controller_rules() -> list[tuple[set[str], set[str]]]:
    """(resources, verbs) of each kohort.dev rule of the controller's ClusterRole template."""
    text = (CHART_DIR / "templates" / "controller" / "rbac.yaml").read_text()
    found = re.findall(
        r'apiGroups: \["kohort\.dev"\]\s+resources: \[([^]]*)\]\s+verbs: \[([^]]*)\]', text
    )
    return [
        ({r.strip(' "') for r in resources.split(",")}, {v.strip(' "') for v in verbs.split(",")})
        for resources, verbs in found
    ]


def test_the_controller_may_watch_every_kohort_kind_it_watches_and_write_cohort_status() -> None:
    watched = {k.plural for k in models(REGISTRY, None) if k.group == "kohort.dev"}
    readable = {
        r
        for resources, verbs in controller_rules()
        if {"get", "list", "watch"} <= verbs
        for r in resources
    }
    patchable = {
        r for resources, verbs in controller_rules() if "patch" in verbs for r in resources
    }

    assert {"cohorts", "resourceflavors"} <= watched <= readable
    assert {"cohorts/status", "clusterqueues/status"} <= patchable
    assert "cohorts" not in patchable  # the spec is the platform engineers'
