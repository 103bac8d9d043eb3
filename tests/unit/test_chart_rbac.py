"""RBAC: every verb written out, and each component allowed what its code does and no more.

`CONTROLLER_NEEDS` and `ROTATOR_NEEDS` list the API calls the code makes (controller/cluster/,
certs/rotator.py). The cluster tests prove the same roles with the ServiceAccounts' own tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controller.workloads.registry import REGISTRY
from tests.chart_support import NAMESPACE, RELEASE, VALUE_SETS, Manifest, render

Permission = tuple[str, str, str]  # (apiGroup, resource, verb)

READ = ("get", "list", "watch")
CONTROLLER_NEEDS: set[Permission] = {
    *(
        ("kohort.dev", r, v)
        for r in (
            "admissionchecks",
            "clusterqueues",
            "cohorts",
            "localqueues",
            "resourceflavors",
            "topologies",
        )
        for v in READ
    ),
    ("kohort.dev", "clusterqueues/status", "patch"),
    ("kohort.dev", "cohorts/status", "patch"),
    ("kohort.dev", "localqueues/status", "patch"),
    *(("kohort.dev", "workloads", v) for v in (*READ, "create", "patch", "delete")),
    ("kohort.dev", "workloads/status", "patch"),
    *(("batch", "jobs", v) for v in (*READ, "patch")),
    ("batch", "jobs/status", "patch"),  # startTime cleared, so a template may change back
    *(("apps", "statefulsets", v) for v in READ),
    *(("leaderworkerset.x-k8s.io", "leaderworkersets", v) for v in READ),
    # Held by a suspend field: unsuspended (with their flavors) and suspended again.
    *(("jobset.x-k8s.io", "jobsets", v) for v in (*READ, "patch")),
    *(("kubeflow.org", "pytorchjobs", v) for v in (*READ, "patch")),
    *(("ray.io", "rayclusters", v) for v in (*READ, "patch")),
    *(("ray.io", "rayjobs", v) for v in (*READ, "patch")),
    *(("", "pods", v) for v in (*READ, "patch", "delete")),
    *(("", "nodes", v) for v in READ),
    *(("", "namespaces", v) for v in READ),  # labels, for ClusterQueues' namespaceSelector
    *(("scheduling.k8s.io", "priorityclasses", v) for v in READ),
    *(
        ("resource.k8s.io", r, v)  # DRA: devices charged, and counted on nodes
        for r in ("resourceclaimtemplates", "resourceslices", "deviceclasses")
        for v in READ
    ),
    *(("scheduling.volcano.sh", "podgroups", v) for v in (*READ, "create", "patch", "delete")),
    ("scheduling.volcano.sh", "queues", "get"),
    ("scheduling.volcano.sh", "queues", "create"),
    # Autoscaled pools: a gang's ProvisioningRequest and its PodTemplates.
    *(("autoscaling.x-k8s.io", "provisioningrequests", v) for v in (*READ, "create", "delete")),
    ("", "podtemplates", "create"),
    ("", "events", "create"),
}
LEADER_ELECTION_NEEDS: set[Permission] = {
    ("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")
}
ROTATOR_NEEDS: set[Permission] = {
    ("", "secrets", "get"),
    ("", "secrets", "update"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch"),
}


def bound_rules(manifest: Manifest, service_account: str) -> Iterator[tuple[dict[str, Any], Any]]:
    """(role, rule) for every rule bound to the ServiceAccount in the release namespace."""
    for binding_kind, role_kind in (("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")):
        for binding in manifest.of_kind(binding_kind):
            if {"kind": "ServiceAccount", "name": service_account, "namespace": NAMESPACE} in (
                binding["subjects"]
            ):
                assert binding["roleRef"]["kind"] == role_kind
                role = manifest.one(role_kind, binding["roleRef"]["name"])
                for rule in role["rules"]:
                    yield role, rule


def permissions(manifest: Manifest, service_account: str) -> set[Permission]:
    return {
        (group, resource, verb)
        for _, rule in bound_rules(manifest, service_account)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_no_rule_uses_a_wildcard(value_set: str) -> None:
    manifest = render(VALUE_SETS[value_set])
    for role in manifest.of_kind("Role") + manifest.of_kind("ClusterRole"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: {rule}"
            assert "nonResourceURLs" not in rule


def test_the_controller_is_allowed_exactly_what_its_code_does() -> None:
    got = permissions(render(), f"{RELEASE}-controller")
    assert got == CONTROLLER_NEEDS | LEADER_ELECTION_NEEDS


def test_the_controller_may_read_every_kind_of_the_workload_registry() -> None:
    got = permissions(render(), f"{RELEASE}-controller")
    missing = {
        (kind.group, kind.plural, verb)
        for kind in REGISTRY.kinds
        for verb in READ
        if (kind.group, kind.plural, verb) not in got
    }
    assert not missing, "a registered kind needs its rule in templates/controller/rbac.yaml"


def test_the_controller_never_reads_secrets_or_changes_rbac_or_nodes() -> None:
    got = permissions(render(), f"{RELEASE}-controller")
    assert not {p for p in got if p[1] == "secrets"}
    assert not {p for p in got if p[0] == "rbac.authorization.k8s.io"}
    assert not {p for p in got if p[1] == "nodes" and p[2] not in READ}


def test_leader_election_is_confined_to_one_lease_in_the_release_namespace() -> None:
    manifest = render()
    for role, rule in bound_rules(manifest, f"{RELEASE}-controller"):
        if rule["resources"] == ["leases"]:
            assert role["kind"] == "Role"
            assert role["metadata"]["namespace"] == NAMESPACE
            if rule["verbs"] != ["create"]:  # create cannot name its object
                assert rule["resourceNames"] == [f"{RELEASE}-controller"]
    assert manifest.container("controller")["args"].count(
        f"--leader-election-id={RELEASE}-controller"
    )


def test_without_leader_election_the_controller_gets_no_lease_access() -> None:
    got = permissions(
        render({"controller": {"leaderElection": {"enabled": False}}}), f"{RELEASE}-controller"
    )
    assert got == CONTROLLER_NEEDS


def test_a_namespace_selector_asks_for_no_more_permissions() -> None:
    manifest = render({"controller": {"namespaceSelector": "kohort.dev/tenant=true"}})
    got = permissions(manifest, f"{RELEASE}-controller")
    assert got == CONTROLLER_NEEDS | LEADER_ELECTION_NEEDS
    assert "--namespace-selector=kohort.dev/tenant=true" in manifest.container("controller")["args"]


def test_coscheduling_swaps_volcano_pod_groups_for_scheduler_plugins_ones() -> None:
    got = permissions(
        render({"gangScheduler": {"backend": "coscheduling"}}), f"{RELEASE}-controller"
    )
    assert not {p for p in got if p[0] == "scheduling.volcano.sh"}
    assert ("scheduling.x-k8s.io", "podgroups", "create") in got


def test_kube_scheduler_gangs_swap_volcano_pod_groups_for_scheduling_workloads() -> None:
    manifest = render({"gangScheduler": {"backend": "kubernetes"}})
    got = permissions(manifest, f"{RELEASE}-controller")
    assert not {p for p in got if p[0] in ("scheduling.volcano.sh", "scheduling.x-k8s.io")}
    assert ("scheduling.k8s.io", "workloads", "create") in got
    assert ("scheduling.k8s.io", "podgroups", "create") in got
    assert "--backend=kubernetes" in manifest.container("controller")["args"]


def test_the_webhook_may_only_rotate_its_own_certificate() -> None:
    manifest = render()
    assert permissions(manifest, f"{RELEASE}-webhook") == ROTATOR_NEEDS
    for role, rule in bound_rules(manifest, f"{RELEASE}-webhook"):
        if rule["resources"] == ["secrets"]:
            assert role["kind"] == "Role"
            assert rule["resourceNames"] == [f"{RELEASE}-webhook-tls"]
        else:
            assert rule["resourceNames"] == [RELEASE]


def test_with_cert_manager_the_webhook_needs_no_api_access_at_all() -> None:
    manifest = render({"certManager": {"enabled": True}})
    assert permissions(manifest, f"{RELEASE}-webhook") == set()
    pod = manifest.deployment("webhook")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
