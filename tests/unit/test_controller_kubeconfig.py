"""How the controller finds its API server and proves who it is: a kubeconfig with a client
certificate, a token or a token file, the pod's service account, and anything else (an exec
credential plugin) through kubernetes-asyncio's loader. Each is checked against a real TLS
server that requires what the kubeconfig says."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import ssl
import sys
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
    tmp_path: Path,
    ca: CertificateAuthority,
    *,
    client_certificates: bool = False,
    refused: frozenset[str] = frozenset(),
) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An HTTPS server on 127.0.0.1 with a certificate of `ca`; it answers every request with
    who asked (the client certificate's CN, the Authorization header), or 401 to an
    Authorization header in `refused`."""
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in peer["subject"]) if peer else {}
        seen.append(
            {"cn": subject.get("commonName"), "authorization": request.headers.get("Authorization")}
        )
        if request.headers.get("Authorization") in refused:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
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


async def test_a_token_file_whose_token_the_server_refused_is_read_again_at_once(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    auth = TokenFile(token_file, reread=60.0, clock=lambda: 0.0)
    headers: dict[str, str] = {}
    await auth.apply(headers)
    token_file.write_text("second\n")

    auth.rejected()
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


# An exec credential plugin: each run counts itself in the file named by its first argument and
# prints what its second asks for (a token of that run, with or without an expiry, a client
# certificate from the files named next, nothing, no answer, or a failure).
PLUGIN = """
import json, sys
from pathlib import Path
runs = Path(sys.argv[1])
run = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(run))
mode = sys.argv[2]
if mode == "fail" or (mode == "fail-after-first" and run > 1):
    sys.exit("the identity provider is down")
if mode == "hang":
    import time
    time.sleep(60)
status = {"token": f"token-{run}"} if mode != "empty" else {}
if mode in ("expiring", "fail-after-first"):
    status["expirationTimestamp"] = "2030-01-01T00:00:00Z"
if mode == "certificate":
    status = {
        "clientCertificateData": Path(sys.argv[3]).read_text(),
        "clientKeyData": Path(sys.argv[4]).read_text(),
    }
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": status,
}))
"""
EXPIRY = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def exec_config(tmp_path: Path, *args: str) -> dict[str, Any]:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    return {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(plugin), str(tmp_path / "runs"), *args],
        "interactiveMode": "Never",
    }


async def load_exec_kubeconfig(
    tmp_path: Path, ca: CertificateAuthority, host: str, *args: str
) -> kubeconfig.Endpoint:
    """The endpoint of a kubeconfig for `host` whose user is the plugin run with `args`."""
    path = write_kubeconfig(
        tmp_path / "config",
        {"server": host, "certificate-authority-data": _b64(ca.cert_pem)},
        {"exec": exec_config(tmp_path, *args)},
    )
    return await kubeconfig.load(str(path))


