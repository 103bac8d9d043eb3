"""core/v1 Pod: the pods of managed workloads, and bare pods in a queue (a gang of one).

Pods made by a managed Job are created only once the Job is released, so they get no gate.
Every other managed pod gets the gate if it arrives without it (defence in depth), and a
LeaderWorkerSet pod gets its group's PodGroup, known from its group-index label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from controller.api import names
from controller.workloads.base import (
    Admission,
    Gang,
    Hold,
    PodSet,
    decorate_pod_template,
    gang_name,
    has_gate,
    labels,
    object_name,
    remove_gate,
    template_requests,
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
    group: ClassVar[str] = ""
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "Pod"
    hold: ClassVar[Hold] = Hold.SCHEDULING_GATE

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

    def gangs(self, obj: JSONDict) -> list[Gang]:
        pods = PodSet("main", 1, template_requests(obj, ROOT), ROOT)
        return [Gang(self.gang_name(obj) or gang_name("pod", object_name(obj)), 1, (pods,))]

    def default(self, editor: Editor, admission: Admission) -> list[str]:
        gang = self.gang_name(editor.doc, admission.request_uid)
        gate = not owned_by_job(editor.doc)
        return decorate_pod_template(editor, ROOT, admission, gang=gang, gate=gate)

    def keep_defaults(self, editor: Editor, old: JSONDict, admission: Admission) -> list[str]:
        # Scheduling gates can be removed from a pod but never added back.
        return []

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        if has_gate(old) and not has_gate(new):
            return (
                f"only kohort's controller may remove the {names.ADMISSION_GATE} scheduling "
                "gate: the pod's gang has not been admitted by its queue"
            )
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return False

    def is_held(self, obj: JSONDict) -> bool:
        return has_gate(obj)

    def release(self, editor: Editor) -> None:
        remove_gate(editor)

    def evict(self, editor: Editor) -> None:
        # A scheduling gate cannot be put back on a pod: evicting a gated kind deletes its pods.
        raise NotImplementedError("pods are evicted by deleting them")
