"""A minimal synchronous JSON client for setting up the local control plane (admin identity).

Tests and kohort itself talk to the cluster through kubernetes-asyncio; this client only
bootstraps (readiness, nodes, CRDs) where no event loop is running.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path} -> HTTP {status}: {body[:500]}")
        self.status = status


@dataclass
class RestClient:
    server: str
    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None
    timeout: float = 30.0

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if self.cert_file and self.key_file:
            ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
    ) -> Any:
        url = urllib.parse.urlsplit(self.server)
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        conn = http.client.HTTPSConnection(
            url.hostname or "127.0.0.1", url.port, context=self._context(), timeout=self.timeout
        )
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = content_type
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace")
        finally:
            conn.close()
        if resp.status >= 400:
            raise ApiError(resp.status, method, path, text)
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, obj: dict[str, Any], exist_ok: bool = False) -> Any:
        try:
            return self.request("POST", path, obj)
        except ApiError as err:
            if exist_ok and err.status == 409:
                return None
            raise

    def apply(self, path: str, obj: dict[str, Any], manager: str = "kohort-dev") -> Any:
        """Server-side apply of one object at its own path (works for very large CRDs)."""
        return self.request(
            "PATCH",
            path,
            obj,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": manager, "force": "true"},
        )

    def patch(self, path: str, patch: dict[str, Any]) -> Any:
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    def delete(self, path: str, missing_ok: bool = True) -> Any:
        try:
            return self.request("DELETE", path)
        except ApiError as err:
            if missing_ok and err.status == 404:
                return None
            raise
