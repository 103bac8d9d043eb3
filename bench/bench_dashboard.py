"""Dashboard speed at 1,000 queues and 10,000 pending gangs: first render and update latency.

    .venv/bin/python bench/bench_dashboard.py [--queues 1000] [--pending 10000] [--updates 20]

Feeds the dashboard's memory directly (no API server): 1,000 ClusterQueues in 20 cohorts with
a LocalQueue each, 10,000 pending gangs spread over them, 2,000 admitted gangs, 250 nodes of 8
GPUs. Serves it over HTTPS on a loopback port and prints:
- the server side: the view computed and encoded as JSON, the first time (every object read),
  and after a change the view and the patch a page is sent (what every change costs: objects
  that did not change are not read again); the whole view's size (a page's first message);
- with Debian's headless Chromium (skipped, saying so, when it is not installed): the page's
  first render, from navigation to the whole tree drawn;
- update latency: one gang admitted in the stores, to the page showing its queue's new count
  (through the event stream, its 0.2 s debounce, the patch merged and the queue redrawn),
  median and worst over `--updates` updates, and the bytes of each update's patch.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from certs.reload import CertificateReloader, server_context
from controller.api import kinds
from controller.api.kube import Node
from controller.api.queues import ClusterQueue, LocalQueue
from controller.api.times import format_time
from controller.api.workload import Workload
from dashboard.live import Follower, Live, Stores
from dashboard.main import self_signed
from dashboard.server import DashboardServer
from hack.browser import MISSING, installed, start_chromium

GPU = "nvidia.com/gpu"
NOW = 1_800_000_000.0


def queue(name: str, cohort: str, gpus: int, used: int) -> ClusterQueue:
    return ClusterQueue.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "cohort": cohort,
                "resourceGroups": [
                    {
                        "coveredResources": [GPU, "cpu"],
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [
                                    {"name": GPU, "nominalQuota": str(gpus)},
                                    {"name": "cpu", "nominalQuota": str(gpus * 8)},
                                ],
                            }
                        ],
                    }
                ],
            },
            "status": {
                "flavorsUsage": [
                    {
                        "name": "default",
                        "resources": [
                            {"name": GPU, "total": str(used), "borrowed": str(max(0, used - gpus))}
                        ],
                    }
                ]
            },
        }
    )


def gang(name: str, namespace: str, rng: random.Random, admitted_in: str | None) -> Workload:
    pods, gpus = rng.randint(1, 4), rng.choice((1, 2, 4, 8))
    status: dict[str, Any] = {"pendingReason": f"Waiting for quota: needs {pods * gpus} {GPU}"}
    if admitted_in is not None:
        status = {
            "conditions": [{"type": "PodsReady", "status": "True", "reason": "Started"}],
            "admission": {
                "clusterQueue": admitted_in,
                "admittedAt": format_time(NOW - 600),
                "podSetAssignments": [
                    {"name": "main", "count": pods, "resourceUsage": {GPU: str(pods * gpus)}}
                ],
            },
        }
    return Workload.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": format_time(NOW - rng.randint(0, 86400)),
            },
            "spec": {
                "queueName": "team",
                "priority": rng.choice((0, 0, 0, 10)),
                "podSets": [{"count": pods, "requests": {GPU: str(gpus)}}],
            },
            "status": status,
        }
    )


def build(queues: int, pending: int, seed: int) -> Stores:
    rng = random.Random(seed)
    cluster_queues = {
        ("", f"q{i:04d}"): queue(f"q{i:04d}", f"cohort-{i % 20:02d}", 8, rng.randint(0, 12))
        for i in range(queues)
    }
    local_queues = {
        (f"ns{i:04d}", "team"): LocalQueue.model_validate(
            {
                "metadata": {"name": "team", "namespace": f"ns{i:04d}"},
                "spec": {"clusterQueue": f"q{i:04d}"},
            }
        )
        for i in range(queues)
    }
    workloads: dict[tuple[str, str], Workload] = {}
    for g in range(pending):
        namespace = f"ns{rng.randrange(queues):04d}"
        workloads[namespace, f"gang-{g:05d}"] = gang(f"gang-{g:05d}", namespace, rng, None)
    for g in range(pending // 5):
        i = rng.randrange(queues)
        name = f"running-{g:05d}"
        workloads[f"ns{i:04d}", name] = gang(name, f"ns{i:04d}", rng, f"q{i:04d}")
    nodes = {
        ("", f"n{i:04d}"): msgspec.convert(
            {
                "metadata": {"name": f"n{i:04d}"},
                "status": {
                    "allocatable": {GPU: "8"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
            Node,
        )
        for i in range(250)
    }
    return Stores(cluster_queues, {}, local_queues, workloads, nodes)


def admit(stores: Stores, key: tuple[str, str], queue_name: str) -> Workload:
    """The pending gang `key`, admitted into `queue_name` (its pods all running)."""
    old = stores.workloads[key]
    body = old.model_dump(by_alias=True, exclude_none=True)
    body["metadata"]["resourceVersion"] = "2"
    body["status"] = {
        "conditions": [{"type": "PodsReady", "status": "True", "reason": "Started"}],
        "admission": {"clusterQueue": queue_name, "podSetAssignments": []},
    }
    new = Workload.model_validate(body)
    stores.workloads[key] = new  # type: ignore[index]
    return new


async def until(driver: Any, script: str, want: Any, within: float = 60.0) -> float:
    """Seconds until the page's `script` returns `want` (polled every 5 ms)."""
    started = time.perf_counter()
    while True:
        got = await asyncio.to_thread(driver.execute_script, script)
        now = time.perf_counter()
        if got == want:
            return now - started
        if now - started > within:
            raise TimeoutError(f"{script!r} still gives {got!r}, not {want!r}")
        await asyncio.sleep(0.005)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> None:
    stores = build(args.queues, args.pending, args.seed)
    live = Live(stores, clock=time.time, interval=15)
    for _ in range(24):
        live.sample()
    print(
        f"dashboard bench: {args.queues} queues, {args.pending} pending gangs,"
        f" {len(stores.workloads) - args.pending} admitted, {len(stores.nodes)} nodes"
    )

    started = time.perf_counter()
    _, body = live.rendered()
    cold = time.perf_counter() - started
    times, sizes = [], []
    page = Follower()
    page.next(live.render())
    pending_keys = [k for k, w in stores.workloads.items() if w.status and not w.status.admission]
    rng = random.Random(args.seed + 2)
    for _ in range(args.repeat):
        namespace, name = rng.choice(pending_keys)
        pending_keys.remove((namespace, name))
        old = stores.workloads[namespace, name]
        new = admit(stores, (namespace, name), f"q{namespace[2:]}")
        live.changed(kinds.WORKLOADS, old, new)
        started = time.perf_counter()
        message = page.next(live.render())
        times.append(time.perf_counter() - started)
        sizes.append(len(message[1]) if message else 0)
    print(
        f"  server: view + whole JSON {cold * 1000:.0f} ms the first time; after a gang admitted,"
        f" view + patch {statistics.median(times) * 1000:.0f} ms median (max"
        f" {max(times) * 1000:.0f} ms over {args.repeat}); whole view {len(body) / 2**20:.2f} MiB"
        f" (a page's first message), patch {statistics.median(sizes) / 1024:.1f} KiB median"
        f" (max {max(sizes) / 1024:.1f} KiB)"
    )

    if not installed():
        print(f"  browser: skipped ({MISSING})")
        return
    profile = Path(tempfile.mkdtemp(prefix="kohort-bench-chromium-"))
    driver = start_chromium(profile)
    context = server_context()
    CertificateReloader(context).load_pem(*self_signed("127.0.0.1"))
    server = DashboardServer(live, context, host="127.0.0.1", port=0)
    await server.start()
    try:
        started = time.perf_counter()
        await asyncio.to_thread(driver.get, f"https://127.0.0.1:{server.port}/")
        count = "return document.querySelectorAll('#tree .queue').length;"
        await until(driver, count, args.queues)
        first = time.perf_counter() - started
        print(f"  browser: first render {first:.2f} s (navigation to {args.queues} queues drawn)")

        pending_keys = [
            k for k, w in stores.workloads.items() if w.status and not w.status.admission
        ]
        rng = random.Random(args.seed + 1)
        latencies: list[float] = []
        sizes = []
        page = Follower()
        page.next(live.render())
        for _ in range(args.updates):
            namespace, name = rng.choice(pending_keys)
            pending_keys.remove((namespace, name))
            target = f"q{namespace[2:]}"
            shown = f"#queue-{target} .admitted"
            script = f"return document.querySelector('{shown}').textContent;"
            before = int(await asyncio.to_thread(driver.execute_script, script))
            old = stores.workloads[namespace, name]
            new = admit(stores, (namespace, name), target)
            live.changed(kinds.WORKLOADS, old, new)
            latencies.append(await until(driver, script, str(before + 1)))
            # (rendered for the page already: the version it was sent)
            message = page.next(live.render())
            sizes.append(len(message[1]) if message else 0)
            await asyncio.sleep(0.3)
        print(
            f"  browser: update latency (a gang admitted to its queue's count on the page)"
            f" median {statistics.median(latencies) * 1000:.0f} ms,"
            f" p90 {pct(latencies, 0.9) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
            f" over {len(latencies)} updates (includes the stream's 200 ms debounce);"
            f" bytes per update {statistics.median(sizes) / 1024:.1f} KiB median,"
            f" max {max(sizes) / 1024:.1f} KiB"
        )
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10000)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5, help="server-side renders timed")
    parser.add_argument("--seed", type=int, default=1)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
