"""Memory of kohort's controller and webhook: the controller with 10,000 Workloads and 1,000
Nodes in its cache, the webhook under load.

    .venv/bin/python bench/bench_memory.py [--workloads 10000] [--nodes 1000] [--fraction F]
        [--concurrency 32] [--time-limit 1800] [--work-dir DIR]
    .venv/bin/python bench/bench_memory.py --where [--workloads 10000] [--nodes 1000] [--top 15]

On the real local control plane (default): a fresh control plane (etcd, kube-apiserver; no
kube-controller-manager, no scheduler), kohort's webhook and controller started as processes
as users start them (hack/scale.py's KohortProcesses), both with `--backend=none`, the
controller with `--wait-for-pods-ready=0` (there is no Job controller here to make pods, and
no gang scheduler to place them); 30 ClusterQueues in 5 cohorts of 6 (nominal 20 cpu,
borrowing limit 100, like the harness setup of bench/bench_scale.py) with a LocalQueue each,
in namespaces of their own. Then, in this order:
1. `--nodes` plain Node objects (32 cpu, Ready, their not-ready taint lifted: nobody manages
   them, so they never change; the controller's placement check counts Ready nodes);
2. `--workloads` one-pod Jobs of 1 cpu, created unsuspended with the queue label through the
   API server, so that kohort's webhook holds each one (bounded concurrency, `--concurrency`);
3. the wait until the controller has a Workload for every Job and has written each one's
   state (admitted, or its pending reason: with 600 cpu of quota in all, most wait), and no
   Workload has changed for `--quiet` seconds.
It prints each process's RSS (the process tree's VmRSS from /proc, sampled every 0.5 s; the
peak includes the root's VmHWM) and CPU seconds at each step: the controller's steady RSS
(median of 10 samples a second apart after settling) and peak, the webhook's peak during the
creates, the objects counted, and per-object figures (RSS growth per Node and per Job with its
Workload).

`--where` (no cluster): where the controller's memory goes, in this process. The controller's
informers, state and reconciler are wired as controller.main wires them (like
bench/bench_reconcile.py) on tests.fakes.memory_api.MemoryApi holding the same Nodes,
queues and held Jobs; passes run until one admits nothing. Printed: the deep size of each of
the controller's structures (each informer's store, the gang index, the engine, the rest of
ClusterState; an object shared by two counts in the first), and tracemalloc's live allocations
grouped by the innermost frame in this project's code (file, then line) and by the innermost
frame of any code (which library allocates).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import functools
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
import types
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.api import kinds, names
from controller.api.times import format_time
from controller.cluster import clients
from controller.cluster.cache import Cache
from controller.cluster.clients import ApiError, Client, JSONDict
from controller.cluster.writers import Writers
from controller.metrics import ControllerMetrics
from controller.reconciler import SETTLE_BUDGET_ROUNDS, Reconciler
from controller.settings import Settings
from controller.state.cluster import ClusterState
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Backend, Mutation, Placement
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from hack import scale
from hack.demo import apply_queues
from hack.localcluster import ClusterOptions, LocalCluster
from hack.objects import pod_template, resource_flavor
from tests.fakes.memory_api import MemoryApi

WORKLOADS = 10_000
NODES = 1_000
NODE_CPU = 32
# 5 cohorts of 6 ClusterQueues, as the harness setup of bench/bench_scale.py.
QUEUES = scale.Scenario(
    (
        scale.CohortSet(
            "cohort",
            5,
            (
                scale.QueueSet(
                    "cq",
                    6,
                    "20",
                    "100",
                    "Any",
                    "LowerPriority",
                    (scale.WorkloadSet(1, 0, (scale.WorkloadClass("one", 0, 0, "1"),)),),
                ),
            ),
        ),
    )
)
# The targets (MB: 10^6 bytes).
CONTROLLER_TARGET_MB = 300
WEBHOOK_TARGET_MB = 80
MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def log(msg: str) -> None:
    print(f"[bench-memory {dt.datetime.now():%H:%M:%S}] {msg}", flush=True)


def mb(mib: float) -> float:
    return mib * MIB / 1e6


# -- the objects ---------------------------------------------------------------------------


def plain_node(name: str) -> JSONDict:
    """A Node no kubelet (and no kwok) manages: Ready, never changing."""
    capacity = {"cpu": str(NODE_CPU), "memory": "256Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kohort.dev/node-pool": "memory",
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
            },
        },
    }


def node_names(count: int) -> list[str]:
    return [f"mem-node-{i:04d}" for i in range(count)]


def planned_jobs(count: int) -> list[tuple[str, str]]:
    """(namespace, name) of `count` Jobs, round-robin over the queues' namespaces."""
    queues = [q.name for q in QUEUES.queues()]
    return [(queues[i % len(queues)], f"job-{i:05d}") for i in range(count)]


