"""How the controller finds its API server and proves who it is: a kubeconfig with a client
certificate, a token or a token file, the pod's service account, and anything else (an exec
credential plugin) through kubernetes-asyncio's loader. Each is checked against a real TLS
server that requires what the kubeconfig says."""

from __future__ import annotations

import base64
import ssl
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from certs.authority import CertificateAuthority
from controller.api import kinds
from controller.cluster import kubeconfig
from controller.cluster.clients import ApiError, connect, from_endpoint
from controller.cluster.kubeconfig import ConfigError, TokenFile, in_cluster


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@asynccontextmanager
async def tls_server(
    tmp_path: Path, ca: CertificateAuthority, *, client_certificates: bool = False
) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An HTTPS server on 127.0.0.1 with a certificate of `ca`; it answers every request with
    who asked (the client certificate's CN, the Authorization header)."""
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in peer["subject"]) if peer else {}
        seen.append(
            {"cn": subject.get("commonName"), "authorization": request.headers.get("Authorization")}
        )
        return web.json_response({"metadata": {"name": "x"}})

    serving = ca.issue_server(["localhost"], ["127.0.0.1"])
    serving.write(tmp_path / "server.crt", tmp_path / "server.key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    if client_certificates:
        context.load_verify_locations(cadata=ca.cert_pem.decode())
        context.verify_mode = ssl.CERT_REQUIRED
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=context)
    try:
        yield f"https://127.0.0.1:{server.port}", seen
    finally:
        await server.close()


def write_kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    return path


async def test_a_kubeconfig_with_a_client_certificate_is_who_the_server_sees(
    tmp_path: Path,
) -> None:
    ca = CertificateAuthority.create("test-ca")
    user = ca.issue_client("kohort-controller", ["kohort"])
    async with tls_server(tmp_path, ca, client_certificates=True) as (host, seen):
        path = write_kubeconfig(
            tmp_path / "config",
            {"server": host, "certificate-authority-data": _b64(ca.cert_pem)},
            {
                "client-certificate-data": _b64(user.cert_pem),
                "client-key-data": _b64(user.key_pem),
            },
        )
        api = await connect(str(path))
        try:
            await api.get(kinds.EVENTS, "x", "ns")
        finally:
            await api.close()

    assert seen == [{"cn": "kohort-controller", "authorization": None}]


async def test_files_a_kubeconfig_names_are_found_beside_it_and_a_token_is_sent(
    tmp_path: Path,
) -> None:
    ca = CertificateAuthority.create("test-ca")
    (tmp_path / "kube").mkdir()
    (tmp_path / "kube" / "ca.crt").write_bytes(ca.cert_pem)
    async with tls_server(tmp_path, ca) as (host, seen):
        path = write_kubeconfig(
            tmp_path / "kube" / "config",
            {"server": host + "/", "certificate-authority": "ca.crt"},
            {"token": "s3cret"},
        )
        api = await connect(str(path))
        try:
            await api.get(kinds.EVENTS, "x", "ns")
        finally:
            await api.close()

    assert seen == [{"cn": None, "authorization": "Bearer s3cret"}]


async def test_a_server_whose_certificate_the_kubeconfig_does_not_trust_is_refused(
    tmp_path: Path,
) -> None:
    ca, other = CertificateAuthority.create("test-ca"), CertificateAuthority.create("other-ca")
    async with tls_server(tmp_path, ca) as (host, seen):
        path = write_kubeconfig(
            tmp_path / "config",
            {"server": host, "certificate-authority-data": _b64(other.cert_pem)},
            {"token": "s3cret"},
        )
        api = await connect(str(path))
        try:
            with pytest.raises(ApiError, match="certificate verify failed"):
                await api.get(kinds.EVENTS, "x", "ns")
        finally:
            await api.close()

    assert seen == []


