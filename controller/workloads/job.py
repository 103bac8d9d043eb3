"""batch/v1 Job: held with spec.suspend; one gang of min(parallelism, completions) pods.

A Job admitted on flavors is put on their nodes in its pod template, in the write that
unsuspends it: the flavors' node labels merged into the template's nodeSelector, their
tolerations appended. Kubernetes lets a Job's template scheduling fields change only while it
is suspended and has no status.startTime, so the template's own nodeSelector and tolerations
are kept in an annotation written with the release, and an eviction suspends the Job, clears
its startTime and puts them back (a controller restarted meanwhile finishes that from the
annotation).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import msgspec

from controller.api import kube, names
from controller.api.kinds import Kind
from controller.workloads.base import (
    NO_FLAVORS,
    Finished,
    Flavors,
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
    same_toleration,
    template_gang,
    template_requests,
    toleration_json,
)
from controller.workloads.edits import Editor, JSONDict, Path, lookup

log = logging.getLogger("kohort.workloads")

TEMPLATE = ("spec", "template")
UNSUSPENDED = "a workload in a kohort queue must be created with spec.suspend: true"
# The pod template's own nodeSelector and tolerations, kept while its flavors' are added.
TEMPLATE_BEFORE_FLAVORS = f"{names.GROUP}/template-before-flavors"


class Scheduling(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """A pod template's nodeSelector and tolerations."""

    node_selector: dict[str, str] = {}
    tolerations: list[kube.Toleration] = []

    def same(self, other: Scheduling) -> bool:
        return self.node_selector == other.node_selector and _same_tolerations(
            self.tolerations, other.tolerations
        )


def _same_tolerations(a: Sequence[kube.Toleration], b: Sequence[kube.Toleration]) -> bool:
    return len(a) == len(b) and all(same_toleration(x, y) for x, y in zip(a, b, strict=True))


def current_scheduling(obj: kube.Job) -> Scheduling:
    spec = obj.spec.template.spec
    return Scheduling(node_selector=dict(spec.node_selector), tolerations=list(spec.tolerations))


def scheduling_before_flavors(obj: kube.Job) -> Scheduling | None:
    """The template's own nodeSelector and tolerations, while its flavors' are in it."""
    text = obj.metadata.annotations.get(TEMPLATE_BEFORE_FLAVORS)
    if text is None:
        return None
    try:
        return msgspec.json.decode(text, type=Scheduling)
    except (msgspec.ValidationError, msgspec.DecodeError):
        meta = obj.metadata
        log.warning(
            "Job %s/%s: annotation %s is not a nodeSelector and tolerations; ignored",
            meta.namespace,
            meta.name,
            TEMPLATE_BEFORE_FLAVORS,
        )
        return None


def _template_patch(obj: kube.Job, target: Scheduling) -> JSONDict:
    """The merge patch of the template's spec that makes its scheduling fields `target`."""
    spec = obj.spec.template.spec
    patch: JSONDict = {}
    selector: dict[str, Any] = {
        k: v for k, v in target.node_selector.items() if spec.node_selector.get(k) != v
    }
    selector.update({k: None for k in spec.node_selector if k not in target.node_selector})
    if selector:
        patch["nodeSelector"] = selector
    if not _same_tolerations(spec.tolerations, target.tolerations):
        patch["tolerations"] = [toleration_json(t) for t in target.tolerations] or None
    return patch


def _encoded(scheduling: Scheduling) -> str:
    return json.dumps(msgspec.to_builtins(scheduling), sort_keys=True, separators=(",", ":"))


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
        before = scheduling_before_flavors(obj)
        if before is not None:
            # The gang is what the user asked for: not the flavors it was released on.
            spec = msgspec.structs.replace(
                template.spec, node_selector=before.node_selector, tolerations=before.tolerations
            )
            template = msgspec.structs.replace(template, spec=spec)
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

    def release(
        self, obj: kube.Job, pods: Sequence[kube.Pod], flavors: Flavors = NO_FLAVORS
    ) -> list[Write]:
        """Unsuspend the Job, its template on the nodes of its flavors in the same write (and
        its own nodeSelector and tolerations kept in an annotation)."""
        if obj.spec.suspend is not True:
            return []
        before = scheduling_before_flavors(obj) or current_scheduling(obj)
        target = before
        mine = flavors.get("main")
        if mine is not None:
            target = Scheduling(
                node_selector=mine.selector_on(before.node_selector),
                tolerations=[*before.tolerations, *mine.tolerations_missing(before.tolerations)],
            )
        body: JSONDict = {"spec": {"suspend": False}}
        writes: list[Write] = []
        template = _template_patch(obj, target)
        if template:
            body["spec"]["template"] = {"spec": template}
            writes += self._clear_start_time(obj)
        kept = None if target.same(before) else _encoded(before)
        if obj.metadata.annotations.get(TEMPLATE_BEFORE_FLAVORS) != kept:
            body["metadata"] = {"annotations": {TEMPLATE_BEFORE_FLAVORS: kept}}
        meta = obj.metadata
        return [*writes, Patch(self.KIND, meta.namespace, meta.name, body)]

    def hold(self, obj: kube.Job, pods: Sequence[kube.Pod]) -> list[Write]:
        """Suspend the Job; then give its template back its own nodeSelector and tolerations
        when a release added its flavors' (which needs its startTime cleared)."""
        writes: list[Write] = [] if obj.spec.suspend is True else [self._suspend(obj, True)]
        if TEMPLATE_BEFORE_FLAVORS not in obj.metadata.annotations:
            return writes
        before = scheduling_before_flavors(obj)
        body: JSONDict = {"metadata": {"annotations": {TEMPLATE_BEFORE_FLAVORS: None}}}
        template = _template_patch(obj, before) if before is not None else {}
        if template:
            body["spec"] = {"template": {"spec": template}}
            writes += self._clear_start_time(obj)
        meta = obj.metadata
        return [*writes, Patch(self.KIND, meta.namespace, meta.name, body)]

    def _suspend(self, obj: kube.Job, suspended: bool) -> Patch:
        meta = obj.metadata
        return Patch(self.KIND, meta.namespace, meta.name, {"spec": {"suspend": suspended}})

    def _clear_start_time(self, obj: kube.Job) -> list[Write]:
        """Forget when a suspended Job last started: only then may its template's nodeSelector
        and tolerations change (it gets a new startTime when it runs again)."""
        if obj.status.start_time is None:
            return []
        meta = obj.metadata
        body = {"status": {"startTime": None}}
        return [Patch(self.KIND, meta.namespace, meta.name, body, subresource="status")]