def user_job(namespace: str, name: str) -> JSONDict:
    """A one-pod Job of 1 cpu as a user creates it: its queue label, not suspended (the
    webhook holds it). The LocalQueue is named like its namespace."""
    return {
        "apiVersion": kinds.JOBS.api_version,
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {names.QUEUE_LABEL: namespace},
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": pod_template({"cpu": "1"}),
        },
    }


def held_job(namespace: str, name: str, created: str) -> JSONDict:
    """`user_job` as kohort's webhook (backend none) leaves it."""
    editor = Editor(user_job(namespace, name))
    JobAdapter().default(editor, Mutation(namespace, Placement.for_backend(Backend.NONE)))
    doc = editor.doc
    doc["metadata"]["creationTimestamp"] = created
    doc["metadata"]["uid"] = f"uid-{namespace}-{name}"
    return doc


async def bounded(limit: int, items: Iterable[T], call: Callable[[T], Awaitable[None]]) -> None:
    """`call` on every item, at most `limit` at once."""
    todo = iter(items)

    async def worker() -> None:
        for item in todo:
            await call(item)

    await asyncio.gather(*(worker() for _ in range(limit)))


async def with_retries(call: Callable[[], Awaitable[Any]], what: str, errors: list[str]) -> None:
    for attempt in range(5):
        try:
            await call()
            return
        except ApiError as err:
            if err.status == 409:
                return  # a retried create that had gone through
            if attempt == 4:
                errors.append(f"{what}: {err}")
        except (OSError, TimeoutError) as err:
            if attempt == 4:
                errors.append(f"{what}: {type(err).__name__} {err}")
        await asyncio.sleep(1.0)


# -- following the controller's Workloads ----------------------------------------------------


class WorkloadWatch:
    """Per Job of the bench: its Workloads, and whether each is admitted or has its pending
    reason written; when a Workload last changed."""

    def __init__(self, jobs: Iterable[tuple[str, str]]) -> None:
        self.jobs = set(jobs)
        self.of_job: dict[tuple[str, str], set[str]] = {}
        self.admitted: dict[str, bool] = {}
        self.reported: dict[str, bool] = {}
        self.foreign = 0
        self.last_change = time.monotonic()

    def see(self, kind: str, data: bytes) -> None:
        wl = scale.decode_workload(data)
        owner = next((o.name for o in wl.metadata.ownerReferences if o.kind == "Job"), "")
        key = (wl.metadata.namespace, owner)
        if key not in self.jobs:
            self.foreign += 1
            return
        self.last_change = time.monotonic()
        uid = wl.metadata.uid
        if kind == "DELETED":
            self.of_job.get(key, set()).discard(uid)
            self.admitted.pop(uid, None)
            self.reported.pop(uid, None)
            return
        self.of_job.setdefault(key, set()).add(uid)
        admitted = any(
            c.type in ("Admitted", "QuotaReserved") and c.status == "True"
            for c in wl.status.conditions
        )
        self.admitted[uid] = admitted
        self.reported[uid] = admitted or bool(wl.status.pendingReason)

    @property
    def with_workload(self) -> int:
        return sum(1 for uids in self.of_job.values() if uids)

    @property
    def workloads(self) -> int:
        return sum(len(uids) for uids in self.of_job.values())

    @property
    def duplicates(self) -> int:
        return sum(1 for uids in self.of_job.values() if len(uids) > 1)

    def settled(self, quiet: float) -> bool:
        return (
            self.with_workload == len(self.jobs)
            and all(self.reported.values())
            and time.monotonic() - self.last_change >= quiet
        )

    async def run(self, api: Client) -> None:
        """Until cancelled; relists after a 410 or a closed watch."""
        version = ""
        while True:
            if not version:
                items, version = await api.read_all(bytes, kinds.WORKLOADS)
                for raw in items:
                    self.see("ADDED", raw)
            try:
                async for event in api.follow(kinds.WORKLOADS, version, timeout_seconds=600):
                    version = event.version or version
                    if event.type != "BOOKMARK":
                        self.see(event.type, event.data)
            except ApiError as err:
                if err.status not in (0, 410):
                    raise
                version = ""


