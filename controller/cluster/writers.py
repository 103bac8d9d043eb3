"""Carry out planned steps against the API server; every result goes back into its store.

Rule: writers decide nothing: each step says what to write. The object the API server returns
is put into the matching informer's store at once, so the state sees the write before the
watch delivers it. Events are best effort.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from controller.api import kinds, kube, names
from controller.api.times import format_time
from controller.api.workload import Workload
from controller.cluster.clients import JSON_PATCH, MERGE_PATCH, ApiError, Client
from controller.cluster.informers import Informer
from controller.state.objects import COMPONENT, as_patch
from controller.state.steps import (
    CreateObject,
    CreatePodGroup,
    CreateWorkload,
    DeletePodGroup,
    DeleteWorkload,
    RecordEvent,
    Step,
    WriteCohortStatus,
    WriteLocalQueueStatus,
    WriteQueueStatus,
    WriteWorkloadPosition,
    WriteWorkloadStatus,
)
from controller.workloads.base import Delete, Patch, PatchType

log = logging.getLogger("kohort.writers")

# Workloads whose last own status write is remembered (see Writers._precondition).
OWN_WRITES_KEPT = 20_000

_CONTENT_TYPES = {PatchType.MERGE: MERGE_PATCH, PatchType.JSON: JSON_PATCH}


def superseded(step: Step, err: ApiError) -> bool:
    """Whether a write was refused only because someone else changed the object since its
    step was computed (a standalone Workload's creator): no error, the next pass looks again."""
    return err.status == 409 and isinstance(step, WriteWorkloadStatus) and bool(step.based_on)


class Writers:
    """The controller's writes, each reflected into the store of its kind."""

    def __init__(
        self, api: Client, stores: Mapping[kinds.Kind, Informer[Any]], *, identity: str = COMPONENT
    ) -> None:
        self.api = api
        self.stores = stores
        self.identity = identity
        # Per Workload whose status someone else writes too: (the version our last status
        # write was computed from, the version it made).
        self._own_writes: dict[tuple[str, str], tuple[str, str]] = {}

    async def _write(self, kind: kinds.Kind, send: Any) -> None:
        """Await a write and put the object it returns into `kind`'s store."""
        self._put(kind, await send)

    def _put(self, kind: kinds.Kind, data: bytes) -> Any:
        store = self.stores.get(kind)
        obj = store.decode(data) if store is not None else None
        if store is not None and obj is not None:
            store.put(obj)
        return obj

    async def _read_again(self, namespace: str, name: str) -> None:
        """Take in what overtook a write at once (the pass that wrote it asks whether the gang
        finished meanwhile), not when the watch brings it."""
        try:
            self._put(
                kinds.WORKLOADS, await self.api.fetch("GET", kinds.WORKLOADS.path(namespace, name))
            )
        except ApiError as err:
            if err.status == 404:
                self._forget(kinds.WORKLOADS, namespace, name)
            # (anything else: the watch brings it)

    def _precondition(self, namespace: str, name: str, based_on: str) -> str:
        """The version a status computed from `based_on` may be written over: `based_on`, or
        the version our own writes made of it since (the steps of one gang are computed
        together, and each write makes a new version), never one someone else changed."""
        store = self.stores.get(kinds.WORKLOADS)
        held = store.get(namespace, name) if store is not None else None
        current = held.metadata.resource_version if isinstance(held, Workload) else None
        if current and self._own_writes.get((namespace, name)) == (based_on, current):
            return current
        return based_on

    def _forget(self, kind: kinds.Kind, namespace: str, name: str) -> None:
        store = self.stores.get(kind)
        if store is not None:
            store.forget(namespace, name)

    async def perform(self, step: Step) -> None:
        """Write one step; ApiError when the API server refuses it."""
        api = self.api
        match step:
            case CreateWorkload(workload=workload):
                namespace = workload.metadata.namespace
                try:
                    await self._write(
                        kinds.WORKLOADS, api.make(_raw, kinds.WORKLOADS, workload, namespace)
                    )
                except ApiError as err:
                    if err.status != 409:
                        raise
            case WriteWorkloadStatus(namespace=namespace, name=name, status=status):
                patch: dict[str, Any] = {"status": as_patch(status)}
                based_on = step.based_on
                if based_on:
                    version = self._precondition(namespace, name, based_on)
                    patch["metadata"] = {"resourceVersion": version}
                try:
                    data = await api.change(
                        _raw, kinds.WORKLOADS, name, patch, namespace, subresource="status"
                    )
                except ApiError as err:
                    if superseded(step, err):
                        await self._read_again(namespace, name)
                    raise
                written = self._put(kinds.WORKLOADS, data)
                if based_on and isinstance(written, Workload):
                    if len(self._own_writes) >= OWN_WRITES_KEPT:
                        self._own_writes.clear()  # at worst, a later write is refused once
                    self._own_writes[(namespace, name)] = (
                        based_on,
                        written.metadata.resource_version or "",
                    )
            case DeleteWorkload(namespace=namespace, name=name):
                await api.delete(kinds.WORKLOADS, name, namespace)
                self._forget(kinds.WORKLOADS, namespace, name)
            case CreatePodGroup(kind=kind, podgroup=podgroup):
                try:
                    await self._write(
                        kind, api.make(_raw, kind, podgroup, podgroup.metadata.namespace)
                    )
                except ApiError as err:
                    if err.status != 409:
                        raise
            case CreateObject(kind=kind, namespace=namespace, body=body):
                try:
                    await api.make(_raw, kind, body, namespace)
                except ApiError as err:
                    if err.status != 409:
                        raise
            case DeletePodGroup(kind=kind, namespace=namespace, name=name):
                await api.delete(kind, name, namespace)
                self._forget(kind, namespace, name)
            case WriteWorkloadPosition(namespace=namespace, name=name, position=position):
                body = position.model_dump(mode="json", by_alias=True) if position else None
                await self._write(
                    kinds.WORKLOADS,
                    api.change(
                        _raw,
                        kinds.WORKLOADS,
                        name,
                        {"status": {"position": body}},
                        namespace,
                        subresource="status",
                    ),
                )
            case WriteQueueStatus(name=name, status=status):
                patch = {"status": as_patch(status)}
                await self._write(
                    kinds.CLUSTER_QUEUES,
                    api.change(_raw, kinds.CLUSTER_QUEUES, name, patch, subresource="status"),
                )
            case WriteLocalQueueStatus(namespace=namespace, name=name, status=status):
                patch = {"status": as_patch(status)}
                await self._write(
                    kinds.LOCAL_QUEUES,
                    api.change(
                        _raw, kinds.LOCAL_QUEUES, name, patch, namespace, subresource="status"
                    ),
                )
            case WriteCohortStatus(name=name, status=status):
                patch = {"status": as_patch(status)}
                await self._write(
                    kinds.COHORTS,
                    api.change(_raw, kinds.COHORTS, name, patch, subresource="status"),
                )
            case Patch(kind=kind, namespace=namespace, name=name, body=body, type=patch_type):
                send = api.change(
                    _raw,
                    kind,
                    name,
                    body,
                    namespace,
                    content_type=_CONTENT_TYPES[patch_type],
                    subresource=step.subresource or None,
                )
                try:
                    await self._write(kind, send)
                except ApiError as err:
                    if not step.expected or err.status not in (404, 409, 422):
                        raise  # otherwise gone or changed under us: the next pass looks again
            case Delete(kind=kind, namespace=namespace, name=name):
                await api.delete(kind, name, namespace)
            case RecordEvent():
                await self._event(step)

    async def _event(self, step: RecordEvent) -> None:
        stamp = format_time(time.time())
        about = step.about
        event = kube.Event(
            api_version=kinds.EVENTS.api_version,
            kind=kinds.EVENTS.kind,
            metadata=kube.ObjectMeta(
                name=f"{about.name}.{uuid.uuid4().hex[:12]}", namespace=step.namespace
            ),
            involved_object=about,
            reason=step.reason,
            message=step.message[:1024],
            type="Warning" if step.warning else "Normal",
            source=kube.EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=self.identity,
            first_timestamp=stamp,
            last_timestamp=stamp,
        )
        try:
            await self.api.make(_raw, kinds.EVENTS, event, step.namespace)
        except ApiError as err:  # events are best effort
            log.debug("event on %s/%s not recorded: %s", step.namespace, about.name, err)

    async def ensure_volcano_queue(self, name: str) -> None:
        """The Volcano queue kohort's PodGroups go to: open, reclaimable off, no capability."""
        try:
            await self.api.get(kinds.VOLCANO_QUEUES, name)
            return
        except ApiError as err:
            if err.status != 404:
                raise
        body = {
            "apiVersion": kinds.VOLCANO_QUEUES.api_version,
            "kind": kinds.VOLCANO_QUEUES.kind,
            "metadata": {"name": name, "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE}},
            "spec": {"weight": 1, "reclaimable": False},
        }
        try:
            await self.api.create(kinds.VOLCANO_QUEUES, body)
        except ApiError as err:
            if err.status != 409:
                raise


def _raw(data: bytes) -> bytes:
    return data
