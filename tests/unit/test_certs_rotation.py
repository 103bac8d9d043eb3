"""Certificate rotation: what to renew when, and replicas racing on one Secret."""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509

from certs.authority import service_dns_names
from certs.main import add_arguments, run
from certs.rotation import Bundle, Policy, Renewal, needed, renew
from certs.rotator import Rotator, ca_bundle_patch, write_cert_dir

NOW = dt.datetime(2026, 11, 22, tzinfo=dt.UTC)
POLICY = Policy(
    dns_names=tuple(service_dns_names("kohort-webhook", "kohort-system")),
    ca_validity=dt.timedelta(days=3650),
    serving_validity=dt.timedelta(days=90),
)


def fresh() -> Bundle:
    return renew(None, Renewal.ALL, POLICY, NOW)


def test_an_empty_secret_gets_a_new_ca_and_serving_pair() -> None:
    assert needed(None, POLICY, NOW) is Renewal.ALL
    assert needed(Bundle.from_secret_data({}), POLICY, NOW) is Renewal.ALL


def test_a_fresh_bundle_needs_nothing_until_a_third_of_its_life_is_left() -> None:
    bundle = fresh()
    assert needed(bundle, POLICY, NOW + dt.timedelta(days=55)) is Renewal.NOTHING
    assert needed(bundle, POLICY, NOW + dt.timedelta(days=62)) is Renewal.SERVING


def test_renewing_the_serving_pair_keeps_the_ca_so_the_ca_bundle_does_not_change() -> None:
    bundle = fresh()
    later = NOW + dt.timedelta(days=70)
    renewed = renew(bundle, needed(bundle, POLICY, later), POLICY, later)
    assert renewed.ca == bundle.ca
    assert renewed.serving.cert.serial_number != bundle.serving.cert.serial_number
    assert renewed.ca_bundle(later) == bundle.ca_bundle(later)


def test_a_new_ca_is_trusted_next_to_the_old_one_until_the_old_one_expires() -> None:
    bundle = fresh()
    near_end = NOW + dt.timedelta(days=3000)
    renewed = renew(bundle, needed(bundle, POLICY, near_end), POLICY, near_end)
    assert renewed.ca != bundle.ca
    assert bundle.ca.cert_pem in renewed.ca_bundle(near_end)
    assert bundle.ca.cert_pem not in renewed.ca_bundle(NOW + dt.timedelta(days=3700))


def test_a_serving_certificate_for_other_names_is_reissued() -> None:
    bundle = fresh()
    other = Policy(dns_names=("elsewhere.svc",), serving_validity=POLICY.serving_validity)
    assert needed(bundle, other, NOW) is Renewal.SERVING
    ips = Policy(dns_names=POLICY.dns_names, ips=("127.0.0.1",))
    assert needed(bundle, ips, NOW) is Renewal.SERVING


def test_the_serving_certificate_covers_every_service_name() -> None:
    sans = fresh().serving.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert sans.value.get_values_for_type(x509.DNSName) == [
        "kohort-webhook",
        "kohort-webhook.kohort-system",
        "kohort-webhook.kohort-system.svc",
        "kohort-webhook.kohort-system.svc.cluster.local",
    ]


def test_a_bundle_survives_the_round_trip_through_secret_data() -> None:
    bundle = fresh()
    again = Bundle.from_secret_data(bundle.to_secret_data())
    assert again is not None
    assert again.serving.cert_pem == bundle.serving.cert_pem
    assert again.ca.pair.key_pem == bundle.ca.pair.key_pem


def test_a_corrupt_secret_reads_as_empty() -> None:
    data = fresh().to_secret_data()
    data["tls.key"] = base64.b64encode(b"not a key").decode()
    assert Bundle.from_secret_data(data) is None


class FakeSecret:
    """A Secret with resourceVersion semantics, shared by several replicas."""

    def __init__(self) -> None:
        self.data: dict[str, str] | None = None
        self.version = 0
        self.writes = 0

    def replica(self) -> FakeStore:
        return FakeStore(self)


class FakeStore:
    def __init__(self, secret: FakeSecret) -> None:
        self.secret = secret

    async def read(self) -> tuple[dict[str, str] | None, str | None]:
        if self.secret.data is None:
            return None, None
        return dict(self.secret.data), str(self.secret.version)

    async def write(self, data: dict[str, str], resource_version: str | None) -> bool:
        exists = self.secret.data is not None
        if (resource_version is None and exists) or (
            resource_version is not None and resource_version != str(self.secret.version)
        ):
            return False  # 409: AlreadyExists or Conflict
        self.secret.data, self.secret.version = data, self.secret.version + 1
        self.secret.writes += 1
        return True


