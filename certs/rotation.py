"""When to renew the webhook's certificates, and what the Secret holding them contains.

Pure: a bundle in, a decision and a new bundle out; the clock is a parameter. `rotator.py`
does the I/O.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import enum
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec

from certs.authority import (
    CA_VALIDITY,
    LEAF_VALIDITY,
    CertificateAuthority,
    KeyPair,
    cert_to_pem,
)

CA_CERT, CA_KEY, PREVIOUS_CA_CERT = "ca.crt", "ca.key", "ca-previous.crt"
TLS_CERT, TLS_KEY = "tls.crt", "tls.key"


class Renewal(enum.IntEnum):
    """What must be issued again, from least to most."""

    NOTHING = 0
    SERVING = 1
    ALL = 2


@dataclass(frozen=True)
class Policy:
    """What the serving certificate must cover, how long things live, when to renew."""

    dns_names: tuple[str, ...]
    ips: tuple[str, ...] = ()
    ca_validity: dt.timedelta = CA_VALIDITY
    serving_validity: dt.timedelta = LEAF_VALIDITY
    # Renew once less than this fraction of a certificate's lifetime is left.
    renew_fraction: float = 1 / 3

    def renew_at(self, cert: x509.Certificate) -> dt.datetime:
        start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
        return end - (end - start) * self.renew_fraction


@dataclass(frozen=True)
class Bundle:
    """A CA, the serving pair it signed, and the CA it replaced (still trusted until expiry)."""

    ca: CertificateAuthority
    serving: KeyPair
    previous_ca: x509.Certificate | None = None

    def ca_bundle(self, now: dt.datetime) -> bytes:
        """What clients must trust: the CA, and the previous one while it is still valid."""
        pem = self.ca.cert_pem
        if self.previous_ca is not None and self.previous_ca.not_valid_after_utc > now:
            pem += cert_to_pem(self.previous_ca)
        return pem

    def to_secret_data(self) -> dict[str, str]:
        files = {
            CA_CERT: self.ca.cert_pem,
            CA_KEY: self.ca.pair.key_pem,
            TLS_CERT: self.serving.cert_pem,
            TLS_KEY: self.serving.key_pem,
        }
        if self.previous_ca is not None:
            files[PREVIOUS_CA_CERT] = cert_to_pem(self.previous_ca)
        return {name: base64.b64encode(pem).decode() for name, pem in files.items()}

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> Bundle | None:
        """The bundle in a Secret's data, or None when it is empty, partial or unreadable."""
        if not data:
            return None
        try:
            pem = {name: base64.b64decode(value, validate=True) for name, value in data.items()}
            ca = CertificateAuthority(KeyPair.from_pem(pem[CA_CERT], pem[CA_KEY]))
            serving = KeyPair.from_pem(pem[TLS_CERT], pem[TLS_KEY])
            previous = (
                x509.load_pem_x509_certificate(pem[PREVIOUS_CA_CERT])
                if PREVIOUS_CA_CERT in pem
                else None
            )
        except (KeyError, ValueError, binascii.Error):
            return None
        return cls(ca, serving, previous)


def _sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    dns = set(names.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    return dns, ips


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _same_key(pair: KeyPair) -> bool:
    public = pair.cert.public_key()
    return isinstance(public, ec.EllipticCurvePublicKey) and (
        public.public_numbers() == pair.key.public_key().public_numbers()
    )


def needed(bundle: Bundle | None, policy: Policy, now: dt.datetime) -> Renewal:
    """What to issue again: everything without a usable CA, the serving pair when it is
    close to expiry, does not match its key or CA, or does not cover the wanted names."""
    if bundle is None or now >= policy.renew_at(bundle.ca.pair.cert):
        return Renewal.ALL
    serving = bundle.serving
    dns, ips = _sans(serving.cert)
    wanted_ips = {str(ipaddress.ip_address(ip)) for ip in policy.ips}
    if (
        now >= policy.renew_at(serving.cert)
        or not _same_key(serving)
        or not _signed_by(serving.cert, bundle.ca.pair.cert)
        or dns != set(policy.dns_names)
        or ips != wanted_ips
    ):
        return Renewal.SERVING
    return Renewal.NOTHING


def renew(bundle: Bundle | None, what: Renewal, policy: Policy, now: dt.datetime) -> Bundle:
    """A bundle with what `needed` asked for issued again."""
    if what is Renewal.NOTHING and bundle is not None:
        return bundle
    previous: x509.Certificate | None = None
    if what is Renewal.ALL or bundle is None:
        ca = CertificateAuthority.create(validity=policy.ca_validity, now=now)
        previous = bundle.ca.pair.cert if bundle is not None else None
    else:
        ca, previous = bundle.ca, bundle.previous_ca
    serving = ca.issue_server(
        dns_names=policy.dns_names, ips=policy.ips, validity=policy.serving_validity, now=now
    )
    return Bundle(ca, serving, previous)
