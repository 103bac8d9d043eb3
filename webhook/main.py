"""`kohort webhook`: serve the mutating and validating admission webhook over HTTPS.

The serving certificate comes from `--cert-dir` (tls.crt, tls.key; reloaded when the files
change) or, with `--rotate-secret NS/NAME`, from the in-cluster rotator running in-process.
The server starts listening only once a certificate is loaded; /readyz says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from pathlib import Path

from certs import main as certs_main
from certs.reload import server_context
from certs.rotation import Bundle
from controller.api import names
from controller.workloads.base import Backend, Placement
from kohort.service import run_until_signalled
from webhook.memory import keep_large_blocks_mapped, return_freed_memory
from webhook.server import WebhookServer
from webhook.settings import (
    DEFAULT_CONTROLLER_SERVICE_ACCOUNT,
    JOB_CONTROLLERS,
    WORKLOAD_CONTROLLERS,
    ControllerIdentity,
    Settings,
)

log = logging.getLogger("kohort.webhook")
DEFAULT_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cert-dir", type=Path, default=DEFAULT_CERT_DIR, help="tls.crt, tls.key")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=9443, help="HTTPS port (default 9443)")
    parser.add_argument(
        "--metrics-port", type=int, default=8080, help="plain-HTTP /metrics port (0: none)"
    )
    parser.add_argument(
        "--reuse-port",
        action="store_true",
        help="share --port with other replicas on this host (SO_REUSEPORT; the kernel spreads"
        " connections among them)",
    )
    parser.add_argument(
        "--backend",
        choices=[b.value for b in Backend],
        default=Backend.VOLCANO.value,
        help="gang scheduler that places admitted gangs (default volcano)",
    )
    parser.add_argument("--scheduler-name", help="schedulerName to set (default: per backend)")
    parser.add_argument(
        "--workload-controller-user",
        action="append",
        default=[],
        metavar="USER",
        help="who makes the objects and pods that managed workloads control: the LWS, JobSet,"
        " KubeRay and training-operator controllers (repeatable; default: their ServiceAccounts"
        " as their releases install them, and the kube-controller-manager)",
    )
    parser.add_argument(
        "--job-controller-user",
        action="append",
        default=[],
        metavar="USER",
        help="who creates Jobs' pods (repeatable; default: the kube-controller-manager and the"
        " job-controller ServiceAccount of kube-system)",
    )
    parser.add_argument(
        "--volcano-queue",
        default=names.VOLCANO_QUEUE,
        help="the Volcano queue of kohort's PodGroups: only kohort's controller may use it",
    )
    identity = parser.add_argument_group(
        "controller identity", "who may release held gangs (unsuspend, ungate, change queues)"
    )
    identity.add_argument("--controller-user", action="append", default=[], metavar="USER")
    identity.add_argument("--controller-group", action="append", default=[], metavar="GROUP")
    identity.add_argument(
        "--controller-service-account",
        action="append",
        default=None,
        metavar="NAMESPACE:NAME",
        help=f"(repeatable; default {DEFAULT_CONTROLLER_SERVICE_ACCOUNT})",
    )
    parser.add_argument(
        "--cert-reload-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often to look for a new certificate in --cert-dir",
    )
    rotation = parser.add_argument_group("in-process certificate rotation")
    rotation.add_argument("--rotate-secret", metavar="NAMESPACE/NAME")
    certs_main.add_certificate_arguments(rotation)
    certs_main.add_rotation_arguments(rotation)


def settings_from(args: argparse.Namespace) -> Settings:
    accounts = args.controller_service_account or [DEFAULT_CONTROLLER_SERVICE_ACCOUNT]
    return Settings(
        placement=Placement.for_backend(Backend(args.backend), args.scheduler_name),
        volcano_queue=args.volcano_queue if Backend(args.backend) is Backend.VOLCANO else None,
        job_controllers=frozenset(args.job_controller_user) or JOB_CONTROLLERS,
        workload_controllers=frozenset(args.workload_controller_user) or WORKLOAD_CONTROLLERS,
        controller=ControllerIdentity.of(
            users=args.controller_user, groups=args.controller_group, service_accounts=accounts
        ),
    )


async def serve(args: argparse.Namespace, stop: asyncio.Event) -> int:
    server = WebhookServer(
        settings_from(args),
        server_context(),
        host=args.host,
        port=args.port,
        metrics_port=args.metrics_port or None,
        reuse_port=args.reuse_port,
    )
    reloader = server.reloader(args.cert_dir)
    tasks: list[asyncio.Task[None]] = []
    if args.rotate_secret:

        def on_bundle(bundle: Bundle) -> None:
            reloader.load_pem(bundle.serving.cert_pem, bundle.serving.key_pem)

        api = await certs_main.kube_api_client(args.kubeconfig)
        rotator = certs_main.build_rotator(api, args, args.rotate_secret, on_bundle)
        try:
            await rotator.reconcile()
        except BaseException:
            await api.close()
            raise
        interval = dt.timedelta(seconds=args.rotation_interval)
        tasks.append(asyncio.create_task(rotator.run(interval)))
    else:
        while not await _try_load(reloader.load_files):
            if await _wait(stop, args.cert_reload_interval):
                return 0
        tasks.append(asyncio.create_task(reloader.watch(args.cert_reload_interval)))
    await server.start()
    tasks.append(asyncio.create_task(return_freed_memory(server.activity)))
    try:
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        await server.stop()
        if args.rotate_secret:
            await api.close()
    return 0


async def _try_load(load: Callable[[], bool]) -> bool:
    try:
        load()
    except (OSError, ValueError) as err:
        log.warning("waiting for a serving certificate: %s", err)
        return False
    return True


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """True when asked to stop within `seconds`."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
    return stop.is_set()


def run(args: argparse.Namespace) -> int:
    keep_large_blocks_mapped()  # for the whole process: see webhook/memory.py
    return run_until_signalled(serve, args)
