"""A Job or a Pod as an admission request carries it, pruned to the members mutation reads.

Rule: every member defaults to UNSET, so a member absent from the body stays absent and an
explicit null stays null: a patch adds the first and replaces the second (`set_op`).

msgspec decodes a review's objects into these views (webhook.pruned_reviews), skipping the
members they do not name instead of building them. A kind that answers a new object from its
view alone (a `capabilities.FastDefaults`) reads them; any other request turns them back into
plain dicts (`msgspec.to_builtins`) that the general path answers as it answers the whole
object. That round trip is why ObjectMeta and OwnerReference here are not `kube`'s: those drop
members equal to their defaults (`omit_defaults`: an empty apiVersion, a null controller) and
refuse a null name or kind, while the dicts must keep every member the general path reads, as
sent (an empty apiVersion names the core group: `base.owned_by`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from jsonpointer import escape
from msgspec import UNSET, Struct, UnsetType

from controller.workloads.edits import JSONDict


class _View(Struct, omit_defaults=True):
    pass


class OwnerReference(_View):
    apiVersion: str | UnsetType | None = UNSET
    kind: str | UnsetType | None = UNSET
    name: str | UnsetType | None = UNSET
    controller: bool | UnsetType | None = UNSET


class ObjectMeta(_View):
    name: str | UnsetType | None = UNSET
    generateName: str | UnsetType | None = UNSET
    labels: dict[str, str] | UnsetType | None = UNSET
    annotations: dict[str, str] | UnsetType | None = UNSET
    ownerReferences: list[OwnerReference] | UnsetType | None = UNSET


class PodSpec(_View):
    schedulerName: str | UnsetType | None = UNSET
    schedulingGates: list[dict[str, Any]] | UnsetType | None = UNSET
    # Backend kubernetes writes these (kube-scheduler's gang of the pod), merged into what the
    # user wrote exactly as the general path does.
    workloadRef: Any | UnsetType = UNSET
    schedulingGroup: Any | UnsetType = UNSET


class PodTemplate(_View):
    metadata: ObjectMeta | UnsetType | None = UNSET
    spec: PodSpec | UnsetType | None = UNSET


Count = Annotated[int, msgspec.Meta(ge=0)]  # a negative one is denied by the general path


class WorkloadSpec(_View):
    # A Job's
    parallelism: Count | UnsetType | None = UNSET
    completions: Count | UnsetType | None = UNSET
    suspend: bool | UnsetType | None = UNSET
    template: PodTemplate | UnsetType | None = UNSET
    # A Pod's
    schedulerName: str | UnsetType | None = UNSET
    schedulingGates: list[dict[str, Any]] | UnsetType | None = UNSET
    workloadRef: Any | UnsetType = UNSET
    schedulingGroup: Any | UnsetType = UNSET


class Workload(_View):
    """A Job or a Pod (one view for both, so the body is decoded in one pass before its kind
    is known); the members one kind lacks are simply absent."""

    metadata: ObjectMeta | UnsetType | None = UNSET
    spec: WorkloadSpec | UnsetType | None = UNSET


def set_op(ops: list[JSONDict], path: str, old: Any, value: Any) -> None:
    """Set the member at `path`, whose value is `old` (UNSET: absent)."""
    ops.append({"op": "add" if old is UNSET else "replace", "path": path, "value": value})


def merge_ops(ops: list[JSONDict], path: str, current: Any, wanted: dict[str, str]) -> None:
    """Merge string members into the object at `path` (missing or null: set whole)."""
    if type(current) is not dict:
        set_op(ops, path, current, wanted)
        return
    for key, value in wanted.items():
        old = current.get(key, UNSET)
        if old != value:
            set_op(ops, f"{path}/{escape(key)}", old, value)