# -- the cluster run -------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """One process tree at one moment: RSS now, peak so far, CPU seconds since its start."""

    rss_mib: float
    peak_mib: float
    cpu_seconds: float


@dataclass
class ClusterResult:
    workloads: int
    nodes: int
    nodes_created: int = 0
    jobs_created: int = 0
    create_seconds: float = 0.0
    settle_seconds: float = 0.0
    wall_seconds: float = 0.0
    with_workload: int = 0
    workload_objects: int = 0
    duplicates: int = 0
    admitted: int = 0
    pending_metric: float = 0.0
    admitted_metric: float = 0.0
    passes: float = 0.0
    reconcile_errors: float = 0.0
    settled: bool = False
    errors: list[str] = field(default_factory=list)
    # step -> process -> figures; steps: started, nodes, created, settled.
    steps: dict[str, dict[str, Figures]] = field(default_factory=dict)
    # The controller's and the webhook's RSS samples after settling (MiB).
    steady_samples: dict[str, list[float]] = field(default_factory=dict)
    logs: Path | None = None

    def at(self, step: str, process: str) -> Figures:
        return self.steps.get(step, {}).get(process, Figures(0.0, 0.0, 0.0))

    def steady(self, process: str) -> float:
        samples = self.steady_samples.get(process, [])
        return statistics.median(samples) if samples else 0.0

    def peak(self, process: str) -> float:
        return max((f[process].peak_mib for f in self.steps.values() if process in f), default=0)

    def cpu(self, process: str, start: str, end: str) -> float:
        return self.at(end, process).cpu_seconds - self.at(start, process).cpu_seconds


def _snapshot(sampler: scale.Sampler) -> dict[str, Figures]:
    sampler.sample()
    return {
        name: Figures(f.rss_mib, f.peak_rss_mib, f.cpu_seconds)
        for name, f in sampler.figures.items()
    }