async def test_a_token_file_is_read_again_once_its_token_may_have_been_rotated(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    now = [0.0]
    auth = TokenFile(token_file, reread=60.0, clock=lambda: now[0])
    headers: dict[str, str] = {}

    await auth.apply(headers)
    token_file.write_text("second\n")
    now[0] = 59.0
    await auth.apply(headers)
    assert headers["Authorization"] == "Bearer first"

    now[0] = 60.0
    await auth.apply(headers)
    assert headers["Authorization"] == "Bearer second"


async def test_in_a_pod_the_service_account_token_is_sent_to_the_kubernetes_service(
    tmp_path: Path,
) -> None:
    ca = CertificateAuthority.create("test-ca")
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "ca.crt").write_bytes(ca.cert_pem)
    (account / "token").write_text("pod-token")
    async with tls_server(tmp_path, ca) as (host, seen):
        port = host.rsplit(":", 1)[1]
        environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
        api = from_endpoint(in_cluster(environ, account))
        try:
            await api.get(kinds.EVENTS, "x", "ns")
        finally:
            await api.close()

    assert seen == [{"cn": None, "authorization": "Bearer pod-token"}]


async def test_an_exec_credential_plugin_is_run_through_kubernetes_asyncio(
    tmp_path: Path,
) -> None:
    ca = CertificateAuthority.create("test-ca")
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        textwrap.dedent(
            """
            import json
            print(json.dumps({
                "apiVersion": "client.authentication.k8s.io/v1",
                "kind": "ExecCredential",
                "status": {"token": "from-the-plugin"},
            }))
            """
        )
    )
    async with tls_server(tmp_path, ca) as (host, seen):
        path = write_kubeconfig(
            tmp_path / "config",
            {"server": host, "certificate-authority-data": _b64(ca.cert_pem)},
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": sys.executable,
                    "args": [str(plugin)],
                    "interactiveMode": "Never",
                }
            },
        )
        endpoint = await kubeconfig.load(str(path))
        assert isinstance(endpoint.auth, kubeconfig.LibraryAuth)
        api = from_endpoint(endpoint)
        try:
            await api.get(kinds.EVENTS, "x", "ns")
        finally:
            await api.close()

    assert seen == [{"cn": None, "authorization": "Bearer from-the-plugin"}]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("- not a mapping\n", "not a kubeconfig"),
        ("apiVersion: v1\nkind: Config\n", "no current-context"),
        ("current-context: gone\ncontexts: []\n", "no context named 'gone'"),
        (
            "current-context: ctx\ncontexts: [{name: ctx, context: {cluster: c}}]\n",
            "no cluster named 'c'",
        ),
        ("{{{", "cannot read the kubeconfig"),
    ],
)
async def test_a_broken_kubeconfig_is_refused_with_what_is_wrong(
    tmp_path: Path, document: str, message: str
) -> None:
    path = tmp_path / "config"
    path.write_text(document)

    with pytest.raises(ConfigError, match=message):
        await kubeconfig.load(str(path))


async def test_a_missing_kubeconfig_is_refused_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=str(tmp_path / "nowhere")):
        await kubeconfig.load(str(tmp_path / "nowhere"))


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        ({"certificate-authority": "missing.crt"}, {}, "certificate-authority: cannot read"),
        ({"certificate-authority-data": "not base64!"}, {}, "certificate-authority-data: not"),
        ({"certificate-authority-data": _b64(b"no PEM here")}, {}, "certificate-authority:"),
        ({}, {"client-certificate": "missing.crt"}, "client-certificate: cannot read"),
        ({}, {"tokenFile": "missing-token"}, "cannot read the token file"),
        ({}, {"tokenFile": "empty-token"}, "the token file .*empty-token is empty"),
    ],
)
async def test_a_kubeconfig_entry_that_cannot_be_used_is_refused_naming_it(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], message: str
) -> None:
    (tmp_path / "empty-token").write_text("\n")
    path = write_kubeconfig(
        tmp_path / "config", {"server": "https://127.0.0.1:6443", **cluster}, user
    )

    with pytest.raises(ConfigError, match=f"kubeconfig {path}: {message}"):
        await kubeconfig.load(str(path))


async def test_tokens_never_show_in_what_a_log_line_prints_of_an_endpoint(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "config", {"server": "https://127.0.0.1:6443"}, {"token": "s3cret"}
    )

    endpoint = await kubeconfig.load(str(path))

    assert "s3cret" not in repr(endpoint)
