"""The kohort.dev/v1alpha1 models accept what the core can use and name what they reject."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from controller.api import kube
from controller.api.common import is_resource_name
from controller.api.quantity import QuantityError, exact_quantity, format_quantity, parse_quantity
from controller.api.queues import ClusterQueue, LocalQueue, ResourceFlavor
from controller.api.workload import Workload


def cluster_queue(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "apiVersion": "kohort.dev/v1alpha1",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a"},
        "spec": {
            "cohort": "research",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "nvidia.com/gpu", "nominalQuota": 8},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    base["spec"].update(spec)
    return base


def gpu_quota(obj: dict[str, Any]) -> dict[str, Any]:
    quota: dict[str, Any] = obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
    return quota


def error_text(obj: dict[str, Any], model: type[ClusterQueue] | type[Workload]) -> str:
    with pytest.raises(ValidationError) as info:
        model.model_validate(obj)
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("2", 2000),
        ("16Gi", 16 * 2**30 * 1000),
        ("1.5", 1500),
        ("1e3", 10**6),
        ("1k", 10**6),
        ("0.0001", 1),
    ],
    ids=["milli", "plain", "binary", "fraction", "exponent", "kilo", "rounds-up"],
)
def test_quantity_parses_to_milli_units(text: str, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "5 Gi", "Gi", "1Zi"])
def test_quantity_rejects_garbage(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_quantity_formats_shortest_exact_form() -> None:
    assert format_quantity(2000) == "2"
    assert format_quantity(500) == "500m"


def test_cluster_queue_round_trips_in_camel_case() -> None:
    obj = cluster_queue(preemption={"reclaimWithinCohort": "Any", "minimumRuntimeSeconds": 600})
    model = ClusterQueue.model_validate(obj)
    assert model.spec.preemption.minimum_runtime_seconds == 600
    dumped = model.model_dump(by_alias=True, exclude_none=True)
    assert dumped["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "8",
    }
    assert ClusterQueue.model_validate(dumped) == model


def test_negative_quota_is_rejected_at_its_path() -> None:
    obj = cluster_queue()
    gpu_quota(obj)["nominalQuota"] = "-1"
    text = error_text(obj, ClusterQueue)
    assert "spec.resourceGroups.0.flavors.0.resources.1.nominalQuota" in text
    assert "negative" in text


def test_borrowing_limit_needs_a_cohort() -> None:
    obj = cluster_queue(cohort=None)
    gpu_quota(obj)["borrowingLimit"] = "4"
    text = error_text(obj, ClusterQueue)
    assert "resourceGroups[0].flavors[0].resources[1].borrowingLimit" in text
    assert "cohort" in text


def test_lending_limit_above_nominal_is_rejected() -> None:
    obj = cluster_queue()
    gpu_quota(obj)["lendingLimit"] = "9"
    text = error_text(obj, ClusterQueue)
    assert "spec.resourceGroups.0.flavors.0.resources.1" in text
    assert "lendingLimit (9)" in text


def test_duplicate_resource_names_are_rejected() -> None:
    obj = cluster_queue()
    flavor = obj["spec"]["resourceGroups"][0]["flavors"][0]
    flavor["resources"].append({"name": "cpu", "nominalQuota": "1"})
    assert "duplicate resource name(s) cpu" in error_text(obj, ClusterQueue)


def test_duplicate_flavor_names_are_rejected() -> None:
    obj = cluster_queue()
    group = obj["spec"]["resourceGroups"][0]
    group["flavors"].append(copy.deepcopy(group["flavors"][0]))
    assert "flavor(s) default listed more than once" in error_text(obj, ClusterQueue)


def test_unknown_spec_fields_are_rejected() -> None:
    obj = cluster_queue(nominalQuota="8")
    assert "spec.nominalQuota" in error_text(obj, ClusterQueue)


def test_metadata_is_read_as_every_kubernetes_objects_metadata() -> None:
    obj = cluster_queue()
    obj["metadata"].update(uid="u-1", resourceVersion="7", finalizers=["example.com/keep"])
    model = ClusterQueue.model_validate(obj)
    assert isinstance(model.metadata, kube.ObjectMeta)
    # What kohort reads is kept; what it never reads (finalizers) is not: it never writes back
    # a whole object it read.
    assert model.model_dump(by_alias=True)["metadata"] == {
        "name": "team-a",
        "uid": "u-1",
        "resourceVersion": "7",
    }


def test_malformed_metadata_is_rejected_naming_the_member() -> None:
    obj = cluster_queue()
    obj["metadata"]["labels"] = {"team": 1}
    text = error_text(obj, ClusterQueue)
    assert "metadata" in text and "`metadata.labels[...]`" in text
    assert "Expected `str`, got `int`" in text


def test_workload_is_a_gang_of_pod_sets() -> None:
    wl = Workload.model_validate(
        {
            "apiVersion": "kohort.dev/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {
                "queueName": "default",
                "priority": 10,
                "podSets": [
                    {
                        "name": "workers",
                        "count": 4,
                        "requests": {"cpu": "8", "nvidia.com/gpu": 8, "memory": "64Gi"},
                        "nodeSelector": {"gpu": "a100"},
                        "tolerations": [{"key": "gpu", "operator": "Exists"}],
                    }
                ],
            },
        }
    )
    assert wl.spec.pod_sets[0].request_milli()["nvidia.com/gpu"] == 8000
    assert Workload.KIND.namespaced and Workload.KIND.plural == "workloads"


def test_workload_rejects_negative_requests_and_empty_gangs() -> None:
    obj: dict[str, Any] = {
        "apiVersion": "kohort.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "w"},
        "spec": {"queueName": "q", "podSets": [{"count": 0, "requests": {"cpu": "-1"}}]},
    }
    text = error_text(obj, Workload)
    assert "spec.podSets.0.count" in text
    assert "spec.podSets.0.requests.cpu" in text


def test_local_queue_and_flavor_shapes() -> None:
    lq = LocalQueue.model_validate(
        {
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": "ml"},
            "spec": {"clusterQueue": "team-a"},
        }
    )
    assert lq.spec.cluster_queue == "team-a"
    rf = ResourceFlavor.model_validate(
        {
            "kind": "ResourceFlavor",
            "metadata": {"name": "a100"},
            "spec": {
                "nodeLabels": {"gpu": "a100"},
                "nodeTaints": [{"key": "gpu", "effect": "NoSchedule"}],
            },
        }
    )
    assert rf.spec.node_taints[0].effect == "NoSchedule"


def _walk(node: object, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for k, v in node.items():
            out.extend(_walk(v, f"{path}.{k}"))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_walk(v, f"{path}[{i}]"))
    return out


def test_generated_crds_are_structural() -> None:
    from controller.api.crds import all_crds

    crds = all_crds()
    assert [c["spec"]["names"]["kind"] for c in crds] == [
        "AdmissionCheck", "ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor", "Topology",
        "Workload",
    ]  # fmt: skip
    for c in crds:
        root = c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in _walk(root):
            assert "$ref" not in node, path
            assert node.get("additionalProperties") is not False, path
            if "anyOf" in node:
                assert node.get("x-kubernetes-int-or-string") is True, path
            if (
                node.get("type") == "object"
                and not path.endswith(".metadata")
                and "properties" not in node
            ):
                assert "additionalProperties" in node or node.get(
                    "x-kubernetes-preserve-unknown-fields"
                ), path


def test_crd_scopes_and_quantities() -> None:
    from controller.api.crds import crd

    cq = crd(ClusterQueue)
    assert cq["spec"]["scope"] == "Cluster"
    assert crd(Workload)["spec"]["scope"] == "Namespaced"
    spec = cq["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    quota = spec["properties"]["resourceGroups"]["items"]["properties"]["flavors"]["items"]
    nominal = quota["properties"]["resources"]["items"]["properties"]["nominalQuota"]
    assert nominal["x-kubernetes-int-or-string"] is True


# -- namespaceSelector: a Kubernetes label selector ---------------------------------------------


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        requirement["values"] = list(values)
    return requirement


def expressions(*requirements: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(requirements)}


TEAM_A = {"matchLabels": {"team": "a"}}
ENV_DEV = expression("env", "In", "dev")
NO_LEGACY = expression("legacy", "DoesNotExist")
SELECTIONS: dict[str, tuple[dict[str, Any], dict[str, str], bool]] = {
    "empty selects all": ({}, {}, True),
    "empty selects labelled": ({}, {"team": "a"}, True),
    "matchLabels equal": (TEAM_A, {"team": "a", "env": "dev"}, True),
    "matchLabels other value": (TEAM_A, {"team": "b"}, False),
    "matchLabels missing": (TEAM_A, {}, False),
    "matchLabels empty value needs the label": ({"matchLabels": {"x": ""}}, {}, False),
    "matchLabels empty value": ({"matchLabels": {"x": ""}}, {"x": ""}, True),
    "In one of": (expressions(expression("env", "In", "dev", "prod")), {"env": "prod"}, True),
    "In none of": (expressions(ENV_DEV), {"env": "prod"}, False),
    "In unset": (expressions(ENV_DEV), {}, False),
    "NotIn none of": (expressions(expression("env", "NotIn", "prod")), {"env": "dev"}, True),
    "NotIn one of": (expressions(expression("env", "NotIn", "prod")), {"env": "prod"}, False),
    "NotIn unset": (expressions(expression("env", "NotIn", "prod")), {}, True),
    "Exists set": (expressions(expression("gpu", "Exists")), {"gpu": ""}, True),
    "Exists unset": (expressions(expression("gpu", "Exists")), {}, False),
    "DoesNotExist unset": (expressions(NO_LEGACY), {"team": "a"}, True),
    "DoesNotExist set": (expressions(NO_LEGACY), {"legacy": "true"}, False),
    "all must hold": (
        TEAM_A | expressions(ENV_DEV, NO_LEGACY),
        {"team": "a", "env": "dev", "legacy": "yes"},
        False,
    ),
    "all hold": (TEAM_A | expressions(ENV_DEV, NO_LEGACY), {"team": "a", "env": "dev"}, True),
}


@pytest.mark.parametrize(("selector", "labels", "selected"), SELECTIONS.values(), ids=SELECTIONS)
def test_namespace_selector_has_kubernetes_semantics(
    selector: dict[str, Any], labels: dict[str, str], selected: bool
) -> None:
    spec = ClusterQueue.model_validate(cluster_queue(namespaceSelector=selector)).spec
    assert spec.namespace_selector is not None
    assert spec.namespace_selector.matches(labels) is selected
    assert spec.selects_namespace(labels) is selected


def test_an_unset_namespace_selector_selects_every_namespace() -> None:
    for obj in (cluster_queue(), cluster_queue(namespaceSelector=None)):
        spec = ClusterQueue.model_validate(obj).spec
        assert spec.namespace_selector is None
        assert spec.selects_namespace({}) and spec.selects_namespace({"team": "b"})


def test_namespace_selector_round_trips_in_camel_case() -> None:
    selector = {
        "matchLabels": {"team": "a", "example.com/tier": "gold"},
        "matchExpressions": [
            {"key": "env", "operator": "NotIn", "values": ["prod"]},
            {"key": "legacy", "operator": "DoesNotExist", "values": []},
        ],
    }
    model = ClusterQueue.model_validate(cluster_queue(namespaceSelector=selector))
    dumped = model.model_dump(by_alias=True, exclude_none=True)
    assert dumped["spec"]["namespaceSelector"] == selector
    assert str(model.spec.namespace_selector) == (
        "team=a,example.com/tier=gold,env notin (prod),!legacy"
    )


BAD_SELECTORS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "In without values": (
        {"matchExpressions": [{"key": "env", "operator": "In"}]},
        ["spec.namespaceSelector.matchExpressions.0.values", "non-empty when operator is In"],
    ),
    "NotIn with empty values": (
        {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": []}]},
        ["matchExpressions.0.values", "non-empty when operator is NotIn"],
    ),
    "Exists with values": (
        {"matchExpressions": [{"key": "env", "operator": "Exists", "values": ["a"]}]},
        ["matchExpressions.0.values", "must be empty when operator is Exists"],
    ),
    "DoesNotExist with values": (
        {
            "matchExpressions": [
                {"key": "a", "operator": "Exists"},
                {"key": "env", "operator": "DoesNotExist", "values": ["a"]},
            ]
        },
        ["matchExpressions.1.values", "must be empty when operator is DoesNotExist"],
    ),
    "unknown operator": (
        {"matchExpressions": [{"key": "env", "operator": "Gt", "values": ["1"]}]},
        ["matchExpressions.0.operator", "'In', 'NotIn', 'Exists' or 'DoesNotExist'"],
    ),
    "empty key": (
        {"matchExpressions": [{"key": "", "operator": "Exists"}]},
        ["matchExpressions.0.key"],
    ),
    "malformed key": (
        {"matchExpressions": [{"key": "Team A", "operator": "Exists"}]},
        ["matchExpressions.0.key", "'Team A' is not a label key"],
    ),
    "malformed matchLabels key": (
        {"matchLabels": {"-team": "a"}},
        ["spec.namespaceSelector.matchLabels", "'-team' is not a label key"],
    ),
    "malformed label value": (
        {"matchLabels": {"team": "a b"}},
        ["spec.namespaceSelector.matchLabels.team", "'a b' is not a label value"],
    ),
    "a plain label map (the old form)": (
        {"team": "a"},
        ["spec.namespaceSelector.team", "Extra inputs are not permitted"],
    ),
}


@pytest.mark.parametrize(("selector", "words"), BAD_SELECTORS.values(), ids=BAD_SELECTORS)
def test_bad_namespace_selectors_are_refused_at_their_path(
    selector: dict[str, Any], words: list[str]
) -> None:
    text = error_text(cluster_queue(namespaceSelector=selector), ClusterQueue)
    for word in words:
        assert word in text


# -- quantities are never negative -------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", -1, "-500m", "-0.001", "-1e3", "-2Gi"])
@pytest.mark.parametrize("field", ["nominalQuota", "borrowingLimit", "lendingLimit"])
def test_negative_quotas_are_refused_with_a_clear_message(value: object, field: str) -> None:
    obj = cluster_queue()
    quota = gpu_quota(obj)
    quota[field] = value
    text = error_text(obj, ClusterQueue)
    assert f"spec.resourceGroups.0.flavors.0.resources.1.{field}" in text
    assert f"must not be negative (got '{value}')" in text


def test_negative_weight_and_requests_are_refused() -> None:
    assert "must not be negative" in error_text(
        cluster_queue(fairSharing={"weight": -1}), ClusterQueue
    )
    workload = {
        "kind": "Workload",
        "metadata": {"name": "w"},
        "spec": {"queueName": "q", "podSets": [{"count": 1, "requests": {"cpu": -2}}]},
    }
    text = error_text(workload, Workload)
    assert "spec.podSets.0.requests.cpu" in text and "must not be negative" in text


@pytest.mark.parametrize("value", ["0", "-0", "+1", 0, "1e3", ".5", "16Gi"])
def test_zero_and_positive_quotas_are_accepted(value: object) -> None:
    obj = cluster_queue()
    gpu_quota(obj)["nominalQuota"] = value
    assert ClusterQueue.model_validate(obj)


def test_quantities_have_at_most_64_characters() -> None:
    obj = cluster_queue()
    gpu_quota(obj)["nominalQuota"] = "1" * 65
    assert "at most 64 characters" in error_text(obj, ClusterQueue)


def test_a_quantity_beyond_what_a_number_holds_is_refused_as_a_validation_error() -> None:
    # The CRD's pattern lets "1e9999999" through; the model says what is wrong instead of
    # raising decimal.Overflow past the informer's and the webhook's handling of bad objects.
    obj = cluster_queue()
    gpu_quota(obj)["nominalQuota"] = "1e9999999"
    assert "out of range for a quantity" in error_text(obj, ClusterQueue)


def test_lending_limit_is_compared_exactly() -> None:
    obj = cluster_queue()
    gpu_quota(obj).update(nominalQuota="1.0001", lendingLimit="1.0002")
    assert "lendingLimit (1.0002)" in error_text(obj, ClusterQueue)
    gpu_quota(obj).update(lendingLimit="1000100u")
    assert ClusterQueue.model_validate(obj)


def test_exact_quantity_keeps_sign_and_precision() -> None:
    assert exact_quantity("-500m") == Decimal("-0.5")
    assert exact_quantity("1Ki") == 1024
    assert exact_quantity("-0") == 0
    assert exact_quantity(3) == 3
    with pytest.raises(QuantityError):
        exact_quantity("1e1.5")
    with pytest.raises(QuantityError):
        exact_quantity("\u0663")  # an Arabic-Indic three: the apiserver only takes 0-9


# -- resource names ------------------------------------------------------------------------------

GOOD_NAMES = [
    "cpu",
    "memory",
    "ephemeral-storage",
    "pods",
    "storage",
    "hugepages-2Mi",
    "hugepages-1Gi",
    "nvidia.com/gpu",
    "amd.com/gpu",
    "example.com/fpga",
    "vendor.example.com/Some_Device.v2",
    "kubernetes.io/batch-cpu",
]
# name -> what the message suggests
BAD_NAMES = {
    "gpu": "did you mean nvidia.com/gpu?",
    "gpus": "did you mean nvidia.com/gpu?",
    "cpus": "did you mean cpu?",
    "CPU": "did you mean cpu?",
    "mem": "did you mean memory?",
    "memroy": "did you mean memory?",
    "requests.cpu": "did you mean cpu?",
    "Nvidia.com/gpu": "did you mean nvidia.com/gpu?",
    "fpga": "e.g. example.com/fpga",
    "nvidia.com/": "",
    "/gpu": "",
    "nvidia.com/gpu/x": "",
    "a b": "",
    "x" * 245 + "/gpu": "",
}


def with_resource(name: str) -> dict[str, Any]:
    """A queue whose one group covers `name` only."""
    group = {
        "coveredResources": [name],
        "flavors": [{"name": "default", "resources": [{"name": name, "nominalQuota": 1}]}],
    }
    return cluster_queue(resourceGroups=[group])


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_standard_and_qualified_resource_names_are_accepted(name: str) -> None:
    assert ClusterQueue.model_validate(with_resource(name))
    assert is_resource_name(name)


@pytest.mark.parametrize(("name", "hint"), BAD_NAMES.items(), ids=[n[:20] for n in BAD_NAMES])
def test_unknown_resource_names_are_refused_with_a_hint(name: str, hint: str) -> None:
    text = error_text(with_resource(name), ClusterQueue)
    for path in ("coveredResources.0", "flavors.0.resources.0.name"):
        assert f"spec.resourceGroups.0.{path}" in text
    assert (
        "a standard resource (cpu, memory, ephemeral-storage, pods, storage, hugepages-<size>)"
        in text
    )
    assert "domain-qualified extended resource such as nvidia.com/gpu" in text
    assert hint in text


def test_a_cached_object_keeps_the_metadata_kohort_reads_and_not_its_managed_fields() -> None:
    workload = Workload.model_validate(
        {
            "apiVersion": "kohort.dev/v1alpha1",
            "kind": "Workload",
            "metadata": {
                "name": "job-a",
                "namespace": "ns",
                "labels": {"kohort.dev/queue-name": "q"},
                "finalizers": ["example.com/keep"],
                "managedFields": [{"manager": "kohort-controller", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {"queueName": "q", "podSets": [{"count": 1}]},
        }
    )
    meta = workload.model_dump(by_alias=True)["metadata"]
    assert meta == {"name": "job-a", "namespace": "ns", "labels": {"kohort.dev/queue-name": "q"}}
