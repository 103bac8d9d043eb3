"""Reconcile-pass speed: the real controller (cache, writers, reconciler) on an in-memory API.

    PYTHONPATH=. .venv/bin/python bench/bench_reconcile.py [--pending 1500 10000]
        [--max-passes 50] [--changes 20] [--starvation-after 3600] [--latency MS]
        [--profile [N]] [--compare REV]

`--compare c08373c` first runs this bench as it was at that commit (the controller before it
kept one engine and typed state), from `git archive`, then the current one: before and after
in one run, on the same machine.

For each size, a world of 30 ClusterQueues in 5 cohorts of 6 (cpu: nominal 20, borrowingLimit
100), one namespace with a LocalQueue per ClusterQueue, kwok-like Nodes (32 cpu each, enough that
placement never limits) and N held one-pod Jobs of 1 cpu, spread round-robin over the queues,
shaped as kohort's webhook leaves them and created a second apart (so with 10,000 the older
ones have waited beyond the core's default starvation_after of an hour). The controller's
informers, writers and reconciler are wired as `controller.main.start` wires them (no leader
election, no `Reconciler.run` loop; Settings(pods_ready_timeout=None), the default core Config)
and `reconcile_once` is called directly. Prints, per size:
- pass 1 (cold: every Job new): wall time, admissions, API writes by kind, writes per admission;
- the passes until one admits and evicts nothing ("settle");
- a steady-state pass with nothing changed;
- "one change" passes: the oldest admitted Job completes (written to the API, whose watch tells
  the controller's informers), then one pass runs.
Times are wall seconds of `reconcile_once`. They include the time spent inside the in-memory
API ("fake API": tests.fakes.memory_api, which keeps objects as JSON text, parses every
answer and sends every change to the watches, our own writes included) and in the garbage
collector ("GC", from gc.callbacks). Write counts are the calls the controller made, by verb
and plural[/subresource]; Events are writes too. `--latency` adds that many milliseconds to
every request, as a round trip to a real API server would.

Figures before and after are in docs/controller.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller import quota
from controller.api import kinds
from controller.api.times import format_time
from controller.cluster.cache import Cache
from controller.cluster.clients import ApiError, JSONDict
from controller.cluster.writers import Writers
from controller.metrics import ControllerMetrics
from controller.reconciler import Reconciler
from controller.settings import Settings
from controller.state.cluster import ClusterState
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Mutation
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from hack.objects import cluster_queue, local_queue, resource_flavor
from tests.fakes.memory_api import MemoryApi
from tests.fakes.workloads import make_job

COHORTS = 5
QUEUES_PER_COHORT = 6
NOMINAL_CPU = 20
BORROWING_CPU = 100
NODE_CPU = 32


class TimedApi(MemoryApi):
    """The in-memory API server, timing itself and optionally slowed to a network round trip."""

    def __init__(self, latency: float) -> None:
        super().__init__()
        self.latency = latency
        self.seconds = 0.0

    async def fetch(self, method: str, path: str, **kwargs: Any) -> bytes:
        if self.latency:
            await asyncio.sleep(self.latency)
        start = time.perf_counter()
        try:
            return await super().fetch(method, path, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


# -- the world ------------------------------------------------------------------------------------


def held_job(name: str, namespace: str, created: str) -> JSONDict:
    """A one-pod Job of 1 cpu in LocalQueue `lq`, as kohort's webhook leaves it (suspended)."""
    job = make_job(
        name, namespace=namespace, queue="lq", parallelism=1, completions=1, cpu="1", memory=None
    )
    editor = Editor(job)
    JobAdapter().default(editor, Mutation("lq"))
    doc = editor.doc
    doc["metadata"]["creationTimestamp"] = created
    return doc


def kwok_node(name: str) -> JSONDict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"type": "kwok", "kubernetes.io/hostname": name},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": str(NODE_CPU), "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": str(NODE_CPU), "memory": "256Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "phase": "Running",
        },
    }


