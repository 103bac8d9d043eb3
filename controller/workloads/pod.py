"""core/v1 Pod: the pods of managed workloads, and bare pods in a queue (a gang of one).

Pods made by a managed Job are created only once the Job is released, so they get no gate.
Every other managed pod gets the gate if it arrives without it (defence in depth), and a
LeaderWorkerSet pod gets its group's PodGroup, known from its group-index label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from controller.api import kube, names
from controller.api.kinds import Kind
from controller.workloads.base import (
    Finished,
    GangShape,
    Mutation,
    Write,
    decorate_pod_template,
    delete_ungated,
    gang_name,
    gate_problem,
    has_gate,
    labels,
    object_name,
    pod_set,
    priority_classes,
    ungate,
)
from controller.workloads.edits import Editor, JSONDict, lookup
from controller.workloads.leaderworkerset import group_gang_name

ROOT: tuple[str, ...] = ()


def controller_owner(obj: JSONDict) -> Mapping[str, Any] | None:
    owners = lookup(obj, ["metadata", "ownerReferences"])
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            return owner
    return None


def owned_by_job(obj: JSONDict) -> bool:
    owner = controller_owner(obj)
    return (
        owner is not None
        and owner.get("kind") == "Job"
        and str(owner.get("apiVersion", "")).startswith("batch/")
    )


class PodAdapter:
    KIND: ClassVar[Kind] = kube.Pod.KIND
    model: ClassVar[type[kube.Pod]] = kube.Pod

    def gang_name(self, obj: JSONDict, request_uid: str = "") -> str | None:
        """The pod's PodGroup, or None for an LWS pod whose group index is not set yet."""
        pod_labels = labels(obj)
        existing = pod_labels.get(names.POD_GROUP_LABEL)
        if isinstance(existing, str) and existing:
            return existing
        lws = pod_labels.get(names.LWS_NAME_LABEL)
        if isinstance(lws, str) and lws:
            index = pod_labels.get(names.LWS_GROUP_INDEX_LABEL)
            return group_gang_name(lws, index) if isinstance(index, str) and index else None
        return gang_name("pod", object_name(obj, request_uid))

    # -- webhook side ---------------------------------------------------------------------------

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        gang = self.gang_name(editor.doc, mutation.request_uid)
        gate = not owned_by_job(editor.doc)
        return decorate_pod_template(editor, ROOT, mutation, gang=gang, gate=gate)

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        # Scheduling gates can be removed from a pod but never added back.
        return []

    def unheld(self, obj: JSONDict) -> str | None:
        # A Job's pods exist only once the Job is released.
        return None if owned_by_job(obj) else gate_problem(obj, [ROOT])

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        if has_gate(old) and not has_gate(new):
            return (
                f"only kohort's controller may remove the {names.ADMISSION_GATE} scheduling "
                "gate: the pod's gang has not been admitted by its queue"
            )
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return False

    # -- controller side: a bare pod is a gang of one, owned by itself ----------------------------

    def gangs(self, obj: kube.Pod) -> list[GangShape]:
        meta = obj.metadata
        # Pods of Jobs, StatefulSets and LeaderWorkerSets belong to their owner's gang (an LWS
        # pod whose LeaderWorkerSet is not known yet waits for it).
        if meta.controller_owner() is not None or meta.labels.get(names.LWS_NAME_LABEL):
            return []
        name = meta.labels.get(names.POD_GROUP_LABEL) or gang_name("pod", meta.name)
        template = kube.PodTemplate(spec=obj.spec)
        return [GangShape(name, 1, (pod_set("main", 1, template),), priority_classes(template))]

    def finished(self, obj: kube.Pod) -> Finished | None:
        phase = obj.status.phase
        if phase == Finished.SUCCEEDED:
            return Finished.SUCCEEDED
        return Finished.FAILED if phase == Finished.FAILED else None

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return None

    def release(self, obj: kube.Pod, pods: Sequence[kube.Pod]) -> list[Write]:
        return ungate(pods)

    def hold(self, obj: kube.Pod, pods: Sequence[kube.Pod]) -> list[Write]:
        # A scheduling gate cannot be put back on a pod: a bare pod is evicted by deleting it.
        return delete_ungated(pods)
