"""Building blocks shared by the kohort.dev/v1alpha1 models: base classes, metadata,
quantities, names, taints, label selectors.

Rule: specs reject unknown fields (`extra="forbid"`); status keeps what the server adds;
metadata is read as every Kubernetes object's (`kube.ObjectMeta`: the members kohort reads,
nothing else). Every field is snake_case in Python and camelCase on the wire.
"""

from __future__ import annotations

import difflib
import functools
import re
import reprlib
from collections.abc import Iterable, Mapping
from typing import Annotated, ClassVar, Final, Literal

import msgspec
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError

from controller.api import kube
from controller.api.kinds import Kind
from controller.api.quantity import QuantityError, exact_quantity

QUANTITY_MAX_LENGTH: Final = 64


def _check_quantity(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        shown = reprlib.repr(value)  # shortened: safe however deeply a value nests
        raise ValueError(f"must be a quantity such as '500m', '2' or '16Gi', not {shown}")
    text = value if isinstance(value, str) else str(value)
    if len(text) > QUANTITY_MAX_LENGTH:
        raise ValueError(f"must be a quantity of at most {QUANTITY_MAX_LENGTH} characters")
    problem = _quantity_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


@functools.lru_cache(maxsize=4096)
def _quantity_problem(text: str) -> str | None:
    """What is wrong with quantity `text`, or None. Cached: a cluster's objects repeat the same
    few quantities, and every Workload the controller reads carries several."""
    try:
        amount = exact_quantity(text)
    except QuantityError as err:
        return str(err)
    if amount < 0:
        return f"must not be negative (got {text!r}); write an amount such as '0', '500m' or '16Gi'"
    return None


# A non-negative Kubernetes quantity, kept as written; `parse_quantity` gives milli-units. The
# CRDs refuse what this refuses (see `crds.quantity_schema`).
Quantity = Annotated[
    str, BeforeValidator(_check_quantity), Field(json_schema_extra={"x-quantity": True})
]
ObjectName = Annotated[str, Field(min_length=1, max_length=253)]

# -- names ----------------------------------------------------------------------------------
# Kubernetes' syntax rules as regular expressions that both Python and the CRDs (OpenAPI
# `pattern`, RE2) use, unanchored here. What a pattern cannot say, a cheap CEL rule in crds.py
# says, and `is_*` below checks exactly the same, so that whatever the apiserver stores the
# models read.

DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN: Final = rf"{DNS_LABEL}(\.{DNS_LABEL})*"
# The name part of a qualified name: at most 63 letters, digits, '-', '_', '.', alphanumeric at
# both ends.
NAME_PART: Final = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
# A qualified name (label keys, resource names): `name` or `prefix/name`, the prefix a DNS
# subdomain. Kubernetes caps the prefix at 253 characters; kohort caps the whole name instead.
QUALIFIED_NAME: Final = rf"({DNS_SUBDOMAIN}/)?{NAME_PART}"
LABEL_KEY_MAX: Final = 253 + 1 + 63
# A label value: empty, or a name part.
LABEL_VALUE: Final = rf"({NAME_PART})?"
LABEL_VALUE_MAX: Final = 63
LABEL_KEY_RULE: Final = (
    "a name of at most 63 letters, digits, '-', '_' or '.' that starts and ends with a letter"
    " or digit, optionally prefixed by a DNS subdomain and '/' (e.g. team, example.com/team)"
)
LABEL_VALUE_RULE: Final = (
    "empty, or at most 63 letters, digits, '-', '_' or '.' that start and end with a letter or"
    " digit"
)

STANDARD_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage", "pods", "storage")
HUGEPAGES_PREFIX: Final = "hugepages-"
RESOURCE_NAME_MAX: Final = 253
# An extended resource is `domain/name`; Kubernetes requires `requests.<domain>` to be a DNS
# subdomain too (that is how a ResourceQuota names it), so the domain has at most 244 characters.
EXTENDED_PREFIX_MAX: Final = 253 - len("requests.")
# Names people write for a resource kohort would otherwise refuse, and what they meant. Keys
# are lower case; the CRDs' rule quotes the same table in its message (see crds.py).
RESOURCE_NAME_FIXES: Final = {
    **{name: name for name in STANDARD_RESOURCES},
    "cpus": "cpu",
    "vcpu": "cpu",
    "vcpus": "cpu",
    "core": "cpu",
    "cores": "cpu",
    "mem": "memory",
    "ram": "memory",
    "disk": "ephemeral-storage",
    "ephemeral": "ephemeral-storage",
    "ephemeral_storage": "ephemeral-storage",
    "ephemeralstorage": "ephemeral-storage",
    "pod": "pods",
    "gpu": "nvidia.com/gpu",
    "gpus": "nvidia.com/gpu",
    "nvidia-gpu": "nvidia.com/gpu",
    "nvidia_gpu": "nvidia.com/gpu",
    "amd-gpu": "amd.com/gpu",
}
RESOURCE_NAMES_ACCEPTED: Final = (
    f"a standard resource ({', '.join(STANDARD_RESOURCES)}, {HUGEPAGES_PREFIX}<size>) or a"
    " domain-qualified extended resource such as nvidia.com/gpu"
)


def _full(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text) is not None


def is_label_key(key: str) -> bool:
    """Whether `key` is a label key: a qualified name of at most 317 characters."""
    return len(key) <= LABEL_KEY_MAX and _full(QUALIFIED_NAME, key)


def is_label_value(value: str) -> bool:
    return len(value) <= LABEL_VALUE_MAX and _full(LABEL_VALUE, value)


def is_resource_name(name: str) -> bool:
    """Whether kohort accepts `name` as a resource, following Kubernetes' rules.

    A qualified name that is a standard resource (cpu, memory, ephemeral-storage, pods, storage,
    hugepages-<size>) or an extended one: `domain/name`, the domain at most 244 characters.
    """
    if len(name) > RESOURCE_NAME_MAX or not _full(QUALIFIED_NAME, name):
        return False
    if name in STANDARD_RESOURCES or name.startswith(HUGEPAGES_PREFIX):
        return True
    return 0 < name.find("/") <= EXTENDED_PREFIX_MAX


def suggest_resource_name(name: str) -> str | None:
    """The resource `name` most likely means, or None when there is no good guess."""
    text = name.strip().lower()
    for prefix in ("requests.", "limits."):
        text = text.removeprefix(prefix)
    if text in RESOURCE_NAME_FIXES:
        return RESOURCE_NAME_FIXES[text]
    if text != name and is_resource_name(text):
        return text
    close = difflib.get_close_matches(
        text, [*STANDARD_RESOURCES, "nvidia.com/gpu", "amd.com/gpu"], n=1, cutoff=0.8
    )
    return close[0] if close else None


def resource_name_problem(name: str) -> str:
    """Why `name` is refused, what is accepted instead, and the likely fix."""
    message = f"{name!r} is not a resource name kohort accepts: use {RESOURCE_NAMES_ACCEPTED}"
    suggestion = suggest_resource_name(name)
    if suggestion is not None:
        return f"{message}; did you mean {suggestion}?"
    if _full(NAME_PART, name):
        return f"{message}; an extended resource needs its vendor's domain, e.g. example.com/{name}"
    return message


def _check_resource_name(name: str) -> str:
    if not is_resource_name(name):
        raise ValueError(resource_name_problem(name))
    return name


def _check_label_key(key: str) -> str:
    if not is_label_key(key):
        raise ValueError(f"{key!r} is not a label key: {LABEL_KEY_RULE}")
    return key


def _check_label_value(value: str) -> str:
    if not is_label_value(value):
        raise ValueError(f"{value!r} is not a label value: {LABEL_VALUE_RULE}")
    return value


# The markers tell crds.py which rule a string follows; it writes the same rule into the CRDs.
# A resource kohort accounts for.
ResourceName = Annotated[
    str,
    AfterValidator(_check_resource_name),
    Field(min_length=1, max_length=RESOURCE_NAME_MAX, json_schema_extra={"x-resource-name": True}),
]
LabelKey = Annotated[
    str,
    AfterValidator(_check_label_key),
    Field(min_length=1, max_length=LABEL_KEY_MAX, json_schema_extra={"x-label-key": True}),
]
LabelValue = Annotated[
    str,
    AfterValidator(_check_label_value),
    Field(max_length=LABEL_VALUE_MAX, json_schema_extra={"x-label-value": True}),
]


class Spec(BaseModel):
    """Base for everything under `spec`: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=False
    )


class Lenient(BaseModel):
    """Base for status: camelCase, fields we do not model are kept."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


def _read_metadata(value: object) -> kube.ObjectMeta:
    if isinstance(value, kube.ObjectMeta):
        return value
    try:
        return msgspec.convert(value, kube.ObjectMeta)
    except msgspec.ValidationError as err:
        # msgspec names the member as `$.labels[...]`; the webhook prefixes `metadata: `.
        problem = str(err).replace("`$", "`metadata")
        raise PydanticCustomError("metadata", "{problem}", {"problem": problem}) from None


def _write_metadata(meta: kube.ObjectMeta) -> object:
    return msgspec.to_builtins(meta)


# A kohort object's metadata, the msgspec view every cached object's metadata is (unknown
# members, managedFields among them, are skipped), inside a pydantic model. Its schema is an
# open object: the apiserver validates metadata.
Metadata = Annotated[
    kube.ObjectMeta,
    PlainValidator(_read_metadata),
    PlainSerializer(_write_metadata),
    WithJsonSchema({"type": "object"}),
]


class Resource(Lenient):
    """A top-level object. Subclasses pin where they live in the API as `KIND`."""

    KIND: ClassVar[Kind]

    api_version: Literal["kohort.dev/v1alpha1"] = "kohort.dev/v1alpha1"
    kind: str
    metadata: Metadata = Field(default_factory=kube.ObjectMeta)


# Taints and tolerations as kohort's CRDs hold them (a ResourceFlavor's nodeTaints and
# tolerations, a Workload pod set's tolerations). Not the msgspec views of nodes' taints and
# pods' tolerations (`kube.Taint`, `kube.Toleration`): these are validated (a key, a known
# effect and operator, no unknown member) and give the CRDs their schema, while the views read
# nodes and pods as the apiserver holds them. `controller.workloads.taints` converts either to
# the decision core's. (No docstrings: a model's docstring becomes the CRD's description.)
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Taint(Spec):
    key: str = Field(min_length=1)
    value: str = ""
    effect: TaintEffect


class Toleration(Spec):
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] = ""
    toleration_seconds: int | None = None


SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
_SET_OPERATORS: Final = ("In", "NotIn")
_VALUES_RULE: JsonDict = {
    "rule": (
        "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0"
        " : !has(self.values) || size(self.values) == 0"
    ),
    "messageExpression": (
        "'must be ' + (self.operator in ['In', 'NotIn'] ? 'non-empty' : 'empty')"
        " + ' when operator is ' + self.operator"
    ),
    "fieldPath": ".values",
}


class LabelSelectorRequirement(Spec):
    """One `matchExpressions` entry: `key` `operator` `values`, as in Kubernetes.

    `In`: the label is set to one of `values`. `NotIn`: the label is unset or set to none of
    them. `Exists` / `DoesNotExist`: the label is set / unset (then `values` must be empty).
    """

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_VALUES_RULE]})

    key: LabelKey
    operator: SelectorOperator
    values: list[LabelValue] = Field(default_factory=list, validate_default=True)

    @field_validator("values")
    @classmethod
    def _values_fit_the_operator(cls, values: list[str], info: ValidationInfo) -> list[str]:
        operator = info.data.get("operator")
        if operator in _SET_OPERATORS and not values:
            raise ValueError(f"must be non-empty when operator is {operator}")
        if operator is not None and operator not in _SET_OPERATORS and values:
            raise ValueError(f"must be empty when operator is {operator} (got {values})")
        return values

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels

    def __str__(self) -> str:
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        return f"{self.key} {self.operator.lower()} ({','.join(self.values)})"


