"""The generated CRDs carry the models' rules, so the apiserver enforces them with no webhook.

The rules themselves run on a real apiserver in tests/cluster/test_crd_rules.py; here: that
they are in the schema, where they belong, and that the patterns say what the models say.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from controller.api.common import (
    QUALIFIED_NAME,
    LabelKey,
    Quantity,
    ResourceName,
    is_label_key,
    is_label_value,
)
from controller.api.crds import NOT_NEGATIVE, crd, model_schema
from controller.api.quantity import QuantityError, exact_quantity
from controller.api.queues import ClusterQueue
from controller.api.workload import Workload

Schema = dict[str, Any]


def spec_of(resource: type[ClusterQueue] | type[Workload]) -> Schema:
    schema: Schema = crd(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec: Schema = schema["properties"]["spec"]
    return spec


def cq_spec() -> Schema:
    return spec_of(ClusterQueue)


def quota_item() -> Schema:
    groups = cq_spec()["properties"]["resourceGroups"]["items"]
    item: Schema = groups["properties"]["flavors"]["items"]["properties"]["resources"]["items"]
    return item


def walk(node: object) -> list[Schema]:
    found: list[Schema] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found += walk(value)
    elif isinstance(node, list):
        for value in node:
            found += walk(value)
    return found


def rules(node: Schema) -> list[str]:
    return [r["rule"] for r in node.get("x-kubernetes-validations", [])]


def test_namespace_selector_is_a_structural_label_selector() -> None:
    selector = cq_spec()["properties"]["namespaceSelector"]
    assert selector["type"] == "object"
    assert selector["nullable"] is True
    assert selector["x-kubernetes-map-type"] == "atomic"
    # The old schema was a map of strings: `matchLabels: {...}` was no string, hence HTTP 500.
    assert "additionalProperties" not in selector
    assert set(selector["properties"]) == {"matchLabels", "matchExpressions"}
    match_labels = selector["properties"]["matchLabels"]
    assert match_labels["type"] == "object"
    assert match_labels["additionalProperties"]["type"] == "string"
    assert match_labels["maxProperties"] == 64
    assert rules(match_labels) and "self.all(k," in rules(match_labels)[0]
    expressions = selector["properties"]["matchExpressions"]
    assert expressions["type"] == "array" and expressions["maxItems"] == 64
    item = expressions["items"]
    assert item["type"] == "object"
    assert item["required"] == ["key", "operator"]
    assert item["properties"]["key"]["minLength"] == 1
    assert item["properties"]["key"]["pattern"] == f"^{QUALIFIED_NAME}$"
    assert item["properties"]["operator"]["enum"] == ["In", "NotIn", "Exists", "DoesNotExist"]
    assert item["properties"]["values"]["items"]["type"] == "string"
    [values_rule] = item["x-kubernetes-validations"]
    assert values_rule["fieldPath"] == ".values"
    assert "size(self.values) > 0" in values_rule["rule"]


def test_cluster_queue_quantities_refuse_negative_values_with_cel() -> None:
    quantities = [n for n in walk(cq_spec()) if n.get("x-kubernetes-int-or-string")]
    assert len(quantities) == 4  # nominalQuota, borrowingLimit, lendingLimit, weight
    for node in quantities:
        assert node["x-kubernetes-validations"] == [NOT_NEGATIVE]
        assert node["maxLength"] == 64
        assert "quantity(string(self)).isLessThan(quantity('0'))" in NOT_NEGATIVE["rule"]


def test_workload_requests_refuse_negative_values_and_unknown_names() -> None:
    pod_sets = spec_of(Workload)["properties"]["podSets"]
    requests = pod_sets["items"]["properties"]["requests"]
    assert requests["maxProperties"] == 64  # bounded, so the apiserver takes the CEL rules
    [value_rule] = requests["additionalProperties"]["x-kubernetes-validations"]
    assert value_rule["message"] == "must not be negative"
    [name_rule] = requests["x-kubernetes-validations"]
    assert "did you mean" in name_rule["messageExpression"]


def test_resource_names_carry_the_name_rule() -> None:
    groups = cq_spec()["properties"]["resourceGroups"]["items"]
    covered = groups["properties"]["coveredResources"]["items"]
    name = quota_item()["properties"]["name"]
    for node in (covered, name):
        assert node["pattern"] == f"^{QUALIFIED_NAME}$"
        assert node["maxLength"] == 253
        [rule] = node["x-kubernetes-validations"]
        assert '"cpu", "memory", "ephemeral-storage", "pods", "storage"' in rule["rule"]
        assert "self.indexOf('/') <= 244" in rule["rule"]
        assert "did you mean" in rule["messageExpression"]
        assert '"gpus": "nvidia.com/gpu"' in rule["messageExpression"]


def test_lending_limit_is_checked_against_nominal_quota_with_cel() -> None:
    [rule] = quota_item()["x-kubernetes-validations"]
    assert rule["fieldPath"] == ".lendingLimit"
    assert "compareTo(quantity(string(self.nominalQuota))) <= 0" in rule["rule"]


QUANTITY_SAMPLES = ["1", "-1", "+1", "1.", ".5", "500m", "16Gi", "1e3", "1E-3", "1e1.5", "1.5.5"]
QUANTITY_SAMPLES += ["Gi", "", "1 Gi", "1Zi", "0x10", "\u0663"]


@pytest.mark.parametrize("text", QUANTITY_SAMPLES)
def test_the_quantity_pattern_accepts_what_the_model_parses(text: str) -> None:
    node = quota_item()["properties"]["nominalQuota"]
    try:
        exact_quantity(text)
        parses = True
    except QuantityError:
        parses = False
    assert bool(re.fullmatch(node["pattern"][1:-1], text)) is parses


LABEL_SAMPLES = ["team", "example.com/team", "a.b-c_d", "Team", "-team", "team-", "a b", ""]
LABEL_SAMPLES += ["EXAMPLE.com/team", "example.com/", "/team", "a/b/c", "x" * 63, "x" * 64]


@pytest.mark.parametrize("text", LABEL_SAMPLES, ids=[s[:16] for s in LABEL_SAMPLES])
def test_label_patterns_accept_what_the_model_accepts(text: str) -> None:
    item = cq_spec()["properties"]["namespaceSelector"]["properties"]["matchExpressions"]["items"]
    key = item["properties"]["key"]
    value = item["properties"]["values"]["items"]
    key_ok = len(text) <= key["maxLength"] and bool(re.fullmatch(key["pattern"][1:-1], text))
    assert key_ok is is_label_key(text)
    value_ok = len(text) <= value["maxLength"] and bool(re.fullmatch(value["pattern"][1:-1], text))
    assert value_ok is is_label_value(text)


class Unbounded(BaseModel):
    names: list[ResourceName]


class Bounded(BaseModel):
    names: Annotated[list[ResourceName], Field(max_length=8)]
    requests: Annotated[dict[ResourceName, Quantity], Field(max_length=16)]


class UnboundedKeys(BaseModel):
    labels: dict[LabelKey, str]


def test_cel_rules_are_only_written_where_the_apiserver_can_bound_their_cost() -> None:
    with pytest.raises(ValueError, match="without max_length"):
        model_schema(Unbounded)
    with pytest.raises(ValueError, match="bounded map"):
        model_schema(UnboundedKeys)
    schema = model_schema(Bounded)
    assert rules(schema["properties"]["names"]["items"])
    requests = schema["properties"]["requests"]
    [keys] = rules(requests)
    assert keys.startswith("self.all(k, size(k) >= 1 && size(k) <= 253 && k.matches(")
    assert "did you mean" in requests["x-kubernetes-validations"][0]["messageExpression"]
    # Quantities in a bounded map get the CEL rule, in an unbounded one a pattern and a minimum.
    assert requests["additionalProperties"]["x-kubernetes-validations"] == [NOT_NEGATIVE]
