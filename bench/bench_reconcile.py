"""Reconcile-pass speed: the real controller (cache, writers, reconciler) on an in-memory API.

    PYTHONPATH=. .venv/bin/python bench/bench_reconcile.py [--pending 1500 10000]
        [--max-passes 50] [--changes 20] [--starvation-after 3600] [--profile [N]]

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
- "one change" passes: the oldest admitted Job completes (written to the API and put into the
  Job informer's store, as its watch event would), then one pass runs.
Times are wall seconds of `reconcile_once`. They include the time spent inside the in-memory
API ("fake API": it keeps objects as JSON text and parses every answer, as a client would) and
in the garbage collector ("GC", from gc.callbacks). Write counts are the calls the controller
made, by verb and plural[/subresource]; Events are writes too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import json
import math
import os
import platform
import pstats
import statistics
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import jsonpatch
from controller.cluster.view import format_time, is_true

from controller import quota
from controller.cluster import clients
from controller.cluster.cache import Cache
from controller.cluster.clients import MERGE_PATCH, ApiError, Client, JSONDict, Kind
from controller.cluster.testing import cluster_queue, local_queue
from controller.cluster.writers import PodGroupSettings, Writers
from controller.metrics import ControllerMetrics
from controller.reconciler import Reconciler, Settings
from controller.workloads.base import Admission
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.testing import make_job

COHORTS = 5
QUEUES_PER_COHORT = 6
NOMINAL_CPU = 20
BORROWING_CPU = 100
NODE_CPU = 32

Key = tuple[str, str]


def _dump(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _load(text: str) -> JSONDict:
    obj: JSONDict = json.loads(text)
    return obj


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, None deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _matches(obj: JSONDict, selector: str | None) -> bool:
    """Equality-based label selectors only (`a=b,c=d`)."""
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        name, _, value = term.partition("=")
        if labels.get(name.strip()) != value.strip().lstrip("="):
            return False
    return True


class MemoryApi(Client):
    """An API server in memory for the verbs the controller uses; every write is counted.

    Objects are kept serialised, as etcd keeps them: every answer is a fresh parse, shared with
    nothing, and the store adds nothing for the garbage collector to walk. No ApiClient behind
    it: `request` (and so `replace`) is not served. Watches never deliver anything (they wait
    forever), so the informers stay synced on what they listed.
    """

    def __init__(self) -> None:
        self.objects: dict[Kind, dict[Key, str]] = defaultdict(dict)
        self.version = 0
        self.writes: Counter[tuple[str, str]] = Counter()
        self.seconds = 0.0  # time spent in here: part of every timed pass
        self._forever = asyncio.Event()

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

    def _key(self, kind: Kind, name: str, namespace: str | None) -> Key:
        return ((namespace or "") if kind.namespaced else "", name)

    def _store(self, kind: Kind, key: Key, obj: JSONDict) -> JSONDict:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[kind][key] = _dump(obj)
        return obj

    def items(self, kind: Kind) -> list[JSONDict]:
        return [_load(text) for text in self.objects[kind].values()]

    def add(self, kind: Kind, obj: JSONDict, namespace: str | None = None) -> JSONDict:
        """Store a new object as the API server would (no write counted: setup uses this)."""
        stored = _load(_dump(obj))
        meta = stored.setdefault("metadata", {})
        if kind.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        key = self._key(kind, str(meta["name"]), meta.get("namespace"))
        if key in self.objects[kind]:
            raise ApiError(409, "POST", kind.path(key[0]), '{"reason": "AlreadyExists"}')
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", format_time(time.time()))
        return self._store(kind, key, stored)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Any = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSONDict:
        raise ApiError(501, method, path, "not served by MemoryApi")

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSONDict:
        with self._timed():
            found = self.objects[kind].get(self._key(kind, name, namespace))
            if found is None:
                raise ApiError(404, "GET", kind.path(namespace, name), '{"reason": "NotFound"}')
            return _load(found)

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int = 500,
    ) -> tuple[list[JSONDict], str]:
        with self._timed():
            items = [
                obj
                for (ns, _), text in self.objects[kind].items()
                if not namespace or ns == namespace
                if _matches(obj := _load(text), label_selector)
            ]
            return items, str(self.version)

    async def watch(
        self,
        kind: Kind,
        resource_version: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[tuple[str, JSONDict]]:
        await self._forever.wait()  # never set: nothing changes behind the informers' backs
        yield "BOOKMARK", {}

    async def create(self, kind: Kind, obj: JSONDict, namespace: str | None = None) -> JSONDict:
        with self._timed():
            self.writes["create", kind.plural] += 1
            return self.add(kind, obj, namespace)

    async def patch(
        self,
        kind: Kind,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
    ) -> JSONDict:
        with self._timed():
            self.writes["patch", kind.plural + (f"/{subresource}" if subresource else "")] += 1
            key = self._key(kind, name, namespace)
            text = self.objects[kind].get(key)
            if text is None:
                raise ApiError(404, "PATCH", kind.path(namespace, name), '{"reason": "NotFound"}')
            current = _load(text)
            if isinstance(patch, list):  # JSON patch (ungating pods)
                try:
                    patched: JSONDict = jsonpatch.apply_patch(current, patch, in_place=True)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
                    raise ApiError(422, "PATCH", kind.path(namespace, name), str(err)) from err
            else:
                body = _load(_dump(patch))
                # /status changes only the status; the main resource ignores status changes.
                if subresource == "status":
                    body = {"status": body["status"]} if "status" in body else {}
                else:
                    body.pop("status", None)
                patched = merge_patch(current, body)
            return self._store(kind, key, patched)

    async def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str = "Background",
        uid: str | None = None,
    ) -> bool:
        with self._timed():
            self.writes["delete", kind.plural] += 1
            key = self._key(kind, name, namespace)
            text = self.objects[kind].get(key)
            if text is None:
                return False
            if uid and _load(text)["metadata"].get("uid") != uid:
                raise ApiError(409, "DELETE", kind.path(namespace, name), '{"reason": "Conflict"}')
            del self.objects[kind][key]
            return True

    async def close(self) -> None:
        return None


# -- the world ------------------------------------------------------------------------------------


def held_job(name: str, namespace: str, created: str) -> JSONDict:
    """A one-pod Job of 1 cpu in LocalQueue `lq`, as kohort's webhook leaves it (suspended)."""
    job = make_job(
        name, namespace=namespace, queue="lq", parallelism=1, completions=1, cpu="1", memory=None
    )
    editor = Editor(job)
    JobAdapter().default(editor, Admission("lq"))
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
    for i in range(queues):
        cq = f"cq-{i:02d}"
        api.add(
            clients.CLUSTER_QUEUES,
            cluster_queue(
                cq,
                {"cpu": str(NOMINAL_CPU)},
                cohort=f"cohort-{i // QUEUES_PER_COHORT}",
                borrowing_limits={"cpu": str(BORROWING_CPU)},
            ),
        )
        namespace = f"team-{i:02d}"
        api.add(clients.NAMESPACES, {"metadata": {"name": namespace}})
        api.add(clients.LOCAL_QUEUES, local_queue(namespace, "lq", cq), namespace)
    nodes = math.ceil(queues * NOMINAL_CPU / NODE_CPU) + 3
    for n in range(nodes):
        api.add(clients.NODES, kwok_node(f"kwok-node-{n:03d}"))
    first = int(time.time()) - pending - 60  # a second apart, all in the past
    for j in range(pending):
        namespace = f"team-{j % queues:02d}"
        api.add(clients.JOBS, held_job(f"job-{j:05d}", namespace, format_time(first + j)))
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