async def run_cluster(
    workloads: int,
    nodes: int,
    work_dir: Path,
    *,
    concurrency: int = 32,
    quiet: float = 10.0,
    time_limit: float = 1800.0,
    progress: Callable[[str], None] = log,
) -> ClusterResult:
    """The bench on a fresh local control plane (see the module's docstring)."""
    result = ClusterResult(workloads, nodes, logs=work_dir)
    started = time.monotonic()
    deadline = started + time_limit
    options = ClusterOptions(node_pools=(), scheduler="none", controller_manager=False)
    with LocalCluster(options, work_dir / "cluster") as cluster:
        stack = scale.KohortProcesses(
            cluster,
            work_dir / "kohort",
            controller_args=("--backend=none", "--wait-for-pods-ready=0"),
            webhook_args=("--backend=none",),
        )
        api: Client | None = None
        tasks: list[asyncio.Task[Any]] = []
        try:
            stack.start()
            scale.create_namespaces(cluster, QUEUES, stack.labels)
            apply_queues(cluster.rest, scale.kohort_queues(QUEUES))
            api = await clients.connect(str(cluster.kubeconfig))
            sampler = scale.Sampler(stack.roots())
            tasks.append(asyncio.create_task(sampler.run()))
            jobs = planned_jobs(workloads)
            watch = WorkloadWatch(jobs)
            tasks.append(asyncio.create_task(watch.run(api)))
            await asyncio.sleep(quiet / 2)  # the controller's first passes over the queues
            result.steps["started"] = await asyncio.to_thread(_snapshot, sampler)

            progress(f"creating {nodes} Nodes")
            errors: list[str] = []
            created_nodes: list[str] = []

            async def make_node(name: str) -> None:
                await api.create(kinds.NODES, plain_node(name))
                # kube-apiserver taints a new Node not-ready; kube-controller-manager (absent
                # here) would lift it once the Node is Ready.
                await api.patch(kinds.NODES, name, {"spec": {"taints": None}})
                created_nodes.append(name)

            async def one_node(name: str) -> None:
                await with_retries(lambda: make_node(name), name, errors)

            await bounded(concurrency, node_names(nodes), one_node)
            result.nodes_created = len(created_nodes)
            await asyncio.sleep(quiet / 2)
            result.steps["nodes"] = await asyncio.to_thread(_snapshot, sampler)

            progress(f"creating {workloads} Jobs through the webhook ({concurrency} at once)")
            t0 = time.monotonic()
            created_jobs = 0
            next_report = t0 + 30

            async def make_job(namespace: str, name: str) -> None:
                nonlocal created_jobs, next_report
                await api.create(kinds.JOBS, user_job(namespace, name), namespace)
                created_jobs += 1
                if time.monotonic() >= next_report:
                    next_report += 30
                    progress(
                        f"  {created_jobs} Jobs created, {watch.with_workload} with a Workload;"
                        f" webhook RSS {sampler.figures['webhook'].rss_mib:.0f} MiB, controller"
                        f" {sampler.figures['controller'].rss_mib:.0f} MiB"
                    )

            async def one_job(job: tuple[str, str]) -> None:
                namespace, name = job
                await with_retries(lambda: make_job(namespace, name), f"{namespace}/{name}", errors)

            await bounded(concurrency, jobs, one_job)
            result.create_seconds = time.monotonic() - t0
            result.jobs_created = created_jobs
            result.errors += errors
            result.steps["created"] = await asyncio.to_thread(_snapshot, sampler)
            progress(
                f"{created_jobs} Jobs created in {result.create_seconds:.0f}s; waiting for the"
                " controller to settle"
            )

            t1 = time.monotonic()
            next_report = t1 + 30
            while not watch.settled(quiet):
                if time.monotonic() > deadline:
                    result.errors.append(f"not settled at the time limit of {time_limit:.0f}s")
                    break
                if not stack.alive():
                    result.errors.append("a kohort process exited")
                    break
                if tasks[1].done():
                    tasks[1].result()  # the watch failed: raise its error
                await asyncio.sleep(1.0)
                if time.monotonic() >= next_report:
                    next_report += 30
                    progress(
                        f"  {watch.with_workload}/{workloads} Jobs with a Workload,"
                        f" {sum(watch.reported.values())} reported,"
                        f" {sum(watch.admitted.values())} admitted; controller RSS"
                        f" {sampler.figures['controller'].rss_mib:.0f} MiB"
                    )
            else:
                result.settled = True
            result.settle_seconds = time.monotonic() - t1
            samples: dict[str, list[float]] = {"controller": [], "webhook": []}
            for _ in range(10):
                figures = await asyncio.to_thread(_snapshot, sampler)
                for name, values in samples.items():
                    values.append(figures[name].rss_mib)
                await asyncio.sleep(1.0)
            result.steady_samples = samples
            result.steps["settled"] = figures
            result.with_workload = watch.with_workload
            result.workload_objects = watch.workloads
            result.duplicates = watch.duplicates
            result.admitted = sum(watch.admitted.values())
            with contextlib.suppress(OSError):
                totals = stack.metric_totals()
                result.pending_metric = totals.get("kohort_pending_workloads", 0.0)
                result.admitted_metric = totals.get("kohort_admitted_active_workloads", 0.0)
                result.passes = totals.get("kohort_reconcile_duration_seconds_count", 0.0)
                result.reconcile_errors = totals.get("kohort_reconcile_errors_total", 0.0)
            result.wall_seconds = time.monotonic() - started
            return result
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if api is not None:
                await api.close()
            stack.stop()


