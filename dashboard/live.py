"""The dashboard's memory: the objects it watches, the GPU history and the recent evictions.

Rule: no I/O. The watch (dashboard/watch.py) feeds objects in through `changed`; the server
asks for the page through `render`, computed once per change however many pages follow it, and
each page's `Follower` turns renders into what that page is sent: the whole view first, then
only what changed since the render it was last sent (a patch). The history is bounded: `hours`
of samples every `interval` seconds, and the last `EVICTIONS_KEPT` evictions.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

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
        self._rendered: Rendered | None = None
        # Samples and evictions recorded so far (a page is sent those it has not had).
        self.sampled = 0
        self.evicted = 0
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
                self.evicted += 1
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
        self.sampled += 1
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

    def render(self) -> Rendered:
        """The view now, its parts encoded (computed once per version); each queue's part is
        encoded once per change of it."""
        if self._rendered is None or self._rendered.version != self.version:
            version = self.version
            view = self.view()
            for gone in self._queues.keys() - view.queues.keys():
                del self._queues[gone]
            self._rendered = Rendered(
                version=version,
                view=view,
                cohorts={name: _ENCODER.encode(c) for name, c in view.cohorts.items()},
                queues={name: self._queues[name] for name in view.queues},
                sampled=self.sampled,
                evicted=self.evicted,
            )
        return self._rendered

    def rendered(self) -> tuple[int, bytes]:
        """The whole view as JSON, with the version it is of."""
        rendered = self.render()
        return rendered.version, rendered.body


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True, slots=True)
class _QueuePart:
    inputs: tuple[object, ...]
    view: QueueView
    json: bytes
    version: int


@dataclass(frozen=True)
class Rendered:
    """One version of the page: the view, and its parts as JSON."""

    version: int
    view: View
    cohorts: dict[str, bytes]
    queues: dict[str, _QueuePart]
    # How many GPU samples and evictions had been recorded by then.
    sampled: int
    evicted: int

    @functools.cached_property
    def body(self) -> bytes:
        """The whole view as JSON (the page's first message, and GET /api/view), with the
        version of each queue's part in `queue_versions`."""
        view = self.view
        page: dict[str, object] = {
            name: getattr(view, name) for name in View.__dataclass_fields__ if name != "queues"
        }
        page["version"] = self.version
        page["cohorts"] = {name: msgspec.Raw(json) for name, json in self.cohorts.items()}
        page["queues"] = {name: msgspec.Raw(part.json) for name, part in self.queues.items()}
        page["queue_versions"] = {name: part.version for name, part in self.queues.items()}
        return _ENCODER.encode(page)


def patch(old: Rendered, new: Rendered) -> bytes:
    """What turns the page of `old` into the page of `new`, as JSON: the figures of the moment
    always; the tree's shape, cohorts and queues that changed (by name, with those removed);
    the GPU samples and evictions recorded since, with how many of each the page keeps."""
    was, now = old.view, new.view
    body: dict[str, object] = {"base": old.version, "version": new.version, "at": now.at}
    body["gpus"] = now.gpus
    if was.roots != now.roots:
        body["roots"] = now.roots
    if was.lone_queues != now.lone_queues:
        body["lone_queues"] = now.lone_queues
    body["cohorts"] = {
        name: msgspec.Raw(json)
        for name, json in new.cohorts.items()
        if old.cohorts.get(name) != json
    }
    body["cohorts_removed"] = sorted(old.cohorts.keys() - new.cohorts.keys())
    changed = {name: part for name, part in new.queues.items() if old.queues.get(name) is not part}
    body["queues"] = {name: msgspec.Raw(part.json) for name, part in changed.items()}
    body["queue_versions"] = {name: part.version for name, part in changed.items()}
    body["queues_removed"] = sorted(old.queues.keys() - new.queues.keys())
    added = min(new.sampled - old.sampled, len(now.gpu_history))
    body["gpu_history_added"] = now.gpu_history[len(now.gpu_history) - added :]
    body["gpu_history_kept"] = len(now.gpu_history)
    evicted = min(new.evicted - old.evicted, len(now.evictions))
    body["evictions_added"] = now.evictions[:evicted]
    body["evictions_kept"] = len(now.evictions)
    return _ENCODER.encode(body)


Message = tuple[Literal["snapshot", "patch"], bytes]


class Follower:
    """What one page has been sent: the whole view first, then patches from what it has."""

    def __init__(self) -> None:
        self.sent: Rendered | None = None

    @property
    def sent_version(self) -> int | None:
        return self.sent.version if self.sent is not None else None

    def next(self, rendered: Rendered) -> Message | None:
        """The message that brings the page to `rendered` (None: it is there already)."""
        sent, self.sent = self.sent, rendered
        if sent is None:
            return "snapshot", rendered.body
        if sent.version == rendered.version:
            return None
        return "patch", patch(sent, rendered)
