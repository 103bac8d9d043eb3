"""`kohort certs`: generate certificates once, or keep them rotated in a cluster.

    kohort certs generate --out DIR [--service SVC --namespace NS] [--dns NAME ...] [--ip ADDR ...]
    kohort certs rotate --secret NS/NAME --service SVC --namespace NS \
        [--webhook-configuration NAME] [--cert-dir DIR] [--once]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import ipaddress
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from certs.authority import CA_VALIDITY, LEAF_VALIDITY, CertificateAuthority, service_dns_names
from certs.rotation import Bundle, Policy

if TYPE_CHECKING:  # (both imported when a rotator is built: `generate` needs neither)
    from certs.rotator import Rotator
    from controller.cluster.clients import Client

DEFAULT_CONFIGURATION = "kohort"


def _days(text: str) -> dt.timedelta:
    days = float(text)
    if days <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of days")
    return dt.timedelta(days=days)


def _ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


ArgumentContainer = argparse._ActionsContainer  # a parser or an argument group


def add_certificate_arguments(parser: ArgumentContainer) -> None:
    """What the serving certificate covers and how long certificates live."""
    parser.add_argument("--service", help="Service name: adds svc, svc.ns, svc.ns.svc, ...")
    parser.add_argument("--namespace", help="the Service's namespace (with --service)")
    parser.add_argument(
        "--dns", action="append", default=[], metavar="NAME", help="a DNS SAN (repeatable)"
    )
    parser.add_argument(
        "--ip", action="append", default=[], type=_ip, metavar="ADDR", help="an IP SAN"
    )
    parser.add_argument(
        "--ca-days",
        type=_days,
        default=CA_VALIDITY,
        dest="ca_validity",
        metavar="DAYS",
        help=f"CA lifetime (default {CA_VALIDITY.days})",
    )
    parser.add_argument(
        "--days",
        type=_days,
        default=LEAF_VALIDITY,
        dest="serving_validity",
        metavar="DAYS",
        help=f"serving certificate lifetime (default {LEAF_VALIDITY.days})",
    )


def add_rotation_arguments(parser: ArgumentContainer) -> None:
    """Flags of the in-cluster rotator, shared with `kohort webhook --rotate-secret`."""
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: the in-cluster service account)"
    )
    parser.add_argument(
        "--webhook-configuration",
        action="append",
        default=None,
        metavar="NAME",
        help="Mutating and Validating webhook configurations whose caBundle to keep "
        f"(repeatable; default {DEFAULT_CONFIGURATION!r})",
    )
    parser.add_argument(
        "--rotation-interval",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how often to check the Secret (renewal is also scheduled before expiry)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="certs_command", required=True, metavar="ACTION")
    generate = sub.add_parser("generate", help="write ca.crt, tls.crt and tls.key to a directory")
    generate.add_argument("--out", type=Path, required=True, help="directory to write to")
    add_certificate_arguments(generate)
    rotate = sub.add_parser("rotate", help="keep the webhook certificates in a Secret rotated")
    rotate.add_argument("--secret", required=True, metavar="NAMESPACE/NAME")
    rotate.add_argument("--cert-dir", type=Path, help="also write tls.crt/tls.key here")
    rotate.add_argument("--once", action="store_true", help="reconcile once and exit")
    add_certificate_arguments(rotate)
    add_rotation_arguments(rotate)


def dns_names(args: argparse.Namespace) -> list[str]:
    names: list[str] = []
    if args.service:
        if not args.namespace:
            raise SystemExit("--service needs --namespace")
        names += service_dns_names(args.service, args.namespace)
    names += [n for n in args.dns if n not in names]
    return names


def generate(args: argparse.Namespace) -> int:
    names = dns_names(args)
    if not names and not args.ip:
        print("give at least one of --service/--namespace, --dns or --ip", file=sys.stderr)
        return 2
    ca = CertificateAuthority.create(validity=args.ca_validity)
    serving = ca.issue_server(dns_names=names, ips=args.ip, validity=args.serving_validity)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "ca.crt").write_bytes(ca.cert_pem)
    serving.write(out / "tls.crt", out / "tls.key")
    print(f"wrote {out}/ca.crt, tls.crt, tls.key for {', '.join([*names, *args.ip])}")
    return 0


def policy_from(args: argparse.Namespace) -> Policy:
    return Policy(
        dns_names=tuple(dns_names(args)),
        ips=tuple(args.ip),
        ca_validity=args.ca_validity,
        serving_validity=args.serving_validity,
    )


async def kube_api_client(kubeconfig: str | None) -> Client:
    """A client of the API server: `kubeconfig`, else the pod's service account (never the
    default kubeconfig: the rotator writes a Secret and webhook configurations)."""
    from controller.cluster.clients import connect, from_endpoint
    from controller.cluster.kubeconfig import in_cluster

    if kubeconfig:
        return await connect(kubeconfig, user_agent="kohort-certs")
    return from_endpoint(in_cluster(), user_agent="kohort-certs")


def build_rotator(
    api: Client, args: argparse.Namespace, secret: str, on_bundle: Callable[[Bundle], None]
) -> Rotator:
    from certs.rotator import KubeSecretStore, Rotator, WebhookConfigurationTarget

    namespace, _, name = secret.partition("/")
    if not namespace or not name:
        raise SystemExit("the Secret is given as NAMESPACE/NAME")
    configurations = args.webhook_configuration or [DEFAULT_CONFIGURATION]
    targets = [
        WebhookConfigurationTarget(api, kind, config)
        for config in configurations
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    ]
    store = KubeSecretStore(api, namespace, name)
    return Rotator(store, targets, policy_from(args), on_bundle=on_bundle)


async def rotate(args: argparse.Namespace) -> int:
    from certs.rotator import write_cert_dir

    def on_bundle(bundle: Bundle) -> None:
        if args.cert_dir is not None:
            write_cert_dir(args.cert_dir, bundle)

    api = await kube_api_client(args.kubeconfig)
    try:
        rotator = build_rotator(api, args, args.secret, on_bundle)
        if args.once:
            await rotator.reconcile()
            return 0
        await rotator.run(dt.timedelta(seconds=args.rotation_interval))
    finally:
        await api.close()
    return 0


def run(args: argparse.Namespace) -> int:
    if args.certs_command == "generate":
        return generate(args)
    if not dns_names(args) and not args.ip:
        print("give at least one of --service/--namespace, --dns or --ip", file=sys.stderr)
        return 2
    return asyncio.run(rotate(args))
