"""CustomResourceDefinitions generated from the pydantic models: one source of truth.

Rule: the output is a Kubernetes *structural* schema: every `$ref` inlined, no `anyOf` except
the int-or-string form of quantities, `nullable` instead of null unions, no
`additionalProperties: false` (the apiserver prunes unknown fields instead), and status kept
open with `x-kubernetes-preserve-unknown-fields`.

The apiserver enforces the models' rules on its own, with no webhook: quantities are not
negative, resource names are standard or domain-qualified, label selectors are well formed,
lendingLimit does not exceed nominalQuota. Syntax is OpenAPI `pattern`s (free); the rest is CEL
`x-kubernetes-validations` (the quantity library needs Kubernetes 1.29 or newer), which the
apiserver only accepts when it can bound their cost: so CEL rules go only where every list and
map around them has a maximum size, and a quantity elsewhere gets a pattern without '-' and
`minimum: 0` instead. The name rules come from the markers `x-resource-name`, `x-label-key`
and `x-label-value` on the models' types, the other rules from the models themselves. On what
these rules check, the apiserver and the models agree (tests/cluster/test_crd_rules.py checks it
on a real apiserver); the webhook validates with the models, which add the cross-field rules
the schema does not express (a borrowingLimit needs a cohort, names are unique).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from controller.api import common
from controller.api.checks import AdmissionCheck
from controller.api.conditions import QueueCondition, WorkloadCondition
from controller.api.names import GROUP, VERSION
from controller.api.quantity import NON_NEGATIVE_QUANTITY_PATTERN, QUANTITY_PATTERN
from controller.api.queues import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Topology
from controller.api.workload import Workload

Schema = dict[str, Any]
RESOURCES = (AdmissionCheck, ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Topology, Workload)
SHORT_NAMES = {
    "AdmissionCheck": ["kac"],
    "ClusterQueue": ["cq"],
    "Cohort": ["coh"],
    "LocalQueue": ["lq"],
    "ResourceFlavor": ["rf"],
    "Topology": ["topo"],
    "Workload": ["wl"],
}
# What `kubectl get` shows for each kind: enough to see why work waits without -o yaml.
_AGE: Schema = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
_USAGE = ".status.flavorsUsage[*].resources[*]"
# The flavors in the order their resources follow in the usage columns.
_FLAVORS: Schema = {"name": "Flavors", "type": "string", "jsonPath": ".status.flavorsUsage[*].name"}
PRINTER_COLUMNS: dict[str, list[Schema]] = {
    "ClusterQueue": [
        {"name": "Cohort", "type": "string", "jsonPath": ".spec.cohort"},
        {"name": "Pending", "type": "integer", "jsonPath": ".status.pendingWorkloads"},
        {"name": "Admitted", "type": "integer", "jsonPath": ".status.admittedWorkloads"},
        _FLAVORS,
        {"name": "Resources", "type": "string", "jsonPath": f"{_USAGE}.name"},
        {"name": "Usage", "type": "string", "jsonPath": f"{_USAGE}.total"},
        {"name": "Borrowed", "type": "string", "jsonPath": f"{_USAGE}.borrowed"},
        {"name": "Share", "type": "integer", "jsonPath": ".status.weightedShare"},
        _AGE,
    ],
    "Cohort": [
        {"name": "Parent", "type": "string", "jsonPath": ".spec.parent"},
        {
            "name": "Active",
            "type": "string",
            "jsonPath": f'.status.conditions[?(@.type=="{QueueCondition.ACTIVE}")].status',
        },
        {"name": "Weight", "type": "string", "jsonPath": ".spec.fairSharing.weight"},
        {"name": "Share", "type": "integer", "jsonPath": ".status.weightedShare"},
        _FLAVORS,
        {"name": "Resources", "type": "string", "jsonPath": f"{_USAGE}.name"},
        {"name": "Usage", "type": "string", "jsonPath": f"{_USAGE}.total"},
        {"name": "Quota", "type": "string", "jsonPath": f"{_USAGE}.subtreeQuota"},
        {"name": "Borrowed", "type": "string", "jsonPath": f"{_USAGE}.borrowed"},
        _AGE,
    ],
    "LocalQueue": [
        {"name": "ClusterQueue", "type": "string", "jsonPath": ".spec.clusterQueue"},
        {"name": "Pending", "type": "integer", "jsonPath": ".status.pendingWorkloads"},
        {"name": "Admitted", "type": "integer", "jsonPath": ".status.admittedWorkloads"},
        _AGE,
        {
            "name": "Reason",
            "type": "string",
            "jsonPath": ".status.pendingReason",
            "priority": 1,
        },
    ],
    "ResourceFlavor": [
        {"name": "Topology", "type": "string", "jsonPath": ".spec.topologyName"},
        {"name": "MaxNodes", "type": "integer", "jsonPath": ".spec.autoscaling.maxNodes"},
        _AGE,
    ],
    "AdmissionCheck": [
        {
            "name": "Class",
            "type": "string",
            "jsonPath": ".spec.provisioningRequest.provisioningClassName",
        },
        _AGE,
    ],
    "Topology": [
        {"name": "Levels", "type": "string", "jsonPath": ".spec.levels[*].nodeLabel"},
        _AGE,
    ],
    "Workload": [
        {"name": "Queue", "type": "string", "jsonPath": ".spec.queueName"},
        {"name": "ClusterQueue", "type": "string", "jsonPath": ".status.admission.clusterQueue"},
        {
            "name": "Admitted",
            "type": "string",
            "jsonPath": f'.status.conditions[?(@.type=="{WorkloadCondition.ADMITTED}")].status',
        },
        {"name": "Position", "type": "integer", "jsonPath": ".status.position.clusterQueue"},
        {"name": "Reason", "type": "string", "jsonPath": ".status.pendingReason"},
        {
            "name": "Start (p90)",
            "type": "string",
            "jsonPath": ".status.startForecast.p90",
            "priority": 1,
        },
        _AGE,
        {
            "name": "InLocalQueue",
            "type": "integer",
            "jsonPath": ".status.position.localQueue",
            "priority": 1,
        },
        {
            "name": "InCohort",
            "type": "integer",
            "jsonPath": ".status.position.cohort",
            "priority": 1,
        },
    ],
}
# Rules on a whole object (they may read metadata.name), by kind.
ROOT_RULES: dict[str, list[Schema]] = {
    # A longer cycle of parents shows in the Cohorts' status: one object alone does not show it.
    "Cohort": [
        {
            "rule": (
                "!has(self.spec) || !has(self.spec.parent)"
                " || self.spec.parent != self.metadata.name"
            ),
            "messageExpression": (
                "'a Cohort cannot be its own parent (spec.parent names the Cohort itself, '"
                " + self.metadata.name + '); name another Cohort or remove spec.parent'"
            ),
            "fieldPath": ".spec.parent",
        }
    ],
}
_DROP = {"title", "$defs", "x-quantity"}
# Quantities: the pattern checks the syntax (a sign allowed), this rule the sign, with a message
# that says why "-1" and -1 are refused. It compares like the model (`exact_quantity`).
NOT_NEGATIVE: Schema = {
    "rule": "!isQuantity(string(self)) || !quantity(string(self)).isLessThan(quantity('0'))",
    "message": "must not be negative",
}


def _cel_text(text: str) -> str:
    """`text` as a CEL string literal."""
    return json.dumps(text)


def _quoted(v: str, rest: str) -> str:
    """CEL for the message "'<value of v>' <rest>"."""
    return '"\'" + ' + v + " + " + _cel_text("' " + rest)


@dataclass(frozen=True)
class NameRule:
    """How the CRDs check a string the models mark: an OpenAPI `pattern` (free), then a CEL rule
    for what a pattern cannot say (`check`, None when nothing), over a string expression `v`.

    Map keys have no `pattern` in a structural schema: there the pattern becomes CEL too.
    """

    pattern: str
    check: Callable[[str], str] | None
    message: Callable[[str], str]

    def on_string(self, node: Schema) -> list[Schema]:
        node["pattern"] = f"^{self.pattern}$"
        if self.check is None:
            return []
        return [{"rule": self.check("self"), "messageExpression": self.message("self")}]

    def on_keys(self, names: Schema) -> Schema:
        holds = f"k.matches(r'^{self.pattern}$')"
        if self.check is not None:
            holds = f"{holds} && {self.check('k')}"
        if "maxLength" in names:
            holds = f"size(k) <= {names['maxLength']} && {holds}"
        if "minLength" in names:
            holds = f"size(k) >= {names['minLength']} && {holds}"
        bad = f"self.filter(k, !({holds}))[0]"
        return {"rule": f"self.all(k, {holds})", "messageExpression": self.message(bad)}


_FIXES = "{%s}" % ", ".join(  # noqa: UP031 - braces of a CEL map literal
    f"{_cel_text(k)}: {_cel_text(v)}" for k, v in common.RESOURCE_NAME_FIXES.items()
)
_STANDARD = f"[{', '.join(_cel_text(n) for n in common.STANDARD_RESOURCES)}]"
_NOT_A_RESOURCE = f"is not a resource name kohort accepts: use {common.RESOURCE_NAMES_ACCEPTED}"
NAME_RULES: dict[str, NameRule] = {
    # The same test as common.is_resource_name; the message suggests a fix for common mistakes.
    "x-resource-name": NameRule(
        pattern=common.QUALIFIED_NAME,
        check=lambda v: (
            f"{v} in {_STANDARD} || {v}.startsWith({_cel_text(common.HUGEPAGES_PREFIX)})"
            f" || ({v}.indexOf('/') > 0 && {v}.indexOf('/') <= {common.EXTENDED_PREFIX_MAX})"
        ),
        message=lambda v: (
            _quoted(v, _NOT_A_RESOURCE) + f" + ({v}.lowerAscii() in {_FIXES}"
            f" ? '; did you mean ' + {_FIXES}[{v}.lowerAscii()] + '?' : '')"
        ),
    ),
    "x-label-key": NameRule(
        pattern=common.QUALIFIED_NAME,
        check=None,
        message=lambda v: _quoted(v, f"is not a label key: {common.LABEL_KEY_RULE}"),
    ),
    "x-label-value": NameRule(
        pattern=common.LABEL_VALUE,
        check=None,
        message=lambda v: _quoted(v, f"is not a label value: {common.LABEL_VALUE_RULE}"),
    ),
}


def quantity_schema(source: Schema, cel: bool = True) -> Schema:
    """A quantity: an integer or a string of the quantity grammar, never negative.

    With `cel`, a CEL rule refuses negative values with a message that says so. Without (in a
    list or map of unbounded size, where the apiserver refuses CEL rules as too costly), the
    pattern refuses a leading '-' and `minimum` a negative integer.
    """
    out: Schema = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN if cel else NON_NEGATIVE_QUANTITY_PATTERN,
        # Also bounds the cost of the CEL rule, which the apiserver checks before it accepts it.
        "maxLength": common.QUANTITY_MAX_LENGTH,
        "x-kubernetes-int-or-string": True,
    }
    if cel:
        out["x-kubernetes-validations"] = [copy.deepcopy(NOT_NEGATIVE)]
    else:
        out["minimum"] = 0
    if "description" in source:
        out["description"] = source["description"]
    return out


def _key_rule(names: Schema) -> Schema:
    """The CEL rule on a map that pydantic's `propertyNames` (the schema of its keys) stands for."""
    markers = [m for m in NAME_RULES if names.get(m)]
    unknown = set(names) - {*NAME_RULES, "minLength", "maxLength", "type"}
    if len(markers) != 1 or unknown:
        raise ValueError(f"cannot express these map keys structurally: {names}")
    return NAME_RULES[markers[0]].on_keys(names)