def fill(api: MemoryApi, pending: int) -> int:
    """ClusterQueues, LocalQueues, Nodes and `pending` held Jobs; returns the number of nodes."""
    queues = COHORTS * QUEUES_PER_COHORT
    api.put(kinds.RESOURCE_FLAVORS, resource_flavor("default"))  # the flavor the queues name
    for i in range(queues):
        cq = f"cq-{i:02d}"
        api.put(
            kinds.CLUSTER_QUEUES,
            cluster_queue(
                cq,
                {"cpu": str(NOMINAL_CPU)},
                cohort=f"cohort-{i // QUEUES_PER_COHORT}",
                borrowing_limits={"cpu": str(BORROWING_CPU)},
            ),
        )
        namespace = f"team-{i:02d}"
        api.put(kinds.NAMESPACES, {"metadata": {"name": namespace}})
        api.put(kinds.LOCAL_QUEUES, local_queue(namespace, "lq", cq))
    nodes = math.ceil(queues * NOMINAL_CPU / NODE_CPU) + 3
    for n in range(nodes):
        api.put(kinds.NODES, kwok_node(f"kwok-node-{n:03d}"))
    first = int(time.time()) - pending - 60  # a second apart, all in the past
    for j in range(pending):
        namespace = f"team-{j % queues:02d}"
        api.put(kinds.JOBS, held_job(f"job-{j:05d}", namespace, format_time(first + j)))
    return nodes


# -- measuring ------------------------------------------------------------------------------------


