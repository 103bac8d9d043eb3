"""Edit a JSON document without changing it, recording each change as an RFC 6902 operation.

The webhook sends the recorded operations as its JSON Patch; the controller can send the same
operations in a PATCH request. Paths are lists of keys; `jsonpointer` escapes them (a label key
such as `kohort.dev/queue-name` becomes `kohort.dev~1queue-name`).

Copy on write: `Editor.doc` starts as the given document and every object or list on the way
to an edited place is copied (shallowly) the first time it is touched. The input is never
changed and unchanged subtrees are shared, so editing a large object costs only its depth.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
from jsonpointer import escape

Path = Sequence[str | int]
JSONDict = dict[str, Any]


def pointer(path: Path) -> str:
    return _pointer(tuple(path))


@functools.lru_cache(maxsize=4096)
def _pointer(path: tuple[str | int, ...]) -> str:
    # Cached: the webhook writes the same few paths into every object of a kind.
    return "".join("/" + escape(str(part)) for part in path)


def lookup(doc: Any, path: Path) -> Any:
    """The value at `path`, or None when any step is missing or of the wrong type."""
    node = doc
    for part in path:
        if isinstance(part, int) and not (isinstance(node, list) and part >= 0):
            return None  # an index only means something in a list (not a string, not -1)
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


class Editor:
    """`doc` is the edited document; `operations` lists what changed, in order."""

    def __init__(self, doc: JSONDict) -> None:
        self.doc = dict(doc)
        self.operations: list[JSONDict] = []
        # Containers copied by this editor (kept alive by `doc`, so ids stay unique).
        self._owned: set[int] = {id(self.doc)}
        # Writable containers by path; entries under a path are dropped when it is replaced.
        self._writable_at: dict[tuple[str | int, ...], Any] = {}

    def get(self, path: Path) -> Any:
        return lookup(self.doc, path)

    def set(self, path: Path, value: Any) -> None:
        """Set the value at `path`, creating missing parent objects; no-op if already equal."""
        if not path:
            raise ValueError("cannot replace the whole document")
        key = path[-1]
        if not isinstance(key, str):
            raise TypeError(f"set needs an object key at {pointer(path)}")
        parent = self._writable(path[:-1], create=True)
        if not isinstance(parent, dict):
            raise TypeError(f"{pointer(path[:-1])} is not an object")
        if key in parent and parent[key] == value:
            return
        op = "replace" if key in parent else "add"
        if isinstance(parent.get(key), dict | list):
            self._forget(path)  # writable containers under the old value are gone
        parent[key] = value
        self.operations.append({"op": op, "path": pointer(path), "value": value})

    def update(self, path: Path, values: Mapping[str, Any]) -> None:
        """Set several members of the object at `path`.

        A missing object (and its missing parents) is added whole, in one operation.
        """
        if not values:
            return
        if self.get(path) is not None:
            for key, value in values.items():
                self.set([*path, key], value)
            return
        depth = len(path) - 1
        while depth > 0 and self.get(path[:depth]) is None:
            depth -= 1
        parent = self._writable(path[:depth], create=False)
        if not isinstance(parent, dict) or not isinstance(path[depth], str):
            raise TypeError(f"{pointer(path[:depth]) or 'the object'} is not an object")
        recorded: Any = dict(values)
        stored: Any = dict(values)
        for part in reversed(path[depth + 1 :]):
            recorded, stored = {part: recorded}, {part: stored}
        op = "replace" if path[depth] in parent else "add"  # present but null
        parent[path[depth]] = stored
        self.operations.append({"op": op, "path": pointer(path[: depth + 1]), "value": recorded})
        node = stored
        for part in path[depth + 1 :]:  # the containers made here are the editor's own
            self._owned.add(id(node))
            node = node[part]
        self._owned.add(id(node))

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
        if not isinstance(current, list):
            raise TypeError(f"{pointer(path)} is not a list")
        self._writable(path, create=False).append(value)
        self.operations.append({"op": "add", "path": pointer([*path, "-"]), "value": value})

    def remove(self, path: Path) -> None:
        """Remove the member or list item at `path`; no-op when it is absent."""
        parent = self.get(path[:-1])
        key = path[-1]
        in_object = isinstance(parent, dict) and isinstance(key, str) and key in parent
        in_list = isinstance(parent, list) and isinstance(key, int) and 0 <= key < len(parent)
        if not (in_object or in_list):
            return
        del self._writable(path[:-1], create=False)[key]
        self._forget(path)
        self.operations.append({"op": "remove", "path": pointer(path)})

    def patch(self) -> jsonpatch.JsonPatch:
        return jsonpatch.JsonPatch(self.operations)

    def _forget(self, path: Path) -> None:
        if not self._writable_at:
            return
        prefix = tuple(path)
        size = len(prefix)
        for cached in [p for p in self._writable_at if p[:size] == prefix]:
            del self._writable_at[cached]

    def _writable(self, path: Path, *, create: bool) -> Any:
        """The container at `path`, copied into `doc` first unless this editor made it.

        With `create`, missing objects on the way are added (and recorded as operations).
        """
        key = tuple(path)
        found = self._writable_at.get(key)
        if found is None:
            found = self._writable_at[key] = self._walk(path, create=create)
        return found

    def _walk(self, path: Path, *, create: bool) -> Any:
        node: Any = self.doc
        for depth, part in enumerate(path):
            if isinstance(node, dict):
                child = node.get(part) if isinstance(part, str) else None
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                child = node[part]
            else:
                raise TypeError(f"{pointer(path[:depth]) or 'the object'} is not an object")
            if child is None:
                if not (create and isinstance(part, str)):
                    raise TypeError(f"{pointer(path[: depth + 1])} is missing")
                child = {}
                self.operations.append(
                    {"op": "add", "path": pointer(path[: depth + 1]), "value": {}}
                )
            elif id(child) in self._owned:
                node = child
                continue
            elif isinstance(child, dict):
                child = dict(child)
            elif isinstance(child, list):
                child = list(child)
            else:
                raise TypeError(f"{pointer(path[: depth + 1])} is not an object or a list")
            self._owned.add(id(child))
            node[part] = child
            node = child
        return node
