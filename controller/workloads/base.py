"""The interface every workload kind implements, and the pieces the kinds share.

An adapter has two sides. The webhook side works on the raw object of an admission request
(JSON as the API server sends it) and records its edits as a JSON Patch. The controller side
works on the typed view the controller caches (`controller.api.kube`): which gangs the object
runs as, whether it has finished, and what to write to release or hold a gang.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import reprlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

import msgspec

from controller.api import kube, names
from controller.api.kinds import Kind
from controller.quota.snapshot import FlavorSpec, PodSet
from controller.workloads.edits import Editor, JSONDict, Path, lookup, pointer
from controller.workloads.pinning import pin_ops, pinned_host
from controller.workloads.requests import Requests, pod_requests
from controller.workloads.taints import pod_toleration, view_toleration

log = logging.getLogger("kohort.workloads")

# The scheduler a pod gets when its spec names none; treated as "not chosen by the user".
DEFAULT_SCHEDULER = "default-scheduler"
# Kubernetes label values are at most 63 characters; gang names are used as label values.
MAX_GANG_NAME = 63


class Backend(enum.StrEnum):
    """Which gang scheduler places an admitted gang's pods on nodes."""

    VOLCANO = "volcano"
    COSCHEDULING = "coscheduling"
    # kube-scheduler's own gang scheduling (scheduling.k8s.io Workloads, KEP-4671).
    KUBERNETES = "kubernetes"
    NONE = "none"


DEFAULT_SCHEDULER_NAMES: Mapping[Backend, str | None] = {
    Backend.VOLCANO: names.VOLCANO_SCHEDULER,
    # scheduler-plugins ships coscheduling as a second scheduler under this name.
    Backend.COSCHEDULING: "scheduler-plugins-scheduler",
    Backend.KUBERNETES: DEFAULT_SCHEDULER,
    Backend.NONE: None,
}


@dataclass(frozen=True)
class Placement:
    """The gang backend and the schedulerName that goes with it."""

    backend: Backend = Backend.VOLCANO
    scheduler_name: str | None = names.VOLCANO_SCHEDULER

    @classmethod
    def for_backend(cls, backend: Backend, scheduler_name: str | None = None) -> Placement:
        return cls(backend, scheduler_name or DEFAULT_SCHEDULER_NAMES[backend])


@dataclass(frozen=True)
class GangShape:
    """A gang an object runs as: its Workload and PodGroup are both called `name`."""

    name: str
    # Pods that must run at once for the gang to start.
    min_member: int
    pod_sets: tuple[PodSet, ...]
    # The PriorityClasses its pod templates name, in pod-set order (the gang's priority is the
    # highest of them).
    priority_classes: tuple[str, ...] = ()
    # A priority the object states itself (a standalone Workload's): it wins over the classes.
    priority: int | None = None
    # The pods its elastic pod set runs at once now (a released Job's parallelism); None: it
    # runs none yet (held), or its kind says nothing of it.
    running: int | None = None


