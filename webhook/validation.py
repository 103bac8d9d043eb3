"""POST /validate: keep held gangs held, and reject malformed kohort.dev quota objects.

1. kohort.dev objects (ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Topology, Workload) must
   validate against the API models; the message names the offending field.
2. Requests from kohort's controller are allowed: releasing and evicting gangs is its job.
3. A new managed workload must arrive held (the mutating webhook fails open, so this is where
   the hold is enforced).
4. An update must not release the hold (unsuspend a Job, remove the admission gate), move a
   started workload to another queue, take a workload out of kohort (remove its queue label,
   add `kohort.dev/opt-out`) or bring an existing one in, nor change the gang fields kohort
   wrote into its pod templates (schedulerName, PodGroup names, group size).
5. No managed pod or pod template may name a node (`spec.nodeName` skips every scheduler), nor
   carry topology annotations (kohort's or Kueue's) that cannot be honoured: the controller
   would leave the workload unmanaged; nor name a ResourceClaim directly (a shared claim's
   devices are charged to nobody: docs/dra.md).
6. PodGroups (Volcano's, coscheduling's) are kohort's controller's to make and edit once they
   are kohort's: labelled managed-by kohort, or in kohort's own Volcano queue.
See docs/security.md for the threat model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from pydantic import ValidationError

from controller.api import kinds, names
from controller.api.common import Resource
from controller.api.quantity import QuantityError, parse_quantity
from controller.api.queues import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Topology
from controller.api.workload import Workload
from controller.workloads.base import (
    Denied,
    WorkloadAdapter,
    owned_by,
    queue_of,
    shown,
)
from controller.workloads.edits import lookup
from controller.workloads.pod import of_unmanaged_job, owned_by_job
from controller.workloads.pod_rules import TOPOLOGY_ANNOTATIONS, PodRulesError
from controller.workloads.registry import REGISTRY, Registry
from webhook import reviews
from webhook.settings import Settings

MODELS: Mapping[str, type[Resource]] = {
    model.KIND.kind: model
    for model in (ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Topology, Workload)
}


def validate(
    review: Any,
    settings: Settings,
    *,
    default_queue: str | None = None,
    registry: Registry = REGISTRY,
) -> dict[str, Any]:
    """The AdmissionReview response for `review`; BadReview when it cannot be answered.

    `default_queue` (the path for opted-in namespaces) makes an unlabelled new workload count
    as managed, so one that arrives unheld (mutation failed open) is refused. Updates are
    judged by their labels alone: workloads made before the namespace opted in stay free.
    `registry`: the workload kinds it manages.
    """
    request = reviews.parse(review)
    if request.operation not in ("CREATE", "UPDATE"):
        return reviews.allow(request.uid)
    if not isinstance(request.object, dict):
        return reviews.deny(request.uid, "request.object must be a JSON object", code=400)
    if request.group == names.GROUP:
        problem = model_problem(request.kind, request.object)
        return (
            reviews.deny(request.uid, problem, code=422) if problem else reviews.allow(request.uid)
        )
    if settings.controller.matches(request.user):
        return reviews.allow(request.uid)
    if (request.group, request.kind) in PODGROUP_KINDS:
        problem = podgroup_problem(request.operation, request.object, request.old_object, settings)
        if problem:
            return reviews.deny(request.uid, f"{request.subject}: {problem}")
        return reviews.allow(request.uid)
    adapter = registry.adapter_for(request.group, request.version, request.kind)
    if adapter is None:
        return reviews.allow(request.uid)
    try:
        user = request.user.username
        if request.operation == "CREATE":
            problem = ownership_problem(
                adapter, request.object, None, user, settings, registry=registry
            )
            problem = problem or creation_problem(
                adapter, request.object, default_queue, registry=registry
            )
            if problem is None and adapter.KIND == kinds.PODS and owned_by_job(request.object):
                problem = job_pod_problem(request.object, user, settings)
        elif isinstance(request.old_object, dict):
            old = request.old_object
            problem = ownership_problem(
                adapter, request.object, old, user, settings, registry=registry
            )
            problem = problem or update_problem(adapter, old, request.object)
        else:
            return reviews.deny(request.uid, "request.oldObject must be a JSON object", code=400)
    except Denied as denied:
        problem = str(denied)
    if problem:
        return reviews.deny(request.uid, f"{request.subject}: {problem}")
    return reviews.allow(request.uid)


PODGROUP_KINDS = {
    (k.group, k.kind) for k in (kinds.VOLCANO_PODGROUPS, kinds.COSCHEDULING_PODGROUPS)
}


def kohorts_podgroup(obj: Any, settings: Settings) -> bool:
    """Whether a PodGroup is kohort's: labelled so, or in kohort's own Volcano queue."""
    managed = lookup(obj, ["metadata", "labels", names.MANAGED_LABEL]) == names.MANAGED_VALUE
    queue = lookup(obj, ["spec", "queue"])
    return managed or (settings.volcano_queue is not None and queue == settings.volcano_queue)


def podgroup_problem(operation: str, new: Any, old: Any, settings: Settings) -> str | None:
    """Why someone other than kohort's controller may not make or change this PodGroup."""
    where = (
        f"in Volcano queue {settings.volcano_queue!r} or " if settings.volcano_queue else ""
    ) + f"labelled {names.MANAGED_LABEL}={names.MANAGED_VALUE}"
    if operation == "CREATE" and kohorts_podgroup(new, settings):
        return (
            f"PodGroups {where} are made only by kohort's controller, once their gang is admitted"
            f" by its queue; label the workload {names.QUEUE_LABEL} instead"
        )
    if operation != "UPDATE" or not isinstance(old, dict):
        return None
    if kohorts_podgroup(old, settings):
        if not same_podgroup_spec(old, new) or not kohorts_podgroup(new, settings):
            return (
                "this PodGroup is kohort's: it is sized and placed for the gang its queue"
                " admitted, and only kohort's controller may change it"
            )
    elif kohorts_podgroup(new, settings):
        return f"a PodGroup cannot be made kohort's by an update: PodGroups {where} are kohort's"
    return None


