"""Connect (see `kubeconfig`), and JSON requests by `Kind` on one aiohttp session.

Every verb takes a `decode` function from the response's bytes to the object the caller wants:
`decoder(model)` gives one for a typed view or one of our API models (the controller's cache
holds those); the plain verbs (`get`, `list`, ...) decode to dicts, for tools and tests. Errors
surface as `ApiError` with the HTTP status, so callers can tell 404, 409 and 410 apart.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

import aiohttp
import msgspec
import pydantic

from controller.api.kinds import Kind
from controller.cluster.kubeconfig import Endpoint, load

JSONDict = dict[str, Any]
M = TypeVar("M")
Decode = Callable[[bytes], M]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def decoder(model: type[M]) -> Decode[M]:
    """Bytes to `model`: a msgspec view (`controller.api.kube`) or a pydantic API model."""
    if isinstance(model, type) and issubclass(model, msgspec.Struct):
        return msgspec.json.Decoder(model).decode
    if isinstance(model, type) and issubclass(model, pydantic.BaseModel):
        return model.model_validate_json
    raise TypeError(f"no decoder for {model!r}")


def _as_dict(data: bytes) -> JSONDict:
    found = json.loads(data) if data else {}
    return found if isinstance(found, dict) else {}


def _model_builtins(obj: Any) -> Any:
    if isinstance(obj, pydantic.BaseModel):
        return obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    raise NotImplementedError(f"cannot encode {type(obj).__name__} as JSON")


_ENCODER = msgspec.json.Encoder(enc_hook=_model_builtins)


def encode(body: Any) -> bytes:
    """A request body as JSON bytes (views and models by their wire names)."""
    if isinstance(body, pydantic.BaseModel):
        return body.model_dump_json(by_alias=True, exclude_none=True).encode()
    return _ENCODER.encode(body)


def plain(body: Any) -> Any:
    """A request body as JSON-ready builtins (views and models by their wire names)."""
    if isinstance(body, msgspec.Struct):
        return msgspec.to_builtins(body)
    if isinstance(body, pydantic.BaseModel):
        return body.model_dump(mode="json", by_alias=True, exclude_none=True)
    return body


class _ListMeta(msgspec.Struct):
    resourceVersion: str = ""
    # `continue` is a Python keyword.
    token: str | None = msgspec.field(default=None, name="continue")


class _Page(msgspec.Struct):
    items: list[msgspec.Raw] = []
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)


class _Event(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _Status(msgspec.Struct):
    code: int = 500


class _Meta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    resourceVersion: str = ""


class _Head(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event: its type, the object's key and resourceVersion, and the object as
    sent, decoded only by a reader that needs it (a BOOKMARK only moves the version on)."""

    type: str
    namespace: str
    name: str
    version: str
    data: bytes


def watch_event(kind_of_event: str, data: bytes) -> WatchEvent:
    meta = msgspec.json.decode(data, type=_Head).metadata
    return WatchEvent(kind_of_event, meta.namespace, meta.name, meta.resourceVersion, data)


class ApiError(Exception):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path} -> HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        return self._field("reason")

    @property
    def summary(self) -> str:
        """`HTTP <status>: <the API server's message>` (the body's start when it has none)."""
        return f"HTTP {self.status}: {self._field('message') or self.body[:300]}"

    def _field(self, name: str) -> str:
        try:
            found = json.loads(self.body)
        except ValueError:
            return ""
        return str(found.get(name, "")) if isinstance(found, dict) else ""


class Fenced(Exception):
    """A request refused before it was sent: its client's fence says this replica may not
    write (it does not hold the Lease)."""


