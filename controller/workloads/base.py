"""The interface every workload kind implements, and the pod-template edits they share."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from controller.api import names
from controller.workloads.edits import Editor, JSONDict, Path, lookup
from controller.workloads.requests import Requests, pod_requests

# The scheduler a pod gets when its spec names none; treated as "not chosen by the user".
DEFAULT_SCHEDULER = "default-scheduler"
# Kubernetes label values are at most 63 characters; gang names are used as label values.
MAX_GANG_NAME = 63


class Backend(enum.StrEnum):
    """Which gang scheduler places an admitted gang's pods on nodes."""

    VOLCANO = "volcano"
    COSCHEDULING = "coscheduling"
    NONE = "none"


DEFAULT_SCHEDULER_NAMES: Mapping[Backend, str | None] = {
    Backend.VOLCANO: names.VOLCANO_SCHEDULER,
    # scheduler-plugins ships coscheduling as a second scheduler under this name.
    Backend.COSCHEDULING: "scheduler-plugins-scheduler",
    Backend.NONE: None,
}


class Hold(enum.StrEnum):
    """How a workload waits for admission."""

    SUSPEND = "suspend"  # spec.suspend on the workload; pods do not exist yet
    SCHEDULING_GATE = "scheduling-gate"  # pods exist but carry the kohort.dev/admission gate


@dataclass(frozen=True)
class Placement:
    """The gang backend and the schedulerName that goes with it."""

    backend: Backend = Backend.VOLCANO
    scheduler_name: str | None = names.VOLCANO_SCHEDULER

    @classmethod
    def for_backend(cls, backend: Backend, scheduler_name: str | None = None) -> Placement:
        return cls(backend, scheduler_name or DEFAULT_SCHEDULER_NAMES[backend])


@dataclass(frozen=True)
class PodSet:
    """`count` pods made from the pod template found at `template_path` in the workload."""

    name: str
    count: int
    requests: Requests  # per pod, milli-units
    template_path: tuple[str, ...]


@dataclass(frozen=True)
class Gang:
    """The unit of admission: its PodGroup and Workload are both called `name`."""

    name: str
    min_member: int
    pod_sets: tuple[PodSet, ...]


@dataclass(frozen=True)
class Admission:
    """What one admission request tells the adapter besides the object itself."""

    queue: str
    placement: Placement = field(default_factory=Placement)
    # Stands in for the object's name when only metadata.generateName is set at CREATE.
    request_uid: str = ""


class Denied(Exception):
    """The object cannot be managed as sent; the message tells the user why."""


class WorkloadAdapter(Protocol):
    """One workload kind (Kueue's GenericJob, as functions over plain dicts)."""

    group: ClassVar[str]
    version: ClassVar[str]
    kind: ClassVar[str]
    hold: ClassVar[Hold]

    def gangs(self, obj: JSONDict) -> list[Gang]:
        """The gangs the workload runs as, with their pod sets; raises Denied on a bad spec."""
        ...

    def default(self, editor: Editor, admission: Admission) -> list[str]:
        """Add the gang fields and the hold to a new object; returns warnings for the user."""
        ...

    def keep_defaults(self, editor: Editor, old: JSONDict, admission: Admission) -> list[str]:
        """On UPDATE, put back gang fields the update dropped (server-side apply drops fields
        missing from the user's manifest); never touches the hold itself."""
        ...

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        """Why an update releases the hold without admission, or None when it does not."""
        ...

    def queue_may_change(self, old: JSONDict) -> bool:
        """Whether the queue label may still change (the workload has not started)."""
        ...


class MergedDefaults(Protocol):
    """Kinds whose whole `default` is one merge: the webhook computes its patch without
    editing (see edits.merge_operations)."""

    def defaults(self, obj: JSONDict, admission: Admission) -> tuple[JSONDict, list[str]]:
        """What a new object must hold, queue label included, to merge into it; warnings.
        Raises Denied like `default`."""
        ...


class Releasable(Protocol):
    """Kinds whose own object carries the hold (Job: suspend; Pod: its scheduling gate)."""

    def is_held(self, obj: JSONDict) -> bool: ...
    def release(self, editor: Editor) -> None: ...
    def evict(self, editor: Editor) -> None: ...