def cluster_report(r: ClusterResult) -> str:
    c, w = "controller", "webhook"
    steady, peak = r.steady(c), r.peak(c)
    hook_peak = r.at("created", w).peak_mib
    lines = [
        f"objects: {r.nodes_created}/{r.nodes} Nodes, {r.jobs_created}/{r.workloads} Jobs created"
        f" in {r.create_seconds:.1f}s ({r.jobs_created / max(r.create_seconds, 1e-9):.0f}/s),"
        f" {r.with_workload} Jobs with a Workload ({r.workload_objects} Workloads,"
        f" {r.duplicates} Jobs with more than one), {r.admitted} admitted,"
        f" {r.workload_objects - r.admitted} waiting; controller metrics: pending"
        f" {r.pending_metric:.0f}, admitted {r.admitted_metric:.0f}, {r.passes:.0f} passes,"
        f" {r.reconcile_errors:.0f} errors",
        f"settled: {'yes' if r.settled else 'NO'} ({r.settle_seconds:.1f}s after the last"
        f" create); wall {r.wall_seconds:.0f}s",
        "",
        f"{'step':<10} {'controller RSS':>15} {'peak':>8} {'CPU s':>8}"
        f" {'webhook RSS':>12} {'peak':>8} {'CPU s':>8}   (MiB, CPU since start)",
    ]
    for step in ("started", "nodes", "created", "settled"):
        a, b = r.at(step, c), r.at(step, w)
        lines.append(
            f"{step:<10} {a.rss_mib:>15.1f} {a.peak_mib:>8.1f} {a.cpu_seconds:>8.1f}"
            f" {b.rss_mib:>12.1f} {b.peak_mib:>8.1f} {b.cpu_seconds:>8.1f}"
        )
    nodes_growth = r.at("nodes", c).rss_mib - r.at("started", c).rss_mib
    jobs_growth = steady - r.at("nodes", c).rss_mib
    per_node = nodes_growth * 1024 / max(1, r.nodes_created)
    per_job = jobs_growth * 1024 / max(1, r.with_workload)
    lines += [
        "",
        f"controller: steady RSS {steady:.1f} MiB ({mb(steady):.0f} MB; median of"
        f" {len(r.steady_samples.get(c, []))} samples after settling), peak {peak:.1f} MiB"
        f" ({mb(peak):.0f} MB); target < {CONTROLLER_TARGET_MB} MB:"
        f" {'met' if mb(max(steady, peak)) < CONTROLLER_TARGET_MB else 'NOT met'}",
        f"controller CPU: {r.at('settled', c).cpu_seconds:.1f}s in all, "
        f"{r.cpu(c, 'nodes', 'created'):.1f}s during the creates,"
        f" {r.cpu(c, 'created', 'settled'):.1f}s after",
        f"webhook: peak RSS during the creates {hook_peak:.1f} MiB ({mb(hook_peak):.0f} MB),"
        f" before {r.at('nodes', w).rss_mib:.1f} MiB, steady after {r.steady(w):.1f} MiB;"
        f" target < {WEBHOOK_TARGET_MB} MB: "
        f"{'met' if mb(hook_peak) < WEBHOOK_TARGET_MB else 'NOT met'}",
        f"webhook CPU during the creates: {r.cpu(w, 'nodes', 'created'):.1f}s"
        f" ({r.cpu(w, 'nodes', 'created') * 1000 / max(1, r.jobs_created):.2f} ms per Job)",
        f"per object (controller RSS growth): {per_node:.1f} KiB per Node"
        f" ({nodes_growth:.1f} MiB for {r.nodes_created}), {per_job:.1f} KiB per Job with its"
        f" Workload ({jobs_growth:.1f} MiB for {r.with_workload})",
    ]
    if r.errors:
        lines.append("errors: " + "; ".join(r.errors[:10]))
    return "\n".join(lines)