async def timed_pass(reconciler: Reconciler, api: MemoryApi, gc_clock: GcClock) -> Pass:
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


async def finish_one(api: MemoryApi, cache: Cache) -> bool:
    """Complete the oldest admitted Job (names follow creation order), in the API and in the Job
    informer's store; False when none is left."""
    for job in sorted(api.items(clients.JOBS), key=lambda j: str(j["metadata"]["name"])):
        if job["spec"].get("suspend") is not False or is_true(job, "Complete"):
            continue
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        stamp = format_time(time.time())
        status = {
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
        patched = await api.patch(
            clients.JOBS, name, {"status": status}, namespace, subresource="status"
        )
        cache.informers[clients.JOBS].put(patched)  # what the watch event would do
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


async def run_size(pending: int, args: argparse.Namespace, gc_clock: GcClock) -> Result:
    api = MemoryApi()
    nodes = fill(api, pending)
    starvation = args.starvation_after if args.starvation_after > 0 else None
    settings = Settings(pods_ready_timeout=None, core=quota.Config(starvation_after=starvation))
    podgroups = PodGroupSettings()
    # As controller.main.start wires them, without leader election and the run loop.
    metrics = ControllerMetrics()
    reconciler_box: list[Reconciler] = []

    def on_change(kind: Kind, event: str, obj: JSONDict) -> None:
        if reconciler_box:
            reconciler_box[0].notify(kind, event, obj)

    cache = Cache(api, podgroup_kind=podgroups.kind, on_change=on_change)
    writers = Writers(api, cache.stores, podgroups, identity="bench")
    reconciler = Reconciler(cache, writers, settings, metrics)
    reconciler_box.append(reconciler)
    start = time.perf_counter()
    cache.start()
    await cache.wait_synced()
    with contextlib.suppress(ApiError):
        await writers.ensure_volcano_queue()
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
            if not await finish_one(api, cache):
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
        left = sum(1 for j in api.items(clients.JOBS) if j["spec"].get("suspend"))
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
        "--profile",
        type=int,
        nargs="?",
        const=10,
        default=0,
        metavar="N",
        help="cProfile pass 1 and print its top N cumulative entries (default 10)",
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
