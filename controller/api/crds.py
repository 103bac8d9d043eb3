"""CustomResourceDefinitions generated from the pydantic models: one source of truth.

Rule: the output is a Kubernetes *structural* schema: every `$ref` inlined, no `anyOf` except
the int-or-string form of quantities, `nullable` instead of null unions, no
`additionalProperties: false` (the apiserver prunes unknown fields instead), and status kept
open with `x-kubernetes-preserve-unknown-fields`. The webhook still validates with the models,
which carry the cross-field rules a schema cannot express.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from controller.api.conditions import WorkloadCondition
from controller.api.names import GROUP, VERSION
from controller.api.quantity import QUANTITY_PATTERN
from controller.api.queues import ClusterQueue, LocalQueue, ResourceFlavor
from controller.api.workload import Workload

Schema = dict[str, Any]
RESOURCES = (ClusterQueue, LocalQueue, ResourceFlavor, Workload)
SHORT_NAMES = {
    "ClusterQueue": ["cq"],
    "LocalQueue": ["lq"],
    "ResourceFlavor": ["rf"],
    "Workload": ["wl"],
}
# What `kubectl get` shows for each kind: enough to see why work waits without -o yaml.
_AGE: Schema = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
_USAGE = ".status.flavorsUsage[*].resources[*]"
PRINTER_COLUMNS: dict[str, list[Schema]] = {
    "ClusterQueue": [
        {"name": "Cohort", "type": "string", "jsonPath": ".spec.cohort"},
        {"name": "Pending", "type": "integer", "jsonPath": ".status.pendingWorkloads"},
        {"name": "Admitted", "type": "integer", "jsonPath": ".status.admittedWorkloads"},
        {"name": "Resources", "type": "string", "jsonPath": f"{_USAGE}.name"},
        {"name": "Usage", "type": "string", "jsonPath": f"{_USAGE}.total"},
        {"name": "Borrowed", "type": "string", "jsonPath": f"{_USAGE}.borrowed"},
        {"name": "Share", "type": "integer", "jsonPath": ".status.weightedShare"},
        _AGE,
    ],
    "LocalQueue": [
        {"name": "ClusterQueue", "type": "string", "jsonPath": ".spec.clusterQueue"},
        {"name": "Pending", "type": "integer", "jsonPath": ".status.pendingWorkloads"},
        {"name": "Admitted", "type": "integer", "jsonPath": ".status.admittedWorkloads"},
        _AGE,
    ],
    "ResourceFlavor": [_AGE],
    "Workload": [
        {"name": "Queue", "type": "string", "jsonPath": ".spec.queueName"},
        {"name": "ClusterQueue", "type": "string", "jsonPath": ".status.admission.clusterQueue"},
        {
            "name": "Admitted",
            "type": "string",
            "jsonPath": f'.status.conditions[?(@.type=="{WorkloadCondition.ADMITTED}")].status',
        },
        {"name": "Reason", "type": "string", "jsonPath": ".status.pendingReason"},
        _AGE,
    ],
}
_DROP = {"title", "$defs", "x-quantity"}


def _quantity(source: Schema) -> Schema:
    out: Schema = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }
    if "description" in source:
        out["description"] = source["description"]
    return out


def structural(schema: Schema, defs: dict[str, Schema]) -> Schema:
    """Rewrite one pydantic JSON schema node into a structural OpenAPI v3 node."""
    if "$ref" in schema:
        target = copy.deepcopy(defs[schema["$ref"].rsplit("/", 1)[-1]])
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        return structural({**target, **extra}, defs)
    if schema.get("x-quantity"):
        return _quantity(schema)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(schema["anyOf"])
        if len(options) != 1:
            raise ValueError(f"cannot express this union structurally: {schema['anyOf']}")
        rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        out = structural({**options[0], **rest}, defs)
        if nullable:
            out["nullable"] = True
        if schema.get("default") is not None:
            out["default"] = schema["default"]
        return out
    out = {k: v for k, v in schema.items() if k not in _DROP}
    if "const" in out:
        out["enum"] = [out.pop("const")]
    if out.get("type") == "object" or "properties" in out:
        out["type"] = "object"
        if "properties" in out:
            out["properties"] = {k: structural(v, defs) for k, v in out["properties"].items()}
            if out.get("additionalProperties") is not False and "additionalProperties" in out:
                out.pop("additionalProperties")
                out["x-kubernetes-preserve-unknown-fields"] = True
            out.pop("additionalProperties", None)
        elif isinstance(out.get("additionalProperties"), dict):
            out["additionalProperties"] = structural(out["additionalProperties"], defs)
        elif out.get("additionalProperties") is True or "additionalProperties" not in out:
            out.pop("additionalProperties", None)
            out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("type") == "array" and "items" in out:
        out["items"] = structural(out["items"], defs)
    return out


def model_schema(model: type[BaseModel]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}))


def crd(resource: type[ClusterQueue | LocalQueue | ResourceFlavor | Workload]) -> Schema:
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
