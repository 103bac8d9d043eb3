"""The one module that imports kubernetes-asyncio: connect, and typed-by-kind JSON requests.

Objects travel as plain JSON dicts (the workload adapters and the cache read them as the API
server sends them); `Kind` says where a resource lives. Errors surface as `ApiError` with the
HTTP status, so callers can tell 404, 409 and 410 apart.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client, config

JSONDict = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True, slots=True)
class Kind:
    """Where a resource lives in the API: group/version/plural and its scope."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


NODES = Kind("", "v1", "nodes", "Node", namespaced=False)
PODS = Kind("", "v1", "pods", "Pod")
EVENTS = Kind("", "v1", "events", "Event")
NAMESPACES = Kind("", "v1", "namespaces", "Namespace", namespaced=False)
JOBS = Kind("batch", "v1", "jobs", "Job")
STATEFULSETS = Kind("apps", "v1", "statefulsets", "StatefulSet")
LEADERWORKERSETS = Kind("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")
LEASES = Kind("coordination.k8s.io", "v1", "leases", "Lease")
PRIORITY_CLASSES = Kind(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
VOLCANO_PODGROUPS = Kind("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
VOLCANO_QUEUES = Kind("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False)
COSCHEDULING_PODGROUPS = Kind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
CLUSTER_QUEUES = Kind("kohort.dev", "v1alpha1", "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = Kind("kohort.dev", "v1alpha1", "localqueues", "LocalQueue")
RESOURCE_FLAVORS = Kind(
    "kohort.dev", "v1alpha1", "resourceflavors", "ResourceFlavor", namespaced=False
)
WORKLOADS = Kind("kohort.dev", "v1alpha1", "workloads", "Workload")
CRDS = Kind(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)


class ApiError(Exception):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path} -> HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        try:
            return str(json.loads(self.body).get("reason", ""))
        except ValueError:
            return ""


class Client:
    """JSON requests over one kubernetes-asyncio ApiClient (connection pool, auth, TLS)."""

    def __init__(self, api: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self.api = api
        self.request_timeout = request_timeout

    async def close(self) -> None:
        await self.api.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: Any = None,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        response = await self.api.call_api(
            path,
            method,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=request_timeout
            if request_timeout is not None
            else self.request_timeout,
        )
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSONDict:
        response = await self._send(method, path, query=query, body=body, content_type=content_type)
        async with response:
            text = await response.text()
            if not 200 <= response.status <= 299:
                raise ApiError(response.status, method, path, text)
        result: JSONDict = json.loads(text) if text else {}
        return result

    # -- verbs ------------------------------------------------------------------------------

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSONDict:
        return await self.request("GET", kind.path(namespace, name))

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int = 500,
    ) -> tuple[list[JSONDict], str]:
        """Every object (following continue tokens), and the list's resourceVersion."""
        items: list[JSONDict] = []
        query: dict[str, str] = {"limit": str(limit)}
        if label_selector:
            query["labelSelector"] = label_selector
        while True:
            page = await self.request("GET", kind.path(namespace), query=query)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion", ""))
            query["continue"] = token

    async def watch(
        self,
        kind: Kind,
        resource_version: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[tuple[str, JSONDict]]:
        """(type, object) events from `resource_version` on, bookmarks included, until the
        server ends the watch. An expired version raises ApiError(410)."""
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
                event = json.loads(line)
                kind_of_event = str(event.get("type", ""))
                obj = event.get("object") or {}
                if kind_of_event == "ERROR":
                    raise ApiError(int(obj.get("code", 500)), "WATCH", path, json.dumps(obj))
                yield kind_of_event, obj

    async def create(self, kind: Kind, obj: JSONDict, namespace: str | None = None) -> JSONDict:
        return await self.request("POST", kind.path(namespace), body=obj)

    async def replace(
        self, kind: Kind, name: str, obj: JSONDict, namespace: str | None = None
    ) -> JSONDict:
        return await self.request("PUT", kind.path(namespace, name), body=obj)

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
        path = kind.path(namespace, name)
        if subresource:
            path += f"/{subresource}"
        return await self.request("PATCH", path, body=patch, content_type=content_type)

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
            await self.request("DELETE", kind.path(namespace, name), body=body)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True


async def connect(kubeconfig: str | None = None, *, qps_timeout: float = 30.0) -> Client:
    """A Client from a kubeconfig file, else the default kubeconfig, else in-cluster config."""
    configuration = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            await config.load_kube_config(client_configuration=configuration)
    return Client(client.ApiClient(configuration), request_timeout=qps_timeout)


def is_api_error(err: BaseException, *statuses: int) -> bool:
    return isinstance(err, ApiError) and (not statuses or err.status in statuses)
