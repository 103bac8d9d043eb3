"""Building blocks shared by the kohort.dev/v1alpha1 models: base classes, quantities, taints.

Rule: specs reject unknown fields (`extra="forbid"`); metadata and status keep what the server
adds. Every field is snake_case in Python and camelCase on the wire.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from controller.api.kinds import Kind
from controller.api.quantity import QuantityError, parse_quantity


def _check_quantity(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"must be a quantity such as '500m', '2' or '16Gi', not {value!r}")
    text = value if isinstance(value, str) else str(value)
    try:
        milli = parse_quantity(text)
    except QuantityError as err:
        raise ValueError(str(err)) from err
    if milli < 0:
        raise ValueError(f"must not be negative (got {text!r})")
    return text


# A non-negative Kubernetes quantity, kept as written; `parse_quantity` gives milli-units.
Quantity = Annotated[
    str, BeforeValidator(_check_quantity), Field(json_schema_extra={"x-quantity": True})
]
ResourceName = Annotated[str, Field(min_length=1, max_length=253)]
ObjectName = Annotated[str, Field(min_length=1, max_length=253)]


class Spec(BaseModel):
    """Base for everything under `spec`: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=False
    )


class Lenient(BaseModel):
    """Base for metadata and status: camelCase, fields we do not model are kept."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class OwnerReference(Lenient):
    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(Lenient):
    name: str = ""
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    owner_references: list[OwnerReference] = Field(default_factory=list)


class Resource(Lenient):
    """A top-level object. Subclasses pin where they live in the API as `KIND`."""

    KIND: ClassVar[Kind]

    api_version: Literal["kohort.dev/v1alpha1"] = "kohort.dev/v1alpha1"
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


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


def parse_time(text: object) -> float | None:
    """An RFC 3339 timestamp as the API server writes it, in seconds; None when absent or bad."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(seconds: float) -> str:
    """Seconds as an RFC 3339 timestamp in UTC, to the second, as the API server writes them."""
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).replace(microsecond=0)
    return stamp.isoformat().replace("+00:00", "Z")