class Client:
    """JSON requests to one API server over one aiohttp session (its connection pool, TLS)."""

    def __init__(
        self,
        endpoint: Endpoint,
        session: aiohttp.ClientSession,
        *,
        user_agent: str | None = None,
        request_timeout: float = 30.0,
    ) -> None:
        self.endpoint = endpoint
        self.session = session
        self.user_agent = user_agent or "kohort"
        self.request_timeout = request_timeout

    def fenced(self, allowed: Callable[[], bool]) -> Client:
        """This client, with every request first asking `allowed` (see FencedClient)."""
        return FencedClient(self, allowed)

    async def close(self) -> None:
        await self.session.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: Any = None,
    ) -> aiohttp.ClientResponse:
        """One request with the endpoint's credentials; the body encoded once by msgspec."""
        endpoint = self.endpoint
        headers = {
            "Accept": "application/json",
            "Content-Type": content_type,
            "User-Agent": self.user_agent,
        }
        await endpoint.auth.apply(headers)
        url = f"{endpoint.host}{path}"
        if query:
            url += "?" + urlencode(query)
        wanted = self.request_timeout if request_timeout is None else request_timeout
        if isinstance(wanted, tuple):
            connect, read = wanted
            timeout = aiohttp.ClientTimeout(connect=connect, sock_connect=connect, sock_read=read)
        else:
            timeout = aiohttp.ClientTimeout(total=wanted)
        response = await self.session.request(
            method,
            url,
            data=None if body is None else encode(body),
            headers=headers,
            timeout=timeout,
            proxy=endpoint.proxy,
            server_hostname=endpoint.server_hostname,
        )
        if response.status == 401:
            endpoint.auth.rejected()  # renewed for the next request, where that can be done
        return response

    async def fetch(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> bytes:
        """The response body of one request; ApiError unless the status is 2xx (status 0 when
        the request did not get through: a reset connection, a timeout)."""
        try:
            response = await self._send(
                method, path, query=query, body=body, content_type=content_type
            )
            async with response:
                data: bytes = await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise ApiError(0, method, path, f"{type(err).__name__}: {err}") from err
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, method, path, data.decode(errors="replace"))
        return data

    # -- typed verbs --------------------------------------------------------------------------

    async def read(
        self, decode: Decode[M], kind: Kind, name: str, namespace: str | None = None
    ) -> M:
        return decode(await self.fetch("GET", kind.path(namespace, name)))

    async def read_all(
        self,
        decode: Decode[M],
        kind: Kind,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int = 500,
    ) -> tuple[list[M], str]:
        """Every object (following continue tokens), and the list's resourceVersion."""
        items: list[M] = []
        query: dict[str, str] = {"limit": str(limit)}
        if label_selector:
            query["labelSelector"] = label_selector
        while True:
            data = await self.fetch("GET", kind.path(namespace), query=query)
            page = msgspec.json.decode(data, type=_Page)
            items.extend(decode(bytes(raw)) for raw in page.items)
            if not page.metadata.token:
                return items, page.metadata.resourceVersion
            query["continue"] = page.metadata.token

    async def follow(
        self,
        kind: Kind,
        resource_version: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        """Events from `resource_version` on, bookmarks included, until the server ends the
        watch. An expired version raises ApiError(410)."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if label_selector:
            query["labelSelector"] = label_selector
        path = kind.path(namespace)
        response = await self._send(
            "GET", path, query=query, request_timeout=(10.0, timeout_seconds + 30.0)
        )
        async with response:
            if response.status != 200:
                raise ApiError(response.status, "WATCH", path, await response.text())
            while True:
                line = await response.content.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                event = msgspec.json.decode(line, type=_Event)
                raw = bytes(event.object)
                if event.type == "ERROR":
                    code = msgspec.json.decode(raw, type=_Status).code
                    raise ApiError(code, "WATCH", path, raw.decode(errors="replace"))
                yield watch_event(event.type, raw)

    async def make(
        self, decode: Decode[M], kind: Kind, obj: Any, namespace: str | None = None
    ) -> M:
        return decode(await self.fetch("POST", kind.path(namespace), body=obj))

    async def change(
        self,
        decode: Decode[M],
        kind: Kind,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
    ) -> M:
        path = kind.path(namespace, name)
        if subresource:
            path += f"/{subresource}"
        return decode(await self.fetch("PATCH", path, body=patch, content_type=content_type))

    # -- plain verbs: objects as dicts --------------------------------------------------------

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSONDict:
        return await self.read(_as_dict, kind, name, namespace)

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int = 500,
    ) -> tuple[list[JSONDict], str]:
        """Every object (following continue tokens), and the list's resourceVersion."""
        return await self.read_all(
            _as_dict, kind, namespace, label_selector=label_selector, limit=limit
        )

    async def create(self, kind: Kind, obj: Any, namespace: str | None = None) -> JSONDict:
        return await self.make(_as_dict, kind, obj, namespace)

    async def replace(
        self, kind: Kind, name: str, obj: JSONDict, namespace: str | None = None
    ) -> JSONDict:
        return _as_dict(await self.fetch("PUT", kind.path(namespace, name), body=obj))

    async def patch(
        self,
        kind: Kind,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
    ) -> JSONDict:
        return await self.change(
            _as_dict,
            kind,
            name,
            patch,
            namespace,
            content_type=content_type,
            subresource=subresource,
        )

    async def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str = "Background",
        uid: str | None = None,
    ) -> bool:
        """Delete; False when it was already gone."""
        body: JSONDict = {"propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self.fetch("DELETE", kind.path(namespace, name), body=body)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True


async def connect(
    kubeconfig: str | None = None, *, qps_timeout: float = 30.0, user_agent: str | None = None
) -> Client:
    """A Client from a kubeconfig file, else $KUBECONFIG, else the in-cluster service account,
    else ~/.kube/config (see `kubeconfig.load`); `user_agent` names this process in the API
    server's audit log."""
    return from_endpoint(await load(kubeconfig), qps_timeout=qps_timeout, user_agent=user_agent)


def from_endpoint(
    endpoint: Endpoint, *, qps_timeout: float = 30.0, user_agent: str | None = None
) -> Client:
    """A Client of `endpoint` (see `connect`), on a session that asks a FencedClient's fence
    on the wire (see `_fenceable_session`)."""
    if endpoint.proxy is None:
        endpoint.proxy = _proxy_for(endpoint.host)
    session = _fenceable_session(endpoint)
    return Client(endpoint, session, user_agent=user_agent, request_timeout=qps_timeout)


def _proxy_for(host: str) -> str | None:
    """The proxy the environment names for `host`, read once here (aiohttp's trust_env reads
    the environment and ~/.netrc on every request)."""
    url = urlsplit(host)
    if url.hostname and not urllib.request.proxy_bypass(url.hostname):
        return urllib.request.getproxies().get(url.scheme or "https")
    return None


# The fence of the request being sent by the current task (set by FencedClient.fetch).
_FENCE: ContextVar[Callable[[], bool] | None] = ContextVar("kohort_fence", default=None)


async def _ask_fence(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestHeadersSentParams | aiohttp.TraceRequestChunkSentParams,
) -> None:
    allowed = _FENCE.get()
    if allowed is not None and not allowed():
        raise Fenced(f"{params.method} {params.url.path}: this replica does not hold the Lease")


def _fenceable_session(endpoint: Endpoint) -> aiohttp.ClientSession:
    """A session that asks a FencedClient's fence again when the request holds its connection
    and its headers are about to be written (after any wait for a connection or a TLS
    handshake), and last when its body is about to be written with them: aiohttp keeps the
    headers back to send them with the body, which on Python 3.11 a task of its own writes, a
    turn of the event loop later. No await is left after that last check."""
    fence = aiohttp.TraceConfig()
    fence.on_request_headers_sent.append(_ask_fence)
    fence.on_request_chunk_sent.append(_ask_fence)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=endpoint.max_connections, ssl=endpoint.ssl),
        trust_env=False,
        read_bufsize=2**21,  # watch events of large objects
        trace_configs=[fence],
    )


class FencedClient(Client):
    """A client whose every request asks `allowed` before it is handed on to `inner`, and once
    more when it holds its connection and its headers are about to be written (clients from
    `connect`), and is refused with Fenced when the answer is no. A leader writes through one:
    a replica paused while leading, even with a request already waiting for a connection, asks
    again when it resumes, before the request's bytes leave."""

    def __init__(self, inner: Client, allowed: Callable[[], bool]) -> None:
        # No session of its own: every request goes through `inner.fetch`.
        self.request_timeout = getattr(inner, "request_timeout", 30.0)
        self.inner = inner
        self.allowed = allowed

    async def close(self) -> None:
        return None  # the connection pool is `inner`'s

    async def fetch(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> bytes:
        if not self.allowed():
            raise Fenced(f"{method} {path}: this replica does not hold the Lease")
        token = _FENCE.set(self.allowed)
        try:
            return await self.inner.fetch(
                method, path, query=query, body=body, content_type=content_type
            )
        except ApiError as err:
            if err.status == 0 and not self.allowed():
                # Refused by the last check, in aiohttp's body writer: nothing was sent.
                raise Fenced(f"{method} {path}: this replica does not hold the Lease") from err
            raise
        finally:
            _FENCE.reset(token)