def structural(schema: Schema, defs: dict[str, Schema], bounded: bool = True) -> Schema:
    """Rewrite one pydantic JSON schema node into a structural OpenAPI v3 node.

    `bounded`: the apiserver can bound how often a CEL rule here runs (every list and map
    around it has maxItems / maxProperties); CEL rules are only written where it can.
    """
    if "$ref" in schema:
        target = copy.deepcopy(defs[schema["$ref"].rsplit("/", 1)[-1]])
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        return structural({**target, **extra}, defs, bounded)
    if schema.get("x-quantity"):
        return quantity_schema(schema, cel=bounded)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(schema["anyOf"])
        if len(options) != 1:
            raise ValueError(f"cannot express this union structurally: {schema['anyOf']}")
        rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        out = structural({**options[0], **rest}, defs, bounded)
        if nullable:
            out["nullable"] = True
        if schema.get("default") is not None:
            out["default"] = schema["default"]
        return out
    out = {k: v for k, v in schema.items() if k not in _DROP}
    rules: list[Schema] = copy.deepcopy(out.pop("x-kubernetes-validations", []))
    for marker, rule in NAME_RULES.items():
        if out.pop(marker, False):
            rules += rule.on_string(out)
    if "propertyNames" in out:
        if "maxProperties" not in out:
            raise ValueError(f"map keys with rules need a bounded map (max_length): {out}")
        rules.append(_key_rule(out.pop("propertyNames")))
    if rules:
        if not bounded:
            raise ValueError(f"CEL rules inside a list or map without max_length: {rules}")
        out["x-kubernetes-validations"] = rules
    if "const" in out:
        out["enum"] = [out.pop("const")]
    if out.get("type") == "object" or "properties" in out:
        out["type"] = "object"
        if "properties" in out:
            out["properties"] = {
                k: structural(v, defs, bounded) for k, v in out["properties"].items()
            }
            if out.get("additionalProperties") is not False and "additionalProperties" in out:
                out.pop("additionalProperties")
                out["x-kubernetes-preserve-unknown-fields"] = True
            out.pop("additionalProperties", None)
        elif isinstance(out.get("additionalProperties"), dict):
            values_bounded = bounded and "maxProperties" in out
            out["additionalProperties"] = structural(
                out["additionalProperties"], defs, values_bounded
            )
        elif out.get("additionalProperties") is True or "additionalProperties" not in out:
            out.pop("additionalProperties", None)
            out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("type") == "array" and "items" in out:
        out["items"] = structural(out["items"], defs, bounded and "maxItems" in out)
    return out


def model_schema(model: type[BaseModel]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}))


def crd(
    resource: type[
        AdmissionCheck | ClusterQueue | Cohort | LocalQueue | ResourceFlavor | Topology | Workload
    ],
) -> Schema:
    """The CustomResourceDefinition of one kind, as a plain dict ready for YAML or the API."""
    spec_model = resource.model_fields["spec"].annotation
    assert isinstance(spec_model, type) and issubclass(spec_model, BaseModel)
    spec_schema = model_schema(spec_model)
    spec_schema.setdefault("description", f"Desired state of the {resource.KIND.kind}.")
    root: Schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    if resource.model_fields["spec"].is_required():
        root["required"] = ["spec"]
    kind = resource.KIND.kind
    if kind in ROOT_RULES:
        root["x-kubernetes-validations"] = copy.deepcopy(ROOT_RULES[kind])
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{resource.KIND.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": resource.KIND.plural,
                "singular": kind.lower(),
                "shortNames": SHORT_NAMES[kind],
            },
            "scope": "Namespaced" if resource.KIND.namespaced else "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS[kind],
                }
            ],
        },
    }


def all_crds() -> list[Schema]:
    """The CRDs of every kohort.dev kind, in a fixed order."""
    return [crd(r) for r in RESOURCES]
