"""leaderworkerset.x-k8s.io/v1 LeaderWorkerSet: one gang per group of `size` pods.

A group's index is known only on its pods, so the templates get the gate and the queue, and
each Pod is given its group's PodGroup when it is created: LeaderWorkerSet's StatefulSets make
the pods, labelled with the LeaderWorkerSet's name and their group's index, and this adapter
tells the Pod adapter, through the registry, which gang such a pod joins (`pod_mark`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from controller.api import kinds, kube, names
from controller.api.kinds import Kind
from controller.workloads.base import (
    NO_FLAVORS,
    Denied,
    Finished,
    Flavors,
    GangShape,
    Mutation,
    Write,
    decorate_pod_template,
    delete_ungated,
    gang_name,
    gate_problem,
    has_gate,
    made_by,
    non_negative_int,
    priority_classes,
    ungate_up_to,
)
from controller.workloads.capabilities import OwnPods, PodMark
from controller.workloads.edits import Editor, JSONDict, Path, lookup
from controller.workloads.pod_rules import TemplatePods, gang_pod_sets, without_slices

GROUP_TEMPLATE = ("spec", "leaderWorkerTemplate")
WORKER = (*GROUP_TEMPLATE, "workerTemplate")
LEADER = (*GROUP_TEMPLATE, "leaderTemplate")


def group_gang_name(lws_name: str, group_index: str | int) -> str:
    """The PodGroup of one LWS group: shared by the pods and the controller."""
    return gang_name(LeaderWorkerSetAdapter.GANG_PREFIX, lws_name, str(group_index))


def _templates(obj: JSONDict) -> list[tuple[str, ...]]:
    if lookup(obj, list(WORKER)) is None:
        raise Denied(f"{'.'.join(WORKER)} is missing")
    return [WORKER, LEADER] if lookup(obj, list(LEADER)) is not None else [WORKER]


class LeaderWorkerSetAdapter:
    KIND: ClassVar[Kind] = kube.LeaderWorkerSet.KIND
    model: ClassVar[type[kube.LeaderWorkerSet]] = kube.LeaderWorkerSet
    GANG_PREFIX: ClassVar[str] = "lws"
    OPTIONAL_CRD: ClassVar[bool] = True
    # Its leader StatefulSet (and worker StatefulSets, through the group's leader Pod).
    MAKES: ClassVar[tuple[Kind, ...]] = (kinds.STATEFULSETS,)
    OWN_PODS: ClassVar[OwnPods] = OwnPods.NONE

    def pod_mark(self, pod_labels: Mapping[str, Any]) -> PodMark | None:
        """A pod labelled with a LeaderWorkerSet's name is one of its groups' (its StatefulSets
        make it): its gang is its group's, known from its group-index label."""
        lws = pod_labels.get(names.LWS_NAME_LABEL)
        if not lws:
            return None
        index = pod_labels.get(names.LWS_GROUP_INDEX_LABEL)
        gang = None
        if isinstance(lws, str) and isinstance(index, str) and index:
            gang = group_gang_name(lws, index)
        return PodMark(
            kind=self.KIND,
            label=names.LWS_NAME_LABEL,
            gang=gang,
            maker=kinds.STATEFULSETS,
            unnamed=(
                f"a pod of LeaderWorkerSet {lws} must carry {names.POD_GROUP_LABEL} (its"
                f" group's gang), which kohort's mutating webhook adds when the pod is created,"
                f" from the {names.LWS_GROUP_INDEX_LABEL} label LeaderWorkerSet's own webhook"
                f" sets: kohort's webhook did not answer (the StatefulSet controller creates"
                f" the pod again), or that label is missing (is LeaderWorkerSet's webhook"
                f" running?)"
            ),
        )

    # -- webhook side ---------------------------------------------------------------------------

    def sizes(self, obj: JSONDict) -> tuple[int, int]:
        """(groups, pods per group); Denied names a field that is not a count."""
        replicas = non_negative_int(obj, ["spec", "replicas"], 1) or 0
        size = non_negative_int(obj, [*GROUP_TEMPLATE, "size"], 1) or 0
        if size < 1:
            raise Denied(f"{'.'.join(GROUP_TEMPLATE)}.size must be at least 1")
        return replicas, size

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        self.sizes(editor.doc)
        return self._decorate(editor, mutation)

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        return self._decorate(editor, mutation)

    def _decorate(self, editor: Editor, mutation: Mutation) -> list[str]:
        warnings: list[str] = []
        for template in _templates(editor.doc):
            warnings += decorate_pod_template(editor, template, mutation, gang=None, gate=True)
        return warnings

    def unheld(self, obj: JSONDict) -> str | None:
        self.sizes(obj)
        return gate_problem(obj, _templates(obj))

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        for template in (WORKER, LEADER):
            if has_gate(old, template) and not has_gate(new, template):
                return f"only kohort's controller may remove the admission gate from {template[-1]}"
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return False

    def templates(self, obj: JSONDict) -> list[Path]:
        return [t for t in (WORKER, LEADER) if lookup(obj, list(t)) is not None]

    # -- controller side ------------------------------------------------------------------------

    def gangs(self, obj: kube.LeaderWorkerSet) -> list[GangShape]:
        group = obj.spec.leader_worker_template
        worker = group.worker_template
        size = group.size if group.size is not None else 1
        if worker is None or size < 1:
            return []
        # Without a template of its own, the leader is made from the workers' (not their slices).
        leader = group.leader_template or without_slices(worker)
        templates = [TemplatePods("leader", 1, leader)]
        if size > 1:
            templates.append(TemplatePods("worker", size - 1, worker))
        sets = gang_pod_sets(templates, obj.metadata.namespace)
        priority = priority_classes(leader, worker if size > 1 else None)
        replicas = obj.spec.replicas if obj.spec.replicas is not None else 1
        return [
            GangShape(group_gang_name(obj.metadata.name, i), size, sets, priority)
            for i in range(replicas)
        ]

    def finished(self, obj: kube.LeaderWorkerSet) -> Finished | None:
        return None

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        """A group's leader has worker index 0; without the index, the leader is the pod of
        the StatefulSet named after the LeaderWorkerSet (workers' is named after the leader)."""
        labels = pod.metadata.labels
        index = labels.get(names.LWS_WORKER_INDEX_LABEL)
        if index is not None:
            return "leader" if index == "0" else "worker"
        owner = pod.metadata.controller_owner()
        if owner is None or owner.kind != "StatefulSet":
            return None
        return "leader" if owner.name == labels.get(names.LWS_NAME_LABEL) else "worker"

    def release(
        self, obj: kube.LeaderWorkerSet, pods: Sequence[kube.Pod], flavors: Flavors = NO_FLAVORS
    ) -> list[Write]:
        """Ungate the group's pods that the LeaderWorkerSet's StatefulSets made, at most its
        size of them, each put on the nodes of its pod set's flavors (leader or worker) in the
        same write: a pod that only carries its labels stays held."""
        group = obj.spec.leader_worker_template
        size = group.size if group.size is not None else 1
        name = obj.metadata.name
        own = [
            p
            for p in pods
            if p.metadata.labels.get(names.LWS_NAME_LABEL) == name and made_by(p, "StatefulSet")
        ]
        return ungate_up_to(
            size, own, lambda p: True, lambda p: flavors.get(self.pod_set_of(p) or "leader")
        )

    def hold(self, obj: kube.LeaderWorkerSet, pods: Sequence[kube.Pod]) -> list[Write]:
        return delete_ungated(pods)
