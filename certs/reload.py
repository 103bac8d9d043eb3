"""Hot reload of a server certificate into a live SSLContext.

New handshakes use the new certificate; open connections keep theirs, so nothing is dropped.
A pair is first loaded into a scratch context: a mismatched or half-written pair never reaches
the live one (load_cert_chain replaces the certificate before it checks the key).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path

from cryptography import x509

log = logging.getLogger(__name__)

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"


def server_context() -> ssl.SSLContext:
    """A TLS server context: TLS 1.2 at least, no client certificates asked for."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _load(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="kohort-cert-") as tmp:
        cert_path, key_path = Path(tmp, CERT_FILE), Path(tmp, KEY_FILE)
        cert_path.write_bytes(cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key_pem)
        context.load_cert_chain(cert_path, key_path)


class CertificateReloader:
    """Keeps `context` serving the newest valid pair from `cert_dir` (or handed over in PEM)."""

    def __init__(
        self,
        context: ssl.SSLContext,
        cert_dir: Path | None = None,
        *,
        on_reload: Callable[[x509.Certificate], None] | None = None,
    ) -> None:
        self.context = context
        self.cert_dir = cert_dir
        self.on_reload = on_reload
        self.loaded: x509.Certificate | None = None
        self._fingerprint = b""

    @property
    def not_after(self) -> dt.datetime | None:
        return self.loaded.not_valid_after_utc if self.loaded else None

    def load_pem(self, cert_pem: bytes, key_pem: bytes) -> bool:
        """Serve this pair from the next handshake on; False if unchanged, ValueError if bad."""
        fingerprint = hashlib.sha256(cert_pem + b"\0" + key_pem).digest()
        if fingerprint == self._fingerprint:
            return False
        try:
            _load(server_context(), cert_pem, key_pem)
            certificate = x509.load_pem_x509_certificate(cert_pem)
        except (ssl.SSLError, ValueError) as err:
            raise ValueError(f"not a usable certificate and key: {err}") from err
        _load(self.context, cert_pem, key_pem)
        self._fingerprint = fingerprint
        self.loaded = certificate
        log.info(
            "serving certificate loaded",
            extra={"notAfter": certificate.not_valid_after_utc.isoformat()},
        )
        if self.on_reload is not None:
            self.on_reload(certificate)
        return True

    def load_files(self) -> bool:
        """Load tls.crt and tls.key from the certificate directory if they changed."""
        if self.cert_dir is None:
            return False
        cert_pem = (self.cert_dir / CERT_FILE).read_bytes()
        key_pem = (self.cert_dir / KEY_FILE).read_bytes()
        return self.load_pem(cert_pem, key_pem)

    async def watch(self, interval: float) -> None:
        """Poll the directory: mounted Secrets change by a symlink swap, not in place."""
        while True:
            await asyncio.sleep(interval)
            try:
                self.load_files()
            except (OSError, ValueError) as err:
                log.warning("keeping the current certificate: %s", err)
