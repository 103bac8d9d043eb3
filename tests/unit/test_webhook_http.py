"""The HTTPS layer: endpoints, probes, metrics, limits and certificate hot reload.

These start the server in-process on 127.0.0.1 with a freshly minted CA; no cluster needed.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jsonpatch
import pytest
from cryptography import x509

from certs.authority import CertificateAuthority, KeyPair
from certs.reload import server_context
from controller.api import names
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_job, make_pod
from webhook.reviews import patch_of
from webhook.server import MAX_BODY, WebhookServer
from webhook.settings import Settings

CA = CertificateAuthority.create()


def serving_pair(ca: CertificateAuthority = CA) -> KeyPair:
    return ca.issue_server(dns_names=["localhost"], ips=["127.0.0.1"])


def client_context(*cas: CertificateAuthority) -> ssl.SSLContext:
    pem = b"".join(ca.cert_pem for ca in cas or (CA,))
    return ssl.create_default_context(cadata=pem.decode())


def local_server() -> WebhookServer:
    """On free ports of 127.0.0.1, no certificate loaded yet."""
    return WebhookServer(
        Settings(),
        server_context(),
        host="127.0.0.1",
        port=0,
        metrics_host="127.0.0.1",
        metrics_port=0,
    )


@pytest.fixture
async def server() -> AsyncIterator[WebhookServer]:
    server = local_server()
    pair = serving_pair()
    server.reloader().load_pem(pair.cert_pem, pair.key_pem)
    await server.start()
    yield server
    await server.stop()


def url(server: WebhookServer, path: str) -> str:
    return f"https://127.0.0.1:{server.port}{path}"


async def post(server: WebhookServer, path: str, body: bytes) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url(server, path), data=body, ssl=client_context()) as response,
    ):
        return response.status, await response.text()


async def test_mutate_over_tls_returns_the_patch(server: WebhookServer) -> None:
    review = make_review(make_job())
    status, text = await post(server, "/mutate", json.dumps(review).encode())
    answer = json.loads(text)
    assert status == 200
    assert answer["response"]["uid"] == review["request"]["uid"]
    assert {"op": "add", "path": "/spec/suspend", "value": True} in patch_of(answer)


async def test_namespace_default_path_implies_the_default_queue(server: WebhookServer) -> None:
    job = make_job(queue=None)
    status, text = await post(
        server, "/mutate-default-queue", json.dumps(make_review(job)).encode()
    )
    assert status == 200
    stored = jsonpatch.apply_patch(job, patch_of(json.loads(text)))
    assert stored["metadata"]["labels"][names.QUEUE_LABEL] == "default"


BAD_BODIES: dict[str, tuple[bytes, str]] = {
    "not json": (b"{nope", "not JSON"),
    "over 3 MiB": (b" " * (MAX_BODY + 1), "3 MiB"),
    "no uid": (
        b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}',
        "uid",
    ),
    "json array": (b"[]", "AdmissionReview"),
    "a Pod nested 100,000 deep": (
        json.dumps(make_review(make_pod()))
        .replace(
            '"restartPolicy"', '"deep": ' + "[" * 100_000 + "]" * 100_000 + ', "restartPolicy"'
        )
        .encode(),
        "not JSON",
    ),
}


@pytest.mark.parametrize(("body", "words"), BAD_BODIES.values(), ids=BAD_BODIES.keys())
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
async def test_bad_bodies_get_a_clear_400(
    server: WebhookServer, path: str, body: bytes, words: str
) -> None:
    status, text = await post(server, path, body)
    assert status == 400
    assert words in text


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
async def test_tls_below_1_2_is_refused(server: WebhookServer) -> None:
    old = client_context()
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("ALL:@SECLEVEL=0")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=old)
        writer.close()


async def test_readyz_waits_for_a_certificate_and_the_listener() -> None:
    server = local_server()
    assert not server.readiness.ready
    pair = serving_pair()
    server.reloader().load_pem(pair.cert_pem, pair.key_pem)
    assert not server.readiness.ready
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url(server, "/readyz"), ssl=client_context()) as response:
                assert response.status == 200
            metrics = f"http://127.0.0.1:{server.metrics_port}/readyz"
            async with session.get(metrics) as response:
                assert response.status == 200
    finally:
        await server.stop()
    assert not server.readiness.ready


async def test_metrics_count_requests_patches_and_denials(server: WebhookServer) -> None:
    await post(server, "/mutate", json.dumps(make_review(make_job())).encode())
    await post(server, "/mutate", json.dumps(make_review(make_job(parallelism=-1))).encode())
    await post(server, "/validate", b"garbage")
    text = await metrics_text(server)
    assert 'kohort_webhook_requests_total{code="200",webhook="mutate"} 2.0' in text
    assert 'kohort_webhook_requests_total{code="400",webhook="validate"} 1.0' in text
    assert 'kohort_webhook_patches_total{kind="Job"} 1.0' in text
    assert 'kohort_webhook_denials_total{kind="Job",webhook="mutate"} 1.0' in text
    assert "kohort_webhook_latency_seconds_bucket" in text
    assert "kohort_webhook_certificate_expiry_timestamp_seconds" in text


async def test_denials_of_kinds_the_webhook_does_not_know_are_counted_as_other(
    server: WebhookServer,
) -> None:
    # Anyone who reaches the port may name any kind: each must not become a metric of its own.
    for i in range(50):
        review = make_review("not an object", kind=f"MadeUp{i}")
        await post(server, "/validate", json.dumps(review).encode())
    await post(server, "/validate", json.dumps(make_review("not an object", kind="Pod")).encode())
    text = await metrics_text(server)
    assert 'kohort_webhook_denials_total{kind="other",webhook="validate"} 50.0' in text
    assert 'kohort_webhook_denials_total{kind="Pod",webhook="validate"} 1.0' in text
    assert "MadeUp" not in text


async def metrics_text(server: WebhookServer) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as response,
    ):
        return await response.text()


async def served_certificate(port: int, context: ssl.SSLContext) -> x509.Certificate:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    der: Any = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    return x509.load_der_x509_certificate(der)


async def test_a_reloaded_certificate_serves_new_handshakes_and_keeps_open_connections(
    server: WebhookServer,
) -> None:
    new_ca = CertificateAuthority.create(common_name="next-ca")
    trusting_both = client_context(CA, new_ca)
    connector = aiohttp.TCPConnector(ssl=trusting_both, limit=1)
    review = json.dumps(make_review(make_job())).encode()
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.post(url(server, "/mutate"), data=review) as response:
            assert response.status == 200
        before = await served_certificate(server.port, trusting_both)
        new_pair = serving_pair(new_ca)
        assert server.reloader().load_pem(new_pair.cert_pem, new_pair.key_pem)
        # The pooled keep-alive connection still answers...
        async with session.post(url(server, "/mutate"), data=review) as response:
            assert response.status == 200
        # ...and a new handshake gets the new certificate.
        after = await served_certificate(server.port, trusting_both)
    assert before.issuer != after.issuer
    assert after.serial_number == new_pair.cert.serial_number


async def test_a_mismatched_pair_is_refused_and_the_old_one_keeps_serving(
    server: WebhookServer,
) -> None:
    first, second = serving_pair(), serving_pair()
    reloader = server.reloader()
    reloader.load_pem(first.cert_pem, first.key_pem)
    with pytest.raises(ValueError, match="not a usable certificate"):
        reloader.load_pem(first.cert_pem, second.key_pem)
    served = await served_certificate(server.port, client_context())
    assert served.serial_number == first.cert.serial_number


async def test_two_replicas_with_reuse_port_share_one_port_and_either_serves_alone() -> None:
    pair = serving_pair()
    first = WebhookServer(
        Settings(), server_context(), host="127.0.0.1", port=0, metrics_port=None, reuse_port=True
    )
    first.reloader().load_pem(pair.cert_pem, pair.key_pem)
    await first.start()
    second = WebhookServer(
        Settings(),
        server_context(),
        host="127.0.0.1",
        port=first.port,
        metrics_port=None,
        reuse_port=True,
    )
    second.reloader().load_pem(pair.cert_pem, pair.key_pem)
    await second.start()
    review = json.dumps(make_review(make_job())).encode()
    try:
        assert second.port == first.port
        await first.stop()
        status, _ = await post(second, "/mutate", review)
        assert status == 200
    finally:
        await first.stop()
        await second.stop()