class SlowFirstRead(FakeStore):
    """Reads, then lets the other replica run before writing: the classic race."""

    def __init__(self, secret: FakeSecret, gate: asyncio.Event) -> None:
        super().__init__(secret)
        self.gate = gate

    async def read(self) -> tuple[dict[str, str] | None, str | None]:
        result = await super().read()
        await self.gate.wait()
        return result


class Recorder:
    def __init__(self) -> None:
        self.bundles: list[bytes] = []

    async def inject(self, ca_bundle: bytes) -> None:
        self.bundles.append(ca_bundle)


async def test_replicas_racing_on_an_empty_secret_end_up_with_the_winners_certificates() -> None:
    secret, gate = FakeSecret(), asyncio.Event()
    served: dict[str, bytes] = {}
    replicas = [
        Rotator(
            SlowFirstRead(secret, gate),
            [Recorder()],
            POLICY,
            on_bundle=lambda b, name=name: served.__setitem__(name, b.serving.cert_pem),
            clock=lambda: NOW,
        )
        for name in ("a", "b", "c")
    ]
    tasks = [asyncio.create_task(r.reconcile()) for r in replicas]
    await asyncio.sleep(0)
    gate.set()
    bundles = await asyncio.gather(*tasks)
    assert secret.writes == 1
    assert len({b.serving.cert_pem for b in bundles}) == 1
    assert len(set(served.values())) == 1
    stored = Bundle.from_secret_data(secret.data)
    assert stored is not None and stored.serving.cert_pem == served["a"]


async def test_the_rotator_renews_before_expiry_and_injects_the_ca_bundle() -> None:
    secret, target = FakeSecret(), Recorder()
    clock = [NOW]
    rotator = Rotator(secret.replica(), [target], POLICY, clock=lambda: clock[0])
    first = await rotator.reconcile()
    again = await rotator.reconcile()
    assert again.serving.cert_pem == first.serving.cert_pem and secret.writes == 1
    assert rotator.next_check(first, dt.timedelta(hours=1)) == 3600
    clock[0] = NOW + dt.timedelta(days=61)
    second = await rotator.reconcile()
    assert secret.writes == 2
    assert second.serving.cert.serial_number != first.serving.cert.serial_number
    assert target.bundles == [first.ca.cert_pem] * 3


def test_ca_bundle_patch_sets_every_webhook_and_tests_the_resource_version() -> None:
    config = {
        "metadata": {"resourceVersion": "42"},
        "webhooks": [{"clientConfig": {"caBundle": "b2xk"}}, {"clientConfig": {}}],
    }
    patch = ca_bundle_patch(config, b"new")
    encoded = base64.b64encode(b"new").decode()
    assert patch == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": encoded},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": encoded},
    ]
    config["webhooks"] = [{"clientConfig": {"caBundle": encoded}}]
    assert ca_bundle_patch(config, b"new") == []


def test_write_cert_dir_replaces_files_whole(tmp_path: Path) -> None:
    bundle = fresh()
    write_cert_dir(tmp_path, bundle)
    write_cert_dir(tmp_path, bundle)
    assert (tmp_path / "tls.crt").read_bytes() == bundle.serving.cert_pem
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]


def test_certs_generate_writes_ca_and_serving_pair(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            *("generate", "--out", str(tmp_path), "--service", "wh", "--namespace", "ns"),
            *("--ip", "127.0.0.1", "--dns", "extra.example"),
        ]
    )
    assert run(args) == 0
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "wh",
        "wh.ns",
        "wh.ns.svc",
        "wh.ns.svc.cluster.local",
        "extra.example",
    ]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("argv", [["generate", "--out", "x"]], ids=["no-names"])
def test_certs_generate_without_names_is_an_error(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args(argv)) == 2


async def test_the_rotator_without_a_kubeconfig_uses_the_pod_and_never_the_users_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from certs.main import kube_api_client
    from controller.cluster.kubeconfig import ConfigError

    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("current-context: a-developers-cluster\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    with pytest.raises(ConfigError, match="not in a pod"):
        await kube_api_client(None)