class Finished(enum.StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class PatchType(enum.StrEnum):
    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"


@dataclass(frozen=True)
class Patch:
    """Patch one object (its `subresource`, when set); `expected` is 404/409/422-tolerant (the
    object changed or is gone)."""

    kind: Kind
    namespace: str
    name: str
    body: Any
    type: PatchType = PatchType.MERGE
    expected: bool = False
    subresource: str = ""


@dataclass(frozen=True)
class Delete:
    kind: Kind
    namespace: str
    name: str


Write = Patch | Delete


@dataclass(frozen=True)
class Mutation:
    """What one webhook request tells the adapter besides the object itself."""

    queue: str
    placement: Placement = field(default_factory=Placement)
    # Stands in for the object's name when only metadata.generateName is set at CREATE.
    request_uid: str = ""
    # Whether its pod templates get the autoscaler's safe-to-evict: at CREATE, and at UPDATE
    # only when the stored object's templates carry it (a running workload's templates must not
    # change: its pods would roll).
    safe_to_evict: bool = True


class Denied(Exception):
    """The object cannot be managed as sent; the message tells the user why."""


def same_toleration(a: kube.Toleration, b: kube.Toleration) -> bool:
    """Whether two tolerations are one (an unset operator is Equal)."""
    return (a.key, a.operator or "Equal", a.value, a.effect, a.toleration_seconds) == (
        b.key,
        b.operator or "Equal",
        b.value,
        b.effect,
        b.toleration_seconds,
    )


@dataclass(frozen=True)
class PodSetFlavors:
    """Where a pod set was admitted, as its pods get it when released: every flavor's node
    labels merged into the pod's nodeSelector and its tolerations appended (one the pod already
    has is not added twice), and, when the admission placed its pods, what pins them to those
    nodes: a required node affinity on their hostnames (`nodes`; see pinning.py) where the
    kind takes one, and the labels the nodes share (`domain`) in the nodeSelector."""

    flavors: tuple[FlavorSpec, ...]
    nodes: tuple[str, ...] = ()
    # The labels all its planned nodes share (its topology domain, its one node), merged into
    # its nodeSelector too: the pin of kinds whose templates take no node affinity.
    domain: Mapping[str, str] = field(default_factory=dict)
    # How many of its pods the plan puts on each of those hostnames: a gated pod is pinned to
    # one of them when it is ungated (its own node, not the pod set's), so that no scheduler
    # puts more of the gang on a node than planned.
    per_host: Mapping[str, int] = field(default_factory=dict)
    # The hostname label of each planned node, by node name (a bound pod's place in the plan).
    node_hosts: Mapping[str, str] = field(default_factory=dict)
    # An elastic pod set's pods admitted (partial admission: maybe fewer than it asks for),
    # what the kind runs it with; None for any other pod set.
    count: int | None = None

    @property
    def pinned_per_pod(self) -> bool:
        """Whether its pods are pinned one by one (the plan spreads them over several nodes)."""
        return len(self.per_host) > 1

    @property
    def node_selector(self) -> dict[str, str]:
        selector: dict[str, str] = {}
        for flavor in self.flavors:
            selector.update(flavor.node_labels)
        selector.update(self.domain)
        return selector

    @property
    def tolerations(self) -> tuple[kube.Toleration, ...]:
        out: list[kube.Toleration] = []
        for flavor in self.flavors:
            for t in flavor.tolerations:
                view = view_toleration(t)
                if not any(same_toleration(view, seen) for seen in out):
                    out.append(view)
        return tuple(out)

    def selector_on(self, current: Mapping[str, str]) -> dict[str, str]:
        """`current` with the flavors' node labels merged in."""
        return {**current, **self.node_selector}

    def tolerations_missing(self, current: Iterable[kube.Toleration]) -> list[kube.Toleration]:
        """The flavors' tolerations `current` lacks, in order."""
        have = list(current)
        return [t for t in self.tolerations if not any(same_toleration(t, h) for h in have)]

    def contradicted(self, current: Mapping[str, str]) -> list[str]:
        """Node selector keys `current` sets to another value than a flavor's node labels."""
        return sorted(k for k, v in self.node_selector.items() if current.get(k, v) != v)


# Pod set name -> the flavors its pods get: what an adapter's `release` applies.
Flavors = Mapping[str, PodSetFlavors]
NO_FLAVORS: Flavors = MappingProxyType({})


def toleration_json(toleration: kube.Toleration) -> JSONDict:
    """A toleration as a pod spec holds it (unset members left out)."""
    out: JSONDict = msgspec.to_builtins(toleration)
    return out


class WorkloadAdapter(Protocol):
    """One workload kind (Kueue's GenericJob). Adding a kind is one module plus one line in
    `registry.REGISTRY`; the facts of its kind and its optional capabilities are in
    `capabilities`."""

    KIND: ClassVar[Kind]

    @property
    def model(self) -> type[kube.View]:
        """The typed view the controller caches for this kind."""
        ...

    # -- webhook side: the raw object of an admission request --------------------------------

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        """Add the gang fields and the hold to a new object; returns warnings for the user."""
        ...

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        """On UPDATE, put back gang fields the update dropped (server-side apply drops fields
        missing from the user's manifest); never touches the hold itself."""
        ...

    def unheld(self, obj: JSONDict) -> str | None:
        """Why a new object in a queue is not held as it must be, or None; raises Denied when
        it cannot be managed at all."""
        ...

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        """Why an update releases the hold without admission, or None when it does not."""
        ...

    def queue_may_change(self, old: JSONDict) -> bool:
        """Whether the queue label may still change (the workload has not started)."""
        ...

    def templates(self, obj: JSONDict) -> list[Path]:
        """Where the object's pod templates are (`()`: the object is a pod itself)."""
        ...

    # -- controller side: the typed view --------------------------------------------------------

    def gangs(self, obj: Any) -> list[GangShape]:
        """The gangs the object runs as; none when kohort does not manage it."""
        ...

    def finished(self, obj: Any) -> Finished | None:
        """Whether the workload is done (its quota can be given back)."""
        ...

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        """Which of the gang's pod sets a pod of it belongs to (None: the first)."""
        ...

    def release(
        self, obj: Any, pods: Sequence[kube.Pod], flavors: Flavors = NO_FLAVORS
    ) -> list[Write]:
        """The writes that let an admitted gang's pods be scheduled, each pod on the nodes of
        the flavors its pod set was admitted on (`flavors`; a pod set absent from it may go
        anywhere its own spec allows); none when they may be scheduled already."""
        ...

    def hold(self, obj: Any, pods: Sequence[kube.Pod]) -> list[Write]:
        """The writes that take a release back (on eviction too); none when it is held."""
        ...


_BRIEF = reprlib.Repr()  # keyword arguments need Python 3.12
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother = 3, 80, 80


def shown(value: Any) -> str:
    """A user's value as a message quotes it: shortened, and safe however deeply it nests."""
    return _BRIEF.repr(value)


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
    return queue_in(labels(obj), default_queue)


def queue_in(object_labels: Mapping[str, Any], default_queue: str | None = None) -> str | None:
    """The LocalQueue named by an object's labels (or implied), or None when opted out."""
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
        raise Denied(f"{'.'.join(path)} must be a non-negative integer, got {shown(value)}")
    return value


def field_path(path: Path) -> str:
    """A path as messages name a field: `spec.workerGroupSpecs[0].template`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def template_requests(obj: JSONDict, template_path: Path) -> Requests:
    """Per-pod requests of the pod template at `template_path` of a raw object."""
    where = field_path((*template_path, "spec"))
    spec = lookup(obj, [*template_path, "spec"])
    if not isinstance(spec, Mapping):
        raise Denied(f"{where} is missing")
    try:
        return pod_requests(msgspec.convert(spec, kube.PodSpec))
    except msgspec.ValidationError as err:
        raise Denied(f"{where}: {err}") from err
    except ValueError as err:
        raise Denied(f"{where}: {err}") from err


def has_gate(obj: Any, template_path: Path = ()) -> bool:
    spec = lookup(obj, [*template_path, "spec"])
    return isinstance(spec, dict) and _gated(spec)


def gate_problem(obj: JSONDict, template_paths: Sequence[Path]) -> str | None:
    """Why a new object's templates (or the pod itself) do not all carry the admission gate."""
    for path in template_paths:
        template_requests(obj, path)
        if not has_gate(obj, path):
            where = field_path(path) or "the pod"
            return (
                f"{where} must carry the {names.ADMISSION_GATE} scheduling gate "
                "(is kohort's mutating webhook registered?)"
            )
    return None


def pod_group_of(obj: JSONDict, template_path: Path) -> str | None:
    """The PodGroup a template's pods join, as stored on the template's labels."""
    value = lookup(obj, [*template_path, "metadata", "labels", names.POD_GROUP_LABEL])
    return value if isinstance(value, str) and value else None


def decorate_pod_template(
    editor: Editor,
    template_path: Path,
    mutation: Mutation,
    *,
    gang: str | None,
    gate: bool,
) -> list[str]:
    """Queue and kohort labels, the gang's PodGroup, schedulerName and (optionally) the gate.

    Idempotent: a second call on the result changes nothing. The PodGroup name is always the
    object's own gang; a schedulerName chosen by the user is kept with a warning.
    """
    template = editor.get(template_path)
    fields, warnings = pod_template_fields(template, template_path, mutation, gang=gang)
    editor.merge(template_path, fields)
    if gate and not _gated(_member(template, "spec")):
        editor.append((*template_path, "spec", "schedulingGates"), {"name": names.ADMISSION_GATE})
    return warnings


def pod_template_fields(
    template: Any, template_path: Path, mutation: Mutation, *, gang: str | None
) -> tuple[JSONDict, list[str]]:
    """What `decorate_pod_template` merges into the template (without the gate), and warnings.

    For adapters that merge these fields together with their own in one `Editor.merge`.
    """
    spec = _member(template, "spec")
    wanted_labels = {names.QUEUE_LABEL: mutation.queue, names.MANAGED_LABEL: names.MANAGED_VALUE}
    annotations: JSONDict = {}
    theirs = _member(_member(template, "metadata"), "annotations")
    if mutation.safe_to_evict and names.SAFE_TO_EVICT_ANNOTATION not in theirs:
        annotations[names.SAFE_TO_EVICT_ANNOTATION] = "false"
    wanted_metadata: JSONDict = {"labels": wanted_labels}
    if annotations:
        wanted_metadata["annotations"] = annotations
    if gang is not None:
        # Always the gang of this object: a template copied from another workload names the
        # other's gang, which its pods must not join.
        wanted_labels[names.POD_GROUP_LABEL] = gang
        backend = mutation.placement.backend
        if backend is Backend.VOLCANO:
            annotations[names.VOLCANO_GROUP_ANNOTATION] = gang
            wanted_metadata["annotations"] = annotations
        if backend is Backend.COSCHEDULING:
            wanted_labels[names.COSCHEDULING_GROUP_LABEL] = gang
    fields: JSONDict = {"metadata": wanted_metadata}
    if gang is not None and mutation.placement.backend is Backend.KUBERNETES:
        fields["spec"] = native_gang_fields(gang)
    warnings: list[str] = []
    wanted = mutation.placement.scheduler_name
    current = spec.get("schedulerName")
    if wanted is not None:
        if current in (None, "", DEFAULT_SCHEDULER):
            fields.setdefault("spec", {})["schedulerName"] = wanted
        elif current != wanted:
            where = field_path(template_path) or "pod"
            warnings.append(
                f"{where} keeps schedulerName {shown(current)}: kohort admits it as a gang, but "
                f"{wanted!r} will not place its pods all-or-nothing"
            )
    return fields, warnings


def native_gang_fields(gang: str) -> JSONDict:
    """The pod spec fields that name the gang's kube-scheduler gang, for both API versions:
    spec.workloadRef (1.35's v1alpha1 Workload) and spec.schedulingGroup (v1beta1's PodGroup).
    Set at creation (both are immutable); an apiserver drops the one it does not know."""
    return {
        "workloadRef": {"name": gang, "podGroup": names.NATIVE_POD_GROUP},
        "schedulingGroup": {"podGroupName": gang},
    }


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


# -- the controller side: typed views ----------------------------------------------------------


def pod_set(name: str, count: int, template: kube.PodTemplate) -> PodSet:
    """`count` pods made from `template`, as the decision core sees them."""
    spec = template.spec
    requests = {r: amount for r, amount in pod_requests(spec).items() if amount > 0}
    return PodSet(
        count=count,
        requests=requests,
        name=name,
        node_selector=dict(spec.node_selector),
        tolerations=tuple(pod_toleration(t) for t in spec.tolerations),
        claim_templates=tuple(
            c.resource_claim_template_name
            for c in spec.resource_claims
            if c.resource_claim_template_name
        ),
        shared_claims=tuple(
            c.resource_claim_name for c in spec.resource_claims if c.resource_claim_name
        ),
    )


def running_pods(spec: kube.JobSpec) -> int:
    """How many pods a Job runs at once: min(parallelism, completions), parallelism (default 1)
    when completions is unset."""
    parallelism = spec.parallelism if spec.parallelism is not None else 1
    return parallelism if spec.completions is None else min(parallelism, spec.completions)


def template_gang(template: kube.PodTemplate) -> str | None:
    """The gang kohort's webhook named in a pod template (absent: the webhook never saw it)."""
    return template.metadata.labels.get(names.POD_GROUP_LABEL) or None


def priority_classes(*templates: kube.PodTemplate | None) -> tuple[str, ...]:
    return tuple(t.spec.priority_class_name for t in templates if t and t.spec.priority_class_name)


def is_gated(pod: kube.Pod) -> bool:
    return spec_gated(pod.spec)


def spec_gated(spec: kube.PodSpec) -> bool:
    """Whether a pod (or a template's pods) carries the admission gate."""
    return any(g.name == names.ADMISSION_GATE for g in spec.scheduling_gates)


def gates_value(spec: kube.PodSpec, gated: bool) -> list[JSONDict] | None:
    """A pod spec's scheduling gates with the admission gate in (`gated`) or out, the others
    kept, as written (None: no gates at all)."""
    gates = [{"name": g.name} for g in spec.scheduling_gates if g.name != names.ADMISSION_GATE]
    if gated:
        gates.append({"name": names.ADMISSION_GATE})
    return gates or None


def controller_owner(obj: JSONDict) -> Mapping[str, Any] | None:
    """The ownerReference of a raw object that names its controller."""
    owners = lookup(obj, ["metadata", "ownerReferences"])
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            return owner
    return None


def owned_by(obj: JSONDict, kind: Kind) -> bool:
    """Whether a raw object's controller is an object of `kind`."""
    owner = controller_owner(obj)
    api_version = owner.get("apiVersion") if owner is not None else None
    return (
        owner is not None
        and owner.get("kind") == kind.kind
        and isinstance(api_version, str)
        and api_version.rpartition("/")[0] == kind.group
    )


def controlled_by(meta: kube.ObjectMeta, kind: Kind) -> bool:
    """Whether the object with metadata `meta` is controlled by an object of `kind`."""
    owner = meta.controller_owner()
    return (
        owner is not None
        and owner.kind == kind.kind
        and owner.api_version.rpartition("/")[0] == kind.group
    )


def made_by(pod: kube.Pod, kind: str, uid: str | None = None) -> bool:
    """Whether the pod's controller is an object of `kind` (with `uid`, when given)."""
    owner = pod.metadata.controller_owner()
    return owner is not None and owner.kind == kind and (uid is None or owner.uid == uid)


def ordinal(pod: kube.Pod, prefix: str) -> int | None:
    """The ordinal of a pod named `<prefix>-<n>`, as a StatefulSet names its pods."""
    head, _, tail = pod.metadata.name.rpartition("-")
    return int(tail) if head == prefix and tail.isdigit() else None


FlavorsOf = Callable[[kube.Pod], PodSetFlavors | None]


def _no_flavor(pod: kube.Pod) -> PodSetFlavors | None:
    return None


def ungate_up_to(
    size: int,
    pods: Sequence[kube.Pod],
    may_release: Callable[[kube.Pod], bool],
    flavors_of: FlavorsOf = _no_flavor,
) -> list[Write]:
    """Ungate gated live `pods` that `may_release` accepts, oldest first, so that at most `size`
    of the gang's live pods are ever released."""
    running = sum(1 for p in pods if p.live() and not is_gated(p))
    gated = sorted(
        (p for p in pods if p.live() and is_gated(p) and may_release(p)),
        key=lambda p: (p.metadata.creation_timestamp or "", p.metadata.name),
    )
    return ungate(gated[: max(0, size - running)], flavors_of, among=pods)


def flavor_ops(pod: kube.Pod, flavors: PodSetFlavors, host: str | None = None) -> list[JSONDict]:
    """JSON Patch operations that put a gated pod on its flavors' nodes: their labels added to
    its nodeSelector and their tolerations to its tolerations, and the pin to its planned nodes,
    or to its one `host` (what Kubernetes lets change on a pod that still has scheduling gates:
    additions only)."""
    spec = pod.spec
    ops: list[JSONDict] = []
    added = {k: v for k, v in flavors.node_selector.items() if k not in spec.node_selector}
    if added and not spec.node_selector:
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": added})
    else:
        ops += [
            {"op": "add", "path": pointer(("spec", "nodeSelector", k)), "value": v}
            for k, v in added.items()
        ]
    missing = [toleration_json(t) for t in flavors.tolerations_missing(spec.tolerations)]
    if missing and not spec.tolerations:
        ops.append({"op": "add", "path": "/spec/tolerations", "value": missing})
    else:
        ops += [{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in missing]
    if host is not None:
        ops += pin_ops(spec, (host,))
    elif flavors.nodes:
        ops += pin_ops(spec, flavors.nodes)
    return ops


def hosts_left(flavors: PodSetFlavors, pod_set: Iterable[kube.Pod]) -> Counter[str]:
    """The planned hosts of a pod set pinned pod by pod, each with the number of its pods still
    to be pinned there: the plan's count less the live pods of `pod_set` already ungated onto
    it (a pod that ended frees its place for the one made again in its stead)."""
    left = Counter(flavors.per_host)
    for pod in pod_set:
        if pod.live() and not is_gated(pod):
            host = pinned_host(pod.spec) or flavors.node_hosts.get(pod.spec.node_name or "")
            if host is not None and host in left:
                left[host] -= 1
    return left


def alike_placement(flavors: PodSetFlavors, pod_set: Iterable[kube.Pod]) -> bool:
    """Whether the pods of a set ask alike where they go (their own nodeSelector, the flavors'
    labels aside): only then may any pod take any of the plan's places (a JobSet's exclusive
    placement gives each Job's pods a nodeSelector of their own)."""
    theirs = flavors.node_selector
    own = {
        tuple(sorted((k, v) for k, v in p.spec.node_selector.items() if k not in theirs))
        for p in pod_set
    }
    return len(own) <= 1


def ungate(
    pods: Sequence[kube.Pod],
    flavors_of: FlavorsOf = _no_flavor,
    *,
    among: Sequence[kube.Pod] = (),
) -> list[Write]:
    """Remove the admission gate from every live gated pod, first putting it on the nodes of its
    flavors (`flavors_of`), in one JSON Patch each, guarded by the pod's resourceVersion so that
    the gate's index is still right. A pod set pinned pod by pod has each pod pinned to one of
    its planned hosts with room left (counting the pods of `among` and `pods` for which
    `flavors_of` gives the very same PodSetFlavors: one pod set), or to all of them once the
    plan's places are taken, or when the set's pods ask for different nodes themselves. A pod
    whose own nodeSelector contradicts its flavors' node labels stays gated: no node could take
    it."""
    writes: list[Write] = []
    left: dict[int, Counter[str] | None] = {}
    for pod in pods:
        if not pod.live():
            continue
        gates = pod.spec.scheduling_gates
        ops: list[JSONDict] = [
            {"op": "remove", "path": f"/spec/schedulingGates/{i}"}
            for i in reversed(range(len(gates)))
            if gates[i].name == names.ADMISSION_GATE
        ]
        if not ops:
            continue
        flavors = flavors_of(pod)
        if flavors is not None:
            contradicted = flavors.contradicted(pod.spec.node_selector)
            if contradicted:
                log.warning(
                    "pod %s/%s stays gated: its nodeSelector sets %s otherwise than its flavors",
                    pod.metadata.namespace,
                    pod.metadata.name,
                    ", ".join(contradicted),
                )
                continue
            host = None
            if flavors.pinned_per_pod:
                if id(flavors) not in left:
                    same = {p.metadata.name: p for p in (*among, *pods) if flavors_of(p) is flavors}
                    alike = alike_placement(flavors, same.values())
                    left[id(flavors)] = hosts_left(flavors, same.values()) if alike else None
                places = left[id(flavors)]
                host = _take_host(places) if places is not None else None
            ops = flavor_ops(pod, flavors, host) + ops
        writes.append(guarded_patch(kube.Pod.KIND, pod.metadata, ops))
    return writes


def _take_host(left: Counter[str]) -> str | None:
    """The host with the most places left (the first by name among equals), one place taken."""
    open_ = [(-n, host) for host, n in left.items() if n > 0]
    if not open_:
        return None
    _, host = min(open_)
    left[host] -= 1
    return host


def guarded_patch(kind: Kind, meta: kube.ObjectMeta, ops: list[JSONDict]) -> Patch:
    """A JSON Patch of `ops` that applies only to the version of the object they were computed
    from (when it is known); a newer one makes it fail, tolerated: the next pass looks again."""
    if meta.resource_version:
        test = {"op": "test", "path": "/metadata/resourceVersion", "value": meta.resource_version}
        ops = [test, *ops]
    return Patch(kind, meta.namespace, meta.name, ops, PatchType.JSON, expected=True)


def delete_ungated(pods: Sequence[kube.Pod]) -> list[Write]:
    """Take a release back for kinds held by the gate: a gate cannot be put back on a pod, so
    its live ungated pods are deleted (their owner makes them again, gated by the webhook)."""
    return [
        Delete(kube.Pod.KIND, p.metadata.namespace, p.metadata.name)
        for p in pods
        if p.live() and not is_gated(p)
    ]