async def test_an_exec_credential_plugins_token_is_what_the_server_sees(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("test-ca")
    async with tls_server(tmp_path, ca) as (host, seen):
        endpoint = await load_exec_kubeconfig(tmp_path, ca, host, "token")
        api = from_endpoint(endpoint)
        try:
            await api.get(kinds.EVENTS, "x", "ns")
            await api.get(kinds.EVENTS, "x", "ns")
        finally:
            await api.close()

    assert isinstance(endpoint.auth, kubeconfig.ExecPlugin)
    assert seen == [{"cn": None, "authorization": "Bearer token-1"}] * 2
    assert (tmp_path / "runs").read_text() == "1"  # a token without an expiry is kept


async def started_plugin(
    tmp_path: Path, mode: str, *, at: dt.datetime
) -> tuple[kubeconfig.ExecPlugin, list[dt.datetime]]:
    """The plugin run with `mode`, started at `at`, and the clock it reads (now[0])."""
    now = [at]
    plugin = kubeconfig.ExecPlugin(exec_config(tmp_path, mode), clock=lambda: now[0])
    await plugin.start()
    return plugin, now


async def _authorization(plugin: kubeconfig.ExecPlugin) -> str:
    headers: dict[str, str] = {}
    await plugin.apply(headers)
    return headers["Authorization"]


async def test_a_plugins_token_is_renewed_shortly_before_it_expires_and_not_sooner(
    tmp_path: Path,
) -> None:
    plugin, now = await started_plugin(tmp_path, "expiring", at=EXPIRY - dt.timedelta(hours=1))

    seen = [await _authorization(plugin)]
    now[0] = EXPIRY - kubeconfig.EXEC_RENEW_BEFORE - dt.timedelta(seconds=1)
    seen.append(await _authorization(plugin))
    now[0] = EXPIRY - kubeconfig.EXEC_RENEW_BEFORE
    seen.append(await _authorization(plugin))

    assert seen == ["Bearer token-1", "Bearer token-1", "Bearer token-2"]


async def test_a_renewal_that_fails_keeps_the_last_token_and_is_tried_again_later(
    tmp_path: Path,
) -> None:
    plugin, now = await started_plugin(
        tmp_path, "fail-after-first", at=EXPIRY - dt.timedelta(hours=1)
    )
    now[0] = EXPIRY

    seen = [await _authorization(plugin), await _authorization(plugin)]
    runs_after_a_failure = (tmp_path / "runs").read_text()
    now[0] = EXPIRY + kubeconfig.EXEC_RETRY_AFTER
    seen.append(await _authorization(plugin))

    assert seen == ["Bearer token-1"] * 3
    assert runs_after_a_failure == "2"  # the second request did not run it again
    assert (tmp_path / "runs").read_text() == "3"


async def test_a_token_the_server_refuses_is_asked_for_again_for_the_next_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubeconfig, "EXEC_RETRY_AFTER", dt.timedelta(0))
    ca = CertificateAuthority.create("test-ca")
    async with tls_server(tmp_path, ca, refused=frozenset({"Bearer token-1"})) as (host, seen):
        endpoint = await load_exec_kubeconfig(tmp_path, ca, host, "token")
        api = from_endpoint(endpoint)
        try:
            with pytest.raises(ApiError) as refused:
                await api.get(kinds.EVENTS, "x", "ns")
            await api.get(kinds.EVENTS, "x", "ns")
        finally:
            await api.close()

    assert refused.value.status == 401
    assert [s["authorization"] for s in seen] == ["Bearer token-1", "Bearer token-2"]


async def test_a_refused_token_is_not_asked_for_again_sooner_than_the_retry_interval(
    tmp_path: Path,
) -> None:
    plugin, now = await started_plugin(tmp_path, "token", at=EXPIRY)

    plugin.rejected()
    seen = [await _authorization(plugin)]
    now[0] = EXPIRY + kubeconfig.EXEC_RETRY_AFTER
    seen.append(await _authorization(plugin))

    assert seen == ["Bearer token-1", "Bearer token-2"]


async def test_a_token_that_expires_at_once_is_not_asked_for_again_at_every_request(
    tmp_path: Path,
) -> None:
    plugin, now = await started_plugin(tmp_path, "expiring", at=EXPIRY)

    seen = [await _authorization(plugin) for _ in range(3)]
    now[0] = EXPIRY + kubeconfig.EXEC_RETRY_AFTER
    seen.append(await _authorization(plugin))

    assert seen == ["Bearer token-1"] * 3 + ["Bearer token-2"]


async def test_requests_that_all_find_the_token_due_run_the_plugin_once(tmp_path: Path) -> None:
    plugin, now = await started_plugin(tmp_path, "expiring", at=EXPIRY - dt.timedelta(hours=1))
    now[0] = EXPIRY

    seen = await asyncio.gather(*(_authorization(plugin) for _ in range(5)))

    assert seen == ["Bearer token-2"] * 5
    assert (tmp_path / "runs").read_text() == "2"


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        ("fail", r"exec plugin .*the identity provider is down"),
        ("no command", "missing key 'command'"),
        ("empty", "it gave neither a token nor a client certificate"),
        ("hang", "it did not answer within 1 s"),
    ],
)
async def test_a_plugin_that_cannot_give_a_token_at_start_is_refused_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin: str, message: str
) -> None:
    monkeypatch.setattr(kubeconfig, "EXEC_TIMEOUT", 1.0)
    config = exec_config(tmp_path, plugin)
    if plugin == "no command":
        del config["command"]
    path = write_kubeconfig(
        tmp_path / "config", {"server": "https://127.0.0.1:6443"}, {"exec": config}
    )

    with pytest.raises(ConfigError, match=f"kubeconfig {path}: .*{message}"):
        await kubeconfig.load(str(path))


