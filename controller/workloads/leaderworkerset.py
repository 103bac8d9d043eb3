"""leaderworkerset.x-k8s.io/v1 LeaderWorkerSet: one gang per group of `size` pods.

A group's index is known only on its pods, so the templates get the gate and the queue, and
each Pod is given its group's PodGroup when it is created (see `pod.py`).
"""

from __future__ import annotations

from typing import ClassVar

from controller.workloads.base import (
    Admission,
    Denied,
    Gang,
    Hold,
    PodSet,
    decorate_pod_template,
    gang_name,
    has_gate,
    non_negative_int,
    object_name,
    template_requests,
)
from controller.workloads.edits import Editor, JSONDict, lookup

GROUP_TEMPLATE = ("spec", "leaderWorkerTemplate")
WORKER = (*GROUP_TEMPLATE, "workerTemplate")
LEADER = (*GROUP_TEMPLATE, "leaderTemplate")


def group_gang_name(lws_name: str, group_index: str | int) -> str:
    """The PodGroup of one LWS group: shared by the pods and the controller."""
    return gang_name("lws", lws_name, str(group_index))


def _templates(obj: JSONDict) -> list[tuple[str, ...]]:
    if lookup(obj, list(WORKER)) is None:
        raise Denied(f"{'.'.join(WORKER)} is missing")
    return [WORKER, LEADER] if lookup(obj, list(LEADER)) is not None else [WORKER]


class LeaderWorkerSetAdapter:
    group: ClassVar[str] = "leaderworkerset.x-k8s.io"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "LeaderWorkerSet"
    hold: ClassVar[Hold] = Hold.SCHEDULING_GATE

    def sizes(self, obj: JSONDict) -> tuple[int, int]:
        """(groups, pods per group); Denied names a field that is not a count."""
        replicas = non_negative_int(obj, ["spec", "replicas"], 1) or 0
        size = non_negative_int(obj, [*GROUP_TEMPLATE, "size"], 1) or 0
        if size < 1:
            raise Denied(f"{'.'.join(GROUP_TEMPLATE)}.size must be at least 1")
        return replicas, size

    def gangs(self, obj: JSONDict) -> list[Gang]:
        replicas, size = self.sizes(obj)
        leader_path = LEADER if lookup(obj, list(LEADER)) is not None else WORKER
        leader = PodSet("leader", 1, template_requests(obj, leader_path), leader_path)
        workers = PodSet("worker", size - 1, template_requests(obj, WORKER), WORKER)
        pod_sets = (leader, workers) if size > 1 else (leader,)
        name = object_name(obj)
        return [Gang(group_gang_name(name, i), size, pod_sets) for i in range(replicas)]

    def default(self, editor: Editor, admission: Admission) -> list[str]:
        self.sizes(editor.doc)
        return self._decorate(editor, admission)

    def keep_defaults(self, editor: Editor, old: JSONDict, admission: Admission) -> list[str]:
        return self._decorate(editor, admission)

    def _decorate(self, editor: Editor, admission: Admission) -> list[str]:
        warnings: list[str] = []
        for template in _templates(editor.doc):
            warnings += decorate_pod_template(editor, template, admission, gang=None, gate=True)
        return warnings

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        for template in (WORKER, LEADER):
            if has_gate(old, template) and not has_gate(new, template):
                return f"only kohort's controller may remove the admission gate from {template[-1]}"
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return False
