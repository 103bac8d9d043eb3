"""Writes: Workloads and their status, PodGroups, Events, and releasing or evicting gangs.

Rule: every write puts the object the API server returns into the matching informer store, so
the next reconcile pass sees it even before the watch delivers it. Writers decide nothing;
they are told what to write.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.api import names
from controller.api.quantity import format_quantity
from controller.cluster import clients
from controller.cluster.clients import ApiError, Client, JSONDict, Kind
from controller.cluster.informers import Informer
from controller.cluster.view import GangView, format_time, is_true
from controller.workloads.base import Backend, has_gate, remove_gate
from controller.workloads.edits import Editor, lookup

log = logging.getLogger("kohort.writers")

COMPONENT = "kohort-controller"


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: float,
) -> list[JSONDict]:
    """The conditions with `kind` set; lastTransitionTime moves only when the status changes."""
    out: list[JSONDict] = []
    found = False
    for cond in conditions:
        if cond.get("type") != kind:
            out.append(dict(cond))
            continue
        found = True
        changed = cond.get("status") != status
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message[:32000],
                "lastTransitionTime": format_time(now)
                if changed
                else cond.get("lastTransitionTime", format_time(now)),
            }
        )
    if not found:
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message[:32000],
                "lastTransitionTime": format_time(now),
            }
        )
    return out


def _quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: format_quantity(a) for r, a in sorted(amounts.items()) if a > 0}


def workload_object(gang: GangView, priority: int) -> JSONDict:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": gang.name,
            "namespace": gang.namespace,
            "labels": {
                names.MANAGED_LABEL: names.MANAGED_VALUE,
                names.QUEUE_LABEL: gang.queue,
            },
            "ownerReferences": [gang.owner.reference()],
        },
        "spec": {
            "queueName": gang.queue,
            "priority": priority,
            "podSets": [
                {
                    "name": ps.name,
                    "count": ps.count,
                    "requests": _quantities(ps.requests),
                    "nodeSelector": dict(ps.node_selector),
                    "tolerations": [_toleration(t) for t in ps.tolerations],
                }
                for ps in gang.pod_sets
            ],
        },
    }


def _toleration(t: Mapping[str, Any]) -> JSONDict:
    out: JSONDict = {}
    for key in ("key", "operator", "value", "effect", "tolerationSeconds"):
        if t.get(key) not in (None, ""):
            out[key] = t[key]
    return out


@dataclass(frozen=True)
class PodGroupSettings:
    backend: Backend = Backend.VOLCANO
    volcano_queue: str = "default"

    @property
    def kind(self) -> Kind | None:
        if self.backend is Backend.VOLCANO:
            return clients.VOLCANO_PODGROUPS
        if self.backend is Backend.COSCHEDULING:
            return clients.COSCHEDULING_PODGROUPS
        return None


def podgroup_object(gang: GangView, settings: PodGroupSettings) -> JSONDict | None:
    kind = settings.kind
    if kind is None or gang.workload is None:
        return None
    workload = gang.workload["metadata"]
    spec: JSONDict = {
        "minMember": gang.min_member,
        "minResources": _quantities(_min_resources(gang)),
    }
    if settings.backend is Backend.VOLCANO:
        spec["queue"] = settings.volcano_queue
        priority_class = next(
            (ps.priority_class for ps in gang.pod_sets if ps.priority_class), None
        )
        if priority_class:
            spec["priorityClassName"] = priority_class
    return {
        "apiVersion": kind.api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": gang.name,
            "namespace": gang.namespace,
            "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE},
            "ownerReferences": [
                {
                    "apiVersion": names.API_VERSION,
                    "kind": "Workload",
                    "name": workload["name"],
                    "uid": workload.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": spec,
    }


def _min_resources(gang: GangView) -> dict[str, int]:
    """Requests of the first min_member pods (leader sets first), what the gang needs to start."""
    left = gang.min_member
    total: dict[str, int] = {}
    for ps in gang.pod_sets:
        n = min(left, ps.count)
        left -= n
        for r, amount in ps.requests.items():
            total[r] = total.get(r, 0) + amount * n
    return total


class Writers:
    """The controller's writes, each reflected into the informers it touches."""

    def __init__(
        self,
        api: Client,
        stores: Mapping[Kind, Informer],
        podgroups: PodGroupSettings,
        *,
        identity: str = COMPONENT,
    ) -> None:
        self.api = api
        self.stores = stores
        self.podgroups = podgroups
        self.identity = identity

    def _put(self, kind: Kind, obj: JSONDict) -> JSONDict:
        store = self.stores.get(kind)
        if store is not None and obj.get("metadata"):
            store.put(obj)
        return obj

    def _forget(self, kind: Kind, namespace: str, name: str) -> None:
        store = self.stores.get(kind)
        if store is not None:
            store.forget(namespace, name)

    # -- Workloads ----------------------------------------------------------------------------

    async def create_workload(self, gang: GangView, priority: int) -> JSONDict:
        body = workload_object(gang, priority)
        try:
            created = await self.api.create(clients.WORKLOADS, body, gang.namespace)
        except ApiError as err:
            if err.status != 409:
                raise
            created = await self.api.get(clients.WORKLOADS, gang.name, gang.namespace)
        return self._put(clients.WORKLOADS, created)

    async def patch_workload_status(self, gang: GangView, status: JSONDict) -> JSONDict:
        assert gang.workload is not None
        patched = await self.api.patch(
            clients.WORKLOADS,
            gang.name,
            {"status": status},
            gang.namespace,
            subresource="status",
        )
        gang.workload = self._put(clients.WORKLOADS, patched)
        return patched

    async def annotate_workload(self, gang: GangView, annotations: Mapping[str, str]) -> None:
        assert gang.workload is not None
        patched = await self.api.patch(
            clients.WORKLOADS,
            gang.name,
            {"metadata": {"annotations": dict(annotations)}},
            gang.namespace,
        )
        gang.workload = self._put(clients.WORKLOADS, patched)

    async def delete_workload(self, namespace: str, name: str) -> None:
        await self.api.delete(clients.WORKLOADS, name, namespace)
        self._forget(clients.WORKLOADS, namespace, name)

    # -- PodGroups ----------------------------------------------------------------------------

    async def ensure_podgroup(self, gang: GangView) -> None:
        body = podgroup_object(gang, self.podgroups)
        kind = self.podgroups.kind
        if body is None or kind is None:
            return
        try:
            created = await self.api.create(kind, body, gang.namespace)
        except ApiError as err:
            if err.status != 409:
                raise
            return
        self._put(kind, created)

    async def delete_podgroup(self, namespace: str, name: str) -> None:
        kind = self.podgroups.kind
        if kind is None:
            return
        await self.api.delete(kind, name, namespace)
        self._forget(kind, namespace, name)

    async def ensure_volcano_queue(self) -> None:
        """The Volcano queue kohort's PodGroups go to: open, reclaimable off, no capability."""
        if self.podgroups.backend is not Backend.VOLCANO:
            return
        name = self.podgroups.volcano_queue
        try:
            await self.api.get(clients.VOLCANO_QUEUES, name)
            return
        except ApiError as err:
            if err.status != 404:
                raise
        body = {
            "apiVersion": clients.VOLCANO_QUEUES.api_version,
            "kind": "Queue",
            "metadata": {"name": name, "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE}},
            "spec": {"weight": 1, "reclaimable": False},
        }
        try:
            await self.api.create(clients.VOLCANO_QUEUES, body)
        except ApiError as err:
            if err.status != 409:
                raise

    # -- releasing and evicting -----------------------------------------------------------------

    async def release(self, gang: GangView) -> int:
        """Unsuspend the Job / remove the admission gate from every gated pod; returns writes."""
        if gang.owner.kind == clients.JOBS:
            return await self._suspend_job(gang, False)
        writes = 0
        for pod in gang.gated_pods():
            if await self._ungate(pod):
                writes += 1
        return writes

    async def _suspend_job(self, gang: GangView, suspended: bool) -> int:
        """Set the owning Job's spec.suspend; returns the writes made (0 when already so)."""
        owner = gang.owner
        if (lookup(owner.obj, ["spec", "suspend"]) is True) == suspended:
            return 0
        patched = await self.api.patch(
            clients.JOBS, owner.name, {"spec": {"suspend": suspended}}, owner.namespace
        )
        self._put(clients.JOBS, patched)
        return 1

    async def _ungate(self, pod: JSONDict) -> bool:
        editor = Editor(pod)  # copy on write: the cached pod stays as it is
        remove_gate(editor)
        if not editor.operations:
            return False
        meta = pod["metadata"]
        version = meta.get("resourceVersion")
        ops: list[JSONDict] = []
        if version:
            ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": version})
        ops.extend(editor.operations)
        try:
            patched = await self.api.patch(
                clients.PODS,
                meta["name"],
                ops,
                meta.get("namespace"),
                content_type=clients.JSON_PATCH,
            )
        except ApiError as err:
            if err.status in (404, 409, 422):
                return False  # gone, or changed under us: the next pass looks again
            raise
        self._put(clients.PODS, patched)
        return True

    async def hold(self, gang: GangView) -> int:
        """Take back a release: suspend the Job / delete the gang's pods that run ungated."""
        if gang.owner.kind == clients.JOBS:
            return await self._suspend_job(gang, True)
        writes = 0
        for pod in gang.live_pods():
            if has_gate(pod):
                continue
            meta = pod["metadata"]
            if await self.api.delete(clients.PODS, meta["name"], meta.get("namespace")):
                writes += 1
        return writes

    # -- events -------------------------------------------------------------------------------

    async def event(
        self, gang: GangView, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """An Event on the user's object (what `kubectl describe` shows) and on the Workload."""
        targets: list[tuple[str, str, str, str]] = [
            (gang.owner.kind.api_version, gang.owner.kind.kind, gang.owner.name, gang.owner.uid)
        ]
        if gang.workload is not None:
            meta = gang.workload["metadata"]
            targets.append((names.API_VERSION, "Workload", meta["name"], meta.get("uid", "")))
        stamp = format_time(time.time())
        for api_version, kind, name, uid in targets:
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{name}.{uuid.uuid4().hex[:12]}",
                    "namespace": gang.namespace,
                },
                "involvedObject": {
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": name,
                    "namespace": gang.namespace,
                    "uid": uid,
                },
                "reason": reason,
                "message": message[:1024],
                "type": "Warning" if warning else "Normal",
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT,
                "reportingInstance": self.identity,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
            try:
                await self.api.create(clients.EVENTS, body, gang.namespace)
            except ApiError as err:  # events are best effort
                log.debug("event on %s/%s not recorded: %s", gang.namespace, name, err)

    # -- ClusterQueue status ----------------------------------------------------------------------

    async def patch_cluster_queue_status(self, name: str, status: JSONDict) -> None:
        patched = await self.api.patch(
            clients.CLUSTER_QUEUES, name, {"status": status}, subresource="status"
        )
        self._put(clients.CLUSTER_QUEUES, patched)


def podgroup_running(pg: Mapping[str, Any] | None) -> bool:
    return bool(lookup(pg, ["status", "phase"]) == "Running")


def finished_reason(gang: GangView) -> str | None:
    if gang.finished:
        return gang.finished
    if gang.workload is not None and is_true(gang.workload, "Finished"):
        return "Succeeded"
    return None