class GcClock:
    """Seconds spent in CPython's cyclic garbage collector, from gc.callbacks."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start


@dataclass
class Pass:
    seconds: float
    fake_seconds: float
    gc_seconds: float
    admitted: int
    evicted: int
    writes: Counter[tuple[str, str]]

    @property
    def total_writes(self) -> int:
        return sum(self.writes.values())


async def timed_pass(reconciler: Reconciler, api: TimedApi, gc_clock: GcClock) -> Pass:
    writes, fake, collecting = api.writes.copy(), api.seconds, gc_clock.seconds
    start = time.perf_counter()
    stats = await reconciler.reconcile_once()
    seconds = time.perf_counter() - start
    return Pass(
        seconds,
        api.seconds - fake,
        gc_clock.seconds - collecting,
        stats.admitted,
        stats.evicted,
        api.writes - writes,
    )


def overhead(p: Pass) -> str:
    return f"fake API {p.fake_seconds:.3f} s, GC {p.gc_seconds:.3f} s"


def by_kind(writes: Counter[tuple[str, str]]) -> str:
    if not writes:
        return "none"
    return ", ".join(f"{verb} {what} {n}" for (verb, what), n in sorted(writes.items()))


def per_admission(writes: int, admitted: int) -> str:
    return f"{writes / admitted:.1f}" if admitted else "n/a"


async def finish_one(api: MemoryApi) -> bool:
    """Complete the oldest admitted Job (names follow creation order), as the Job controller
    would; its watch event reaches the informers. False when none is left."""
    for job in sorted(api.all(kinds.JOBS), key=lambda j: str(j["metadata"]["name"])):
        conditions = (job.get("status") or {}).get("conditions") or []
        if job["spec"].get("suspend") is not False or any(
            c["type"] == "Complete" for c in conditions
        ):
            continue
        stamp = format_time(time.time())
        job["status"] = {
            "conditions": [
                {
                    "type": "Complete",
                    "status": "True",
                    "lastProbeTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
            "succeeded": 1,
            "completionTime": stamp,
        }
        api.put(kinds.JOBS, job)
        await api.settle()
        return True
    return False


@dataclass
class Result:
    pending: int
    cold: Pass
    settle: list[Pass]
    settled: bool
    steady: Pass
    changes: list[Pass]


async def wire(api: MemoryApi, settings: Settings) -> tuple[ClusterState, Cache, Reconciler]:
    """The controller as controller.main.start wires it, without leader election and the run
    loop, its cache synced from `api`."""
    podgroups = PodGroupSettings()
    state = ClusterState(settings, podgroups)
    cache = Cache(api, podgroup_kind=podgroups.kind)
    writers = Writers(api, cache.informers, identity="bench")
    reconciler = Reconciler(state, writers, settings, ControllerMetrics())
    cache.listen(reconciler.notify)
    cache.start()
    await cache.wait_synced()
    with contextlib.suppress(ApiError):
        await writers.ensure_volcano_queue(podgroups.volcano_queue)
    return state, cache, reconciler


async def run_size(pending: int, args: argparse.Namespace, gc_clock: GcClock) -> Result:
    api = TimedApi(args.latency / 1000)
    nodes = fill(api, pending)
    starvation = args.starvation_after if args.starvation_after else None
    settings = Settings(pods_ready_timeout=None, core=quota.Config(starvation_after=starvation))
    start = time.perf_counter()
    _, cache, reconciler = await wire(api, settings)
    print(
        f"\n== {pending:,} held Jobs, {COHORTS * QUEUES_PER_COHORT} ClusterQueues in {COHORTS}"
        f" cohorts, {nodes} nodes of {NODE_CPU} cpu; cache synced in"
        f" {time.perf_counter() - start:.2f} s"
    )
    try:
        profile = cProfile.Profile() if args.profile else None
        if profile is not None:
            profile.enable()
        cold = await timed_pass(reconciler, api, gc_clock)
        if profile is not None:
            profile.disable()
        print(
            f"pass 1 (cold): {cold.seconds:.3f} s ({overhead(cold)}),"
            f" {cold.admitted} admitted, {cold.evicted} evicted, {cold.total_writes} writes"
            f" ({per_admission(cold.total_writes, cold.admitted)} per admission)"
        )
        print(f"  writes: {by_kind(cold.writes)}")
        if profile is not None:
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.profile)
            print("  cProfile of pass 1 (its wall time above includes the profiler's overhead):")
            print(out.getvalue())

        settle: list[Pass] = []
        settled = False
        while len(settle) < args.max_passes:
            p = await timed_pass(reconciler, api, gc_clock)
            settle.append(p)
            if not p.admitted and not p.evicted:
                settled = True
                break
        times = ", ".join(f"{p.seconds:.3f}" for p in settle)
        print(
            f"settle: {len(settle)} more passes"
            f" ({'the last admitted and evicted nothing' if settled else 'cap reached'}),"
            f" {sum(p.seconds for p in settle):.3f} s in all; each: {times}"
        )
        print(
            f"  admitted {sum(p.admitted for p in settle)}, evicted"
            f" {sum(p.evicted for p in settle)}; writes:"
            f" {by_kind(sum((p.writes for p in settle), Counter()))}"
        )

        steady = await timed_pass(reconciler, api, gc_clock)
        print(
            f"steady pass (nothing changed): {steady.seconds:.3f} s ({overhead(steady)}),"
            f" {steady.admitted} admitted,"
            f" {steady.total_writes} writes: {by_kind(steady.writes)}"
        )

        changes: list[Pass] = []
        for _ in range(args.changes):
            if not await finish_one(api):
                break
            changes.append(await timed_pass(reconciler, api, gc_clock))
        if changes:
            walls = [p.seconds for p in changes]
            admitted = sum(p.admitted for p in changes)
            writes = sum((p.writes for p in changes), Counter())
            total = sum(writes.values())
            print(
                f"one change x{len(changes)} (a Job completes, one pass): median"
                f" {statistics.median(walls):.3f} s, max {max(walls):.3f} s (means: fake API"
                f" {statistics.fmean(p.fake_seconds for p in changes):.3f} s, GC"
                f" {statistics.fmean(p.gc_seconds for p in changes):.3f} s);"
                f" {admitted} admitted, {total} writes"
                f" ({per_admission(total, admitted)} per admission)"
            )
            print(f"  writes: {by_kind(writes)}")
        left = sum(1 for j in api.all(kinds.JOBS) if j["spec"].get("suspend"))
        print(f"  at the end: {left:,} Jobs still held (pending)")
        return Result(pending, cold, settle, settled, steady, changes)
    finally:
        await cache.stop()
        await api.close()


def table(results: list[Result]) -> None:
    print("\nsummary (seconds: wall time of one reconcile_once; fake/gc: of which in the fake API")
    print("and in the garbage collector; w/adm: API writes per admission)")
    header = (
        f"{'pending':>8} {'cold s':>7} {'fake':>6} {'gc':>6} {'admit':>5} {'writes':>6}"
        f" {'w/adm':>6} {'settle':>6} {'settle s':>8} {'steady s':>8} {'st.wr':>5}"
        f" {'chg med s':>9} {'chg max s':>9} {'chg w/adm':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        walls = [p.seconds for p in r.changes]
        med, top = (f"{statistics.median(walls):.3f}", f"{max(walls):.3f}") if walls else ("-", "-")
        chg_admitted = sum(p.admitted for p in r.changes)
        chg_writes = sum(p.total_writes for p in r.changes)
        settle = f"{len(r.settle)}{'' if r.settled else '+'}"
        print(
            f"{r.pending:>8,} {r.cold.seconds:>7.3f} {r.cold.fake_seconds:>6.3f}"
            f" {r.cold.gc_seconds:>6.3f} {r.cold.admitted:>5} {r.cold.total_writes:>6}"
            f" {per_admission(r.cold.total_writes, r.cold.admitted):>6} {settle:>6}"
            f" {sum(p.seconds for p in r.settle):>8.3f} {r.steady.seconds:>8.3f}"
            f" {r.steady.total_writes:>5} {med:>9} {top:>9}"
            f" {per_admission(chg_writes, chg_admitted):>9}"
        )
    print("(settle: passes after pass 1 until one admitted and evicted nothing; + = cap reached)")


def run_before(args: argparse.Namespace) -> None:
    """This bench as it was at `args.compare`, with the code of that commit (its in-memory API
    delivers no watch events and knows no --latency)."""
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(
            ["git", "archive", args.compare], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        command = [sys.executable, str(Path(tree) / "bench" / "bench_reconcile.py")]
        command += ["--pending", *map(str, args.pending), "--changes", str(args.changes)]
        command += ["--max-passes", str(args.max_passes)]
        if args.starvation_after is not None:  # (None: the core's default, off)
            command += ["--starvation-after", str(args.starvation_after)]
        print(f"==== before: this bench at {args.compare}", flush=True)
        subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": tree})
        print(f"\n==== after: this bench at the working tree (--latency {args.latency:g} ms)")


async def main_async(args: argparse.Namespace) -> None:
    gc_clock = GcClock()
    results = [await run_size(n, args, gc_clock) for n in args.pending]
    table(results)
    print(
        f"machine: {platform.system()} {platform.machine()}, os.cpu_count()={os.cpu_count()},"
        f" Python {platform.python_version()} ({platform.python_implementation()})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, nargs="+", default=[1500, 10000])
    parser.add_argument("--max-passes", type=int, default=50, help="cap on the settle passes")
    parser.add_argument("--changes", type=int, default=20, help="one-change passes")
    parser.add_argument(
        "--starvation-after",
        type=float,
        default=quota.Config().starvation_after,
        metavar="SECONDS",
        help="the core's starvation guard, as the controller's flag (default %(default)s; 0: off)",
    )
    parser.add_argument(
        "--latency",
        type=float,
        default=0.0,
        metavar="MS",
        help="milliseconds added to every API request (a round trip; default 0)",
    )
    parser.add_argument(
        "--compare",
        metavar="REV",
        help="first run this bench as it was at git revision REV (before), then now (after)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        nargs="?",
        const=10,
        default=0,
        metavar="N",
        help="cProfile pass 1 and print its top N cumulative entries (default 10)",
    )
    args = parser.parse_args()
    if args.compare:
        run_before(args)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