def same_podgroup_spec(old: Any, new: Any) -> bool:
    """Whether an update keeps a PodGroup's spec. Quantities are compared by value: Volcano
    writes the whole object back (its PodGroups have no status subresource), and Go spells a
    quantity its own way ("524288000" comes back as "524288k")."""
    before, after = lookup(old, ["spec"]), lookup(new, ["spec"])
    if not isinstance(before, dict) or not isinstance(after, dict):
        return bool(before == after)
    key = "minResources"
    if {k: v for k, v in before.items() if k != key} != {
        k: v for k, v in after.items() if k != key
    }:
        return False
    return bool(_amounts(before.get(key)) == _amounts(after.get(key)))


def _amounts(resources: Any) -> Any:
    if not isinstance(resources, dict):
        return resources
    try:
        return {r: parse_quantity(str(v)) for r, v in resources.items()}
    except QuantityError:
        return resources


def model_problem(kind: str, obj: dict[str, Any]) -> str | None:
    """Why a kohort.dev object is invalid, naming the field, or None when it is valid."""
    model = MODELS.get(kind)
    if model is None:
        return f"unknown kind {names.API_VERSION} {kind}"
    try:
        model.model_validate(obj)
    except ValidationError as err:
        return "; ".join(_describe(error) for error in err.errors())
    return None


def _describe(error: Mapping[str, Any]) -> str:
    path = ""
    for part in error.get("loc", ()):
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    message = str(error.get("msg", "invalid"))
    message = message.removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden":
        message = "unknown field"
    return f"{path}: {message}" if path else message


