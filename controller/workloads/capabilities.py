"""What a registered kind says of itself beyond `WorkloadAdapter`, and what it may ask of the
registry about the other kinds.

Rule: what other code needs to know about kinds is derived from these declarations by the
registry (`registry.Registry`), never listed by hand. A kind states its facts as class-level
constants (`KindAdapter`); behaviour only some kinds have is an optional capability, a small
protocol the registry looks for (as Kueue's optional job interfaces). An adapter that needs to
know the other kinds is told them when it is registered (`Registrable`), as a `KindIndex`: no
adapter imports another, nor the registry.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self, TypeGuard, runtime_checkable

from controller.api import kube
from controller.api.kinds import Kind
from controller.api.workload import Workload as WorkloadRecord
from controller.workloads.base import (
    Finished,
    GangShape,
    Mutation,
    Placement,
    WorkloadAdapter,
    Write,
)
from controller.workloads.edits import JSONDict
from controller.workloads.pruned import Workload


class OwnPods(enum.Enum):
    """How the objects of a kind make the pods whose controller they are."""

    # None itself: the objects it makes do (a JobSet's Jobs), or it is a pod.
    NONE = "none"
    # Only once released, so without the admission gate (a Job's).
    UNGATED = "ungated"
    # From its pod templates, which name its gang and carry the admission gate: a pod that names
    # such an object as its controller joins that gang, gated until its release (a
    # StatefulSet's).
    GATED = "gated"
    # As GATED, and made by its operator alone, so that a pod that names such an object as its
    # controller is refused from anyone but a workload controller (a PyTorchJob's, a
    # RayCluster's).
    BY_OPERATOR = "by-operator"


class KindAdapter(WorkloadAdapter, Protocol):
    """A workload kind as the registry takes it: its adapter and the facts of its kind."""

    # It names its gangs `<GANG_PREFIX>-...`: a plain pod group may not take such a name.
    GANG_PREFIX: ClassVar[str]
    # Its CRD may be missing from a cluster: its informer waits for it instead of failing.
    OPTIONAL_CRD: ClassVar[bool]
    # The kinds of the objects it makes that join its gang (a JobSet's Jobs, a RayJob's
    # RayCluster and submitter Job), besides pods.
    MAKES: ClassVar[tuple[Kind, ...]]
    # How it makes its pods.
    OWN_PODS: ClassVar[OwnPods]


@dataclass(frozen=True)
class PodMark:
    """A pod that carries a kind's label is that kind's, whichever object is its controller (a
    LeaderWorkerSet's pods are made by its StatefulSets)."""

    kind: Kind
    # The label that marks such pods.
    label: str
    # The gang the pod joins, as its labels name it; None while they do not yet.
    gang: str | None
    # The kind of the objects that make such pods: any other pod that carries the label pretends.
    maker: Kind
    # Why a pod so marked that names no gang cannot be admitted.
    unnamed: str


class KindIndex(Protocol):
    """What an adapter may ask of the registry it is in about the registered kinds."""

    def made_by_managed(self, meta: kube.ObjectMeta) -> bool:
        """Whether the object with metadata `meta` is controlled by an object of a registered
        kind."""
        ...

    def makers_of(self, kind: Kind) -> tuple[Kind, ...]:
        """The registered kinds whose objects make objects of `kind` that join their gang."""
        ...

    @property
    def gated_pod_makers(self) -> tuple[Kind, ...]:
        """The kinds whose pods carry the admission gate and join the gang their templates
        name (OwnPods.GATED and BY_OPERATOR)."""
        ...

    @property
    def gang_prefixes(self) -> Mapping[Kind, str]:
        """Each kind's gang-name prefix, in registration order."""
        ...

    def pod_mark(self, pod_labels: Mapping[str, Any]) -> PodMark | None:
        """What the kind whose label a pod carries says of it; None when it carries none."""
        ...


class Registrable:
    """The base of an adapter that asks about the other kinds: the registry gives it a
    `KindIndex` when it registers it (`registered`), a fresh adapter for each registry."""

    def __init__(self, kinds: KindIndex | None = None) -> None:
        self._kinds = kinds

    def registered(self, kinds: KindIndex) -> Self:
        """This adapter, told the kinds of the registry that holds it."""
        return type(self)(kinds)

    @property
    def kinds(self) -> KindIndex:
        if self._kinds is None:
            raise LookupError(
                f"{type(self).__name__} knows no other kinds: take it from a registry"
                " (controller.workloads.registry.REGISTRY.instance)"
            )
        return self._kinds


@runtime_checkable
class SeesOtherKinds(Protocol):
    """Capability: the adapter asks about the other kinds (see `Registrable`)."""

    def registered(self, kinds: KindIndex) -> Self: ...


@runtime_checkable
class MergedDefaults(Protocol):
    """Capability: the kind's whole `default` is one merge, whose patch the webhook computes
    without editing (see edits.merge_operations)."""

    def defaults(self, obj: JSONDict, mutation: Mutation) -> tuple[JSONDict, list[str]]:
        """What a new object must hold, queue label included, to merge into it; warnings.
        Raises Denied like `default`."""
        ...


@runtime_checkable
class FastDefaults(Protocol):
    """Capability: the kind answers a new object of its usual shape straight from its pruned
    view (`pruned.Workload`), without building it as dicts."""

    def fast_defaults(
        self, obj: Workload, *, queue: str, placement: Placement, request_uid: str
    ) -> list[JSONDict] | None:
        """The JSON Patch its general defaulting gives a new object of the usual shape, in the
        same order, for the `Mutation` of these members; None for any other shape (the general
        path answers it then)."""
        ...


@runtime_checkable
class MarksPods(Protocol):
    """Capability: the kind knows its pods by a label they carry (see `PodMark`)."""

    def pod_mark(self, pod_labels: Mapping[str, Any]) -> PodMark | None:
        """What this kind says of a pod whose labels are `pod_labels`; None when they do not
        mark it as one of this kind's."""
        ...


# -- how a kind's objects own their gangs (the controller side) ----------------------------------


@runtime_checkable
class WeakOwner(Protocol):
    """Capability: an object of this kind owns its gang only until an object of a managed kind
    names the same gang (pods that only carry a gang's label, a Workload its creator submitted
    under that name): the managed object takes it. Weak owners never take a gang from each
    other: the first seen keeps it."""

    def shares_gangs(self) -> bool:
        """Whether several objects of this kind form one gang (the pods of a plain group), so
        that one more of them joining a gang is how the gang grows, not a conflict."""
        ...


@runtime_checkable
class GangOfMembers(Protocol):
    """Capability: the gang's owner is one of its own members (a bare pod, or a pod of a plain
    pod group): no controller of its own tells when it ends, it may be assembled one member at
    a time, and another member takes it over when its owner goes."""

    def group_done(
        self, owner: Any, shape: GangShape, members: Sequence[kube.Pod]
    ) -> Finished | None:
        """Whether the gang is done, judged from its members."""
        ...

    def incomplete(self, owner: Any, shape: GangShape, members: Sequence[kube.Pod]) -> str | None:
        """Why the gang cannot be admitted yet as its members are (None: it can)."""
        ...

    def successor(self, gone: str, gang: str, members: Sequence[kube.Pod]) -> kube.Pod | None:
        """The member that owns gang `gang` now that member `gone` went, if any."""
        ...

    def outlives_members(self, owner: Any, gang: str) -> bool:
        """Whether the gang's Workload has no owner and outlives its members: evicting it
        deletes them, and only their creator makes them again, under the same gang."""
        ...


@runtime_checkable
class OwnsItsRecord(Protocol):
    """Capability: the gang's record is a Workload its creator submitted, which is also its
    owner. Its creator runs the gang's work once admitted (kohort makes no PodGroup for it) and
    writes the record's status too (kohort writes it only on the version it saw)."""

    def owner_of(self, record: WorkloadRecord) -> Any | None:
        """The owner view of a submitted record; None for a record kohort made."""
        ...

    def queue_name(self, owner: Any) -> str:
        """The LocalQueue the record names."""
        ...


@runtime_checkable
class DeclaresRuntime(Protocol):
    """Capability: an object of the kind may declare the most its gang runs (start-time
    forecasts take it instead of what its queue's finished gangs ran)."""

    def max_runtime(self, owner: Any) -> float | None:
        """Seconds, or None when the object declares nothing."""
        ...


@runtime_checkable
class ShrinksInPlace(Protocol):
    """Capability: an admitted object asked for fewer pods (a Job's parallelism lowered) runs
    on with the pods it keeps, its controller removing the others: its gang keeps its
    admission at the smaller count, its quota given back at once, instead of being evicted
    and requeued as for any other change of shape."""

    def shrinks_in_place(self, owner: Any) -> bool:
        """Whether this object's gangs may shrink so (a kind may say no for some objects)."""
        ...

    def shrink(self, owner: Any, counts: Mapping[str, int]) -> list[Write]:
        """The writes that make the object ask for `counts` pods per pod set (kohort shrinking
        it for another gang instead of evicting it)."""
        ...


class RecordOwner(WorkloadAdapter, OwnsItsRecord, Protocol):
    """The adapter that owns the Workloads their creators submit (workloads.standalone)."""


# -- asking an adapter for a capability -----------------------------------------------------------
# isinstance against a runtime protocol walks the protocol's members on every call (about 20 µs
# on Python 3.11); the state asks on every gang it looks at, so the answer is kept per class.


_IMPLEMENTS: dict[tuple[type, type], bool] = {}


def _implements(cls: type, capability: type) -> bool:
    found = _IMPLEMENTS.get((cls, capability))
    if found is None:
        found = _IMPLEMENTS[(cls, capability)] = issubclass(cls, capability)
    return found


def weak_owner(adapter: object) -> TypeGuard[WeakOwner]:
    return _implements(type(adapter), WeakOwner)


def gang_of_members(adapter: object) -> TypeGuard[GangOfMembers]:
    return _implements(type(adapter), GangOfMembers)


def owns_its_record(adapter: object) -> TypeGuard[OwnsItsRecord]:
    return _implements(type(adapter), OwnsItsRecord)


def declares_runtime(adapter: object) -> TypeGuard[DeclaresRuntime]:
    return _implements(type(adapter), DeclaresRuntime)


def shrinks_in_place(adapter: object) -> TypeGuard[ShrinksInPlace]:
    return _implements(type(adapter), ShrinksInPlace)