def object_name(obj: JSONDict, request_uid: str = "") -> str:
    """metadata.name, or generateName plus a suffix from the request uid before it is named."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    name = metadata.get("name")
    if isinstance(name, str) and name:
        return name
    generate = metadata.get("generateName")
    prefix = generate if isinstance(generate, str) else ""
    suffix = hashlib.sha256(request_uid.encode()).hexdigest()[:5]
    return f"{prefix}{suffix}"


def gang_name(*parts: str) -> str:
    """`part-part-...`, shortened with a hash when too long for a label value."""
    full = "-".join(parts)
    if len(full) <= MAX_GANG_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    head = full[: MAX_GANG_NAME - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}"


def labels(obj: Any) -> Mapping[str, Any]:
    found = lookup(obj, ["metadata", "labels"])
    return found if isinstance(found, Mapping) else {}


def queue_of(obj: JSONDict, default_queue: str | None = None) -> str | None:
    """The LocalQueue a workload goes to, or None when kohort leaves it alone."""
    object_labels = labels(obj)
    if object_labels.get(names.OPT_OUT_LABEL) == "true":
        return None
    queue = object_labels.get(names.QUEUE_LABEL)
    if isinstance(queue, str) and queue:
        return queue
    return default_queue


def non_negative_int(obj: JSONDict, path: Sequence[str], default: int | None) -> int | None:
    """An integer field that must not be negative; Denied names the field when it is."""
    value = lookup(obj, path)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Denied(f"{'.'.join(path)} must be a non-negative integer, got {value!r}")
    return value


def template_requests(obj: JSONDict, template_path: Sequence[str]) -> Requests:
    spec = lookup(obj, [*template_path, "spec"])
    if not isinstance(spec, Mapping):
        raise Denied(f"{'.'.join(template_path)}.spec is missing")
    try:
        return pod_requests(spec)
    except ValueError as err:
        raise Denied(f"{'.'.join(template_path)}.spec: {err}") from err


def has_gate(obj: Any, template_path: Path = ()) -> bool:
    spec = lookup(obj, [*template_path, "spec"])
    return isinstance(spec, dict) and _gated(spec)


def remove_gate(editor: Editor, template_path: Path = ()) -> None:
    gates = editor.get([*template_path, "spec", "schedulingGates"])
    if not isinstance(gates, list):
        return
    for index in reversed(range(len(gates))):
        gate = gates[index]
        if isinstance(gate, Mapping) and gate.get("name") == names.ADMISSION_GATE:
            editor.remove([*template_path, "spec", "schedulingGates", index])


def pod_group_of(obj: JSONDict, template_path: Path) -> str | None:
    """The PodGroup a template's pods join, as stored on the template's labels."""
    value = lookup(obj, [*template_path, "metadata", "labels", names.POD_GROUP_LABEL])
    return value if isinstance(value, str) and value else None


def decorate_pod_template(
    editor: Editor,
    template_path: Path,
    admission: Admission,
    *,
    gang: str | None,
    gate: bool,
) -> list[str]:
    """Queue and kohort labels, the gang's PodGroup, schedulerName and (optionally) the gate.

    Idempotent: a second call on the result changes nothing. A PodGroup name already present
    is kept, and a schedulerName chosen by the user is kept with a warning.
    """
    template = editor.get(template_path)
    fields, warnings = pod_template_fields(template, template_path, admission, gang=gang)
    editor.merge(template_path, fields)
    if gate and not _gated(_member(template, "spec")):
        editor.append((*template_path, "spec", "schedulingGates"), {"name": names.ADMISSION_GATE})
    return warnings


def pod_template_fields(
    template: Any, template_path: Path, admission: Admission, *, gang: str | None
) -> tuple[JSONDict, list[str]]:
    """What `decorate_pod_template` merges into the template (without the gate), and warnings.

    For adapters that merge these fields together with their own in one `Editor.merge`.
    """
    metadata = _member(template, "metadata")
    spec = _member(template, "spec")
    labels = _member(metadata, "labels")
    annotations = _member(metadata, "annotations")
    wanted_labels = {names.QUEUE_LABEL: admission.queue, names.MANAGED_LABEL: names.MANAGED_VALUE}
    wanted_metadata: JSONDict = {"labels": wanted_labels}
    if gang is not None:
        gang = pod_group_of(template, ()) or gang  # an existing name is kept
        wanted_labels[names.POD_GROUP_LABEL] = gang
        backend = admission.placement.backend
        # A group the user already named for the scheduler is kept.
        volcano_key = names.VOLCANO_GROUP_ANNOTATION
        if backend is Backend.VOLCANO and annotations.get(volcano_key) is None:
            wanted_metadata["annotations"] = {volcano_key: gang}
        cosched_key = names.COSCHEDULING_GROUP_LABEL
        if backend is Backend.COSCHEDULING and labels.get(cosched_key) is None:
            wanted_labels[cosched_key] = gang
    fields: JSONDict = {"metadata": wanted_metadata}
    warnings: list[str] = []
    wanted = admission.placement.scheduler_name
    current = spec.get("schedulerName")
    if wanted is not None:
        if current in (None, "", DEFAULT_SCHEDULER):
            fields["spec"] = {"schedulerName": wanted}
        elif current != wanted:
            where = ".".join(str(p) for p in template_path) or "pod"
            warnings.append(
                f"{where} keeps schedulerName {current!r}: kohort admits it as a gang, but "
                f"{wanted!r} will not place its pods all-or-nothing"
            )
    return fields, warnings


def _member(obj: Any, key: str) -> Mapping[str, Any]:
    """obj[key] when both are objects, else an empty mapping (for reading only)."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else _EMPTY


def _gated(spec: Mapping[str, Any]) -> bool:
    gates = spec.get("schedulingGates")
    return isinstance(gates, list) and any(
        isinstance(g, dict) and g.get("name") == names.ADMISSION_GATE for g in gates
    )


_EMPTY: Mapping[str, Any] = MappingProxyType({})
