"""Informers of our own: list, then watch with bookmarks; relist on 410 Gone; jittered backoff.

Rule: a store holds typed objects and only moves forward. Writers put the objects the API
server returns into the store at once (`Informer.put`), and a watch event older than what the
store holds is ignored, so the controller never decides on a state older than its own last
write. Every change, from the watch or from a write, reaches the listener as (old, new).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import msgspec
import pydantic

from controller.api.kinds import Kind
from controller.cluster.clients import ApiError, Client, Decode, WatchEvent, watch_event

log = logging.getLogger("kohort.informers")

Key = tuple[str, str]  # (namespace or "", name)


class _Meta(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def resource_version(self) -> str | None: ...


class Object(Protocol):
    """What every cached object has: a view (controller.api.kube) or one of our API models."""

    @property
    def metadata(self) -> _Meta: ...


T = TypeVar("T", bound=Object)
# (kind, old, new): new is None when the object was deleted, old None when it is new.
Listener = Callable[[Kind, T | None, T | None], None]


def key_of(obj: Object) -> Key:
    return (obj.metadata.namespace or "", obj.metadata.name)


def _version(obj: Object) -> int | None:
    try:
        return int(obj.metadata.resource_version or "")
    except ValueError:
        return None


def _newer_than(obj: Object | None, version: str) -> bool:
    """Whether `obj` is a later state than resourceVersion `version` (our own recent write)."""
    held = _version(obj) if obj is not None else None
    try:
        return held is not None and held > int(version)
    except ValueError:
        return False


def watch_event_of_item(data: bytes) -> WatchEvent:
    """A listed object, kept as its key, version and bytes until it needs decoding."""
    return watch_event("ADDED", data)


def _newer(new: Object, old: Object) -> bool:
    """Whether `new` is a later state than `old` (resourceVersions compare as integers on
    etcd; without versions, always)."""
    a, b = _version(new), _version(old)
    return a is None or b is None or a > b


@dataclass
class Backoff:
    """Exponential backoff with full jitter: base * 2^n seconds, capped, randomised."""

    base: float = 0.5
    cap: float = 30.0
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next_delay(self) -> float:
        self.failures += 1
        ceiling = min(self.cap, self.base * 2.0 ** (self.failures - 1))
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.failures = 0


class Informer(Generic[T]):
    """The current objects of one kind, kept up to date from the API server."""

    def __init__(
        self,
        api: Client,
        kind: Kind,
        decode: Decode[T],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        listener: Listener[T] | None = None,
        optional: bool = False,
        watch_timeout: int = 300,
    ) -> None:
        self.api = api
        self.kind = kind
        self.decode = self._tolerant(decode)
        self.namespace = namespace
        self.label_selector = label_selector
        self.listener = listener
        # An optional kind may not be served (e.g. LeaderWorkerSet without its CRD): then the
        # informer counts as synced and empty, and looks again every 10 seconds.
        self.optional = optional
        self.watch_timeout = watch_timeout
        self.store: dict[Key, T] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.relists = 0
        # Watches that found their resourceVersion compacted away (410 Gone).
        self.expired = 0
        # Objects the server holds that do not decode (a broken custom resource): skipped.
        self.undecodable = 0
        self.backoff = Backoff()
        self._task: asyncio.Task[None] | None = None

    def _tolerant(self, decode: Decode[T]) -> Decode[T | None]:
        def tolerant(data: bytes) -> T | None:
            try:
                return decode(data)
            except (msgspec.ValidationError, pydantic.ValidationError, ValueError) as err:
                self.undecodable += 1
                log.warning(
                    "%s: skipping an object that does not decode: %s", self.kind.plural, err
                )
                return None

        return tolerant

    # -- reading ----------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> T | None:
        return self.store.get((namespace, name))

    # -- writing through ----------------------------------------------------------------------

    def put(self, obj: T) -> None:
        """Take an object the API server returned for our own write."""
        self._apply(obj)

    def forget(self, namespace: str, name: str) -> None:
        old = self.store.pop((namespace, name), None)
        if old is not None:
            self._notify(old, None)

    def _apply(self, obj: T) -> bool:
        key = key_of(obj)
        old = self.store.get(key)
        if old is not None and not _newer(obj, old):
            return False
        self.store[key] = obj
        self._notify(old, obj)
        return True

    def _notify(self, old: T | None, new: T | None) -> None:
        if self.listener is not None:
            self.listener(self.kind, old, new)

    # -- running ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"informer-{self.kind.plural}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)  # the caller's cancel passes
            self._task = None

    async def run(self) -> None:
        """List, then watch from the list's version on; a watch that ends or breaks resumes
        from the last version seen (as client-go's reflector does); only 410 Gone, a version
        compacted away, makes it list again."""
        listed = False
        while True:
            try:
                if not listed:
                    await self._list()
                    listed = True
                    self.backoff.reset()
                await self._watch()
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                if err.status == 410:
                    self.expired += 1
                    log.info(
                        "%s: resourceVersion %s expired, relisting",
                        self.kind.plural,
                        self.resource_version,
                    )
                    listed = False
                    continue
                if err.status == 404 and self.optional:
                    for key in list(self.store):
                        self.forget(*key)
                    self.synced.set()
                    listed = False
                    await asyncio.sleep(10)
                    continue
                delay = self.backoff.next_delay()
                log.warning("%s informer: %s; retrying in %.1fs", self.kind.plural, err, delay)
                await asyncio.sleep(delay)
            except Exception as err:  # connection resets, timeouts, bad JSON
                delay = self.backoff.next_delay()
                log.warning(
                    "%s informer: %s: %s; retrying in %.1fs",
                    self.kind.plural,
                    type(err).__name__,
                    err,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _list(self) -> None:
        listed, version = await self.api.read_all(
            watch_event_of_item, self.kind, self.namespace, label_selector=self.label_selector
        )
        keys = {(item.namespace, item.name) for item in listed}
        for key, held in list(self.store.items()):
            if key not in keys and not _newer_than(held, version):
                self.forget(*key)  # gone (objects we made after the list stay)
        for item in listed:
            if not self._holds((item.namespace, item.name), item.version):
                obj = self.decode(item.data)
                if obj is not None:  # one that does not decode keeps its last good version
                    self._apply(obj)
        self.resource_version = version
        self.relists += 1
        self.synced.set()

    async def _watch(self) -> None:
        timeout = int(self.watch_timeout * random.uniform(0.8, 1.0))
        async for event in self.api.follow(
            self.kind,
            self.resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            timeout_seconds=timeout,
        ):
            key = (event.namespace, event.name)
            if event.type == "DELETED":
                if not _newer_than(self.store.get(key), event.version):
                    self.forget(*key)
            elif event.type != "BOOKMARK" and not self._holds(key, event.version):
                obj = self.decode(event.data)
                if obj is not None:
                    self._apply(obj)
            # Only once the event is taken: a watch that breaks on it resumes before it.
            if event.version:
                self.resource_version = event.version
            self.backoff.reset()

    def _holds(self, key: Key, version: str) -> bool:
        """Whether the store already holds this version of the object, or a later one (the
        echo of our own write, usually): then the event need not even be decoded."""
        old = self.store.get(key)
        if old is None:
            return False
        held = _version(old)
        try:
            return held is not None and held >= int(version)
        except ValueError:
            return False
