"""The kohort.dev/v1alpha1 models accept what the core can use and name what they reject."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from controller.api import ClusterQueue, LocalQueue, ResourceFlavor, Workload, parse_quantity
from controller.api.quantity import QuantityError, format_quantity


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


def test_metadata_keeps_server_fields() -> None:
    obj = cluster_queue()
    obj["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    model = ClusterQueue.model_validate(obj)
    assert model.model_dump(by_alias=True)["metadata"]["managedFields"] == [{"manager": "kubectl"}]


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
        "ClusterQueue", "LocalQueue", "ResourceFlavor", "Workload"
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
