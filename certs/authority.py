"""A small certificate authority: ECDSA P-256 CA, serving and client certificates."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = dt.timedelta(days=3650)
LEAF_VALIDITY = dt.timedelta(days=365)
# Backdating tolerates small clock differences between the issuer and the verifier.
CLOCK_SKEW = dt.timedelta(minutes=5)


def new_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_to_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_to_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def cert_to_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return cert_to_pem(self.cert)

    @property
    def key_pem(self) -> bytes:
        return key_to_pem(self.key)

    @property
    def not_after(self) -> dt.datetime:
        return self.cert.not_valid_after_utc

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> KeyPair:
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("only ECDSA keys are supported")
        return cls(x509.load_pem_x509_certificate(cert_pem), key)


@dataclass(frozen=True)
class CertificateAuthority:
    """Issues certificates signed by one self-signed ECDSA CA."""

    pair: KeyPair

    @classmethod
    def create(
        cls,
        common_name: str = "kohort-ca",
        validity: dt.timedelta = CA_VALIDITY,
        now: dt.datetime | None = None,
    ) -> CertificateAuthority:
        key = new_private_key()
        start = (now or dt.datetime.now(dt.UTC)) - CLOCK_SKEW
        subject = _name(common_name)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(KeyPair(cert, key))

    @property
    def cert_pem(self) -> bytes:
        return self.pair.cert_pem

    def _issue(
        self,
        subject: x509.Name,
        usage: ExtendedKeyUsageOID | x509.ObjectIdentifier,
        sans: list[x509.GeneralName],
        validity: dt.timedelta,
        now: dt.datetime | None,
    ) -> KeyPair:
        key = new_private_key()
        start = (now or dt.datetime.now(dt.UTC)) - CLOCK_SKEW
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.pair.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(min(start + validity, self.pair.not_after))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage([cast(x509.ObjectIdentifier, usage)]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.pair.key.public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return KeyPair(builder.sign(self.pair.key, hashes.SHA256()), key)

    def issue_server(
        self,
        dns_names: Sequence[str] = (),
        ips: Sequence[str] = (),
        validity: dt.timedelta = LEAF_VALIDITY,
        now: dt.datetime | None = None,
    ) -> KeyPair:
        """A TLS serving certificate; Go clients read only the SANs, never the CN."""
        if not dns_names and not ips:
            raise ValueError("a serving certificate needs at least one DNS name or IP address")
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
        common_name = dns_names[0] if dns_names else ips[0]
        return self._issue(_name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, sans, validity, now)

    def issue_client(
        self,
        common_name: str,
        organizations: Sequence[str] = (),
        validity: dt.timedelta = LEAF_VALIDITY,
        now: dt.datetime | None = None,
    ) -> KeyPair:
        """A client certificate: Kubernetes reads the user from CN and groups from O."""
        return self._issue(
            _name(common_name, organizations),
            ExtendedKeyUsageOID.CLIENT_AUTH,
            [],
            validity,
            now,
        )


def service_dns_names(service: str, namespace: str) -> list[str]:
    """Every name under which a Service is reached inside a cluster."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]
