"""Helpers for the tests of the kinds held by a suspend field (JobSet, PyTorchJob, RayCluster):
an object as the webhook stores it, the controller's view of it, and a write applied to it."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import msgspec

from controller import quota
from controller.api import names
from controller.workloads.base import Patch, PatchType, PodSetFlavors, Write
from controller.workloads.suspended import SuspendedAdapter
from tests.fakes.reviews import make_review
from webhook.mutation import mutate
from webhook.reviews import patch_of
from webhook.settings import Settings
from webhook.validation import validate

JSON = dict[str, Any]
SETTINGS = Settings()
CONTROLLER = "system:serviceaccount:kohort-system:kohort-controller"

H100 = quota.FlavorSpec(
    "h100",
    node_labels={"gpu": "h100"},
    tolerations=(quota.Toleration("gpu", "Exists", "", "NoSchedule"),),
)
GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


def mutated(obj: JSON, **kwargs: Any) -> JSON:
    """`obj` with the JSON Patch the mutating webhook answers its creation with."""
    response = mutate(make_review(obj), SETTINGS, **kwargs)
    assert response["response"]["allowed"], response
    result: JSON = jsonpatch.apply_patch(obj, patch_of(response))
    return result


def updated(new: JSON, old: JSON) -> JSON:
    """`new` with the JSON Patch the mutating webhook answers the update from `old` with."""
    response = mutate(make_review(new, operation="UPDATE", old=old), SETTINGS)
    assert response["response"]["allowed"], response
    result: JSON = jsonpatch.apply_patch(new, patch_of(response))
    return result


def denial(obj: JSON) -> str:
    """Why the mutating webhook refuses to create `obj`."""
    response = mutate(make_review(obj), SETTINGS)["response"]
    assert response["allowed"] is False, response
    message: str = response["status"]["message"]
    return message


def allowed(new: JSON, old: JSON | None = None, user: str = "alice") -> bool:
    """Whether the validating webhook lets `user` create `new` (or update `old` to it)."""
    operation = "CREATE" if old is None else "UPDATE"
    review = make_review(new, operation=operation, old=old, user=user)
    return bool(validate(review, SETTINGS)["response"]["allowed"])


def stored(obj: JSON) -> JSON:
    """`obj` as the API server keeps it once the webhook made it: named, versioned."""
    result = mutated(obj)
    result["metadata"].update(uid=f"uid-{obj['metadata']['name']}", resourceVersion="1")
    return result


def view(adapter: SuspendedAdapter, raw: JSON) -> Any:
    return msgspec.convert(raw, adapter.model)


def applied(raw: JSON, write: Write) -> JSON:
    """`raw` after a JSON Patch of the controller's, at its next resourceVersion."""
    assert isinstance(write, Patch) and write.type is PatchType.JSON and write.expected
    result: JSON = jsonpatch.apply_patch(raw, write.body)
    meta = result["metadata"]
    meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
    return result


def on_h100(adapter: SuspendedAdapter, raw: JSON) -> dict[str, PodSetFlavors]:
    """Every pod set of the object admitted on flavor h100."""
    return {t.pod_set: PodSetFlavors((H100,)) for t in adapter.held_templates(view(adapter, raw))}


def released_and_held(adapter: SuspendedAdapter, raw: JSON) -> tuple[JSON, JSON]:
    """The object released on h100, and then held again."""
    [release] = adapter.release(view(adapter, raw), [], on_h100(adapter, raw))
    released = applied(raw, release)
    [hold] = adapter.hold(view(adapter, released), [])
    return released, applied(released, hold)


def templates(adapter: SuspendedAdapter, raw: JSON) -> list[JSON]:
    """The object's pod templates, in pod-set order."""
    found = []
    for template in adapter.held_templates(view(adapter, raw)):
        node: Any = raw
        for part in template.path:
            node = node[part]
        found.append(node)
    return found


def decorated(template: JSON, gang: str) -> bool:
    """Whether a pod template carries the gang fields of kohort's webhook (Volcano)."""
    meta = template["metadata"]
    return (
        meta["labels"][names.POD_GROUP_LABEL] == gang
        and meta["labels"][names.QUEUE_LABEL] == "research"
        and meta["labels"][names.MANAGED_LABEL] == names.MANAGED_VALUE
        and meta["annotations"][names.VOLCANO_GROUP_ANNOTATION] == gang
        and template["spec"]["schedulerName"] == "volcano"
    )


def gated(template: JSON) -> bool:
    gates = template["spec"].get("schedulingGates", [])
    return {"name": names.ADMISSION_GATE} in gates


def unsuspended(raw: JSON, path: tuple[str, ...] = ("spec", "suspend")) -> JSON:
    new = copy.deepcopy(raw)
    node = new
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = False
    return new


def merged(raw: JSON, patch: Patch) -> JSON:
    """`raw` with a merge patch applied (a copy)."""
    result: JSON = copy.deepcopy(raw)

    def merge(target: JSON, change: JSON) -> None:
        for key, value in change.items():
            if value is None:
                target.pop(key, None)
            elif isinstance(value, dict) and isinstance(target.get(key), dict):
                merge(target[key], value)
            else:
                target[key] = value

    merge(result, patch.body)
    return result
