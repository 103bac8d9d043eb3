"""Where the API server is and how to talk to it: the in-cluster service account, or a
kubeconfig file.

Rule: the cases kohort's processes run with (the service account of their pod; a kubeconfig
whose user is a client certificate, a token or a token file) are read here; an exec credential
plugin that gives a token is run through kubernetes-asyncio's ExecProvider, and run again
before the token expires or once the server refuses it; any other user (a plugin that gives a
client certificate, an auth provider, basic auth) or a $KUBECONFIG of several files is handed
to kubernetes-asyncio's loader (renewed only where the library renews them). It is
imported only in those cases: importing it costs the controller 38 MiB and over half a second
of CPU at start (docs/performance.md), for a few lines of YAML and TLS set-up in the common
case.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import logging
import math
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

log = logging.getLogger("kohort.kubeconfig")
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# How long a token read from a file is used before the file is read again (the kubelet
# rewrites a projected service account token well before it expires).
TOKEN_FILE_REREAD = 60.0
# The keys of a kubeconfig user that kohort reads itself; a user with any other goes to
# kubernetes-asyncio.
_OWN_USER_KEYS = frozenset(
    {"client-certificate", "client-certificate-data", "client-key", "client-key-data"}
    | {"token", "tokenFile"}
)
# A plugin's token is renewed this long before the expiry it gave; a plugin is run again no
# sooner than this after its last run (a failed one, or a token the server refused), and is
# given this long to answer.
EXEC_RENEW_BEFORE = dt.timedelta(seconds=30)
EXEC_RETRY_AFTER = dt.timedelta(seconds=10)
EXEC_TIMEOUT = 30.0


class ConfigError(Exception):
    """No usable configuration: what was looked for and what was wrong."""


class Auth(Protocol):
    async def apply(self, headers: dict[str, str]) -> None:
        """Add the request's credentials to `headers`."""

    def rejected(self) -> None:
        """The server refused them (401): renew them for the next request, where that can be
        done (by default, nothing can)."""
        return None


class NoAuth(Auth):
    async def apply(self, headers: dict[str, str]) -> None:
        return None


@dataclass
class BearerToken(Auth):
    token: str = field(repr=False)

    async def apply(self, headers: dict[str, str]) -> None:
        headers["Authorization"] = f"Bearer {self.token}"


@dataclass
class TokenFile(Auth):
    """A token read from a file, and read again every `reread` seconds (rotated tokens)."""

    path: Path
    reread: float = TOKEN_FILE_REREAD
    clock: Callable[[], float] = time.monotonic
    _token: str = field(default="", repr=False)
    _read_at: float | None = field(default=None, repr=False)

    def read(self) -> str:
        """The token now in the file; ConfigError when it cannot be read or is empty."""
        try:
            token = self.path.read_text().strip()
        except OSError as err:
            raise ConfigError(f"cannot read the token file {self.path}: {err}") from err
        if not token:
            raise ConfigError(f"the token file {self.path} is empty")
        return token

    async def apply(self, headers: dict[str, str]) -> None:
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self.reread:
            try:
                self._token = self.read()
            except ConfigError:
                if self._read_at is None:
                    raise
                # (keep the last token: the file may be in the middle of being replaced)
            self._read_at = now
        headers["Authorization"] = f"Bearer {self._token}"

    def rejected(self) -> None:
        if self._read_at is not None:
            self._read_at = -math.inf  # read again (keeping this token if that fails)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ExecPlugin(Auth):
    """A token from an exec credential plugin (kubernetes-asyncio's ExecProvider runs it), kept
    until shortly before the expiry the plugin gave with it, or until the server refuses it
    (401), then asked for again, as client-go does. The plugin is run at most every
    EXEC_RETRY_AFTER and given EXEC_TIMEOUT to answer; a renewal that fails keeps the last token
    (the server's 401 then says what is wrong)."""

    def __init__(
        self, exec_config: Mapping[str, Any], clock: Callable[[], dt.datetime] = _utcnow
    ) -> None:
        from kubernetes_asyncio.config.exec_provider import ExecProvider
        from kubernetes_asyncio.config.kube_config import ConfigNode

        self.command = str(exec_config.get("command", ""))
        try:
            self._provider = ExecProvider(ConfigNode("exec", dict(exec_config)))
        except Exception as err:  # the library's ConfigException, or a TypeError of bad YAML
            raise ConfigError(f"exec plugin {self.command}: {err}") from err
        self._clock = clock
        self._token: str | None = None
        self._renew_at: dt.datetime | None = None
        self._ran_at: dt.datetime | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"ExecPlugin(command={self.command!r})"

    async def start(self) -> dict[str, Any]:
        """Run the plugin for the first time; its status: a token (kept), or a client
        certificate; ConfigError if it failed or gave neither."""
        try:
            status = await self._run()
        except Exception as err:
            raise ConfigError(f"exec plugin {self.command}: {err}") from err
        if not status.get("token") and not status.get("clientCertificateData"):
            raise ConfigError(
                f"exec plugin {self.command}: it gave neither a token nor a client certificate"
            )
        self._take(status)
        return status

    async def _run(self) -> dict[str, Any]:
        self._ran_at = self._clock()
        try:
            async with asyncio.timeout(EXEC_TIMEOUT):
                status = await self._provider.run()
        except TimeoutError:
            raise ConfigError(f"it did not answer within {EXEC_TIMEOUT:.0f} s") from None
        if not isinstance(status, dict):
            raise ConfigError("its status is not an object")
        return status

    def _take(self, status: Mapping[str, Any]) -> None:
        token, expiry = status.get("token"), status.get("expirationTimestamp")
        self._token = str(token) if token else None
        self._renew_at = None
        if expiry:
            try:
                when = dt.datetime.fromisoformat(str(expiry))
            except ValueError as err:
                raise ConfigError(f"exec plugin {self.command}: {err}") from err
            if when.tzinfo is None:  # (RFC 3339 has an offset; taken as UTC without one)
                when = when.replace(tzinfo=dt.UTC)
            self._renew_at = when - EXEC_RENEW_BEFORE
            if self._ran_at is not None:  # (a token that expires at once is not asked for
                # again at every request)
                self._renew_at = max(self._renew_at, self._ran_at + EXEC_RETRY_AFTER)

    async def apply(self, headers: dict[str, str]) -> None:
        if self._due():
            async with self._lock:
                if self._due():
                    await self._renew()
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"

    def _due(self) -> bool:
        return self._renew_at is not None and self._clock() >= self._renew_at

    def rejected(self) -> None:
        soonest = (self._ran_at or self._clock()) + EXEC_RETRY_AFTER
        self._renew_at = min(self._renew_at or soonest, soonest)

    async def _renew(self) -> None:
        try:
            status = await self._run()
            if not status.get("token"):
                raise ConfigError("it gave no token")
            self._take(status)
        except Exception as err:  # a broken plugin must not take the process down
            log.warning("exec plugin %s: renewing the token failed: %s", self.command, err)
            self._renew_at = self._clock() + EXEC_RETRY_AFTER


