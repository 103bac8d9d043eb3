"""Load benchmark of the webhook's POST /mutate over TLS, next to a bare aiohttp TLS ceiling.

    .venv/bin/python bench/bench_webhook.py [--loads 250,500,1000,2000] [--seconds 1.5] [--rounds N]

Each server runs in its own process (asyncio: one core at most); they take turns under load, so
one is busy at a time. The load generator runs here (`--pin` puts the servers on CPU 0 and the
generator on CPU 1). All get the same ~4 KB review of a realistic managed Job:
- "bare": an aiohttp HTTPS handler that reads the body and returns a constant response;
- "decode": the same plus decoding the body as JSON (what any webhook must at least do);
- "kohort": the real admission app (decode, mutate, encode, metrics).
The closed loop runs `--rounds` times, the three servers taking turns, and the ratios are the
medians over rounds: on a shared machine one round alone can be off by 30% or more. Each round
also offers kohort 1,000 req/s, and its p99 is the median over rounds.
Each fixed offered load is open-loop (requests are sent on schedule whether or not earlier ones
returned; latency counts from the scheduled time, so queueing shows). Then a closed loop finds
the maximum throughput. The server's CPU time per request (from /proc) gives the one-core
capacity even when the load generator, not the server, is the bottleneck. Everything listens on
127.0.0.1 and the run stops by itself (about 1.5 minutes with the defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import ssl
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from certs.authority import CertificateAuthority
from certs.reload import server_context
from controller.api import names
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_job
from webhook.server import WebhookServer
from webhook.settings import Settings

HOST = "127.0.0.1"
SERVERS = ("bare", "decode", "kohort")
TARGET_RATE = 1000  # req/s at which kohort's p99 is judged
# Like the API server: a pool of keep-alive connections to the webhook.
CONNECTIONS = 16
CONSTANT = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "x", "allowed": True},
    }
).encode()


def realistic_job_review() -> bytes:
    """A managed PyTorch-style Job as `kubectl apply` sends it: about 4 KB of JSON."""
    job = make_job("resnet50-imagenet-ddp", namespace="vision-team", parallelism=8, completions=8)
    job["metadata"]["labels"] |= {"app.kubernetes.io/name": "resnet50", "team": "vision"}
    job["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "resnet50"}}
        )
    }
    spec = job["spec"]["template"]["spec"]
    container = spec["containers"][0]
    container |= {
        "image": "registry.example.com/vision/resnet50-train:2026.11.3",
        "command": ["torchrun", "--nnodes=8", "--nproc-per-node=8", "train.py"],
        "args": ["--epochs=90", "--batch-size=256", "--data=/data/imagenet", "--amp"],
        "env": [{"name": f"NCCL_SETTING_{i}", "value": f"value-{i}"} for i in range(12)]
        + [
            {"name": "MASTER_ADDR", "value": "resnet50-imagenet-ddp-0.resnet50"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "resources": {
            "requests": {"cpu": "30", "memory": "200Gi", "nvidia.com/gpu": "8"},
            "limits": {"cpu": "32", "memory": "220Gi", "nvidia.com/gpu": "8"},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": "/data", "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "checkpoints", "mountPath": "/checkpoints"},
        ],
        "ports": [{"containerPort": 29500, "name": "c10d", "protocol": "TCP"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    spec |= {
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}},
        ],
    }
    job["spec"] |= {"backoffLimit": 6, "completionMode": "Indexed", "suspend": False}
    job["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "batch/v1",
            "time": "2026-11-22T02:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {f"f:{names.QUEUE_LABEL}": {}}}},
        }
    ]
    return json.dumps(make_review(job)).encode()


# --- servers (child processes) -------------------------------------------------------------


def _serve(kind: str, port: int, cert_dir: str, ready: Any, pin: bool) -> None:
    if pin:
        os.sched_setaffinity(0, {0})

    async def main() -> None:
        context = server_context()
        context.load_cert_chain(Path(cert_dir, "tls.crt"), Path(cert_dir, "tls.key"))
        if kind in ("bare", "decode"):

            async def constant(request: web.Request) -> web.Response:
                body = await request.read()
                if kind == "decode":
                    orjson.loads(body)
                return web.Response(body=CONSTANT, content_type="application/json")

            app = web.Application()
            app.router.add_post("/mutate", constant)
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await runner.setup()
            await web.TCPSite(runner, HOST, port, ssl_context=context, backlog=1024).start()
        else:
            server = WebhookServer(Settings(), context, host=HOST, port=port, metrics_port=None)
            server.reloader(Path(cert_dir)).load_files()
            await server.start()
        ready.set()
        await asyncio.sleep(3600)

    asyncio.run(main())


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


# --- load generator ------------------------------------------------------------------------


@dataclass
class Result:
    server: str
    offered: str
    sent: int
    seconds: float
    latencies: list[float]
    errors: int
    cpu: float

    @property
    def achieved(self) -> float:
        return len(self.latencies) / self.seconds

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu / max(1, len(self.latencies))


class Connection(asyncio.Protocol):
    """One keep-alive HTTPS connection that sends a request and reads one response at a time.

    Far cheaper per request than a full HTTP client, so one core can offer thousands of
    requests per second and the server, not the generator, is what gets measured.
    """

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.waiter: asyncio.Future[int] | None = None
        self.expected: int | None = None
        self.status = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.expected is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).lower()
            self.status = int(head[9:12])
            at = head.find(b"content-length:") + len(b"content-length:")
            self.expected = end + 4 + int(head[at : head.find(b"\r\n", at)])
        if len(self.buffer) >= self.expected:
            del self.buffer[: self.expected]
            self.expected = None
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(self.status)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection lost"))

    async def send(self, request: bytes) -> int:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.waiter


class Pool:
    def __init__(self, port: int, context: ssl.SSLContext, size: int) -> None:
        self.port, self.context, self.size = port, context, size
        self.idle: asyncio.Queue[Connection] = asyncio.Queue()

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(self.size):
            _, connection = await loop.create_connection(
                Connection, HOST, self.port, ssl=self.context
            )
            self.idle.put_nowait(connection)

    async def post(self, request: bytes) -> bool:
        connection = await self.idle.get()
        try:
            async with asyncio.timeout(5):
                ok = await connection.send(request) == 200
        except (TimeoutError, ConnectionError):
            connection = await self._replace(connection)
            ok = False
        self.idle.put_nowait(connection)
        return ok

    async def _replace(self, broken: Connection) -> Connection:
        if broken.transport is not None:
            broken.transport.abort()
        _, connection = await asyncio.get_running_loop().create_connection(
            Connection, HOST, self.port, ssl=self.context
        )
        return connection

    def close(self) -> None:
        while not self.idle.empty():
            connection = self.idle.get_nowait()
            if connection.transport is not None:
                connection.transport.close()


def http_request(body: bytes) -> bytes:
    head = (
        f"POST /mutate HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def open_loop(pool: Pool, request: bytes, rate: float, seconds: float) -> Sample:
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    errors = 0
    count = int(rate * seconds)
    start = loop.time() + 0.05

    async def one(at: float) -> None:
        nonlocal errors
        await asyncio.sleep(max(0.0, at - loop.time()))
        if await pool.post(request):
            latencies.append(loop.time() - at)
        else:
            errors += 1

    await asyncio.gather(*(one(start + i / rate) for i in range(count)))
    return latencies, errors, loop.time() - start


async def closed_loop(pool: Pool, request: bytes, workers: int, seconds: float) -> Sample:
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    errors = 0
    start = loop.time()
    end = start + seconds

    async def worker() -> None:
        nonlocal errors
        while loop.time() < end:
            sent = loop.time()
            if await pool.post(request):
                latencies.append(loop.time() - sent)
            else:
                errors += 1

    await asyncio.gather(*(worker() for _ in range(workers)))
    return latencies, errors, loop.time() - start


Sample = tuple[list[float], int, float]


async def open_pool(port: int, ca_pem: bytes) -> Pool:
    pool = Pool(port, ssl.create_default_context(cadata=ca_pem.decode()), CONNECTIONS)
    await pool.open()
    await open_loop(pool, http_request(b"{}"), 300, 1.0)  # warm up (answered with a 400)
    return pool


async def fixed_loads(
    name: str, pid: int, pool: Pool, body: bytes, loads: list[int], seconds: float
) -> list[Result]:
    request = http_request(body)
    results: list[Result] = []
    for rate in loads:
        cpu = _cpu_seconds(pid)
        latencies, errors, elapsed = await open_loop(pool, request, rate, seconds)
        cpu = _cpu_seconds(pid) - cpu
        results.append(
            Result(name, f"{rate}/s", int(rate * seconds), elapsed, latencies, errors, cpu)
        )
    return results


async def maximum(name: str, pid: int, pool: Pool, body: bytes, seconds: float) -> Result:
    cpu = _cpu_seconds(pid)
    latencies, errors, elapsed = await closed_loop(pool, http_request(body), CONNECTIONS, seconds)
    cpu = _cpu_seconds(pid) - cpu
    return Result(name, "max", len(latencies), elapsed, latencies, errors, cpu)


async def measure(
    servers: dict[str, tuple[int, int]],
    body: bytes,
    ca_pem: bytes,
    loads: list[int],
    seconds: float,
    rounds: int,
) -> tuple[list[Result], list[dict[str, Result]], list[Result]]:
    """Fixed loads once per server, then `rounds` closed loops with the servers taking turns;
    each round ends with kohort at the target load (TARGET_RATE) for the median p99."""
    pools = {name: await open_pool(port, ca_pem) for name, (_, port) in servers.items()}
    fixed: list[Result] = []
    per_round: list[dict[str, Result]] = []
    paced: list[Result] = []
    try:
        for name, (pid, _) in servers.items():
            fixed += await fixed_loads(name, pid, pools[name], body, loads, seconds)
        for _ in range(rounds):
            per_round.append(
                {
                    name: await maximum(name, pid, pools[name], body, seconds)
                    for name, (pid, _) in servers.items()
                }
            )
            pid, _ = servers["kohort"]
            paced += await fixed_loads("kohort", pid, pools["kohort"], body, [TARGET_RATE], seconds)
    finally:
        for pool in pools.values():
            pool.close()
    return fixed, per_round, paced


def run_server(kind: str, cert_dir: str, pin: bool) -> tuple[multiprocessing.Process, int]:
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    port = _free_port()
    process = context.Process(target=_serve, args=(kind, port, cert_dir, ready, pin), daemon=True)
    process.start()
    if not ready.wait(10):
        process.kill()
        raise SystemExit(f"the {kind} server did not start")
    return process, port


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="250,500,1000,2000", help="offered loads, req/s")
    parser.add_argument("--seconds", type=float, default=1.5, help="duration of each load")
    parser.add_argument("--rounds", type=int, default=10, help="closed-loop rounds per server")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="pin the server to CPU 0 and the generator to CPU 1 (only on an otherwise idle host)",
    )
    args = parser.parse_args()
    loads = [int(x) for x in args.loads.split(",") if x]
    if args.pin:
        os.sched_setaffinity(0, {1})
    body = realistic_job_review()
    ca = CertificateAuthority.create()
    pair = ca.issue_server(dns_names=["localhost"], ips=[HOST])
    load_before = Path("/proc/loadavg").read_text().split()[0]
    processes: list[multiprocessing.Process] = []
    with tempfile.TemporaryDirectory() as cert_dir:
        pair.write(Path(cert_dir, "tls.crt"), Path(cert_dir, "tls.key"))
        try:
            servers: dict[str, tuple[int, int]] = {}
            for kind in SERVERS:
                process, port = run_server(kind, cert_dir, args.pin)
                processes.append(process)
                assert process.pid is not None
                servers[kind] = (process.pid, port)
            fixed, rounds, paced = asyncio.run(
                measure(servers, body, ca.cert_pem, loads, args.seconds, args.rounds)
            )
        finally:
            for process in processes:
                process.kill()
                process.join(5)
    report(args, len(body), load_before, fixed, rounds, paced)
    return 0


def report(
    args: argparse.Namespace,
    size: int,
    load_before: str,
    fixed: list[Result],
    rounds: list[dict[str, Result]],
    paced: list[Result],
) -> None:
    pinning = "server on CPU 0, generator on CPU 1" if args.pin else "not pinned"
    print(f"review size: {size} bytes; one server process each (one core); {pinning}")
    print(f"host load average before the run: {load_before}")
    print(
        f"{'server':8} {'offered':>8} {'achieved/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'errors':>6} {'CPU ms/req':>10}"
    )
    for i, by_server in enumerate(rounds, 1):
        for r in by_server.values():
            r.offered = f"max #{i}"
    for r in fixed + [r for by_server in rounds for r in by_server.values()]:
        print(
            f"{r.server:8} {r.offered:>8} {r.achieved:>10.0f} {r.percentile(0.5):>8.2f} "
            f"{r.percentile(0.99):>8.2f} {r.errors:>6} {r.cpu_ms_per_request:>10.3f}"
        )

    def ratios(server: str) -> tuple[list[float], list[float]]:
        throughput = [r[server].achieved / r["bare"].achieved for r in rounds]
        capacity = [r["bare"].cpu_ms_per_request / r[server].cpu_ms_per_request for r in rounds]
        return throughput, capacity

    for server in ("decode", "kohort"):
        throughput, capacity = ratios(server)
        print(
            f"{server}/bare throughput (closed loop, {CONNECTIONS} connections): median "
            f"{statistics.median(throughput):.2f}x over {len(rounds)} rounds "
            f"({', '.join(f'{x:.2f}' for x in throughput)}); one-core capacity from server CPU "
            f"per request: median {statistics.median(capacity):.2f}x"
        )
    print("target: kohort/bare throughput >= 0.70x")
    p99s = [r.percentile(0.99) for r in paced]
    p50s = [r.percentile(0.5) for r in paced]
    print(
        f"kohort p99 at {TARGET_RATE} req/s: median {statistics.median(p99s):.2f} ms over "
        f"{len(paced)} rounds ({', '.join(f'{x:.1f}' for x in p99s)}) (target < 10 ms); "
        f"p50 median {statistics.median(p50s):.2f} ms; errors {sum(r.errors for r in paced)}"
    )


if __name__ == "__main__":
    sys.exit(main())
