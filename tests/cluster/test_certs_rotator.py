"""The certificate rotator against a real API server: one Secret, one winner, caBundle set."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from certs.authority import service_dns_names
from certs.rotation import Bundle, Policy
from certs.rotator import KubeSecretStore, Rotator, WebhookConfigurationTarget
from controller.cluster.clients import Client
from hack.localcluster import LocalCluster
from kohort import cli
from kohort.cli import build_parser
from tests.support import eventually
from webhook.main import serve

pytestmark = pytest.mark.cluster


def _inert_configuration(name: str) -> dict[str, object]:
    """A webhook configuration that matches nothing, only there to receive a caBundle."""
    webhook = {
        "name": "nothing.kohort.dev",
        "clientConfig": {"url": "https://127.0.0.1:9/never"},
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Ignore",
        "namespaceSelector": {"matchLabels": {"kohort.dev/test-no-such-namespace": name}},
        "rules": [
            {
                "apiGroups": ["example.com"],
                "apiVersions": ["v1"],
                "resources": ["nothings"],
                "operations": ["CREATE"],
            }
        ],
    }
    return {
        "metadata": {"name": name},
        "webhooks": [webhook, webhook | {"name": "also.kohort.dev"}],
    }


@pytest.fixture
async def configuration(api: client.ApiClient, namespace: str) -> AsyncIterator[str]:
    admission = client.AdmissionregistrationV1Api(api)
    name = f"kohort-rotator-{namespace}"[:63]
    await admission.create_mutating_webhook_configuration(_inert_configuration(name))
    await admission.create_validating_webhook_configuration(_inert_configuration(name))
    yield name
    with contextlib.suppress(ApiException):
        await admission.delete_mutating_webhook_configuration(name)
    with contextlib.suppress(ApiException):
        await admission.delete_validating_webhook_configuration(name)


async def test_replicas_racing_on_one_secret_agree_and_set_the_ca_bundle(
    api: client.ApiClient, admin: Client, namespace: str, configuration: str
) -> None:
    policy = Policy(dns_names=tuple(service_dns_names("kohort-webhook", namespace)))
    served: list[bytes] = []

    def replica() -> Rotator:
        targets = [
            WebhookConfigurationTarget(admin, kind, configuration)
            for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        ]
        return Rotator(
            KubeSecretStore(admin, namespace, "kohort-webhook-certs"),
            targets,
            policy,
            on_bundle=lambda bundle: served.append(bundle.serving.cert_pem),
        )

    bundles = await asyncio.gather(*(replica().reconcile() for _ in range(3)))

    assert len({b.serving.cert_pem for b in bundles}) == 1
    assert len(set(served)) == 1
    secret = await client.CoreV1Api(api).read_namespaced_secret("kohort-webhook-certs", namespace)
    stored = Bundle.from_secret_data(secret.data)
    assert stored is not None and stored.serving.cert_pem == served[0]
    admission = client.AdmissionregistrationV1Api(api)
    for read in (
        admission.read_mutating_webhook_configuration,
        admission.read_validating_webhook_configuration,
    ):
        config = await read(configuration)
        for webhook in config.webhooks:
            assert base64.b64decode(webhook.client_config.ca_bundle) == stored.ca.cert_pem


async def test_a_due_serving_certificate_is_renewed_in_the_secret(
    admin: Client, namespace: str, configuration: str
) -> None:
    policy = Policy(dns_names=("kohort-webhook",), serving_validity=dt.timedelta(days=30))
    store = KubeSecretStore(admin, namespace, "kohort-webhook-certs")
    first = await Rotator(store, [], policy).reconcile()
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=25)
    second = await Rotator(store, [], policy, clock=lambda: later).reconcile()
    assert second.serving.cert.serial_number != first.serving.cert.serial_number
    assert second.ca.cert_pem == first.ca.cert_pem


async def test_a_secret_created_with_another_type_keeps_it(
    api: client.ApiClient, admin: Client, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_secret(
        namespace, {"metadata": {"name": "prepared"}, "type": "Opaque", "data": {}}
    )
    store = KubeSecretStore(admin, namespace, "prepared")
    await Rotator(store, [], Policy(dns_names=("kohort-webhook",))).reconcile()
    secret = await core.read_namespaced_secret("prepared", namespace)
    assert secret.type == "Opaque"
    assert Bundle.from_secret_data(secret.data) is not None


async def test_kohort_webhook_with_rotate_secret_serves_the_certificate_it_stored(
    api: client.ApiClient, cluster: LocalCluster, namespace: str, configuration: str
) -> None:
    """`kohort webhook --rotate-secret`: Secret written, caBundle set, that pair served, ready."""
    port = _free_port()
    args = build_parser().parse_args(
        [
            *("webhook", "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0"),
            *("--rotate-secret", f"{namespace}/kohort-webhook-certs"),
            *("--service", "kohort-webhook", "--namespace", namespace, "--ip", "127.0.0.1"),
            *("--kubeconfig", str(cluster.kubeconfig), "--webhook-configuration", configuration),
        ]
    )
    stop = asyncio.Event()
    server = asyncio.create_task(serve(args, stop))
    try:
        secret = await eventually(
            lambda: _read_secret(api, namespace),
            lambda found: found is not None,
            within=30,
            what="the rotator to write the Secret",
        )
        stored = Bundle.from_secret_data(secret)
        assert stored is not None
        trust = ssl.create_default_context(cadata=stored.ca.cert_pem.decode())
        ready = await eventually(
            lambda: _readyz(port, trust), lambda status: status == 200, within=30, what="/readyz"
        )
        assert ready == 200
        config = await client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(
            configuration
        )
        assert base64.b64decode(config.webhooks[0].client_config.ca_bundle) == stored.ca.cert_pem
    finally:
        stop.set()
        async with asyncio.timeout(15):
            assert await server == 0


async def _read_secret(api: client.ApiClient, namespace: str) -> dict[str, str] | None:
    try:
        secret = await client.CoreV1Api(api).read_namespaced_secret(
            "kohort-webhook-certs", namespace
        )
    except ApiException:
        return None
    data: dict[str, str] | None = secret.data
    return data


async def _readyz(port: int, trust: ssl.SSLContext) -> int:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"https://127.0.0.1:{port}/readyz", ssl=trust) as response,
        ):
            return response.status
    except aiohttp.ClientError:
        return 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_kohort_certs_rotate_once_fills_the_secret_and_the_cert_dir(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    argv = [
        *("certs", "rotate", "--once", "--secret", f"{namespace}/webhook-certs"),
        *("--service", "kohort-webhook", "--namespace", namespace),
        *("--kubeconfig", str(cluster.kubeconfig), "--cert-dir", str(tmp_path)),
    ]
    assert cli.main(argv) == 0
    secret = cluster.rest.get(f"/api/v1/namespaces/{namespace}/secrets/webhook-certs")
    stored = Bundle.from_secret_data(secret["data"])
    assert stored is not None
    assert (tmp_path / "tls.crt").read_bytes() == stored.serving.cert_pem
    assert (tmp_path / "ca.crt").read_bytes() == stored.ca.cert_pem
