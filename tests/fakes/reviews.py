"""AdmissionReview builders for tests and benchmarks."""

from __future__ import annotations

import uuid
from typing import Any

from controller.api import kinds
from webhook.reviews import API_VERSION, KIND

_GROUP_VERSIONS = {
    k.kind: (k.group, k.version, k.plural)
    for k in (
        kinds.JOBS,
        kinds.STATEFULSETS,
        kinds.LEADERWORKERSETS,
        kinds.JOBSETS,
        kinds.PYTORCHJOBS,
        kinds.RAYCLUSTERS,
        kinds.RAYJOBS,
        kinds.PODS,
        kinds.CLUSTER_QUEUES,
        kinds.COHORTS,
        kinds.LOCAL_QUEUES,
        kinds.RESOURCE_FLAVORS,
        kinds.WORKLOADS,
        kinds.VOLCANO_PODGROUPS,
    )
}


def make_review(
    obj: Any,
    *,
    operation: str = "CREATE",
    old: Any = None,
    user: str = "alice",
    groups: tuple[str, ...] = ("system:authenticated",),
    kind: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """An admission.k8s.io/v1 AdmissionReview, as the API server sends it, for `obj`."""
    kind = kind or (obj.get("kind") if isinstance(obj, dict) else None) or "Job"
    group, version, resource = _GROUP_VERSIONS.get(kind, ("example.com", "v1", "things"))
    meta = obj.get("metadata", {}) if isinstance(obj, dict) else {}
    meta = meta if isinstance(meta, dict) else {}
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
        "operation": operation,
        "userInfo": {"username": user, "groups": list(groups)},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }
    return {"apiVersion": API_VERSION, "kind": KIND, "request": request}