def creation_problem(
    adapter: WorkloadAdapter,
    obj: dict[str, Any],
    default_queue: str | None = None,
    *,
    registry: Registry = REGISTRY,
) -> str | None:
    """Why a new workload may not be created as it is (it is managed but not held)."""
    if queue_of(obj, default_queue) is None:
        return None
    if adapter.KIND != kinds.PODS and registry.part_of_managed_workload(obj):
        return None  # held through its owner, which is the gang
    if queue_of(obj) is None and adapter.KIND == kinds.PODS and of_unmanaged_job(obj):
        return None  # a pod of a Job made before its namespace opted in, or opted out
    return (
        node_name_problem(adapter, obj)
        or shared_claim_problem(adapter, obj)
        or adapter.unheld(obj)
        or pod_rules_problem(adapter, obj)
    )


def ownership_problem(
    adapter: WorkloadAdapter,
    new: dict[str, Any],
    old: dict[str, Any] | None,
    username: str,
    settings: Settings,
    *,
    registry: Registry = REGISTRY,
) -> str | None:
    """Why this user may not make or change an object that names a managed workload as its
    controller. Such an object is held through its owner's gang (a JobSet's Jobs, a
    LeaderWorkerSet's StatefulSets, the pods of a kind whose operator alone makes them:
    `registry.operator_pod_makers`), so only the owner's controller
    (`settings.workload_controllers`) makes it or changes its spec and ownerReferences."""
    if username in settings.workload_controllers:
        return None
    if adapter.KIND == kinds.PODS:
        owner = next((k for k in registry.operator_pod_makers if owned_by(new, k)), None)
        if old is not None or owner is None:
            return None
        return (
            f"only the {owner.kind} controller creates the pods of a {owner.kind} (once kohort"
            f" releases it); a pod of yours must not name a {owner.kind} as its controller"
        )
    if old is None:
        if not registry.part_of_managed_workload(new):
            return None
        return (
            "its controller (ownerReference with controller: true) is a workload kohort holds as"
            " a gang, and only that workload's controller makes the objects it controls; create"
            " it without that ownerReference"
        )
    if not (registry.part_of_managed_workload(old) or registry.part_of_managed_workload(new)):
        return None
    changed = [
        where
        for where, path in (
            ("spec", ["spec"]),
            ("ownerReferences", ["metadata", "ownerReferences"]),
        )
        if lookup(old, path) != lookup(new, path)
    ]
    if not changed:
        return None
    return (
        f"it is held through the gang of its controller (ownerReference), so only that"
        f" controller changes its {' or '.join(changed)}"
    )


def job_pod_problem(obj: dict[str, Any], username: str, settings: Settings) -> str | None:
    """Why a pod may not name a Job as its controller: only the Job controller creates a Job's
    pods (once kohort has released the Job); kohort ungates those of a Job whose release gated
    them, so one made by anybody else, gated or not, would run outside the queue."""
    if username in settings.job_controllers:
        return None
    return (
        "only the Job controller creates a Job's pods (once kohort releases the Job); a pod that"
        " names a Job as its controller must come from it"
    )


def node_name_problem(adapter: WorkloadAdapter, obj: dict[str, Any]) -> str | None:
    """Why a managed pod or pod template may not name its node."""
    for path in adapter.templates(obj):
        if lookup(obj, [*path, "spec", "nodeName"]):
            where = ".".join(str(p) for p in [*path, "spec", "nodeName"])
            return (
                f"{where} binds pods to a node without any scheduler, so kohort could neither"
                " hold nor place them; use a nodeSelector or node affinity instead"
            )
    return None


def shared_claim_problem(adapter: WorkloadAdapter, obj: dict[str, Any]) -> str | None:
    """Why a managed pod or pod template may not name a ResourceClaim directly: the devices of
    a claim shared with others are charged to no gang (a template's are, per pod)."""
    for path in adapter.templates(obj):
        claims = lookup(obj, [*path, "spec", "resourceClaims"])
        for i, claim in enumerate(claims if isinstance(claims, list) else []):
            name = claim.get("resourceClaimName") if isinstance(claim, dict) else None
            if name:
                where = ".".join(str(p) for p in [*path, "spec", "resourceClaims", i])
                return (
                    f"{where} names ResourceClaim {shown(name)} directly: the devices of a"
                    " claim shared between pods are charged to no queue; use"
                    " resourceClaimTemplateName with a ResourceClaimTemplate instead, so each"
                    " pod's devices are charged to its gang (docs/dra.md)"
                )
    return None