class LabelSelector(Spec):
    """A Kubernetes label selector: every `matchLabels` entry and every expression must hold.

    An empty selector (`{}`) matches everything, as in Kubernetes.
    """

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-map-type": "atomic"})

    # At most 64 of each: the CRD checks them with CEL rules, whose cost must be bounded.
    match_labels: Annotated[dict[LabelKey, LabelValue], Field(max_length=64)] = Field(
        default_factory=dict
    )
    match_expressions: Annotated[list[LabelSelectorRequirement], Field(max_length=64)] = Field(
        default_factory=list
    )

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with `labels` is selected (Kubernetes semantics)."""
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            e.matches(labels) for e in self.match_expressions
        )

    def __str__(self) -> str:
        """The selector as `kubectl -l` writes it: `team=a,env in (dev,prod),!legacy`."""
        parts = [f"{k}={v}" for k, v in self.match_labels.items()]
        parts += [str(e) for e in self.match_expressions]
        return ",".join(parts)


class Condition(Lenient):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


def duplicates(names: Iterable[str]) -> list[str]:
    """Names that occur more than once, in first-seen order."""
    seen: set[str] = set()
    repeated: list[str] = []
    for name in names:
        if name in seen and name not in repeated:
            repeated.append(name)
        seen.add(name)
    return repeated