# -- where the memory goes (in-process) ------------------------------------------------------


_SHARED = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    types.FrameType,
)


def _referents(obj: Any) -> Iterator[Any]:
    if isinstance(obj, msgspec.Struct):
        # Structs may be untracked by the collector (then get_referents sees nothing).
        for name in obj.__struct_fields__:
            yield getattr(obj, name, None)
    else:
        yield from gc.get_referents(obj)


def deep_size(root: Any, seen: set[int]) -> tuple[int, int]:
    """Bytes (sys.getsizeof) and count of the objects reachable from `root` not in `seen`;
    classes, modules and functions are not followed (shared by everything)."""
    total = count = 0
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, _SHARED) or obj is None:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        count += 1
        todo.extend(_referents(obj))
    return total, count


@dataclass(frozen=True)
class WhereResult:
    census: list[tuple[str, int, int]]  # (structure, bytes, objects)
    traced: int
    traced_peak: int
    by_project_file: list[tuple[str, int, int]]  # (file, bytes, blocks)
    by_project_line: list[tuple[str, int, int]]
    by_any_file: list[tuple[str, int, int]]
    rss_mib: dict[str, float]
    counts: dict[str, int]
    passes: int
    seconds: float


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _short(filename: str) -> str:
    path = Path(filename)
    with contextlib.suppress(ValueError):
        return str(path.relative_to(ROOT))
    parts = path.parts
    if "site-packages" in parts:
        return "/".join(parts[parts.index("site-packages") + 1 :])
    return filename


def _project(filename: str) -> bool:
    return filename.startswith(str(ROOT)) and "/.venv/" not in filename


def fill_memory_api(api: MemoryApi, workloads: int, nodes: int) -> None:
    api.put(kinds.RESOURCE_FLAVORS, resource_flavor("default"))
    for obj in scale.kohort_queues(QUEUES):
        kind = kinds.CLUSTER_QUEUES if obj["kind"] == "ClusterQueue" else kinds.LOCAL_QUEUES
        api.put(kind, obj)
    for q in QUEUES.queues():
        api.put(kinds.NAMESPACES, {"metadata": {"name": q.name}})
    for name in node_names(nodes):
        api.put(kinds.NODES, plain_node(name))
    first = int(time.time()) - workloads - 60
    for i, (namespace, name) in enumerate(planned_jobs(workloads)):
        api.put(kinds.JOBS, held_job(namespace, name, format_time(first + i)))


def _table(size: Counter[str], blocks: Counter[str]) -> list[tuple[str, int, int]]:
    return [(k, size[k], blocks[k]) for k, _ in size.most_common()]


def group_traces(
    snapshot: tracemalloc.Snapshot,
) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]], list[tuple[str, int, int]]]:
    """Live bytes and blocks by the innermost frame in this project's code (file; file and
    line), and by the innermost frame of any code (file)."""
    sizes: tuple[Counter[str], Counter[str], Counter[str]] = (Counter(), Counter(), Counter())
    blocks: tuple[Counter[str], Counter[str], Counter[str]] = (Counter(), Counter(), Counter())
    short = functools.lru_cache(maxsize=None)(_short)
    for trace in snapshot.traces:
        frames = trace.traceback  # the oldest frame first
        ours = next((f for f in reversed(frames) if _project(f.filename)), None)
        keys = (
            short(ours.filename) if ours else "(no frame in this project)",
            f"{short(ours.filename)}:{ours.lineno}" if ours else "(no frame in this project)",
            short(frames[-1].filename),
        )
        for size, block, key in zip(sizes, blocks, keys, strict=True):
            size[key] += trace.size
            block[key] += 1
    return (
        _table(sizes[0], blocks[0]),
        _table(sizes[1], blocks[1]),
        _table(sizes[2], blocks[2]),
    )


