"""The in-cluster certificate rotator: Secret first, then caBundle, then the server.

Every replica runs it. The Secret is the source of truth: a replica that wants new certificates
writes them with the resourceVersion it read, so when two replicas race one write wins (the
other gets 409 Conflict), and the loser re-reads and uses the winner's certificates. The CA
goes into the caBundle of kohort's webhook configurations; the serving pair goes to the
server (files in the certificate directory, and a hot reload).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from certs.rotation import (
    CA_CERT,
    TLS_CERT,
    TLS_KEY,
    Bundle,
    Policy,
    Renewal,
    needed,
    renew,
)
from controller.api import kinds
from controller.cluster.clients import JSON_PATCH, ApiError, Client

log = logging.getLogger(__name__)
_CONFIGURATION_KINDS = {
    kinds.MUTATING_WEBHOOK_CONFIGURATIONS.kind: kinds.MUTATING_WEBHOOK_CONFIGURATIONS,
    kinds.VALIDATING_WEBHOOK_CONFIGURATIONS.kind: kinds.VALIDATING_WEBHOOK_CONFIGURATIONS,
}

Clock = Callable[[], dt.datetime]
MAX_RACES = 5


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class SecretStore(Protocol):
    async def read(self) -> tuple[dict[str, str] | None, str | None]:
        """The Secret's data and resourceVersion; (None, None) when it does not exist."""
        ...

    async def write(self, data: dict[str, str], resource_version: str | None) -> bool:
        """Create (no resourceVersion) or replace it; False when another writer got there first."""
        ...


class CABundleTarget(Protocol):
    async def inject(self, ca_bundle: bytes) -> None: ...


class Rotator:
    def __init__(
        self,
        store: SecretStore,
        targets: Iterable[CABundleTarget],
        policy: Policy,
        *,
        on_bundle: Callable[[Bundle], None] = lambda _: None,
        clock: Clock = utc_now,
    ) -> None:
        self.store = store
        self.targets = list(targets)
        self.policy = policy
        self.on_bundle = on_bundle
        self.clock = clock

    async def settle(self) -> Bundle:
        """The bundle every replica agrees on, renewed first if it is due."""
        for _ in range(MAX_RACES):
            data, version = await self.store.read()
            current = Bundle.from_secret_data(data)
            what = needed(current, self.policy, self.clock())
            if what is Renewal.NOTHING and current is not None:
                return current
            fresh = renew(current, what, self.policy, self.clock())
            if await self.store.write(fresh.to_secret_data(), version):
                log.info("certificates renewed", extra={"renewed": what.name.lower()})
                return fresh
            log.info("another replica renewed the certificates first; reading theirs")
        raise RuntimeError(f"the certificate Secret changed under us {MAX_RACES} times in a row")

    async def reconcile(self) -> Bundle:
        bundle = await self.settle()
        ca_bundle = bundle.ca_bundle(self.clock())
        for target in self.targets:
            await target.inject(ca_bundle)
        self.on_bundle(bundle)
        return bundle

    def next_check(self, bundle: Bundle, interval: dt.timedelta) -> float:
        """Seconds until the next reconcile: the interval, or sooner when renewal is due."""
        due = min(
            self.policy.renew_at(bundle.serving.cert), self.policy.renew_at(bundle.ca.pair.cert)
        )
        return max(1.0, min(interval.total_seconds(), (due - self.clock()).total_seconds()))

    async def run(self, interval: dt.timedelta = dt.timedelta(minutes=10)) -> None:
        """Reconcile forever; errors are logged and retried after a short pause."""
        while True:
            try:
                bundle = await self.reconcile()
                delay = self.next_check(bundle, interval)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("certificate rotation failed; retrying")
                delay = 10.0
            await asyncio.sleep(delay)


def write_cert_dir(cert_dir: Path, bundle: Bundle) -> None:
    """ca.crt, tls.crt and tls.key, each replaced atomically (rename) so readers never see
    half a file."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    files = {
        CA_CERT: bundle.ca.cert_pem,
        TLS_CERT: bundle.serving.cert_pem,
        TLS_KEY: bundle.serving.key_pem,
    }
    for name, pem in files.items():
        fd, tmp = tempfile.mkstemp(dir=cert_dir, prefix=f".{name}.")
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        os.replace(tmp, cert_dir / name)


# --- Kubernetes I/O -------------------------------------------------------------------------


class KubeSecretStore:
    def __init__(self, api: Client, namespace: str, name: str) -> None:
        self.api = api
        self.namespace, self.name = namespace, name
        # A Secret's type cannot change: a replace keeps the type the Secret was created with.
        self.type = "kubernetes.io/tls"

    async def read(self) -> tuple[dict[str, str] | None, str | None]:
        try:
            secret = await self.api.get(kinds.SECRETS, self.name, self.namespace)
        except ApiError as err:
            if err.status == 404:
                return None, None
            raise
        self.type = secret.get("type") or self.type
        return secret.get("data") or None, (secret.get("metadata") or {}).get("resourceVersion")

    async def write(self, data: dict[str, str], resource_version: str | None) -> bool:
        body: Any = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": self.type,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "data": data,
        }
        try:
            if resource_version is None:
                await self.api.create(kinds.SECRETS, body, self.namespace)
            else:
                body["metadata"]["resourceVersion"] = resource_version
                await self.api.replace(kinds.SECRETS, self.name, body, self.namespace)
        except ApiError as err:
            if err.status == 409:
                return False
            raise
        return True


def ca_bundle_patch(config: Mapping[str, Any], ca_bundle: bytes) -> list[dict[str, Any]]:
    """JSON Patch setting caBundle on every webhook of a configuration (empty if all set).

    It starts with a `test` of the resourceVersion, so a configuration that changed since it
    was read is never patched by position.
    """
    encoded = base64.b64encode(ca_bundle).decode()
    operations: list[dict[str, Any]] = []
    for index, webhook in enumerate(config.get("webhooks") or []):
        current = (webhook.get("clientConfig") or {}).get("caBundle")
        if current != encoded:
            path = f"/webhooks/{index}/clientConfig/caBundle"
            operations.append({"op": "add", "path": path, "value": encoded})
    if not operations:
        return []
    version = (config.get("metadata") or {}).get("resourceVersion")
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *operations]


class WebhookConfigurationTarget:
    """caBundle of one MutatingWebhookConfiguration or ValidatingWebhookConfiguration."""

    def __init__(self, api: Client, kind: str, name: str) -> None:
        if kind not in _CONFIGURATION_KINDS:
            raise ValueError(f"not a webhook configuration kind: {kind}")
        self.api = api
        self.kind, self.name = kind, name

    async def inject(self, ca_bundle: bytes) -> None:
        kind = _CONFIGURATION_KINDS[self.kind]
        for _ in range(MAX_RACES):
            try:
                config = await self.api.get(kind, self.name)
            except ApiError as err:
                if err.status == 404:
                    log.warning("%s %s not found; caBundle not set", self.kind, self.name)
                    return
                raise
            operations = ca_bundle_patch(config, ca_bundle)
            if not operations:
                return
            try:
                await self.api.patch(kind, self.name, operations, content_type=JSON_PATCH)
                return
            except ApiError as err:
                if err.status not in (409, 422):  # the resourceVersion test failed
                    raise
        raise RuntimeError(f"{self.kind} {self.name} kept changing; caBundle not set")
