"""`kohort dashboard`: a read-only, live web page of the queues, their gangs and the GPUs.

It watches ClusterQueues, Cohorts, LocalQueues, Workloads and Nodes through the API server
with the kubeconfig given (in the chart: its own ServiceAccount, bound to a read-only
ClusterRole), and serves the page over HTTPS: with `--cert-dir` (tls.crt, tls.key; reloaded
when they change), else with a certificate it makes for itself at start (the browser warns:
for a laptop's port-forward, not for a shared address).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from pathlib import Path

from certs.authority import CertificateAuthority
from certs.reload import CertificateReloader, server_context
from controller.cluster import clients
from dashboard.live import Live, Stores
from dashboard.server import DashboardServer
from dashboard.view import GPU
from dashboard.watch import Watch
from kohort.service import run_until_signalled

log = logging.getLogger("kohort.dashboard")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    parser.add_argument(
        "--cert-dir",
        type=Path,
        help="tls.crt and tls.key to serve (default: a self-signed certificate made at start)",
    )
    parser.add_argument(
        "--history-hours", type=float, default=6.0, help="hours of GPU history kept in memory"
    )
    parser.add_argument(
        "--sample-seconds", type=float, default=15.0, help="seconds between GPU samples"
    )
    parser.add_argument("--gpu-resource", default=GPU, help=f"the GPU resource (default {GPU})")


def self_signed(host: str) -> tuple[bytes, bytes]:
    """A serving certificate and key for localhost and `host`, from a throwaway CA."""
    ips = ["127.0.0.1"]
    if host[:1].isdigit() and host not in ("0.0.0.0", "127.0.0.1"):
        ips.append(host)
    pair = CertificateAuthority.create("kohort-dashboard").issue_server(["localhost"], ips)
    return pair.cert_pem, pair.key_pem


async def serve(args: argparse.Namespace, stop: asyncio.Event) -> int:
    context = server_context()
    reloader = CertificateReloader(context, args.cert_dir)
    tasks: list[asyncio.Task[None]] = []
    if args.cert_dir is not None:
        reloader.load_files()
        tasks.append(asyncio.create_task(reloader.watch(10.0)))
    else:
        reloader.load_pem(*self_signed(args.host))
    live = Live(
        Stores(),
        clock=time.time,
        hours=args.history_hours,
        interval=args.sample_seconds,
        gpu=args.gpu_resource,
    )
    api = await clients.connect(args.kubeconfig, user_agent="kohort-dashboard")
    watch = Watch(api, live)
    server = DashboardServer(live, context, host=args.host, port=args.port)
    watch.start()
    await server.start()
    tasks.append(asyncio.create_task(sample_every(live)))
    try:
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        await server.stop()
        await watch.stop()
        await api.close()
    return 0


async def sample_every(live: Live) -> None:
    while True:
        live.sample()
        await asyncio.sleep(live.interval)


def run(args: argparse.Namespace) -> int:
    return run_until_signalled(serve, args)
