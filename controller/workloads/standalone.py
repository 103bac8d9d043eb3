"""kohort.dev Workload submitted by its creator: a gang with no kind adapter of its own.

A Workload kohort did not make (it lacks the `kohort.dev/managed-by` label) is its own gang's
owner: its spec (queue, priority, pod sets) is the gang, kohort admits it against quota and
records that in its status (QuotaReserved, Admitted, or Evicted on preemption), and its creator
runs the gang's work once admitted and stops it when evicted. kohort holds and releases
nothing, and makes no PodGroup. The gang is done, and its quota given back, when its creator
sets the condition Finished to True (reason `Failed` for a failure) or deletes the Workload.
Pods that carry `kohort.dev/pod-group: <name>` and no queue label count as the gang's pods
(placement, PodsReady); a creator that runs no such pods sets PodsReady itself, or the
pods-ready timeout evicts the gang. kohort writes such a Workload's status only on the version
it has seen, so a Finished its creator has just added is never written over.

This is what frameworks without an adapter, and load generators like Kueue's own scale runner,
submit. A managed object whose gang name such a Workload holds, and that Workload, both wait
(see ClusterState._bookkeeping). The webhook never routes a Workload to an adapter: only the
controller uses this one, as the owner of submitted Workloads (capabilities.OwnsItsRecord,
capabilities.WeakOwner).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from controller.api import kinds, kube
from controller.api.conditions import WorkloadCondition, find
from controller.api.kinds import Kind
from controller.api.workload import Workload
from controller.quota.snapshot import PodSet
from controller.workloads.base import NO_FLAVORS, Finished, Flavors, GangShape, Mutation, Write
from controller.workloads.edits import Editor, JSONDict, Path
from controller.workloads.taints import core_toleration


@dataclass(frozen=True)
class Standalone:
    """A standalone Workload as its gang's owner: its metadata as every owner's reads."""

    workload: Workload

    @property
    def metadata(self) -> kube.ObjectMeta:
        return self.workload.metadata


def _core_pod_sets(wl: Workload) -> tuple[PodSet, ...]:
    return tuple(
        PodSet(
            count=ps.count,
            requests=ps.request_milli(),
            name=ps.name,
            node_selector=dict(ps.node_selector),
            tolerations=tuple(core_toleration(t) for t in ps.tolerations),
        )
        for ps in wl.spec.pod_sets
    )


class StandaloneAdapter:
    KIND: ClassVar[Kind] = kinds.WORKLOADS

    @property
    def model(self) -> type[kube.View]:
        raise TypeError("a standalone Workload is cached as a Workload, not through a view")

    # -- webhook side: never routed here ----------------------------------------------------

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        return []

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        return []

    def unheld(self, obj: JSONDict) -> str | None:
        return None

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return False

    def templates(self, obj: JSONDict) -> list[Path]:
        return []

    # -- controller side ----------------------------------------------------------------------

    def gangs(self, obj: Standalone) -> list[GangShape]:
        wl = obj.workload
        if wl.metadata.deletion_timestamp:
            return []
        pod_sets = _core_pod_sets(wl)
        size = sum(ps.count for ps in pod_sets)
        return [GangShape(wl.metadata.name, size, pod_sets, priority=wl.spec.priority)]

    def finished(self, obj: Standalone) -> Finished | None:
        status = obj.workload.status
        done = find(status.conditions, WorkloadCondition.FINISHED) if status else None
        if done is None or done.status != "True":
            return None
        return Finished.FAILED if done.reason == Finished.FAILED else Finished.SUCCEEDED

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return None

    def release(
        self, obj: Standalone, pods: Sequence[kube.Pod], flavors: Flavors = NO_FLAVORS
    ) -> list[Write]:
        return []  # its creator reads the admission from the status

    def hold(self, obj: Standalone, pods: Sequence[kube.Pod]) -> list[Write]:
        return []  # its creator stops its work when the status says Evicted

    # -- its own record (capabilities.OwnsItsRecord, capabilities.WeakOwner) -------------------

    def owner_of(self, record: Workload) -> Standalone | None:
        return Standalone(record) if record.submitted() else None

    def queue_name(self, owner: Standalone) -> str:
        return owner.workload.spec.queue_name

    def shares_gangs(self) -> bool:
        return False


STANDALONE = StandaloneAdapter()