_TOPOLOGY_KEYS = frozenset(key for pair in TOPOLOGY_ANNOTATIONS for key in pair)


def pod_rules_problem(adapter: WorkloadAdapter, obj: dict[str, Any]) -> str | None:
    """Why the topology annotations of a managed workload's pod templates (kohort's or Kueue's)
    cannot be honoured: its gangs are read as the controller reads them, which would leave it
    unmanaged. Only an object whose templates carry one of them is read."""
    annotations = [
        lookup(obj, [*path, "metadata", "annotations"]) for path in adapter.templates(obj)
    ]
    if not any(isinstance(a, dict) and not _TOPOLOGY_KEYS.isdisjoint(a) for a in annotations):
        return None
    try:
        adapter.gangs(msgspec.convert(obj, adapter.model))
    except PodRulesError as err:
        return str(err)
    except (msgspec.ValidationError, ValueError):
        return None  # not this check's business: the object's shape is judged elsewhere
    return None


# Written by kohort's webhook into managed pod templates; users may not change them.
GANG_FIELDS: tuple[tuple[str, ...], ...] = (
    ("spec", "schedulerName"),
    ("metadata", "labels", names.POD_GROUP_LABEL),
    ("metadata", "labels", names.POD_GROUP_TOTAL_COUNT_LABEL),
    ("metadata", "labels", names.COSCHEDULING_GROUP_LABEL),
    ("metadata", "annotations", names.VOLCANO_GROUP_ANNOTATION),
    ("spec", "workloadRef"),
    ("spec", "schedulingGroup"),
)


def update_problem(
    adapter: WorkloadAdapter, old: dict[str, Any], new: dict[str, Any]
) -> str | None:
    """Why an update by someone other than the controller is not allowed."""
    old_queue, new_queue = queue_of(old), queue_of(new)
    if old_queue is None and new_queue is None:
        return None
    if old_queue is None:
        return (
            f"an existing workload cannot be put in a kohort queue: set {names.QUEUE_LABEL}"
            f" (without {names.OPT_OUT_LABEL}=true) when it is created"
        )
    if new_queue is None:
        return (
            f"a workload in a kohort queue cannot leave it (by removing {names.QUEUE_LABEL} or"
            f" adding {names.OPT_OUT_LABEL}=true); delete it and create it again outside kohort"
        )
    bypass = adapter.bypass(old, new) or gang_fields_problem(adapter, old, new)
    if bypass:
        return bypass
    rules = pod_rules_problem(adapter, new)
    if rules and pod_rules_problem(adapter, old) is None:
        return rules
    claims = shared_claim_problem(adapter, new)
    if claims and shared_claim_problem(adapter, old) is None:
        return claims
    if old_queue != new_queue and not adapter.queue_may_change(old):
        return (
            f"the {names.QUEUE_LABEL} label cannot change from {shown(old_queue)} to"
            f" {shown(new_queue)} once the workload may have started; delete and recreate it in"
            " the new queue"
        )
    return None


def gang_fields_problem(
    adapter: WorkloadAdapter, old: dict[str, Any], new: dict[str, Any]
) -> str | None:
    """Why an update changes what kohort wrote into the pod templates, or names a node."""
    for path in adapter.templates(old):
        for field in GANG_FIELDS:
            before, after = lookup(old, [*path, *field]), lookup(new, [*path, *field])
            if before is not None and after != before:
                where = ".".join(str(p) for p in [*path, *field])
                return (
                    f"{where} was set by kohort for the gang's admission and placement and cannot"
                    f" change (from {shown(before)} to {shown(after)}); delete and recreate the"
                    " workload"
                )
        if path and lookup(new, [*path, "spec", "nodeName"]):
            return node_name_problem(adapter, new)
    return None
