"""The dashboard's memory: the objects it watches, the GPU history and the recent evictions.

Rule: no I/O. The watch (dashboard/watch.py) feeds objects in through `changed`; the server
asks for the page's JSON through `rendered`, computed once per change however many pages
follow it. The history is bounded: `hours` of samples every `interval` seconds, and the last
`EVICTIONS_KEPT` evictions.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from controller.api.kinds import Kind
from controller.api.kube import Node
from controller.api.queues import ClusterQueue, Cohort, LocalQueue
from controller.api.workload import Workload
from dashboard.view import (
    GPU,
    Eviction,
    GangEntry,
    GpuSample,
    PendingGang,
    QueueView,
    View,
    build_view,
    entry_of,
    eviction_of,
    gpu_sample,
    queue_view,
)

EVICTIONS_KEPT = 200
Key = tuple[str, str]
_ENCODER = msgspec.json.Encoder()


@dataclass
class Stores:
    """The objects of each kind, by (namespace, name): the informers' own stores."""

    cluster_queues: Mapping[Key, ClusterQueue] = field(default_factory=dict)
    cohorts: Mapping[Key, Cohort] = field(default_factory=dict)
    local_queues: Mapping[Key, LocalQueue] = field(default_factory=dict)
    workloads: Mapping[Key, Workload] = field(default_factory=dict)
    nodes: Mapping[Key, Node] = field(default_factory=dict)


class Live:
    def __init__(
        self,
        stores: Stores,
        *,
        clock: Callable[[], float],
        hours: float = 6.0,
        interval: float = 15.0,
        gpu: str = GPU,
    ) -> None:
        self.stores = stores
        self.clock = clock
        self.interval = interval
        self.gpu = gpu
        self.history: deque[GpuSample] = deque(maxlen=max(1, int(hours * 3600 / interval)))
        self.evictions: deque[Eviction] = deque(maxlen=EVICTIONS_KEPT)
        # Bumped at every change; pages wait on `wake` for the next one.
        self.version = 0
        self.wake = asyncio.Event()
        self._rendered: tuple[int, bytes] | None = None
        # What each Workload object gave (a changed Workload is a new object): most of a large
        # cluster's gangs do not change between two renders.
        self._entries: dict[Key, tuple[Workload, GangEntry]] = {}
        # Each queue's part of the page, its inputs, its JSON and a version the page redraws
        # it by (a queue whose inputs did not change is neither recomputed nor redrawn).
        self._queues: dict[str, _QueuePart] = {}

    # -- fed by the watch --------------------------------------------------------------------

    def changed(self, kind: Kind, old: Any, new: Any) -> None:
        """An informer's listener: any change redraws; a Workload's may be an eviction."""
        if kind.kind == "Workload":
            eviction = eviction_of(old, new, self.clock())
            if eviction is not None:
                self.evictions.appendleft(eviction)
            if new is None and old is not None:
                self._entries.pop((old.metadata.namespace, old.metadata.name), None)
        self.touch()

    def touch(self) -> None:
        self.version += 1
        self.wake.set()
        self.wake = asyncio.Event()

    def sample(self) -> GpuSample:
        """Record the GPUs now into the history (the server calls it every `interval`)."""
        now = self.clock()
        sample = self._gpu_sample(now)
        self.history.append(sample)
        self.touch()
        return sample

    # -- read by the server ------------------------------------------------------------------

    def view(self) -> View:
        now = self.clock()
        s = self.stores
        return build_view(
            cluster_queues=s.cluster_queues.values(),
            cohorts=s.cohorts.values(),
            local_queues=s.local_queues.values(),
            workloads=s.workloads.values(),
            gpus=self._gpu_sample(now),
            gpu_history=self.history,
            evictions=self.evictions,
            now=now,
            entry=self._entry,
            queue_of=self._queue,
        )

    def _gpu_sample(self, now: float) -> GpuSample:
        s = self.stores
        return gpu_sample(s.workloads.values(), s.nodes.values(), now, self.gpu, self._entry)

    def _entry(self, workload: Workload) -> GangEntry:
        key = (workload.metadata.namespace, workload.metadata.name)
        held = self._entries.get(key)
        if held is None or held[0] is not workload:
            held = self._entries[key] = (workload, entry_of(workload, self.gpu))
        return held[1]

    def _queue(
        self,
        queue: ClusterQueue,
        local_queues: Sequence[str],
        pending: Sequence[PendingGang],
        admitted: int,
    ) -> QueueView:
        # The same objects (kept here, so that their ids are not reused meanwhile).
        inputs = (queue, *local_queues, admitted, *pending)
        held = self._queues.get(queue.metadata.name)
        if held is not None and _same(held.inputs, inputs):
            return held.view
        view = queue_view(queue, local_queues, pending, admitted)
        version = held.version + 1 if held is not None else 0
        self._queues[view.name] = _QueuePart(inputs, view, _ENCODER.encode(view), version)
        return view

    def rendered(self) -> tuple[int, bytes]:
        """The view as JSON, with the version it is of (computed once per version); each queue's
        part is encoded once per change of it, and `queue_versions` tells the page which parts
        changed."""
        if self._rendered is None or self._rendered[0] != self.version:
            version = self.version
            view = self.view()
            for gone in self._queues.keys() - view.queues.keys():
                del self._queues[gone]
            parts = {name: self._queues[name] for name in view.queues}
            page = {
                field: getattr(view, field)
                for field in View.__dataclass_fields__
                if field != "queues"
            }
            page["queues"] = {name: msgspec.Raw(part.json) for name, part in parts.items()}
            page["queue_versions"] = {name: part.version for name, part in parts.items()}
            self._rendered = (version, _ENCODER.encode(page))
        return self._rendered


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True, slots=True)
class _QueuePart:
    inputs: tuple[object, ...]
    view: QueueView
    json: bytes
    version: int
