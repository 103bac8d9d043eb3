"""The answer for a new Job of the usual shape, read straight from its typed view.

A new Job is the review the mutating webhook answers most, and the one a burst of `kubectl
apply` or a pipeline sends by the hundred. `webhook.mutation.mutate` answers it through the
Job adapter (`JobAdapter.defaults` merged by `merge_operations`); this module gives the same
operations, in the same order, without building and walking dicts, and is held to that by a
property test over generated Jobs (tests/unit/test_webhook_pruned_reviews.py).

It only takes the usual shape: metadata, spec and spec.template.spec present, no scheduler
chosen by the user, made by no controller. Anything else returns None and goes the general way,
which also writes every warning and denial (and leaves a JobSet's Jobs alone).
"""

from __future__ import annotations

from typing import Any

from jsonpointer import escape
from msgspec import UNSET

from controller.api import names
from controller.workloads.base import DEFAULT_SCHEDULER, Backend, gang_name, object_name
from webhook import reviews
from webhook.pruned_reviews import ObjectMeta, PodSpec, Workload
from webhook.settings import Settings

_TEMPLATE_META = "/spec/template/metadata"


def answer(
    uid: str, job: Workload, settings: Settings, default_queue: str | None
) -> dict[str, Any] | None:
    """The AdmissionReview response for creating `job`, or None when it is not of the usual
    shape (the general path answers it then)."""
    meta, spec = job.metadata, job.spec
    if type(meta) is not ObjectMeta or spec is None or spec is UNSET:
        return None
    owners = meta.ownerReferences
    if type(owners) is list and any(o.controller is True for o in owners):
        return None
    template = spec.template
    if template is None or template is UNSET:
        return None
    pod_spec = template.spec
    if type(pod_spec) is not PodSpec:
        return None
    placement = settings.placement
    if placement.backend is Backend.KUBERNETES:
        return None  # pods name their gang's Workload (spec.workloadRef): the general path
    wanted_scheduler = placement.scheduler_name
    scheduler = pod_spec.schedulerName
    if scheduler not in (UNSET, None, "", DEFAULT_SCHEDULER, wanted_scheduler):
        return None  # kept with a warning: the general path writes it

    labels = meta.labels if type(meta.labels) is dict else {}
    if labels.get(names.OPT_OUT_LABEL) == "true":
        return reviews.allow(uid)
    queue = labels.get(names.QUEUE_LABEL) or default_queue
    if queue is None:
        return reviews.allow(uid)

    ops: list[dict[str, Any]] = []
    _merge_object(ops, "/metadata/labels", meta.labels, {names.QUEUE_LABEL: queue})
    if spec.suspend is not True:
        _set(ops, "/spec/suspend", spec.suspend, True)

    template_meta = template.metadata
    template_labels: Any = UNSET
    annotations: Any = UNSET
    if isinstance(template_meta, ObjectMeta):
        template_labels, annotations = template_meta.labels, template_meta.annotations
    name = meta.name
    if not name:  # only generateName: named like the general path names it
        name = object_name({"metadata": {"generateName": meta.generateName}}, uid)
    # Always this Job's own gang: a template copied from another workload names the other's.
    gang = gang_name("job", name)
    wanted_labels = {
        names.QUEUE_LABEL: queue,
        names.MANAGED_LABEL: names.MANAGED_VALUE,
        names.POD_GROUP_LABEL: gang,
    }
    wanted_annotations: dict[str, str] = {}
    backend = placement.backend
    if backend is Backend.VOLCANO:
        wanted_annotations[names.VOLCANO_GROUP_ANNOTATION] = gang
    if backend is Backend.COSCHEDULING:
        wanted_labels[names.COSCHEDULING_GROUP_LABEL] = gang
    wanted_meta: dict[str, Any] = {"labels": wanted_labels}
    if wanted_annotations:
        wanted_meta["annotations"] = wanted_annotations
    if not isinstance(template_meta, ObjectMeta):
        _set(ops, _TEMPLATE_META, template_meta, wanted_meta)
    else:
        _merge_object(ops, f"{_TEMPLATE_META}/labels", template_labels, wanted_labels)
        if wanted_annotations:
            _merge_object(ops, f"{_TEMPLATE_META}/annotations", annotations, wanted_annotations)
    if wanted_scheduler is not None and scheduler != wanted_scheduler:
        _set(ops, "/spec/template/spec/schedulerName", scheduler, wanted_scheduler)
    return reviews.allow(uid, patch=ops)


def _set(ops: list[dict[str, Any]], path: str, old: Any, value: Any) -> None:
    ops.append({"op": "add" if old is UNSET else "replace", "path": path, "value": value})


def _merge_object(
    ops: list[dict[str, Any]], path: str, current: Any, wanted: dict[str, str]
) -> None:
    """Merge string members into the object at `path` (missing or null: set whole)."""
    if type(current) is not dict:
        _set(ops, path, current, wanted)
        return
    for key, value in wanted.items():
        old = current.get(key, UNSET)
        if old != value:
            _set(ops, f"{path}/{escape(key)}", old, value)
