"""Informers of our own: list, then watch with bookmarks; relist on 410 Gone; jittered backoff.

Rule: a store only moves forward. Writers put the objects the API server returns into the store
at once (`Informer.put`), and a watch event older than what the store holds is ignored, so the
reconciler never decides on a state older than its own last write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from controller.cluster.clients import ApiError, Client, JSONDict, Kind

log = logging.getLogger("kohort.informers")

Key = tuple[str, str]  # (namespace or "", name)
Listener = Callable[[Kind, str, JSONDict], None]


def key_of(obj: JSONDict) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _version(obj: JSONDict) -> int | None:
    text = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(text) if text is not None else None
    except (TypeError, ValueError):
        return None


def newer_or_same(new: JSONDict, old: JSONDict) -> bool:
    """Whether `new` is not older than `old` (resourceVersions compare as integers on etcd)."""
    a, b = _version(new), _version(old)
    if a is None or b is None:
        return True
    return a >= b


def _trim(obj: JSONDict) -> JSONDict:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


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


class Informer:
    """The current objects of one kind, kept up to date from the API server."""

    def __init__(
        self,
        api: Client,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        listener: Listener | None = None,
        optional: bool = False,
        watch_timeout: int = 300,
    ) -> None:
        self.api = api
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.listener = listener
        # An optional kind may not be served (e.g. LeaderWorkerSet without its CRD): then the
        # informer counts as synced and empty, and looks again every 10 seconds.
        self.optional = optional
        self.watch_timeout = watch_timeout
        self.store: dict[Key, JSONDict] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.relists = 0
        self.backoff = Backoff()
        self._task: asyncio.Task[None] | None = None

    # -- reading ----------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> JSONDict | None:
        return self.store.get((namespace, name))

    def items(self) -> Iterator[JSONDict]:
        return iter(list(self.store.values()))

    # -- writing through ----------------------------------------------------------------------

    def put(self, obj: JSONDict) -> None:
        """Take an object the API server returned for our own write."""
        key = key_of(obj)
        old = self.store.get(key)
        if old is None or newer_or_same(obj, old):
            self.store[key] = _trim(obj)

    def forget(self, namespace: str, name: str) -> None:
        self.store.pop((namespace, name), None)

    # -- running ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"informer-{self.kind.plural}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        while True:
            try:
                await self._list()
                self.backoff.reset()
                while True:
                    await self._watch()
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                if err.status == 410:
                    log.info("%s: resourceVersion expired, relisting", self.kind.plural)
                    continue
                if err.status == 404 and self.optional:
                    self.store.clear()
                    self.synced.set()
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
        items, version = await self.api.list(
            self.kind, self.namespace, label_selector=self.label_selector
        )
        fresh = {key_of(obj): _trim(obj) for obj in items}
        old = self.store
        # Keep our own writes that are newer than the list (they raced with it).
        for key, obj in old.items():
            if key in fresh and not newer_or_same(fresh[key], obj):
                fresh[key] = obj
        self.store = fresh
        self.resource_version = version
        self.relists += 1
        self.synced.set()
        if self.listener is not None:
            for key in old.keys() - fresh.keys():
                self.listener(self.kind, "DELETED", old[key])
            for obj in fresh.values():
                self.listener(self.kind, "SYNC", obj)

    async def _watch(self) -> None:
        timeout = int(self.watch_timeout * random.uniform(0.8, 1.0))
        async for event, obj in self.api.watch(
            self.kind,
            self.resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            timeout_seconds=timeout,
        ):
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = str(version)
            if event == "BOOKMARK":
                continue
            key = key_of(obj)
            if event == "DELETED":
                self.store.pop(key, None)
            else:
                old = self.store.get(key)
                if old is not None and not newer_or_same(obj, old):
                    continue
                self.store[key] = _trim(obj)
            self.backoff.reset()
            if self.listener is not None:
                self.listener(self.kind, event, obj)
