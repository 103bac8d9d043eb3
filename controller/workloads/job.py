"""batch/v1 Job: held with spec.suspend; one gang of min(parallelism, completions) pods."""

from __future__ import annotations

from typing import ClassVar

from controller.api import names
from controller.workloads.base import (
    Admission,
    Gang,
    Hold,
    PodSet,
    gang_name,
    non_negative_int,
    object_name,
    pod_template_fields,
    template_requests,
)
from controller.workloads.edits import Editor, JSONDict, lookup

TEMPLATE = ("spec", "template")


def _suspended(obj: JSONDict) -> bool:
    return lookup(obj, ["spec", "suspend"]) is True


class JobAdapter:
    group: ClassVar[str] = "batch"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "Job"
    hold: ClassVar[Hold] = Hold.SUSPEND

    def gang_name(self, obj: JSONDict, request_uid: str = "") -> str:
        return gang_name("job", object_name(obj, request_uid))

    def sizes(self, obj: JSONDict) -> tuple[int, int]:
        """(pods running at once, gang size); Denied names a field that is not a count."""
        parallelism = non_negative_int(obj, ["spec", "parallelism"], 1) or 0
        completions = non_negative_int(obj, ["spec", "completions"], None)
        return parallelism, parallelism if completions is None else min(parallelism, completions)

    def gangs(self, obj: JSONDict) -> list[Gang]:
        parallelism, size = self.sizes(obj)
        pods = PodSet("main", parallelism, template_requests(obj, TEMPLATE), TEMPLATE)
        return [Gang(self.gang_name(obj), size, (pods,))]

    def defaults(self, obj: JSONDict, admission: Admission) -> tuple[JSONDict, list[str]]:
        self.sizes(obj)  # rejects a spec that cannot form a gang
        gang = self.gang_name(obj, admission.request_uid)
        template = lookup(obj, TEMPLATE)
        fields, warnings = pod_template_fields(template, TEMPLATE, admission, gang=gang)
        values = {
            "metadata": {"labels": {names.QUEUE_LABEL: admission.queue}},
            "spec": {"suspend": True, "template": fields},
        }
        return values, warnings

    def default(self, editor: Editor, admission: Admission) -> list[str]:
        values, warnings = self.defaults(editor.doc, admission)
        editor.merge((), values)
        return warnings

    def keep_defaults(self, editor: Editor, old: JSONDict, admission: Admission) -> list[str]:
        # The template of a Job is immutable; suspend belongs to the controller.
        return []

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        if _suspended(old) and not _suspended(new):
            return "a Job waiting in a kohort queue is unsuspended only by kohort's controller"
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return _suspended(old)

    def is_held(self, obj: JSONDict) -> bool:
        return _suspended(obj)

    def release(self, editor: Editor) -> None:
        editor.set(["spec", "suspend"], False)

    def evict(self, editor: Editor) -> None:
        editor.set(["spec", "suspend"], True)