class LibraryAuth(Auth):
    """Credentials from a kubernetes-asyncio Configuration (auth providers, basic auth, a
    plugin's client certificate), as its loader left them (and its refresh hook, where it
    installs one, renews them)."""

    def __init__(self, configuration: Any) -> None:
        self.configuration = configuration

    async def apply(self, headers: dict[str, str]) -> None:
        settings = await self.configuration.auth_settings()
        bearer = settings.get("BearerToken")
        if bearer:  # a token, or basic auth as the loader writes it
            headers["Authorization"] = bearer["value"]


@dataclass
class Endpoint:
    """An API server and how to reach it."""

    host: str
    ssl: ssl.SSLContext | bool = True
    server_hostname: str | None = None
    proxy: str | None = None
    auth: Auth = field(default_factory=NoAuth)
    # Requests in flight at once (connections to the server).
    max_connections: int = 100


async def load(
    kubeconfig: str | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    account: Path = SERVICE_ACCOUNT,
) -> Endpoint:
    """The endpoint of `kubeconfig`; without one, the first of: the files $KUBECONFIG names,
    the pod's service account, ~/.kube/config (controller-runtime's order)."""
    if kubeconfig:
        return await _from_file(_resolved(kubeconfig))
    files = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if len(files) > 1:
        return await _from_library(os.pathsep.join(files))  # merged as the library merges
    if files:
        return await _from_file(_resolved(files[0]))
    if environ.get("KUBERNETES_SERVICE_HOST") and (account / "token").exists():
        return in_cluster(environ, account)
    return await _from_file(_resolved("~/.kube/config"))


def in_cluster(
    environ: Mapping[str, str] = os.environ, account: Path = SERVICE_ACCOUNT
) -> Endpoint:
    """The API server's Service, as the pod's service account sees it."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("not in a pod: KUBERNETES_SERVICE_HOST/PORT are not set")
    if ":" in host:
        host = f"[{host}]"  # IPv6
    try:
        context = ssl.create_default_context(cafile=str(account / "ca.crt"))
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"service account CA {account / 'ca.crt'}: {err}") from err
    token = TokenFile(account / "token")
    token.read()  # now, not at the first request
    return Endpoint(f"https://{host}:{port}", context, auth=token)


async def _from_file(path: Path) -> Endpoint:
    cluster, user = _current(_read(path), path)
    plugin: ExecPlugin | None = None
    if isinstance(user.get("exec"), dict) and set(user) - {"exec"} <= _OWN_USER_KEYS:
        try:
            plugin = ExecPlugin(user["exec"])
            status = await plugin.start()
        except ConfigError as err:
            raise ConfigError(f"kubeconfig {path}: {err}") from err
        if not status.get("token"):  # a client certificate: the library's loader reads it
            return await _from_library(str(path))
    elif not set(user) <= _OWN_USER_KEYS:
        return await _from_library(str(path))
    try:
        endpoint = from_kubeconfig(cluster, user, path.parent)
    except ConfigError as err:
        raise ConfigError(f"kubeconfig {path}: {err}") from err
    if plugin is not None:
        endpoint.auth = plugin
    return endpoint


def _resolved(name: str) -> Path:
    return Path(name).expanduser().resolve()


def _read(path: Path) -> dict[str, Any]:
    """The kubeconfig file (read once, at start)."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read the kubeconfig {path}: {err}") from err
    if not isinstance(document, dict):
        raise ConfigError(f"kubeconfig {path}: not a kubeconfig")
    return document


