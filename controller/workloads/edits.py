"""Edit a JSON document, recording each change as an RFC 6902 operation.

The webhook sends the recorded operations as its JSON Patch; the controller can send the same
operations in a PATCH request. Paths are sequences of keys; `jsonpointer` escapes them (a label
key such as `kohort.dev/queue-name` becomes `kohort.dev~1queue-name`).

Copy on write (the default): `Editor.doc` starts as the given document and every object or list
on the way to an edited place is copied (shallowly) the first time it is touched. The input is
never changed and unchanged subtrees are shared, so editing a large object costs only its depth.
A caller that owns the document (the webhook, which has just decoded it) may have it edited in
place instead, which skips the copies.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
from jsonpointer import escape

Path = Sequence[str | int]
JSONDict = dict[str, Any]
_Key = tuple[str | int, ...]


def pointer(path: Path) -> str:
    return _pointer(tuple(path))


@functools.lru_cache(maxsize=4096)
def _pointer(path: _Key) -> str:
    # Cached: the webhook writes the same few paths into every object of a kind.
    return "".join("/" + escape(str(part)) for part in path)


def lookup(doc: Any, path: Path) -> Any:
    """The value at `path`, or None when any step is missing or of the wrong type.

    Object members are found by string keys only, list items by non-negative int only.
    """
    node = doc
    for part in path:
        kind = type(node)
        if kind is dict or (kind is not list and isinstance(node, Mapping)):
            if type(part) is not str:
                return None
            node = node.get(part)
        elif kind is list:
            if type(part) is not int or not 0 <= part < len(node):
                return None
            node = node[part]
        else:
            return None
        if node is None:
            return None
    return node


def _snapshot(value: Any) -> Any:
    """A copy of a JSON value that shares no object or list with it."""
    kind = type(value)
    if kind is dict:
        return {k: _snapshot(v) for k, v in value.items()}
    if kind is list:
        return [_snapshot(v) for v in value]
    return value


class Editor:
    """`doc` is the edited document; `operations` lists what changed, in order.

    `in_place`: edit the given document itself instead of a copy (the caller owns it). Values
    stored in it are then copies of the recorded ones, so later edits never change the record.
    """

    def __init__(self, doc: JSONDict, *, in_place: bool = False) -> None:
        self.doc = doc if in_place else dict(doc)
        self.in_place = in_place
        self.operations: list[JSONDict] = []
        # Writable containers (copied by this editor or made by it) by path. An entry under a
        # path is dropped when the value at that path is replaced or removed.
        self._writable_at: dict[_Key, Any] = {(): self.doc}

    def get(self, path: Path) -> Any:
        return lookup(self.doc, path)

    def set(self, path: Path, value: Any) -> None:
        """Set the value at `path`, creating missing parent objects; no-op if already equal."""
        if not path:
            raise ValueError("cannot replace the whole document")
        key = path[-1]
        if type(key) is not str:
            raise TypeError(f"set needs an object key at {pointer(path)}")
        at = tuple(path[:-1])
        parent = lookup(self.doc, at)
        if type(parent) is dict:
            old = parent.get(key, _MISSING)
            if old is not _MISSING and old == value:
                return
        parent = self._writable(at, create=True)
        if type(parent) is not dict:
            raise TypeError(f"{_pointer(at)} is not an object")
        old = parent.get(key, _MISSING)
        if isinstance(old, dict | list):
            self._forget((*at, key))
        # In place, a copy keeps later edits below it out of the record; copy on write may
        # share the value, since edits below it copy it first.
        parent[key] = _snapshot(value) if self.in_place else value
        op = "add" if old is _MISSING else "replace"
        self.operations.append({"op": op, "path": _pointer((*at, key)), "value": value})

    def update(self, path: Path, values: Mapping[str, Any]) -> None:
        """Set several members of the object at `path`.

        A missing object (and its missing parents) is added whole, in one operation.
        """
        if not values:
            return
        at = tuple(path)
        if lookup(self.doc, at) is not None:
            for key, value in values.items():
                self.set((*at, key), value)
            return
        depth = len(at) - 1
        while depth > 0 and lookup(self.doc, at[:depth]) is None:
            depth -= 1
        parent = self._writable(at[:depth], create=False)
        if type(parent) is not dict or type(at[depth]) is not str:
            raise TypeError(f"{_pointer(at[:depth]) or 'the object'} is not an object")
        recorded: Any = dict(values)
        stored: Any = _snapshot(recorded) if self.in_place else dict(values)
        for part in reversed(at[depth + 1 :]):
            recorded, stored = {part: recorded}, {part: stored}
        op = "replace" if at[depth] in parent else "add"  # present but null
        self._forget(at[: depth + 1])
        parent[at[depth]] = stored
        self.operations.append({"op": op, "path": _pointer(at[: depth + 1]), "value": recorded})
        for end in range(depth + 1, len(at) + 1):  # the objects made here are the editor's own
            self._writable_at[at[:end]] = stored
            if end < len(at):
                stored = stored[at[end]]

    def merge(self, path: Path, values: Mapping[str, Any]) -> None:
        """Make the object at `path` hold `values`, member by member and recursively.

        An object in `values` merges into the object already there; a missing object, or any
        other value, is set whole. One operation per change; equal values record none.
        """
        at = tuple(path)
        current = lookup(self.doc, at)
        if current is None:
            self.update(at, values)
        elif type(current) is dict:
            self._merge(at, current, values)
        else:
            raise TypeError(f"{_pointer(at) or 'the object'} is not an object")

    def _merge(self, at: _Key, current: JSONDict, values: Mapping[str, Any]) -> None:
        # In place, `current` is the container to write to; copy on write finds its copy.
        parent = current if self.in_place else None
        for key, value in values.items():
            old = current.get(key, _MISSING)
            if type(value) is dict and old is not _MISSING and old is not None:
                if type(old) is not dict:
                    raise TypeError(f"{_pointer((*at, key))} is not an object")
                self._merge((*at, key), old, value)
                continue
            if old == value:
                continue
            if parent is None:
                parent = self._writable(at, create=False)
            if type(old) is dict or type(old) is list:
                self._forget((*at, key))
            stored = value
            if self.in_place and (type(value) is dict or type(value) is list):
                stored = _snapshot(value)
            parent[key] = stored
            op = "add" if old is _MISSING else "replace"
            self.operations.append({"op": op, "path": _pointer((*at, key)), "value": value})

    def set_default(self, path: Path, value: Any) -> bool:
        """Set the value at `path` only when it is absent (or null); True if it was set."""
        if self.get(path) is not None:
            return False
        self.set(path, value)
        return True

    def append(self, path: Path, value: Any) -> None:
        """Append to the list at `path`, creating the list when absent."""
        current = self.get(path)
        if current is None:
            self.set(path, [value])
            return
        if type(current) is not list:
            raise TypeError(f"{pointer(path)} is not a list")
        self._writable(tuple(path), create=False).append(
            _snapshot(value) if self.in_place else value
        )
        self.operations.append({"op": "add", "path": _pointer((*path, "-")), "value": value})

    def remove(self, path: Path) -> None:
        """Remove the member or list item at `path`; no-op when it is absent."""
        parent = self.get(path[:-1])
        key = path[-1]
        in_object = type(parent) is dict and type(key) is str and key in parent
        in_list = type(parent) is list and type(key) is int and 0 <= key < len(parent)
        if not (in_object or in_list):
            return
        at = tuple(path)
        container = self._writable(at[:-1], create=False)
        del container[key]
        # List items after a removed one move: forget every cached container under the list.
        self._forget(at[:-1] if in_list else at)
        self._writable_at[at[:-1]] = container
        self.operations.append({"op": "remove", "path": _pointer(at)})

    def patch(self) -> jsonpatch.JsonPatch:
        return jsonpatch.JsonPatch(self.operations)

    def _forget(self, at: _Key) -> None:
        """Drop the cached containers at `at` and under it: the value there was replaced."""
        if self.in_place:
            return  # nothing is cached: see _writable
        size = len(at)
        for cached in [p for p in self._writable_at if p[:size] == at and len(p) >= size]:
            del self._writable_at[cached]

    def _writable(self, at: _Key, *, create: bool) -> Any:
        """The container at `at`, copied into `doc` first unless this editor made it.

        With `create`, missing objects on the way are added (and recorded as operations).
        In place every container is the editor's own, so the path is walked without a cache.
        """
        if self.in_place:
            return self._walk(self.doc, (), at, create=create)
        found = self._writable_at.get(at)
        if found is not None:
            return found
        depth = len(at)
        while at[:depth] not in self._writable_at:
            depth -= 1
        return self._walk(self._writable_at[at[:depth]], at[:depth], at, create=create)

    def _walk(self, node: Any, start: _Key, at: _Key, *, create: bool) -> Any:
        """From `node` (the container at `start`) down to the container at `at`."""
        for end in range(len(start) + 1, len(at) + 1):
            part = at[end - 1]
            if type(node) is dict and type(part) is str:
                child = node.get(part)
            elif type(node) is list and type(part) is int and 0 <= part < len(node):
                child = node[part]
            else:
                raise TypeError(f"{_pointer(at[: end - 1]) or 'the object'} is not an object")
            if child is None:
                if not (create and type(part) is str):
                    raise TypeError(f"{_pointer(at[:end])} is missing")
                child = {}
                self.operations.append({"op": "add", "path": _pointer(at[:end]), "value": {}})
            elif self.in_place:
                if type(child) is not dict and type(child) is not list:
                    raise TypeError(f"{_pointer(at[:end])} is not an object or a list")
                node = child
                continue
            elif type(child) is dict:
                child = dict(child)
            elif type(child) is list:
                child = list(child)
            else:
                raise TypeError(f"{_pointer(at[:end])} is not an object or a list")
            node[part] = child
            if not self.in_place:
                self._writable_at[at[:end]] = child
            node = child
        return node


def merge_operations(doc: JSONDict, values: Mapping[str, Any]) -> list[JSONDict]:
    """The operations `Editor(doc).merge((), values)` records, computed without editing.

    For a caller that needs only the patch (the webhook answering a new object): nothing is
    copied or written. Recorded values are `values`' own objects, not copies.
    """
    if type(doc) is not dict:
        raise TypeError("the object is not an object")
    operations: list[JSONDict] = []
    _diff("", doc, values, operations)
    return operations


def _diff(at: str, current: JSONDict, values: Mapping[str, Any], out: list[JSONDict]) -> None:
    # Editor._merge's rule, with JSON pointers built as it goes down.
    for key, value in values.items():
        old = current.get(key, _MISSING)
        path = f"{at}/{escape(key)}"
        if type(value) is dict and old is not _MISSING and old is not None:
            if type(old) is not dict:
                raise TypeError(f"{path} is not an object")
            _diff(path, old, value, out)
        elif old != value:
            out.append(
                {"op": "add" if old is _MISSING else "replace", "path": path, "value": value}
            )


_MISSING: Any = object()
