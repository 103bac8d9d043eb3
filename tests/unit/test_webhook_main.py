"""`kohort webhook`: flags, waiting for a certificate, picking up new certificate files."""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from certs.authority import CertificateAuthority
from controller.workloads.base import Backend
from kohort.cli import build_parser
from webhook.main import serve, settings_from
from webhook.reviews import UserInfo

CA = CertificateAuthority.create()


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["webhook", *argv])


def test_defaults_are_port_9443_volcano_and_the_controller_service_account() -> None:
    args = parse()
    settings = settings_from(args)
    assert args.port == 9443
    assert settings.placement.backend is Backend.VOLCANO
    assert settings.placement.scheduler_name == "volcano"
    controller = UserInfo("system:serviceaccount:kohort-system:kohort-controller")
    assert settings.controller.matches(controller)
    assert not settings.controller.matches(UserInfo("alice", frozenset({"system:masters"})))


def test_controller_identity_and_backend_come_from_flags() -> None:
    settings = settings_from(
        parse(
            "--backend",
            "coscheduling",
            "--controller-group",
            "kohort:controllers",
            "--controller-service-account",
            "ops/kohort",
        )
    )
    assert settings.placement.backend is Backend.COSCHEDULING
    assert settings.controller.matches(UserInfo("x", frozenset({"kohort:controllers"})))
    assert settings.controller.matches(UserInfo("system:serviceaccount:ops:kohort"))
    assert not settings.controller.matches(
        UserInfo("system:serviceaccount:kohort-system:kohort-controller")
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _serial_served(port: int) -> int | None:
    context = ssl.create_default_context(cadata=CA.cert_pem.decode())
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except OSError:
        return None
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return int(x509.load_der_x509_certificate(der).serial_number)


async def _eventually(
    probe: Callable[[], Awaitable[int | None]], want: int, seconds: float = 10
) -> None:
    for _ in range(int(seconds / 0.1)):
        if await probe() == want:
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"never saw {want!r}")


async def test_the_server_listens_only_once_a_certificate_appears_and_reloads_new_files(
    tmp_path: Path,
) -> None:
    port, metrics_port = _free_port(), _free_port()
    args = parse(
        "--cert-dir",
        str(tmp_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        "--cert-reload-interval",
        "0.1",
    )
    stop = asyncio.Event()
    server = asyncio.create_task(serve(args, stop))
    try:
        await asyncio.sleep(0.3)
        assert await _serial_served(port) is None  # no certificate, no listener
        first = CA.issue_server(ips=["127.0.0.1"])
        first.write(tmp_path / "tls.crt", tmp_path / "tls.key")
        await _eventually(lambda: _serial_served(port), first.cert.serial_number)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{metrics_port}/readyz") as ready,
        ):
            assert ready.status == 200
        second = CA.issue_server(ips=["127.0.0.1"])
        second.write(tmp_path / "tls.crt", tmp_path / "tls.key")
        await _eventually(lambda: _serial_served(port), second.cert.serial_number)
    finally:
        stop.set()
        async with asyncio.timeout(10):
            assert await server == 0