def _named(document: Mapping[str, Any], section: str, name: str, path: Path) -> dict[str, Any]:
    for entry in document.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            found = entry.get(section[:-1])
            if isinstance(found, dict):
                return found
    raise ConfigError(f"kubeconfig {path}: no {section[:-1]} named {name!r}")


def _current(document: Mapping[str, Any], path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cluster and the user of the current context."""
    name = document.get("current-context")
    if not name:
        raise ConfigError(f"kubeconfig {path}: no current-context")
    context = _named(document, "contexts", name, path)
    cluster = _named(document, "clusters", context.get("cluster", ""), path)
    user_name = context.get("user")
    user = _named(document, "users", user_name, path) if user_name else {}
    return cluster, user


def from_kubeconfig(cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path) -> Endpoint:
    """The endpoint of a kubeconfig's cluster and user entries (relative file names are
    relative to the kubeconfig's directory, `base`); ConfigError names the entry at fault."""
    server = cluster.get("server")
    if not server:
        raise ConfigError("the cluster has no server")
    authority = _pem(cluster, "certificate-authority", base)  # the data, else the file
    try:
        context = ssl.create_default_context(
            cadata=authority.decode() if authority is not None else None
        )
    except (ssl.SSLError, ValueError) as err:
        raise ConfigError(f"certificate-authority: {err}") from err
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    certificate = _pem(user, "client-certificate", base)
    key = _pem(user, "client-key", base)
    if certificate is not None:
        with _as_files(certificate, key) as (cert_file, key_file):
            try:
                context.load_cert_chain(cert_file, key_file)
            except ssl.SSLError as err:
                raise ConfigError(f"client-certificate and client-key: {err}") from err
    auth: Auth = NoAuth()
    if user.get("token"):
        auth = BearerToken(str(user["token"]))
    elif user.get("tokenFile"):
        token_file = TokenFile(base / str(user["tokenFile"]))
        token_file.read()  # now, not at the first request
        auth = token_file
    return Endpoint(
        str(server).rstrip("/"),
        context,
        server_hostname=cluster.get("tls-server-name") or None,
        proxy=cluster.get("proxy-url") or None,
        auth=auth,
    )


def _pem(entry: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    """The PEM of `key`: from `key-data` (base64), else from the file `key` names."""
    if entry.get(f"{key}-data"):
        try:
            return base64.b64decode(str(entry[f"{key}-data"]), validate=True)
        except ValueError as err:
            raise ConfigError(f"{key}-data: not base64: {err}") from err
    if entry.get(key):
        path = base / str(entry[key])
        try:
            return path.read_bytes()
        except OSError as err:
            raise ConfigError(f"{key}: cannot read {path}: {err}") from err
    return None


@contextlib.contextmanager
def _as_files(certificate: bytes, key: bytes | None) -> Iterator[tuple[str, str | None]]:
    """The PEM blocks as files that exist only while `ssl` loads them."""
    with tempfile.TemporaryDirectory(prefix="kohort-tls-") as directory:
        cert_file = Path(directory) / "tls.crt"
        cert_file.write_bytes(certificate)
        key_file = None
        if key is not None:
            key_file = Path(directory) / "tls.key"
            key_file.touch(mode=0o600)
            key_file.write_bytes(key)
        yield str(cert_file), str(key_file) if key_file else None


async def _from_library(source: str) -> Endpoint:
    """The endpoint kubernetes-asyncio's loader makes of `source` (a file, or files joined by
    os.pathsep: the library's own default is $KUBECONFIG as it was when it was imported)."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    try:
        await config.load_kube_config(config_file=source, client_configuration=configuration)
    except config.ConfigException as err:
        raise ConfigError(f"kubeconfig {source}: {err}") from err
    return from_configuration(configuration)


def from_configuration(configuration: Any) -> Endpoint:
    """The endpoint of a loaded kubernetes-asyncio Configuration."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return Endpoint(
        configuration.host,
        context,
        server_hostname=configuration.tls_server_name,
        proxy=configuration.proxy,
        auth=LibraryAuth(configuration),
        max_connections=configuration.connection_pool_maxsize,
    )