async def run_where(
    workloads: int, nodes: int, *, frames: int = 12, max_passes: int = 200
) -> WhereResult:
    rss = {"imported": _rss_mib()}
    api = MemoryApi()
    fill_memory_api(api, workloads, nodes)
    gc.collect()
    rss["fake API filled"] = _rss_mib()
    # A pass takes in at most SETTLE_BUDGET_ROUNDS x concurrent_writes new gangs (256 by
    # default; the rest in later passes): with a budget for all of them, one pass creates every
    # Workload (the state reached is the same, in fewer passes under tracemalloc).
    settings = Settings(
        pods_ready_timeout=None,
        concurrent_writes=max(32, -(-workloads // SETTLE_BUDGET_ROUNDS)),
    )
    podgroups = PodGroupSettings(Backend.NONE)
    if frames > 0:
        tracemalloc.start(frames)
    t0 = time.perf_counter()
    state = ClusterState(settings, podgroups)
    cache = Cache(api, podgroup_kind=podgroups.kind)
    writers = Writers(api, cache.informers, identity="bench")
    reconciler = Reconciler(state, writers, settings, ControllerMetrics())
    cache.listen(reconciler.notify)
    passes = 0
    try:
        cache.start()
        await cache.wait_synced()
        log(f"cache synced in {time.perf_counter() - t0:.1f}s")
        jobs = cache.informers[kinds.JOBS].store
        workloads_held = cache.informers[kinds.WORKLOADS].store
        while passes < max_passes:
            stats = await reconciler.reconcile_once()
            passes += 1
            # The reports (pending reasons) are written beside the passes.
            async with asyncio.timeout(300):
                await reconciler.deferred.drain()
            await api.settle()
            log(
                f"pass {passes}: {stats.admitted} admitted, {stats.evicted} evicted;"
                f" {len(workloads_held)} Workloads for {len(jobs)} Jobs"
            )
            # A pass takes in a budget of new gangs: settled once every Job has its Workload
            # and a pass changes nothing.
            if (
                not stats.admitted
                and not stats.evicted
                and len(workloads_held) >= len(jobs)
                and not len(reconciler.deferred)
            ):
                break
        seconds = time.perf_counter() - t0
        log(f"settled after {passes} passes in {seconds:.1f}s; taking the snapshot")
        gc.collect()
        traced = traced_peak = 0
        by_file: list[tuple[str, int, int]] = []
        by_line: list[tuple[str, int, int]] = []
        by_any: list[tuple[str, int, int]] = []
        if frames > 0:
            rss["controller settled (with tracemalloc's own overhead)"] = _rss_mib()
            traced, traced_peak = tracemalloc.get_traced_memory()
            snapshot = tracemalloc.take_snapshot()
            tracemalloc.stop()
            by_file, by_line, by_any = group_traces(snapshot)
            del snapshot
        else:
            rss["controller settled (no tracemalloc)"] = _rss_mib()
        log("snapshot grouped; measuring the controller's structures")

        seen: set[int] = {id(api), id(cache), id(writers), id(reconciler), id(state)}
        census: list[tuple[str, int, int]] = []
        for kind, informer in cache.informers.items():
            size, count = deep_size(informer.store, seen)
            if informer.store:
                census.append(
                    (f"informer store: {kind.plural} ({len(informer.store)})", size, count)
                )
        census.append(("ClusterState.index (the gangs)", *deep_size(state.index, seen)))
        census.append(("ClusterState.engine (the decision core)", *deep_size(state.engine, seen)))
        for name, value in vars(state).items():
            if name in ("index", "engine"):
                continue
            size, count = deep_size(value, seen)
            if size >= 64 * 1024:
                census.append((f"ClusterState.{name}", size, count))
        rest = sum(deep_size(v, seen)[0] for v in vars(state).values())
        census.append(("ClusterState, the rest", rest, 0))
        census.append(("Reconciler (deferred writes, ...)", *deep_size(vars(reconciler), seen)))
        log("measured")
        counts = {f"{kind.plural}": len(i.store) for kind, i in cache.informers.items() if i.store}
        counts["gangs"] = len(list(state.index))
        return WhereResult(
            census, traced, traced_peak, by_file, by_line, by_any, rss, counts, passes, seconds
        )
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
        await cache.stop()
        await api.close()


def where_report(r: WhereResult, top: int) -> str:
    def table(title: str, rows: Sequence[tuple[str, int, int]], unit: str) -> list[str]:
        total = sum(size for _, size, _ in rows) or 1
        out = [f"\n{title}", f"{'MiB':>8} {'%':>6} {unit:>10}  where"]
        for name, size, n in rows[:top]:
            out.append(f"{size / MIB:>8.2f} {100 * size / total:>6.1f} {n:>10,}  {name}")
        if len(rows) > top:
            rest = sum(size for _, size, _ in rows[top:])
            out.append(
                f"{rest / MIB:>8.2f} {100 * rest / total:>6.1f} {'':>10}  ({len(rows) - top} more)"
            )
        return out

    census_total = sum(size for _, size, _ in r.census)
    lines = [
        "objects in the controller's cache: "
        + ", ".join(f"{k} {v:,}" for k, v in r.counts.items())
        + f"; {r.passes} passes, {r.seconds:.1f}s"
        + (" (under tracemalloc)" if r.traced else ""),
        "this process's RSS: " + ", ".join(f"{k} {v:.0f} MiB" for k, v in r.rss_mib.items()),
        f"tracemalloc: {r.traced / MIB:.1f} MiB live after settling (peak {r.traced_peak / MIB:.1f}"
        " MiB), everything allocated since the controller started, fake API's copies included",
    ]
    census_rows = sorted(r.census, key=lambda row: -row[1])
    lines += table(
        f"the controller's structures by deep size (sys.getsizeof over what each reaches;"
        f" {census_total / MIB:.1f} MiB in all)",
        census_rows,
        "objects",
    )
    if r.traced:
        lines += table(
            "live allocations by the innermost frame in this project (file)",
            r.by_project_file,
            "blocks",
        )
        lines += table("... and by line", r.by_project_line, "blocks")
        lines += table(
            "live allocations by the innermost frame of any code (file)", r.by_any_file, "blocks"
        )
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> int:
    workloads = max(1, round(args.workloads * args.fraction))
    nodes = max(1, round(args.nodes * args.fraction))
    machine = (
        f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()},"
        " load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    )
    if args.where:
        log(f"in-process: {workloads} held Jobs, {nodes} Nodes, MemoryApi; {machine}")
        result = await run_where(workloads, nodes, frames=args.frames)
        print(where_report(result, args.top))
        return 0
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="kohort-bench-memory-"))
    log(f"{workloads} Jobs, {nodes} Nodes on a fresh control plane; {machine}; work dir {work}")
    r = await run_cluster(
        workloads,
        nodes,
        work,
        concurrency=args.concurrency,
        quiet=args.quiet,
        time_limit=args.time_limit,
    )
    print()
    print(cluster_report(r))
    print("load average at the end {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    print(f"logs in {work}")
    return 0 if r.settled and not r.errors else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=WORKLOADS, help="one-pod Jobs")
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument(
        "--fraction", type=float, default=1.0, help="scale --workloads and --nodes (0.01: smoke)"
    )
    parser.add_argument("--concurrency", type=int, default=32, help="creates in flight at once")
    parser.add_argument(
        "--quiet", type=float, default=10.0, help="seconds with no Workload change = settled"
    )
    parser.add_argument("--time-limit", type=float, default=1800.0)
    parser.add_argument("--work-dir", help="where logs go (default: a new temporary dir)")
    parser.add_argument(
        "--where", action="store_true", help="in-process breakdown of the controller's memory"
    )
    parser.add_argument("--top", type=int, default=15, help="rows per --where table")
    parser.add_argument(
        "--frames",
        type=int,
        default=12,
        help="tracemalloc frames (--where; 0: no tracemalloc, only the deep sizes and RSS)",
    )
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
