"""batch/v1 Job: held with spec.suspend; one gang of min(parallelism, completions) pods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from controller.api import kube, names
from controller.api.kinds import Kind
from controller.workloads.base import (
    Finished,
    GangShape,
    Mutation,
    Patch,
    Write,
    gang_name,
    non_negative_int,
    object_name,
    pod_set,
    pod_template_fields,
    priority_classes,
    template_gang,
    template_requests,
)
from controller.workloads.edits import Editor, JSONDict, Path, lookup

TEMPLATE = ("spec", "template")
UNSUSPENDED = "a workload in a kohort queue must be created with spec.suspend: true"


def _suspended(obj: JSONDict) -> bool:
    return lookup(obj, ["spec", "suspend"]) is True


class JobAdapter:
    KIND: ClassVar[Kind] = kube.Job.KIND
    model: ClassVar[type[kube.Job]] = kube.Job

    def gang_name(self, obj: JSONDict, request_uid: str = "") -> str:
        return gang_name("job", object_name(obj, request_uid))

    # -- webhook side ---------------------------------------------------------------------------

    def sizes(self, obj: JSONDict) -> tuple[int, int]:
        """(pods running at once, gang size); Denied names a field that is not a count."""
        parallelism = non_negative_int(obj, ["spec", "parallelism"], 1) or 0
        completions = non_negative_int(obj, ["spec", "completions"], None)
        return parallelism, parallelism if completions is None else min(parallelism, completions)

    def defaults(self, obj: JSONDict, mutation: Mutation) -> tuple[JSONDict, list[str]]:
        self.sizes(obj)  # rejects a spec that cannot form a gang
        gang = self.gang_name(obj, mutation.request_uid)
        template = lookup(obj, TEMPLATE)
        fields, warnings = pod_template_fields(template, TEMPLATE, mutation, gang=gang)
        values = {
            "metadata": {"labels": {names.QUEUE_LABEL: mutation.queue}},
            "spec": {"suspend": True, "template": fields},
        }
        return values, warnings

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        values, warnings = self.defaults(editor.doc, mutation)
        editor.merge((), values)
        return warnings

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        # The template of a Job is immutable; suspend belongs to the controller.
        return []

    def unheld(self, obj: JSONDict) -> str | None:
        self.sizes(obj)
        template_requests(obj, TEMPLATE)
        return None if _suspended(obj) else UNSUSPENDED

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        if _suspended(old) and not _suspended(new):
            return "a Job waiting in a kohort queue is unsuspended only by kohort's controller"
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return _suspended(old)

    def templates(self, obj: JSONDict) -> list[Path]:
        return [TEMPLATE]

    # -- controller side ------------------------------------------------------------------------

    def gangs(self, obj: kube.Job) -> list[GangShape]:
        template = obj.spec.template
        # The webhook wrote the gang's name into the template: it is authoritative (a name
        # chosen with generateName at CREATE differs from what would be derived later).
        name = template_gang(template)
        parallelism = obj.spec.parallelism if obj.spec.parallelism is not None else 1
        if name is None or parallelism < 1:
            return []
        completions = obj.spec.completions
        size = parallelism if completions is None else min(parallelism, completions)
        pods = pod_set("main", parallelism, template)
        return [GangShape(name, max(size, 1), (pods,), priority_classes(template))]

    def finished(self, obj: kube.Job) -> Finished | None:
        done = {c.type for c in obj.status.conditions if c.status == "True"}
        if done & {"Complete", "SuccessCriteriaMet"}:
            return Finished.SUCCEEDED
        if done & {"Failed", "FailureTarget"}:
            return Finished.FAILED
        return None

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return None

    def release(self, obj: kube.Job, pods: Sequence[kube.Pod]) -> list[Write]:
        return [] if obj.spec.suspend is not True else [self._suspend(obj, False)]

    def hold(self, obj: kube.Job, pods: Sequence[kube.Pod]) -> list[Write]:
        return [] if obj.spec.suspend is True else [self._suspend(obj, True)]

    def _suspend(self, obj: kube.Job, suspended: bool) -> Patch:
        meta = obj.metadata
        return Patch(self.KIND, meta.namespace, meta.name, {"spec": {"suspend": suspended}})
