"""The AdmissionReview wire format: decode a request, build a response.

Purely data-manipulative: no I/O. A review that cannot be answered at all (no uid to echo, not
an admission.k8s.io/v1 AdmissionReview) raises BadReview, which the server turns into a 400.
"""

from __future__ import annotations

import base64
import binascii
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
OPERATIONS: tuple[Operation, ...] = ("CREATE", "UPDATE", "DELETE", "CONNECT")


_BRIEF = reprlib.Repr()  # keyword arguments need Python 3.12
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother = 3, 80, 80


def _shown(value: Any) -> str:
    """A sender's value as a reason quotes it: shortened, and safe however deeply it nests."""
    return _BRIEF.repr(value)


class BadReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer."""


@dataclass(frozen=True)
class UserInfo:
    username: str = ""
    groups: frozenset[str] = frozenset()


@dataclass(slots=True)
class Request:
    uid: str
    group: str
    version: str
    kind: str
    operation: Operation
    namespace: str
    name: str
    object: Any
    old_object: Any
    user_info: Any = None  # request.userInfo as sent; read through `user`
    dry_run: bool = False

    @property
    def subject(self) -> str:
        """What a denial message is about: `Job train`, or `Job` before it is named."""
        return f"{self.kind} {self.name}" if self.name else self.kind

    @property
    def user(self) -> UserInfo:
        """Who sent the request (only the validating webhook asks)."""
        user = self.user_info if type(self.user_info) is dict else {}
        groups = user.get("groups")
        return UserInfo(
            username=_text(user.get("username"), "request.userInfo.username"),
            groups=frozenset(g for g in groups if isinstance(g, str))
            if isinstance(groups, list)
            else frozenset(),
        )


def _text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if type(value) is not str:
        raise BadReview(f"{where} must be a string")
    return value


_TEXT_FIELDS = (
    "request.kind.group",
    "request.kind.version",
    "request.kind.kind",
    "request.namespace",
    "request.name",
)


def parse(review: Any) -> Request:
    """The request inside an AdmissionReview; BadReview if it cannot be answered."""
    if type(review) is not dict:
        raise BadReview("the body must be a JSON object (an AdmissionReview)")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise BadReview(
            f"expected apiVersion {API_VERSION} kind {KIND}, got "
            f"{_shown(review.get('apiVersion'))} {_shown(review.get('kind'))}"
        )
    request = review.get("request")
    if type(request) is not dict:
        raise BadReview("request is missing")
    uid = request.get("uid")
    if type(uid) is not str or not uid:
        raise BadReview("request.uid is missing")
    kind = request.get("kind")
    if type(kind) is not dict:
        raise BadReview("request.kind is missing")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise BadReview(
            f"request.operation {_shown(operation)} is not one of {', '.join(OPERATIONS)}"
        )
    texts = (
        kind.get("group"),
        kind.get("version"),
        kind.get("kind"),
        request.get("namespace"),
        request.get("name"),
    )
    for value, where in zip(texts, _TEXT_FIELDS, strict=True):
        if value is not None and type(value) is not str:
            raise BadReview(f"{where} must be a string")
    group, version, kind_name, namespace, name = (t or "" for t in texts)
    return Request(
        uid,
        group,
        version,
        kind_name,
        operation,
        namespace,
        name,
        request.get("object"),
        request.get("oldObject"),
        request.get("userInfo"),
        request.get("dryRun") is True,
    )


def _review(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def allow(
    uid: str,
    *,
    patch: Sequence[Mapping[str, Any]] = (),
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        encoded = orjson.dumps(patch if type(patch) is list else list(patch))
        response["patchType"] = "JSONPatch"
        response["patch"] = binascii.b2a_base64(encoded, newline=False).decode()
    if warnings:
        response["warnings"] = list(warnings)
    return _review(response)


def deny(uid: str, message: str, *, code: int = 403) -> dict[str, Any]:
    reason = {400: "BadRequest", 403: "Forbidden", 422: "Invalid"}.get(code, "Forbidden")
    status = {"code": code, "message": message, "reason": reason}
    return _review({"uid": uid, "allowed": False, "status": status})


def patch_of(review: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch operations in a response (empty when there is none)."""
    encoded = review.get("response", {}).get("patch")
    return orjson.loads(base64.b64decode(encoded)) if encoded else []
