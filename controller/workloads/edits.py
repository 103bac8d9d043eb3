"""Edit a JSON document in place and record each change as an RFC 6902 operation.

The webhook sends the recorded operations as its JSON Patch; the controller can send the same
operations in a PATCH request. Paths are lists of keys; `jsonpointer` escapes them (a label key
such as `kohort.dev/queue-name` becomes `kohort.dev~1queue-name`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import jsonpatch
from jsonpointer import JsonPointer

Path = Sequence[str | int]
JSONDict = dict[str, Any]


def pointer(path: Path) -> str:
    return str(JsonPointer.from_parts([str(p) for p in path]).path)


def lookup(doc: Any, path: Path) -> Any:
    """The value at `path`, or None when any step is missing or of the wrong type."""
    node = doc
    for part in path:
        if isinstance(node, dict) and isinstance(part, str):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    return node


class Editor:
    """Changes `doc` in place; `operations` lists what changed, in order (values are copies)."""

    def __init__(self, doc: JSONDict) -> None:
        self.doc = doc
        self.operations: list[JSONDict] = []

    def get(self, path: Path) -> Any:
        return lookup(self.doc, path)

    def set(self, path: Path, value: Any) -> None:
        """Set the value at `path`, creating missing parent objects; no-op if already equal."""
        if not path:
            raise ValueError("cannot replace the whole document")
        parent_path, key = list(path[:-1]), path[-1]
        parent = self._ensure_object(parent_path)
        if not isinstance(key, str):
            raise TypeError(f"set needs an object key at {pointer(path)}")
        if key in parent and parent[key] == value:
            return
        op = "replace" if key in parent else "add"
        parent[key] = value
        self.operations.append({"op": op, "path": pointer(path), "value": copy.deepcopy(value)})

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
        current.append(value)
        self.operations.append(
            {"op": "add", "path": pointer([*path, "-"]), "value": copy.deepcopy(value)}
        )

    def remove(self, path: Path) -> None:
        """Remove the member or list item at `path`; no-op when it is absent."""
        parent = self.get(path[:-1])
        key = path[-1]
        in_object = isinstance(parent, dict) and isinstance(key, str) and key in parent
        in_list = isinstance(parent, list) and isinstance(key, int) and 0 <= key < len(parent)
        if not (in_object or in_list):
            return
        del parent[key]
        self.operations.append({"op": "remove", "path": pointer(path)})

    def patch(self) -> jsonpatch.JsonPatch:
        return jsonpatch.JsonPatch(self.operations)

    def _ensure_object(self, path: list[str | int]) -> JSONDict:
        node: Any = self.doc
        for depth, part in enumerate(path):
            child = lookup(node, [part])
            if child is None:
                if not isinstance(part, str) or not isinstance(node, dict):
                    raise TypeError(f"cannot create {pointer(path[: depth + 1])}")
                child = {}
                node[part] = child
                self.operations.append(
                    {"op": "add", "path": pointer(path[: depth + 1]), "value": {}}
                )
            elif not isinstance(child, dict):
                raise TypeError(f"{pointer(path[: depth + 1])} is not an object")
            node = child
        if not isinstance(node, dict):
            raise TypeError(f"{pointer(path)} is not an object")
        return node
