"""Which adapter handles which kind, and everything kohort derives from the kinds' facts.

Rule: a kind is one adapter module plus one line in `REGISTRY`; no list of kinds is kept
anywhere else. A `Registry` is a value built from adapters: the webhook (routing, defaulting,
validation, its configurations and metrics) and the controller (its informers, its state) take
one, the default being `REGISTRY`, so a test can register another kind without patching. The
sets other code asks about (the managed kinds, the optional CRDs, whose pods carry the gate,
whose operator alone makes pods, which kinds make which, the gang-name prefixes) are computed
here from what each kind declares (`capabilities.KindAdapter`), and an adapter that asks about
the other kinds is told them as the registry registers it (`capabilities.Registrable`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from controller.api import kube
from controller.api.kinds import Kind
from controller.workloads.base import WorkloadAdapter, controlled_by, owned_by
from controller.workloads.capabilities import (
    FastDefaults,
    KindAdapter,
    MarksPods,
    MergedDefaults,
    OwnPods,
    PodMark,
    SeesOtherKinds,
)
from controller.workloads.job import JobAdapter
from controller.workloads.jobset import JobSetAdapter
from controller.workloads.leaderworkerset import LeaderWorkerSetAdapter
from controller.workloads.pod import PodAdapter
from controller.workloads.pytorchjob import PyTorchJobAdapter
from controller.workloads.raycluster import RayClusterAdapter
from controller.workloads.rayjob import RayJobAdapter
from controller.workloads.statefulset import StatefulSetAdapter

GVK = tuple[str, str, str]
A = TypeVar("A")


class Registry:
    """The registered workload kinds, in registration order, and what follows from them."""

    def __init__(self, adapters: Iterable[KindAdapter]) -> None:
        given = list(adapters)
        kinds = [a.KIND for a in given]
        twice = sorted({k.kind for k in kinds if kinds.count(k) > 1})
        if twice:
            raise ValueError(f"kinds registered twice: {', '.join(twice)}")
        # Every managed kind (its objects held as gangs).
        self.kinds: tuple[Kind, ...] = tuple(kinds)
        # Kinds the cluster may not serve: their informers wait for their CRDs.
        self.optional_kinds = frozenset(a.KIND for a in given if a.OPTIONAL_CRD)
        self._gang_prefixes: Mapping[Kind, str] = MappingProxyType(
            {a.KIND: a.GANG_PREFIX for a in given}
        )
        self._gated_pod_makers = tuple(
            a.KIND for a in given if a.OWN_PODS in (OwnPods.GATED, OwnPods.BY_OPERATOR)
        )
        # Kinds whose operator alone makes their pods (a pod naming one as controller from
        # anyone else is refused).
        self.operator_pod_makers = tuple(a.KIND for a in given if a.OWN_PODS is OwnPods.BY_OPERATOR)
        self._makers: Mapping[Kind, tuple[Kind, ...]] = {
            made: tuple(a.KIND for a in given if made in a.MAKES) for a in given for made in a.MAKES
        }
        registered = [a.registered(self) if isinstance(a, SeesOtherKinds) else a for a in given]
        self.adapters: Mapping[Kind, KindAdapter] = MappingProxyType(
            {a.KIND: a for a in registered}
        )
        self._by_gvk: Mapping[GVK, KindAdapter] = {_gvk(a.KIND): a for a in registered}
        self._merged = {_gvk(a.KIND): a for a in registered if isinstance(a, MergedDefaults)}
        self._fast = {_gvk(a.KIND): a for a in registered if isinstance(a, FastDefaults)}
        self._markers = tuple(a for a in registered if isinstance(a, MarksPods))

    def with_kinds(self, *adapters: KindAdapter) -> Registry:
        """This registry with more kinds registered after its own."""
        return Registry([*self.adapters.values(), *adapters])

    # -- routing --------------------------------------------------------------------------------

    def adapter_for(self, group: str, version: str, kind: str) -> KindAdapter | None:
        return self._by_gvk.get((group, version, kind))

    def merged_defaults_for(self, group: str, version: str, kind: str) -> MergedDefaults | None:
        """The adapter of a kind whose defaults are one merge (see MergedDefaults)."""
        return self._merged.get((group, version, kind))

    def fast_defaults_for(self, group: str, version: str, kind: str) -> FastDefaults | None:
        """The adapter of a kind that answers its usual new objects from their pruned view."""
        return self._fast.get((group, version, kind))

    def instance(self, cls: type[A]) -> A:
        """The registered adapter of class `cls` (for callers that use its own methods)."""
        for adapter in self.adapters.values():
            if type(adapter) is cls:
                return adapter
        raise LookupError(f"no {cls.__name__} is registered")

    # -- what follows from the kinds' facts (capabilities.KindIndex) ----------------------------

    def part_of_managed_workload(self, obj: Any) -> bool:
        """Whether a raw object (not a pod) was made for a workload of a kind kohort manages as
        a gang: a JobSet's Job, a RayJob's RayCluster or submitter Job, a LeaderWorkerSet's
        leader StatefulSet, or a worker StatefulSet, which LWS makes owned by its group's
        leader Pod. Its owner's gang holds it, so it is left as its owner's controller made it
        (in an opted-in namespace too)."""
        return isinstance(obj, dict) and any(owned_by(obj, kind) for kind in self.kinds)

    def made_by_managed(self, meta: kube.ObjectMeta) -> bool:
        """`part_of_managed_workload` for an object's typed metadata."""
        return any(controlled_by(meta, kind) for kind in self.kinds)

    def makers_of(self, kind: Kind) -> tuple[Kind, ...]:
        return self._makers.get(kind, ())

    @property
    def gated_pod_makers(self) -> tuple[Kind, ...]:
        return self._gated_pod_makers

    @property
    def gang_prefixes(self) -> Mapping[Kind, str]:
        return self._gang_prefixes

    def pod_mark(self, pod_labels: Mapping[str, Any]) -> PodMark | None:
        for marker in self._markers:
            mark = marker.pod_mark(pod_labels)
            if mark is not None:
                return mark
        return None


def _gvk(kind: Kind) -> GVK:
    return (kind.group, kind.version, kind.kind)


# The kinds kohort manages, one line each.
REGISTRY = Registry(
    [
        JobAdapter(),
        StatefulSetAdapter(),
        LeaderWorkerSetAdapter(),
        JobSetAdapter(),
        PyTorchJobAdapter(),
        RayClusterAdapter(),
        RayJobAdapter(),
        PodAdapter(),
    ]
)

# The default registry's adapters by kind, for code that takes a mapping (controller.state).
ADAPTERS: Mapping[Kind, WorkloadAdapter] = REGISTRY.adapters