async def test_a_plugins_client_certificate_is_who_the_server_sees(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("test-ca")
    user = ca.issue_client("from-a-plugin", ["kohort"])
    user.write(tmp_path / "user.crt", tmp_path / "user.key")
    async with tls_server(tmp_path, ca, client_certificates=True) as (host, seen):
        endpoint = await load_exec_kubeconfig(
            tmp_path,
            ca,
            host,
            "certificate",
            str(tmp_path / "user.crt"),
            str(tmp_path / "user.key"),
        )
        api = from_endpoint(endpoint)
        try:
            await api.get(kinds.EVENTS, "x", "ns")
        finally:
            await api.close()

    assert seen == [{"cn": "from-a-plugin", "authorization": None}]


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


def _token_kubeconfig(path: Path, server: str, token: str) -> Path:
    return write_kubeconfig(path, {"server": server}, {"token": token})


async def _bearer(endpoint: kubeconfig.Endpoint) -> str:
    headers: dict[str, str] = {}
    await endpoint.auth.apply(headers)
    return headers["Authorization"]


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A pod's service account, a home with ~/.kube/config, and two more kubeconfigs, each
    naming a server and a token of its own."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "ca.crt").write_bytes(CertificateAuthority.create("test-ca").cert_pem)
    (account / "token").write_text("pod-token")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    _token_kubeconfig(home / ".kube" / "config", "https://home:6443", "home-token")
    return {
        "account": account,
        "pod": {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
        "flag": str(_token_kubeconfig(tmp_path / "flag", "https://flag:6443", "flag-token")),
        "env": str(_token_kubeconfig(tmp_path / "env", "https://env:6443", "env-token")),
    }


@pytest.mark.parametrize(
    ("flag", "environment", "in_pod", "expected"),
    [
        (True, True, True, ("https://flag:6443", "Bearer flag-token")),
        (False, True, True, ("https://env:6443", "Bearer env-token")),
        (False, False, True, ("https://10.0.0.1:443", "Bearer pod-token")),
        (False, False, False, ("https://home:6443", "Bearer home-token")),
    ],
    ids=[
        "--kubeconfig wins over everything",
        "then $KUBECONFIG, even in a pod",
        "then the pod's service account",
        "else ~/.kube/config",
    ],
)
async def test_the_controller_finds_its_api_server_in_controller_runtimes_order(
    places: dict[str, Any], flag: bool, environment: bool, in_pod: bool, expected: tuple[str, str]
) -> None:
    environ = dict(places["pod"]) if in_pod else {}
    if environment:
        environ["KUBECONFIG"] = places["env"]

    endpoint = await kubeconfig.load(
        places["flag"] if flag else None, environ=environ, account=places["account"]
    )

    assert (endpoint.host, await _bearer(endpoint)) == expected


async def test_a_kubeconfig_of_several_files_is_merged_by_the_library(
    tmp_path: Path,
) -> None:
    clusters = tmp_path / "clusters"
    clusters.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://merged:6443"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    users = tmp_path / "users"
    users.write_text(yaml.safe_dump({"users": [{"name": "u", "user": {"token": "merged"}}]}))
    environ = {"KUBECONFIG": os.pathsep.join([str(clusters), str(users)])}

    endpoint = await kubeconfig.load(environ=environ, account=tmp_path / "no-account")

    assert isinstance(endpoint.auth, kubeconfig.LibraryAuth)
    assert (endpoint.host, await _bearer(endpoint)) == ("https://merged:6443", "Bearer merged")
