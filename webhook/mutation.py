"""POST /mutate: give a new managed workload its gang fields and its admission hold.

CREATE gets the full treatment. An UPDATE only gets back gang fields it dropped (server-side
apply drops fields missing from the user's manifest); the hold belongs to the controller (which
unsuspends, ungates and evicts) and the validating webhook guards it. The mutation is
idempotent, so `reinvocationPolicy: IfNeeded` and retries are harmless.

A new object of a kind that answers from its pruned view (`capabilities.FastDefaults`: a Job)
takes the fast path (`fast_answer`): the webhook decides the queue (opt-out label, default
queue) and builds the response, the kind's adapter the patch.
"""

from __future__ import annotations

from typing import Any

from controller.api import kinds, names
from controller.workloads.base import Denied, Mutation, WorkloadAdapter, queue_in, queue_of
from controller.workloads.edits import Editor, JSONDict, lookup, merge_operations
from controller.workloads.pod import of_unmanaged_job
from controller.workloads.pruned import ObjectMeta
from controller.workloads.registry import REGISTRY, Registry
from webhook import reviews
from webhook.pruned_reviews import PrunedRequest
from webhook.settings import Settings


def implied_exempt(kind: str, obj: Any) -> bool:
    """Whether an object the namespace's default queue would manage is left alone: a pod of a
    Job kohort does not manage runs as its Job does."""
    return kind == kinds.PODS.kind and of_unmanaged_job(obj)


def mutate(
    review: Any,
    settings: Settings,
    *,
    default_queue: str | None = None,
    owned: bool = False,
    registry: Registry = REGISTRY,
) -> dict[str, Any]:
    """The AdmissionReview response for `review`; BadReview when it cannot be answered.

    `review` is a decoded AdmissionReview, or its request as `pruned_reviews` decodes it.

    `default_queue` is the LocalQueue implied for workloads without a queue label: the server
    passes `default` on the path that the webhook configuration routes opted-in namespaces to.
    `owned`: the caller gives the review away (the server, which has just decoded it), so the
    object is edited in place instead of copied; the response is the same.
    `registry`: the workload kinds it manages.
    """
    if type(review) is PrunedRequest:
        answer = fast_answer(review, settings, default_queue, registry)
        if answer is not None:
            return answer
        request = review.request()
    else:
        request = reviews.parse(review)
    adapter = registry.adapter_for(request.group, request.version, request.kind)
    if adapter is None or request.operation not in ("CREATE", "UPDATE"):
        return reviews.allow(request.uid)
    if not isinstance(request.object, dict):
        return reviews.deny(request.uid, "request.object must be a JSON object", code=400)
    old = request.old_object if isinstance(request.old_object, dict) else None
    # Made by a managed workload (a JobSet's Job, a LeaderWorkerSet's StatefulSet), now and
    # before the update: its owner is the gang.
    made_by_gang = request.operation == "CREATE" or registry.part_of_managed_workload(old)
    if (
        request.kind != kinds.PODS.kind
        and made_by_gang
        and registry.part_of_managed_workload(request.object)
    ):
        return reviews.allow(request.uid)
    if request.operation == "CREATE":
        queue = queue_of(request.object, default_queue)
        if queue_of(request.object) is None and implied_exempt(request.kind, request.object):
            return reviews.allow(request.uid)
    elif old is not None:
        # An update keeps a workload's queue: a label it drops comes back only when it was
        # implied by the namespace (the validating webhook refuses other queue changes).
        implied = queue_of(request.object, default_queue)
        kept = implied if implied is not None and queue_of(old) == implied else None
        queue = queue_of(request.object) or kept
    else:
        return reviews.allow(request.uid)
    if queue is None:
        return reviews.allow(request.uid)
    safe_to_evict = old is None or _carries_safe_to_evict(adapter, old)
    mutation = Mutation(queue, settings.placement, request.uid, safe_to_evict=safe_to_evict)
    merged = registry.merged_defaults_for(request.group, request.version, request.kind)
    if old is None and merged is not None:
        # The whole default is one merge: the patch comes straight from the object.
        try:
            values, warnings = merged.defaults(request.object, mutation)
            patch = merge_operations(request.object, values)
        except Denied as denied:
            return reviews.deny(request.uid, f"{request.subject}: {denied}")
        except TypeError as err:
            return reviews.deny(request.uid, f"{request.subject}: {err}", code=400)
        return reviews.allow(request.uid, patch=patch, warnings=warnings)
    editor = Editor(request.object, in_place=owned)
    try:
        editor.merge(("metadata", "labels"), {names.QUEUE_LABEL: queue})
        if old is None:
            warnings = adapter.default(editor, mutation)
        else:
            warnings = adapter.keep_defaults(editor, old, mutation)
    except Denied as denied:
        return reviews.deny(request.uid, f"{request.subject}: {denied}")
    except TypeError as err:  # a field of the wrong JSON type where an object or list belongs
        return reviews.deny(request.uid, f"{request.subject}: {err}", code=400)
    return reviews.allow(request.uid, patch=editor.operations, warnings=warnings)


def _carries_safe_to_evict(adapter: WorkloadAdapter, obj: JSONDict) -> bool:
    """Whether every pod template of a stored workload carries the autoscaler's safe-to-evict
    (what the webhook gives new workloads)."""
    for path in adapter.templates(obj):
        annotations = lookup(obj, [*path, "metadata", "annotations"])
        if not isinstance(annotations, dict) or names.SAFE_TO_EVICT_ANNOTATION not in annotations:
            return False
    return True


def fast_answer(
    review: PrunedRequest, settings: Settings, default_queue: str | None, registry: Registry
) -> dict[str, Any] | None:
    """The answer for creating an object whose kind answers from its pruned view, or None when
    the general path answers it (another kind or operation, or not of the kind's usual shape).

    An object outside every queue (opted out, or no queue) is allowed unpatched, as the general
    path allows it whatever its shape."""
    obj = review.object
    if review.operation != "CREATE" or obj is None:
        return None
    fast = registry.fast_defaults_for(review.group, review.version, review.kind)
    if fast is None:
        return None
    meta = obj.metadata
    labels = meta.labels if type(meta) is ObjectMeta and type(meta.labels) is dict else {}
    queue = queue_in(labels, default_queue)
    if queue is None:
        return reviews.allow(review.uid)
    patch = fast.fast_defaults(
        obj, queue=queue, placement=settings.placement, request_uid=review.uid
    )
    return None if patch is None else reviews.allow(review.uid, patch=patch)
