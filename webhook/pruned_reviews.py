"""Decode a mutation review keeping only the members that mutation reads.

Jobs and Pods make up almost every review the mutating webhook sees. For them the body is
decoded with msgspec into a typed view (`controller.workloads.pruned`) that names just the
members `webhook.mutation.mutate` reads or writes. A new Job is answered from the view itself
(`mutation.fast_answer`, through the Job adapter's `fast_defaults`); otherwise the objects become
(small) plain dicts, a request that `mutate` answers exactly as it answers the full review.
Members the view does not name are skipped while parsing, never built: decoding costs about a
third of decoding the whole body.

Anything unusual (another kind or operation, a member of an unexpected type, JSON that is not
a review at all) is not this module's business: `decode` returns None and the caller decodes
the full body, so every error message comes from the general path.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
from msgspec import Struct

from controller.api import kinds
from controller.workloads.pruned import Workload
from webhook import reviews


class GroupVersionKind(Struct):
    group: str = ""
    version: str = ""
    kind: str = ""


class Request(Struct):
    uid: str
    kind: GroupVersionKind
    operation: str
    namespace: str = ""
    name: str = ""
    object: Workload | None = None
    oldObject: Workload | None = None


class Review(Struct):
    apiVersion: str
    kind: str
    request: Request


_REVIEW = msgspec.json.Decoder(Review)
PRUNED_KINDS = frozenset((k.group, k.version, k.kind) for k in (kinds.JOBS, kinds.PODS))
_OPERATIONS: dict[str, reviews.Operation] = {"CREATE": "CREATE", "UPDATE": "UPDATE"}


@dataclass(slots=True)
class PrunedRequest:
    """A Job's or Pod's admission request with its objects as typed views."""

    uid: str
    group: str
    version: str
    kind: str
    operation: reviews.Operation
    namespace: str
    name: str
    object: Workload | None
    old_object: Workload | None

    def request(self) -> reviews.Request:
        """As `reviews.parse` gives it, with the objects as (pruned) plain dicts."""
        return reviews.Request(
            self.uid,
            self.group,
            self.version,
            self.kind,
            self.operation,
            self.namespace,
            self.name,
            msgspec.to_builtins(self.object),
            msgspec.to_builtins(self.old_object),
        )


def decode(body: bytes) -> PrunedRequest | None:
    """The request in `body` with its objects pruned, or None when the full body is needed."""
    try:
        review = _REVIEW.decode(body)
    except (msgspec.MsgspecError, RecursionError):  # msgspec refuses deep nesting this way
        return None
    request = review.request
    gvk = request.kind
    operation = _OPERATIONS.get(request.operation)
    if (
        operation is None
        or (gvk.group, gvk.version, gvk.kind) not in PRUNED_KINDS
        or review.apiVersion != reviews.API_VERSION
        or review.kind != reviews.KIND
        or not request.uid
    ):
        return None
    return PrunedRequest(
        request.uid,
        gvk.group,
        gvk.version,
        gvk.kind,
        operation,
        request.namespace,
        request.name,
        request.object,
        request.oldObject,
    )
