"""An API server in memory, for unit tests and benchmarks of the controller without a cluster.

It answers the requests `clients.Client` makes (get, list with continue tokens and a label
selector, watch, create, merge and JSON patches, the status subresource, delete) and keeps
objects as JSON text, so every answer is a fresh copy like on the wire. It validates nothing:
the tests that need a real API server run on the local control plane (tests/cluster).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonpatch

from controller.api.kinds import Kind
from controller.api.times import format_time
from controller.cluster.clients import JSON_PATCH, ApiError, Client, WatchEvent, plain, watch_event

JSONDict = dict[str, Any]
# (group, version, plural)
Collection = tuple[str, str, str]


@dataclass(frozen=True)
class _Path:
    collection: Collection
    namespace: str
    name: str
    subresource: str


def _parse(path: str) -> _Path:
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    else:
        group, version, rest = parts[1], parts[2], parts[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    return _Path((group, version, rest[0]), namespace, name, sub)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _selected(obj: JSONDict, selector: str | None) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class MemoryApi(Client):
    """A `Client` whose requests are answered from memory; `writes` counts what it was asked."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.version = 1000
        self.objects: dict[Collection, dict[tuple[str, str], str]] = {}
        self.writes: Counter[tuple[str, str]] = Counter()
        # Every write in order: (verb, plural[/subresource], name).
        self.log: list[tuple[str, str, str]] = []
        # Namespaces being deleted: creating objects there is forbidden.
        self.terminating: set[str] = set()
        # (verb, plural) -> the HTTP status to fail such requests with.
        self.failing: dict[tuple[str, str], int] = {}
        self._watchers: dict[Collection, list[asyncio.Queue[tuple[str, str]]]] = {}
        self.page_size = 500

    async def close(self) -> None:
        return None

    # -- what tests and benches do to the "cluster" ---------------------------------------

    def put(self, kind: Kind, obj: Any) -> JSONDict:
        """Store an object as a user would (create or replace), telling the watchers."""
        body: JSONDict = json.loads(json.dumps(plain(obj)))
        meta = body.setdefault("metadata", {})
        key = (meta.get("namespace", "") if kind.namespaced else "", meta["name"])
        collection = (kind.group, kind.version, kind.plural)
        exists = key in self.objects.get(collection, {})
        return self._store(collection, key, body, "MODIFIED" if exists else "ADDED")

    def read_back(self, kind: Kind, name: str, namespace: str = "") -> JSONDict | None:
        text = self.objects.get((kind.group, kind.version, kind.plural), {}).get((namespace, name))
        return json.loads(text) if text is not None else None

    def all(self, kind: Kind) -> list[JSONDict]:
        return [
            json.loads(t)
            for t in self.objects.get((kind.group, kind.version, kind.plural), {}).values()
        ]

    async def settle(self) -> None:
        """Let every watcher take the events sent so far."""
        for _ in range(1000):
            if not any(q.qsize() for qs in self._watchers.values() for q in qs):
                break
            await asyncio.sleep(0)
        await asyncio.sleep(0)

    # -- answering requests ---------------------------------------------------------------

    def _store(
        self, collection: Collection, key: tuple[str, str], body: JSONDict, event: str
    ) -> JSONDict:
        self.version += 1
        meta = body.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.version)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", format_time(self.clock()))
        text = json.dumps(body)
        self.objects.setdefault(collection, {})[key] = text
        self._tell(collection, event, text)
        return body

    def _tell(self, collection: Collection, event: str, text: str) -> None:
        for queue in self._watchers.get(collection, []):
            queue.put_nowait((event, text))

    async def fetch(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> bytes:
        where = _parse(path)
        plural = where.collection[2]
        verb = {"GET": "get", "POST": "create", "PATCH": "patch", "DELETE": "delete"}[method]
        failure = self.failing.get((verb, plural))
        if failure is not None:
            raise ApiError(failure, method, path, json.dumps({"reason": "Injected"}))
        if method == "GET":
            return self._get(where, dict(query or {}))
        what = plural + (f"/{where.subresource}" if where.subresource else "")
        self.writes[(verb, what)] += 1
        name = where.name or str(((plain(body) or {}).get("metadata") or {}).get("name", ""))
        self.log.append((verb, what, name))
        if method == "POST":
            return self._create(where, plain(body), path)
        if method == "PATCH":
            return self._patch(where, plain(body), content_type, path)
        return self._delete(where, path)

    def _get(self, where: _Path, query: dict[str, str]) -> bytes:
        objects = self.objects.get(where.collection, {})
        if where.name:
            text = objects.get((where.namespace, where.name))
            if text is None:
                raise ApiError(404, "GET", where.name, '{"reason": "NotFound"}')
            return text.encode()
        keys = sorted(k for k in objects if not where.namespace or k[0] == where.namespace)
        selector = query.get("labelSelector")
        if selector:
            keys = [k for k in keys if _selected(json.loads(objects[k]), selector)]
        start = int(query.get("continue") or 0)
        page = ",".join(objects[k] for k in keys[start : start + self.page_size])
        meta: JSONDict = {"resourceVersion": str(self.version)}
        if start + self.page_size < len(keys):
            meta["continue"] = str(start + self.page_size)
        return f'{{"items":[{page}],"metadata":{json.dumps(meta)}}}'.encode()

    def _create(self, where: _Path, body: JSONDict, path: str) -> bytes:
        if where.namespace in self.terminating:
            raise ApiError(403, "POST", path, '{"reason": "Forbidden"}')
        body = json.loads(json.dumps(body))
        meta = body.setdefault("metadata", {})
        meta.pop("resourceVersion", None)
        if where.namespace:
            meta["namespace"] = where.namespace
        key = (where.namespace, meta.get("name", ""))
        if key in self.objects.get(where.collection, {}):
            raise ApiError(409, "POST", path, '{"reason": "AlreadyExists"}')
        return json.dumps(self._store(where.collection, key, body, "ADDED")).encode()

    def _patch(self, where: _Path, body: Any, content_type: str, path: str) -> bytes:
        key = (where.namespace, where.name)
        text = self.objects.get(where.collection, {}).get(key)
        if text is None:
            raise ApiError(404, "PATCH", path, '{"reason": "NotFound"}')
        current = json.loads(text)
        wanted = (
            (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        )
        if wanted and wanted != current["metadata"].get("resourceVersion"):
            # As the API server does: a merge patch naming a version is a precondition.
            raise ApiError(409, "PATCH", path, '{"reason": "Conflict"}')
        if content_type == JSON_PATCH:
            try:
                patched = jsonpatch.apply_patch(current, body)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
                raise ApiError(422, "PATCH", path, json.dumps({"message": str(err)})) from err
        elif where.subresource == "status":
            patched = dict(current, status=_merge(current.get("status"), body.get("status")))
        else:
            patch = dict(body)
            patch.pop("status", None)
            patched = _merge(current, patch)
        return json.dumps(self._store(where.collection, key, patched, "MODIFIED")).encode()

    def _delete(self, where: _Path, path: str) -> bytes:
        text = self.objects.get(where.collection, {}).pop((where.namespace, where.name), None)
        if text is None:
            raise ApiError(404, "DELETE", path, '{"reason": "NotFound"}')
        self.version += 1
        gone = json.loads(text)
        gone["metadata"]["resourceVersion"] = str(self.version)
        self._tell(where.collection, "DELETED", json.dumps(gone))
        return b"{}"

    async def follow(
        self,
        kind: Kind,
        resource_version: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        collection = (kind.group, kind.version, kind.plural)
        self._watchers.setdefault(collection, []).append(queue)
        try:
            while True:
                event, text = await queue.get()
                obj = json.loads(text)
                if namespace and obj["metadata"].get("namespace") != namespace:
                    continue
                if not _selected(obj, label_selector):
                    continue
                yield watch_event(event, text.encode())
        finally:
            self._watchers[collection].remove(queue)
