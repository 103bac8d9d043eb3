"""Kueue's scheduler baseline (`test/performance/scheduler` of the sigs.k8s.io/kueue module) run
through kohort and through Kueue on the local control plane; bench/bench_scale.py prints the
figures and docs/performance.md reports them.

The scenario is read at run time from Kueue's own generator config in the Go module cache
(cohorts of ClusterQueues, and per queue sets of workloads of one class each: count, creation
interval, CPU request, runtime, priority); `Scenario.scaled` keeps a fraction of every set.

Two setups:
- `jobs`: every workload is a batch/v1 Job of one pod, created by this process at the
  generator's pace (per queue and set: wait the interval, create, again) on a fresh control
  plane with kwok nodes; kwok completes each pod after the class's runtime
  (`kwok.kohort.dev/complete-after`). Kueue runs as its real manager with its batch/v1 Job
  integration and its webhooks (`hack/workload_controllers.py`); kohort as its webhook and its
  controller processes, releasing to Volcano.
- `harness`: Kueue's own runner and minimalkueue as Kueue runs them (envtest with this
  control plane's etcd and kube-apiserver), next to kohort's controller alone on a control
  plane with no pods, no kube-controller-manager and no nodes, the role of Kueue's runner
  (finishing a workload once it has run its runtime after admission) played here by this
  process writing the Job's status.

Time to admission is measured as Kueue's runner measures it: from the workload's creation (here
the moment its create request was sent) to the moment a watch shows it Admitted, the last such
moment when it was evicted and admitted again.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import datetime as dt
import math
import os
import statistics
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec
import yaml

from certs.authority import CertificateAuthority
from controller.api import kinds, names
from controller.api.times import format_time
from controller.cluster import clients
from controller.cluster.clients import ApiError, Client, JSONDict
from controller.workloads.base import Backend, Mutation, Placement
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from hack import processes, testenv
from hack.chaos.stack import KOHORT, ChildProcess
from hack.demo import CONTROLLER_USER, STACK_LABEL, apply_queues, install_crds, register_webhook
from hack.localcluster import ClusterOptions, LocalCluster, NodePool, free_port
from hack.objects import cluster_queue, local_queue, pod_template
from hack.tables import format_table

KUEUE_MODULE = "sigs.k8s.io/kueue"
BASELINE_CONFIG = "test/performance/scheduler/configs/baseline/generator.yaml"
KUEUE_CRDS = "config/components/crd/bases"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_WORKLOADS = kinds.Kind(KUEUE_GROUP, KUEUE_VERSION, "workloads", "Workload")
KUEUE_FLAVOR = "rf"  # the generator's default ResourceFlavor
NODE_CPU = 32
# Nodes for this much more CPU than every ClusterQueue's nominal quota together (what the
# cohorts can use at once), so that placement never limits admission.
NODE_HEADROOM = 1.5
PRIORITY_CLASS_PREFIX = "scale-"


# -- the scenario ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    runtime_ms: int
    priority: int
    cpu: str


@dataclass(frozen=True)
class WorkloadSet:
    count: int
    interval_ms: int
    classes: tuple[WorkloadClass, ...]


@dataclass(frozen=True)
class QueueSet:
    name: str
    count: int
    nominal: str
    borrowing_limit: str
    reclaim: str
    within: str
    sets: tuple[WorkloadSet, ...]


@dataclass(frozen=True)
class CohortSet:
    name: str
    count: int
    queue_sets: tuple[QueueSet, ...]


@dataclass(frozen=True)
class Queue:
    """One ClusterQueue of the scenario; its namespace and LocalQueue have its name too."""

    name: str
    cohort: str
    spec: QueueSet


@dataclass(frozen=True)
class PlannedJob:
    namespace: str
    name: str
    cls: WorkloadClass


@dataclass(frozen=True)
class Stream:
    """The workloads of one set of one queue: each created `interval` seconds after the one
    before it was (the first after `interval` too), as Kueue's generator does."""

    queue: Queue
    interval: float
    jobs: tuple[PlannedJob, ...]


@dataclass(frozen=True)
class Scenario:
    cohorts: tuple[CohortSet, ...]
    fraction: float = 1.0

    def scaled(self, fraction: float) -> Scenario:
        """Every workload set keeps round(count * fraction) workloads, at least one."""

        def keep(count: int) -> int:
            return max(1, round(count * fraction))

        return Scenario(
            tuple(
                replace(
                    cs,
                    queue_sets=tuple(
                        replace(
                            qs,
                            sets=tuple(replace(ws, count=keep(ws.count)) for ws in qs.sets),
                        )
                        for qs in cs.queue_sets
                    ),
                )
                for cs in self.cohorts
            ),
            self.fraction * fraction,
        )

    def limited(self, cohorts: int) -> Scenario:
        """Only the first `cohorts` cohorts."""
        kept: list[CohortSet] = []
        left = cohorts
        for cs in self.cohorts:
            if left <= 0:
                break
            kept.append(replace(cs, count=min(cs.count, left)))
            left -= kept[-1].count
        return Scenario(tuple(kept), self.fraction)

    def queues(self) -> list[Queue]:
        """Named as Kueue's generator names them."""
        out = []
        for cs in self.cohorts:
            for ci in range(cs.count):
                cohort = f"{cs.name}-{ci}"
                for qsi, qs in enumerate(cs.queue_sets):
                    for qi in range(qs.count):
                        out.append(Queue(f"{qs.name}-{qsi}-{qi}-{cohort}", cohort, qs))
        return out

    def streams(self) -> list[Stream]:
        out = []
        for queue in self.queues():
            for wsi, ws in enumerate(queue.spec.sets):
                jobs = tuple(
                    PlannedJob(queue.name, f"{cls.name}-{wsi}-{si}-{i}", cls)
                    for si in range(ws.count)
                    for i, cls in enumerate(ws.classes)
                )
                out.append(Stream(queue, ws.interval_ms / 1000, jobs))
        return out

    def jobs(self) -> list[PlannedJob]:
        return [job for stream in self.streams() for job in stream.jobs]

    def classes(self) -> dict[str, WorkloadClass]:
        return {
            cls.name: cls
            for cs in self.cohorts
            for qs in cs.queue_sets
            for ws in qs.sets
            for cls in ws.classes
        }

    @property
    def total(self) -> int:
        return len(self.jobs())

    def nominal_cpu(self) -> float:
        return sum(_cpu(q.spec.nominal) for q in self.queues())

    def node_count(self) -> int:
        biggest = max(_cpu(c.cpu) for c in self.classes().values())
        if biggest > NODE_CPU:
            raise ValueError(f"a workload of {biggest} CPU does not fit a {NODE_CPU}-CPU node")
        return max(2, math.ceil(self.nominal_cpu() * NODE_HEADROOM / NODE_CPU))

    def generator_config(self) -> dict[str, Any]:
        """This scenario in the schema of Kueue's generator config (for its runner)."""
        return {
            "cohorts": [
                {
                    "className": cs.name,
                    "count": cs.count,
                    "queuesSets": [
                        {
                            "className": qs.name,
                            "count": qs.count,
                            "nominalQuota": qs.nominal,
                            "borrowingLimit": qs.borrowing_limit,
                            "reclaimWithinCohort": qs.reclaim,
                            "withinClusterQueue": qs.within,
                            "workloadsSets": [
                                {
                                    "count": ws.count,
                                    "creationIntervalMs": ws.interval_ms,
                                    "workloads": [
                                        {
                                            "className": c.name,
                                            "runtimeMs": c.runtime_ms,
                                            "priority": c.priority,
                                            "request": c.cpu,
                                        }
                                        for c in ws.classes
                                    ],
                                }
                                for ws in qs.sets
                            ],
                        }
                        for qs in cs.queue_sets
                    ],
                }
                for cs in self.cohorts
            ]
        }


def _cpu(quantity: str) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def kueue_module_dir() -> Path:
    return testenv.go_module_dir(KUEUE_MODULE, testenv.versions()["KUEUE_VERSION"])


def parse_generator_config(doc: Mapping[str, Any]) -> Scenario:
    """Kueue's generator config (the standard form, without TAS) as a Scenario."""
    if doc.get("topology"):
        raise ValueError("topology-aware generator configs are not supported")
    cohorts = []
    for cs in doc["cohorts"]:
        queue_sets = []
        for qs in cs["queuesSets"]:
            sets = tuple(
                WorkloadSet(
                    int(ws["count"]),
                    int(ws.get("creationIntervalMs", 0)),
                    tuple(
                        WorkloadClass(
                            str(w["className"]),
                            int(w["runtimeMs"]),
                            int(w.get("priority", 0)),
                            str(w["request"]),
                        )
                        for w in ws["workloads"]
                    ),
                )
                for ws in qs["workloadsSets"]
            )
            queue_sets.append(
                QueueSet(
                    str(qs["className"]),
                    int(qs["count"]),
                    str(qs["nominalQuota"]),
                    str(qs["borrowingLimit"]),
                    str(qs.get("reclaimWithinCohort", "Never")),
                    str(qs.get("withinClusterQueue", "Never")),
                    sets,
                )
            )
        cohorts.append(CohortSet(str(cs["className"]), int(cs["count"]), tuple(queue_sets)))
    return Scenario(tuple(cohorts))


def baseline() -> Scenario:
    """Kueue's baseline scenario, read from its module."""
    path = kueue_module_dir() / BASELINE_CONFIG
    return parse_generator_config(yaml.safe_load(path.read_text()))


# -- what a watch sees ----------------------------------------------------------------------


class _Condition(msgspec.Struct):
    type: str = ""
    status: str = ""
    message: str = ""


class _Owner(msgspec.Struct):
    kind: str = ""
    name: str = ""


class _Meta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    ownerReferences: list[_Owner] = []


class _Status(msgspec.Struct):
    conditions: list[_Condition] = []
    pendingReason: str | None = None


class _Workload(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _Status = msgspec.field(default_factory=_Status)


# A watched Workload's key, owners, conditions and pending reason (benches read it).
decode_workload = msgspec.json.Decoder(_Workload).decode


class _JobSpec(msgspec.Struct):
    suspend: bool | None = None


class _Job(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _JobSpec = msgspec.field(default_factory=_JobSpec)


# A watched Job's key and spec.suspend (a JobSet decodes alike).
decode_job = msgspec.json.Decoder(_Job).decode


def _true(wl: _Workload, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in wl.status.conditions)


@dataclass
class JobRecord:
    cls: str
    created: float | None = None
    admitted_first: float | None = None
    admitted_last: float | None = None
    admissions: int = 0
    evictions: int = 0
    # The last time the Job was seen unsuspended after being suspended (released to run).
    released_last: float | None = None
    running: bool = False
    finished: float | None = None
    workloads: set[str] = field(default_factory=set)


class Recorder:
    """Per Job of the scenario: when it was created, admitted (first and last time), evicted
    and finished, from a watch on the admitting system's Workloads (both Kueue's and kohort's
    carry the conditions Admitted and Finished and name their Job as owner; a Workload this
    process submitted in the Job's place has its name and no owner)."""

    def __init__(
        self,
        jobs: Sequence[PlannedJob],
        on_admitted: Callable[[tuple[str, str], JobRecord], None] | None = None,
    ) -> None:
        self.planned = list(jobs)
        self.records = {(j.namespace, j.name): JobRecord(j.cls.name) for j in jobs}
        self.admitted_now: dict[str, bool] = {}  # Workload uid -> Admitted at its last event
        self.on_admitted = on_admitted
        self.foreign = 0  # Workloads of no Job of the scenario
        self.relists = 0
        self.done = asyncio.Event()
        self._unfinished = len(self.records)

    def created(self, job: PlannedJob, at: float) -> None:
        self.records[(job.namespace, job.name)].created = at

    def see(self, data: bytes, now: float) -> None:
        wl = decode_workload(data)
        owner = next((o.name for o in wl.metadata.ownerReferences if o.kind == "Job"), None)
        if owner is None and not wl.metadata.ownerReferences:
            owner = wl.metadata.name  # submitted by this process as the planned job itself
        record = self.records.get((wl.metadata.namespace, owner or ""))
        if record is None:
            self.foreign += 1
            return
        record.workloads.add(wl.metadata.uid)
        finished = _true(wl, "Finished")
        admitted = _true(wl, "Admitted") and not finished
        before = self.admitted_now.get(wl.metadata.uid, False)
        self.admitted_now[wl.metadata.uid] = admitted
        if admitted and not before:
            record.admissions += 1
            record.admitted_last = now
            if record.admitted_first is None:
                record.admitted_first = now
            if self.on_admitted is not None:
                self.on_admitted((wl.metadata.namespace, owner or ""), record)
        elif before and not admitted and not finished:
            record.evictions += 1
        if finished and record.finished is None:
            if record.admitted_first is None:
                # Admitted and finished between two events this watch saw (a relist).
                record.admissions += 1
                record.admitted_first = record.admitted_last = now
            record.finished = now
            self._unfinished -= 1
            if self._unfinished == 0:
                self.done.set()

    def see_job(self, data: bytes, now: float) -> None:
        job = decode_job(data)
        record = self.records.get((job.metadata.namespace, job.metadata.name))
        if record is None:
            return
        running = job.spec.suspend is False
        if running and not record.running:
            record.released_last = now
        record.running = running

    def admitted(self, key: tuple[str, str]) -> bool:
        record = self.records[key]
        return record.finished is None and any(self.admitted_now.get(u) for u in record.workloads)

    async def watch(self, api: Client, kind: kinds.Kind) -> None:
        """Follows `kind` (the system's Workloads, or Jobs) in every namespace until cancelled
        (objects count as seen at a relist)."""
        see = self.see_job if kind == kinds.JOBS else self.see

        def seen(event_type: str, data: bytes, now: float) -> None:
            if event_type in ("ADDED", "MODIFIED"):
                see(data, now)

        await follow_kind(api, kind, seen, relisted=self._relisted)

    def _relisted(self) -> None:
        self.relists += 1


# What a watch hands on: the event's type (ADDED for every object of a relist), the object as
# sent, and the moment it came (time.monotonic()).
Seen = Callable[[str, bytes, float], None]


async def follow_kind(
    api: Client,
    kind: kinds.Kind,
    see: Seen,
    *,
    relisted: Callable[[], None] | None = None,
    label_selector: str | None = None,
) -> None:
    """Follows `kind` in every namespace until cancelled: a list, then watches from its
    version on; after a 410 or a broken connection, a new list (`relisted` is called before its
    objects are seen, so that a reader may forget what a missed deletion would have removed)."""
    version = ""
    while True:
        if not version:
            items, version = await api.read_all(bytes, kind, label_selector=label_selector)
            if relisted is not None:
                relisted()
            now = time.monotonic()
            for raw in items:
                see("ADDED", raw, now)
        try:
            async for event in api.follow(
                kind, version, label_selector=label_selector, timeout_seconds=600
            ):
                version = event.version or version
                if event.type != "BOOKMARK":
                    see(event.type, event.data, time.monotonic())
        except ApiError as err:
            if err.status not in (0, 410):
                raise
            version = ""


# -- process figures ------------------------------------------------------------------------


@dataclass
class ProcessFigures:
    """CPU seconds (user + system, the process and its descendants, from their start) and
    peak resident memory (the largest sum over the tree at one sample, or the root's own
    high-water mark if larger)."""

    cpu_seconds: float = 0.0
    peak_rss_mib: float = 0.0
    # The tree's resident memory at the last sample.
    rss_mib: float = 0.0


_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def process_tree(root: int, children: Mapping[int, list[int]] | None = None) -> list[int]:
    children = _children() if children is None else children
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


class Sampler:
    """Samples named process trees (by root PID) every `interval` seconds."""

    def __init__(self, roots: Mapping[str, int], interval: float = 0.5) -> None:
        self.roots = dict(roots)
        self.interval = interval
        self.figures = {name: ProcessFigures() for name in roots}

    def sample(self) -> None:
        children = _children()
        for name, root in self.roots.items():
            figures = self.figures[name]
            cpu = 0.0
            rss = 0
            for pid in process_tree(root, children):
                fields = _stat(pid)
                if fields is None:
                    continue
                # utime stime cutime cstime: fields 14-17 of stat, 12-15 after the name.
                cpu += sum(int(v) for v in fields[11:15]) / _TICK
                rss += _status_kib(pid, "VmRSS")
            hwm = _status_kib(root, "VmHWM")
            if cpu:
                figures.cpu_seconds = max(figures.cpu_seconds, cpu)
            figures.peak_rss_mib = max(figures.peak_rss_mib, rss / 1024, hwm / 1024)
            figures.rss_mib = rss / 1024

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(self.interval)


# -- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassFigures:
    count: int
    admitted: int
    mean: float | None
    p50: float | None
    p95: float | None
    # Time to release (the Job unsuspended): mean and p95; None without Jobs.
    release_mean: float | None = None
    release_p95: float | None = None


def class_figures(
    count: int, waits: Sequence[float], releases: Sequence[float] = ()
) -> ClassFigures:
    released = sorted(releases)
    release_mean = statistics.fmean(released) if released else None
    release_p95 = percentile(released, 0.95) if released else None
    if not waits:
        return ClassFigures(count, 0, None, None, None, release_mean, release_p95)
    ordered = sorted(waits)
    return ClassFigures(
        count,
        len(ordered),
        statistics.fmean(ordered),
        percentile(ordered, 0.50),
        percentile(ordered, 0.95),
        release_mean,
        release_p95,
    )


def percentile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile (0 to 1) of values sorted in ascending order, by nearest rank."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class RunResult:
    system: str  # "kohort" or "Kueue"
    setup: str  # "jobs" or "harness"
    workloads: int
    created: int = 0
    admitted: int = 0
    finished: int = 0
    # First create to the last Finished seen (harness: minimalkueue's own wall time).
    wall: float | None = None
    classes: dict[str, ClassFigures] = field(default_factory=dict)
    evictions: int = 0
    # Jobs that had more than one Workload of the admitting system.
    duplicates: int = 0
    processes: dict[str, ProcessFigures] = field(default_factory=dict)
    complete: bool = False
    # What went wrong: creates that failed, the time limit, a process that exited.
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    logs: Path | None = None

    @property
    def admissions_per_second(self) -> float | None:
        return self.admitted / self.wall if self.wall else None

    @property
    def controller(self) -> ProcessFigures:
        return self.processes.get("controller", ProcessFigures())


def summarize(result: RunResult, recorder: Recorder, started: float) -> RunResult:
    waits: dict[str, list[float]] = {}
    releases: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    last_finish = None
    for record in recorder.records.values():
        if record.released_last is not None and record.created is not None:
            releases.setdefault(record.cls, []).append(record.released_last - record.created)
        counts[record.cls] = counts.get(record.cls, 0) + 1
        result.created += record.created is not None
        result.evictions += record.evictions
        result.duplicates += len(record.workloads) > 1
        if record.admitted_last is not None and record.created is not None:
            result.admitted += 1
            waits.setdefault(record.cls, []).append(record.admitted_last - record.created)
        if record.finished is not None:
            result.finished += 1
            last_finish = max(last_finish or record.finished, record.finished)
    result.classes = {
        name: class_figures(counts[name], waits.get(name, []), releases.get(name, []))
        for name in counts
    }
    result.complete = result.finished == result.workloads
    if last_finish is not None:
        result.wall = last_finish - started
    return result


# -- creating the workloads -----------------------------------------------------------------


MakeJob = Callable[[PlannedJob], JSONDict]


async def create_streams(
    api: Client,
    streams: Sequence[Stream],
    make_job: MakeJob,
    recorder: Recorder,
    *,
    attempts: int = 5,
    kind: kinds.Kind = kinds.JOBS,
) -> list[str]:
    """Creates every stream's Jobs (or what `make_job` makes in their place, of `kind`) at its
    pace, all streams at once; the errors of creates that failed `attempts` times."""
    errors: list[str] = []

    async def one(stream: Stream) -> None:
        for job in stream.jobs:
            await asyncio.sleep(stream.interval)
            body = make_job(job)
            for attempt in range(attempts):
                recorder.created(job, time.monotonic())
                try:
                    await api.create(kind, body, job.namespace)
                    break
                except ApiError as err:
                    if err.status == 409:
                        break  # a retried create that had gone through
                    if attempt == attempts - 1:
                        errors.append(f"{job.namespace}/{job.name}: {err}")
                    await asyncio.sleep(1.0)

    await asyncio.gather(*(one(s) for s in streams))
    return errors


def priority_class_name(cls: WorkloadClass) -> str:
    return f"{PRIORITY_CLASS_PREFIX}{cls.name}"


def create_priority_classes(cluster: LocalCluster, scenario: Scenario) -> None:
    for cls in scenario.classes().values():
        cluster.rest.create(
            kinds.PRIORITY_CLASSES.path(),
            {
                "apiVersion": kinds.PRIORITY_CLASSES.api_version,
                "kind": "PriorityClass",
                "metadata": {"name": priority_class_name(cls)},
                "value": cls.priority,
            },
            exist_ok=True,
        )


def create_namespaces(cluster: LocalCluster, scenario: Scenario, labels: Mapping[str, str]) -> None:
    for queue in scenario.queues():
        cluster.rest.create(
            kinds.NAMESPACES.path(),
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": queue.name, "labels": dict(labels)},
            },
            exist_ok=True,
        )


def one_pod_job(job: PlannedJob, queue_label: str, *, kwok_runtime: bool) -> JSONDict:
    """A Job of one pod requesting the class's CPU, created suspended in the queue named like
    its namespace; with `kwok_runtime` kwok completes its pod after the class's runtime."""
    template = pod_template(
        {"cpu": job.cls.cpu},
        complete_after=f"{job.cls.runtime_ms}ms" if kwok_runtime else None,
        priority_class=priority_class_name(job.cls),
    )
    return {
        "apiVersion": kinds.JOBS.api_version,
        "kind": "Job",
        "metadata": {"name": job.name, "labels": {queue_label: job.namespace}},
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": template,
        },
    }


# -- one run --------------------------------------------------------------------------------


@dataclass
class RunOptions:
    work_dir: Path
    time_limit: float = 1800.0
    progress: Callable[[str], None] | None = None
    # Seconds between progress lines.
    progress_every: float = 30.0
    # More `kohort controller` flags (experiments: what a setting changes).
    kohort_args: tuple[str, ...] = ()
    # Count the controller's API writes from kube-apiserver's audit log (a diagnosis: the
    # audit log slows the API server, so figures of such runs are not comparable).
    count_writes: bool = False


# Who writes as whom: kohort's controller has its own user; Kueue's manager acts as the
# cluster's admin, told apart by its user agent.
ADMIN_USER = "kohort-admin"


def _audit(options: RunOptions) -> dict[str, Any]:
    return {"audit_users": (CONTROLLER_USER, ADMIN_USER)} if options.count_writes else {}


def count_writes(cluster: LocalCluster, agent: str, workloads: int) -> str:
    """The writes whose user agent starts with `agent`, by verb and resource, from the audit
    log: one line."""
    counts: dict[str, int] = {}
    path = cluster.audit_log_path
    if not path.exists():
        return "no audit log"
    with path.open() as lines:
        for line in lines:
            entry = msgspec.json.decode(line)
            if not str(entry.get("userAgent", "")).startswith(agent):
                continue
            ref = entry.get("objectRef") or {}
            what = ref.get("resource", "?") + (
                "/" + ref["subresource"] if ref.get("subresource") else ""
            )
            key = f"{entry.get('verb')} {what}"
            counts[key] = counts.get(key, 0) + 1
    total = sum(counts.values())
    top = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:8])
    return f"{agent} API writes: {total} ({total / max(1, workloads):.1f} per workload): {top}"


async def _drive(
    result: RunResult,
    kubeconfig: Path,
    scenario: Scenario,
    workload_kind: kinds.Kind,
    make_job: MakeJob,
    roots: Mapping[str, int],
    options: RunOptions,
    *,
    finisher: Finisher | None = None,
    watched: Sequence[Callable[[], bool]] = (),
    created_kind: kinds.Kind = kinds.JOBS,
) -> RunResult:
    """Creates the scenario's Jobs, watches the system's Workloads until every one has
    finished (or the time limit), sampling the named processes."""
    api = await clients.connect(str(kubeconfig))
    sampler = Sampler(roots)
    recorder = Recorder(scenario.jobs())
    if finisher is not None:
        recorder.on_admitted = finisher(api, recorder)
    tasks: list[asyncio.Task[Any]] = []
    try:
        tasks.append(asyncio.create_task(recorder.watch(api, workload_kind)))
        tasks.append(asyncio.create_task(recorder.watch(api, kinds.JOBS)))
        tasks.append(asyncio.create_task(sampler.run()))
        started = time.monotonic()
        creating = asyncio.create_task(
            create_streams(api, scenario.streams(), make_job, recorder, kind=created_kind)
        )
        tasks.append(creating)
        deadline = started + options.time_limit
        next_report = started + options.progress_every
        while not recorder.done.is_set():
            if time.monotonic() > deadline:
                result.errors.append(f"stopped at the time limit of {options.time_limit:.0f}s")
                break
            if not all(alive() for alive in watched):
                result.errors.append("a process of the system under test exited")
                break
            for watch in tasks[:2]:
                if watch.done():
                    watch.result()  # the watch failed: raise its error
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await recorder.done.wait()
            if options.progress and time.monotonic() >= next_report:
                next_report += options.progress_every
                options.progress(_progress(result, recorder, started))
        if creating.done():
            result.errors += creating.result()
        await asyncio.to_thread(sampler.sample)
        result.processes = sampler.figures
        if any(name.startswith("control-plane/") for name in result.processes):
            result.notes.append(control_plane_note(result))
        result.notes.append(
            "load average at the end {:.1f} {:.1f} {:.1f} (1, 5, 15 min)".format(*os.getloadavg())
        )
        result.notes += (
            [f"{recorder.foreign} Workload events of no Job of the scenario"]
            if recorder.foreign
            else []
        )
        return summarize(result, recorder, started)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await api.close()


def _progress(result: RunResult, recorder: Recorder, started: float) -> str:
    records = recorder.records.values()
    created = sum(r.created is not None for r in records)
    admitted = sum(r.admitted_first is not None for r in records)
    finished = sum(r.finished is not None for r in records)
    return (
        f"{result.system} {result.setup}: {time.monotonic() - started:6.0f}s created {created},"
        f" admitted {admitted}, finished {finished} of {len(recorder.records)}"
    )


# -- kohort ---------------------------------------------------------------------------------


class KohortProcesses:
    """kohort's webhook (optional) and controller as `kohort webhook` and `kohort controller`
    processes, as users start them (hack/chaos/stack.py), acting in namespaces labelled
    `kohort.dev/stack=<ident>`."""

    def __init__(
        self,
        cluster: LocalCluster,
        work_dir: Path,
        *,
        webhook: bool = True,
        controller_args: Sequence[str] = (),
        webhook_args: Sequence[str] = (),
    ) -> None:
        self.cluster = cluster
        self.ident = uuid.uuid4().hex[:8]
        work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.health_port = free_port()
        self.ca = CertificateAuthority.create(f"kohort-webhook-{self.ident}")
        cert_dir = work_dir / "webhook-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        self.ca.issue_server(["localhost"], ["127.0.0.1"]).write(
            cert_dir / "tls.crt", cert_dir / "tls.key"
        )
        self.webhook = (
            ChildProcess(
                "webhook",
                [
                    KOHORT,
                    "webhook",
                    f"--cert-dir={cert_dir}",
                    "--host=127.0.0.1",
                    f"--port={self.port}",
                    "--metrics-port=0",
                    f"--controller-user={CONTROLLER_USER}",
                    *webhook_args,
                ],
                work_dir / "webhook.log",
            )
            if webhook
            else None
        )
        kubeconfig = work_dir / "controller.kubeconfig"
        pair = cluster.issue_user(CONTROLLER_USER, ["system:masters"])
        cluster.write_kubeconfig(kubeconfig, CONTROLLER_USER, pair)
        self.controller = ChildProcess(
            "controller",
            [
                KOHORT,
                "controller",
                f"--kubeconfig={kubeconfig}",
                f"--namespace-selector={STACK_LABEL}={self.ident}",
                "--no-leader-elect",
                "--identity=bench",
                f"--health-port={self.health_port}",
                "--health-host=127.0.0.1",
                *controller_args,
            ],
            work_dir / "controller.log",
        )

    @property
    def labels(self) -> dict[str, str]:
        return {STACK_LABEL: self.ident}

    def start(self) -> KohortProcesses:
        install_crds(self.cluster.rest, self.cluster)
        if self.webhook is not None:
            self.webhook.start()
            processes.wait_until(
                "kohort's webhook listening", lambda: _listening(self.port), 60, ()
            )
            register_webhook(
                self.cluster.rest,
                f"kohort-{self.ident}",
                f"https://127.0.0.1:{self.port}",
                self.ca.cert_pem,
                self.ident,
            )
        self.controller.start()
        processes.wait_until(
            "kohort's controller ready",
            lambda: _http_ok(f"http://127.0.0.1:{self.health_port}/readyz"),
            120,
            (),
        )
        return self

    def roots(self) -> dict[str, int]:
        out = {}
        for name, child in (("controller", self.controller), ("webhook", self.webhook)):
            if child is not None and child.proc is not None:
                out[name] = child.proc.pid
        return out

    def alive(self) -> bool:
        return self.controller.running and (self.webhook is None or self.webhook.running)

    def metric_totals(self) -> dict[str, float]:
        """The controller's /metrics, each metric summed over its labels (by base name)."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.health_port}/metrics", timeout=10
        ) as resp:
            text = resp.read().decode()
        values: dict[str, float] = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if not line.startswith("#") and value:
                base = name.split("{", 1)[0]
                values[base] = values.get(base, 0.0) + float(value)
        return values

    def pass_note(self, save_to: Path) -> str:
        """The controller's reconcile passes from its /metrics (saved to `save_to`)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/metrics", timeout=10
            ) as resp:
                text = resp.read().decode()
        except OSError as err:
            return f"kohort controller metrics unavailable: {err}"
        save_to.write_text(text)
        values: dict[str, float] = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            base = name.split("{", 1)[0]
            if not line.startswith("#") and value:
                values[base] = values.get(base, 0.0) + float(value)
        passes = values.get("kohort_reconcile_duration_seconds_count", 0.0)
        seconds = values.get("kohort_reconcile_duration_seconds_sum", 0.0)
        mean = seconds / passes if passes else 0.0
        return (
            f"kohort controller: {passes:.0f} reconcile passes, {seconds:.1f}s in passes"
            f" (mean {mean:.2f}s), {values.get('kohort_reconcile_errors_total', 0.0):.0f}"
            " errors"
        )

    def stop(self) -> None:
        for child in (self.controller, self.webhook):
            if child is not None:
                child.stop()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def kohort_queues(scenario: Scenario) -> list[JSONDict]:
    """The scenario's queues as kohort ClusterQueues and LocalQueues. Evictions may happen at
    once and hit gangs that just started (`evictAfterSeconds: 0`, `minimumRuntimeSeconds: 0`),
    as Kueue's preemption does; kohort's defaults wait half an hour and ten minutes."""
    objects: list[JSONDict] = []
    for q in scenario.queues():
        objects.append(
            cluster_queue(
                q.name,
                {"cpu": q.spec.nominal},
                cohort=q.cohort,
                borrowing_limits={"cpu": q.spec.borrowing_limit},
                reclaim=q.spec.reclaim,
                within_queue=q.spec.within,
            )
        )
        objects.append(local_queue(q.name, q.name, q.name))
    return objects


# kwok renews its nodes' Leases through the same API server the run loads: on two busy cores a
# renewal can come later than kube-controller-manager's default grace period (50s), which then
# marks the node NotReady (kube-scheduler and Volcano stop placing there, kohort's placement
# check stops counting it) and back. The nodes stand for real ones, whose kubelets do not share
# the control plane's cores.
NODE_MONITOR_GRACE = "--node-monitor-grace-period=1h"


def control_plane_roots(cluster: LocalCluster, *, but: Sequence[str] = ()) -> dict[str, int]:
    """The control plane's processes (etcd, kube-apiserver, ...) as sampler roots, named
    `control-plane/<name>`."""
    return {f"control-plane/{p.name}": p.pid for p in cluster.procs if p.name not in but}


def control_plane_note(result: RunResult) -> str:
    parts = [
        f"{name.split('/', 1)[1]} {figures.cpu_seconds:.0f}"
        for name, figures in sorted(result.processes.items())
        if name.startswith("control-plane/")
    ]
    return "control plane CPU seconds: " + ", ".join(parts)


def _cluster_options(scenario: Scenario, scheduler: Any, **extra: Any) -> ClusterOptions:
    pool = NodePool("scale", scenario.node_count(), cpu=str(NODE_CPU), memory="256Gi", pods=110)
    return ClusterOptions(
        node_pools=(pool,),
        scheduler=scheduler,
        controller_manager_flags=(NODE_MONITOR_GRACE,),
        **extra,
    )


# kohort's controller as the bench runs it: no waste budget, so that reclaim is never refused
# for the work it would throw away (the scenario's gangs run for a second at most).
KOHORT_CONTROLLER_ARGS = ("--waste-budget=-1",)


async def run_kohort_jobs(scenario: Scenario, options: RunOptions) -> RunResult:
    """The scenario as one-pod Jobs through kohort's webhook and controller, released to
    Volcano, on kwok nodes."""
    result = RunResult("kohort", "jobs", scenario.total)
    work = options.work_dir / "kohort-jobs"
    cluster_options = _cluster_options(scenario, "volcano", **_audit(options))
    with LocalCluster(cluster_options, work / "cluster") as cluster:
        stack = KohortProcesses(
            cluster,
            work / "kohort",
            controller_args=(*KOHORT_CONTROLLER_ARGS, *options.kohort_args),
        )
        try:
            stack.start()
            create_priority_classes(cluster, scenario)
            create_namespaces(cluster, scenario, stack.labels)
            apply_queues(cluster.rest, kohort_queues(scenario))
            result.logs = work
            return await _drive(
                result,
                cluster.kubeconfig,
                scenario,
                kinds.WORKLOADS,
                lambda job: one_pod_job(job, names.QUEUE_LABEL, kwok_runtime=True),
                {**stack.roots(), **control_plane_roots(cluster)},
                options,
                watched=(stack.alive,),
            )
        finally:
            result.notes.append(stack.pass_note(work / "controller-metrics.txt"))
            stack.stop()
            if options.count_writes:
                result.notes.append(count_writes(cluster, "kohort-controller", scenario.total))


def held_job(job: PlannedJob) -> JSONDict:
    """A one-pod Job as kohort's webhook leaves it for a gang backend of none."""
    editor = Editor(one_pod_job(job, names.QUEUE_LABEL, kwok_runtime=False))
    JobAdapter().default(editor, Mutation(job.namespace, Placement.for_backend(Backend.NONE)))
    return editor.doc


def submitted_workload(job: PlannedJob) -> JSONDict:
    """The planned job as a kohort Workload submitted directly, as Kueue's runner submits its
    Workloads: one pod set of one pod requesting the class's CPU, the class's priority, in the
    queue named like its namespace (see controller/workloads/standalone.py)."""
    return {
        "apiVersion": kinds.WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": {"name": job.name},
        "spec": {
            "queueName": job.namespace,
            "priority": job.cls.priority,
            "podSets": [{"name": "main", "count": 1, "requests": {"cpu": job.cls.cpu}}],
        },
    }


Finisher = Callable[[Client, Recorder], Callable[[tuple[str, str], JobRecord], None]]


def runtime_finisher(write: Callable[[Client, str, str], Awaitable[None]]) -> Finisher:
    """Plays the part of Kueue's runner: a job admitted `runtime` ago and still admitted is
    finished by `write` (api, namespace, name)."""

    def make(api: Client, recorder: Recorder) -> Callable[[tuple[str, str], JobRecord], None]:
        runtimes = {(j.namespace, j.name): j.cls.runtime_ms / 1000 for j in recorder.planned}
        pending: set[asyncio.Task[None]] = set()

        async def finish(key: tuple[str, str], admitted_at: float) -> None:
            await asyncio.sleep(max(0.0, admitted_at + runtimes[key] - time.monotonic()))
            record = recorder.records[key]
            if not recorder.admitted(key) or record.admitted_last != admitted_at:
                return  # evicted meanwhile: its next admission finishes it
            with contextlib.suppress(ApiError):
                await write(api, *key)

        def on_admitted(key: tuple[str, str], record: JobRecord) -> None:
            assert record.admitted_last is not None
            task = asyncio.get_running_loop().create_task(finish(key, record.admitted_last))
            pending.add(task)
            task.add_done_callback(pending.discard)

        return on_admitted

    return make


async def _job_succeeded(api: Client, namespace: str, name: str) -> None:
    """A Job's status as its controller writes it once its one pod succeeded."""
    now = format_time(time.time())
    met = {"status": "True", "lastProbeTime": now, "lastTransitionTime": now}
    status = {
        "startTime": now,
        "completionTime": now,
        "succeeded": 1,
        "conditions": [
            {"type": "SuccessCriteriaMet", "reason": "CompletionsReached", **met},
            {"type": "Complete", "reason": "CompletionsReached", **met},
        ],
    }
    await api.patch(kinds.JOBS, name, {"status": status}, namespace, subresource="status")


async def _workload_finished(api: Client, namespace: str, name: str) -> None:
    """A submitted Workload's Finished, appended by a JSON patch (no condition kohort wrote is
    replaced)."""
    finished = {
        "type": "Finished",
        "status": "True",
        "reason": "Succeeded",
        "message": "the runner finished it after its runtime",
        "lastTransitionTime": format_time(time.time()),
    }
    add = [{"op": "add", "path": "/status/conditions/-", "value": finished}]
    await api.patch(
        kinds.WORKLOADS, name, add, namespace, content_type=clients.JSON_PATCH, subresource="status"
    )


job_finisher = runtime_finisher(_job_succeeded)
workload_finisher = runtime_finisher(_workload_finished)


async def run_kohort_workloads(scenario: Scenario, options: RunOptions) -> RunResult:
    """kohort's controller alone, as Kueue's harness runs minimalkueue, on what Kueue's runner
    makes: this process submits each job as a Workload, at the scenario's pace, and marks it
    Finished once it has run its runtime after admission. No webhook, no pods (no
    kube-controller-manager, no scheduler, no nodes: admission on quota alone)."""
    return await run_kohort_without_pods(scenario, options, submit_workloads=True)


async def run_kohort_without_pods(
    scenario: Scenario, options: RunOptions, *, submit_workloads: bool = False
) -> RunResult:
    """kohort's controller alone with no pods (no webhook, no kube-controller-manager, no
    scheduler, no nodes: admission on quota alone). By default on Jobs, created as the webhook
    leaves them and finished by this process after their runtime, so kohort also makes their
    Workloads and releases the Jobs; `submit_workloads`: see run_kohort_workloads."""
    setup = "harness" if submit_workloads else "harness-jobs"
    result = RunResult("kohort", setup, scenario.total)
    work = options.work_dir / f"kohort-{setup}"
    cluster_options = ClusterOptions(
        node_pools=(), scheduler="none", controller_manager=False, **_audit(options)
    )
    with LocalCluster(cluster_options, work / "cluster") as cluster:
        stack = KohortProcesses(
            cluster,
            work / "kohort",
            webhook=False,
            controller_args=(
                *KOHORT_CONTROLLER_ARGS,
                "--backend=none",
                "--no-placement-check",
                "--wait-for-pods-ready=0",
                *options.kohort_args,
            ),
        )
        try:
            stack.start()
            create_priority_classes(cluster, scenario)
            create_namespaces(cluster, scenario, stack.labels)
            apply_queues(cluster.rest, kohort_queues(scenario))
            result.logs = work
            return await _drive(
                result,
                cluster.kubeconfig,
                scenario,
                kinds.WORKLOADS,
                submitted_workload if submit_workloads else held_job,
                {**stack.roots(), **control_plane_roots(cluster)},
                options,
                finisher=workload_finisher if submit_workloads else job_finisher,
                watched=(stack.alive,),
                created_kind=kinds.WORKLOADS if submit_workloads else kinds.JOBS,
            )
        finally:
            result.notes.append(stack.pass_note(work / "controller-metrics.txt"))
            stack.stop()
            if options.count_writes:
                result.notes.append(count_writes(cluster, "kohort-controller", scenario.total))


# -- Kueue ----------------------------------------------------------------------------------


def kueue_queues(scenario: Scenario) -> list[tuple[str, JSONDict]]:
    """(API path, object) of the scenario's ResourceFlavor, ClusterQueues and LocalQueues, as
    Kueue's generator makes them."""
    base = f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}"
    api_version = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
    out: list[tuple[str, JSONDict]] = [
        (
            f"{base}/resourceflavors",
            {
                "apiVersion": api_version,
                "kind": "ResourceFlavor",
                "metadata": {"name": KUEUE_FLAVOR},
            },
        )
    ]
    for q in scenario.queues():
        spec = {
            "cohortName": q.cohort,
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": KUEUE_FLAVOR,
                            "resources": [
                                {
                                    "name": "cpu",
                                    "nominalQuota": q.spec.nominal,
                                    "borrowingLimit": q.spec.borrowing_limit,
                                }
                            ],
                        }
                    ],
                }
            ],
            "preemption": {
                "reclaimWithinCohort": q.spec.reclaim,
                "withinClusterQueue": q.spec.within,
            },
        }
        out.append(
            (
                f"{base}/clusterqueues",
                {
                    "apiVersion": api_version,
                    "kind": "ClusterQueue",
                    "metadata": {"name": q.name},
                    "spec": spec,
                },
            )
        )
        out.append(
            (
                f"{base}/namespaces/{q.name}/localqueues",
                {
                    "apiVersion": api_version,
                    "kind": "LocalQueue",
                    "metadata": {"name": q.name, "namespace": q.name},
                    "spec": {"clusterQueue": q.name},
                },
            )
        )
    return out


async def run_kueue_jobs(scenario: Scenario, options: RunOptions) -> RunResult:
    """The scenario as one-pod Jobs through Kueue's manager (its batch/v1 Job integration and
    its webhooks), released to kube-scheduler, on kwok nodes."""
    result = RunResult("Kueue", "jobs", scenario.total)
    work = options.work_dir / "kueue-jobs"
    cluster_options = _cluster_options(
        scenario, "kube-scheduler", workload_controllers=("kueue-manager",), **_audit(options)
    )
    with LocalCluster(cluster_options, work / "cluster") as cluster:
        create_priority_classes(cluster, scenario)
        create_namespaces(cluster, scenario, {})
        for path, obj in kueue_queues(scenario):
            cluster.rest.create(path, obj)
        manager = cluster.process("kueue-manager")
        result.logs = work
        await _drive(
            result,
            cluster.kubeconfig,
            scenario,
            KUEUE_WORKLOADS,
            lambda job: one_pod_job(job, KUEUE_QUEUE_LABEL, kwok_runtime=True),
            {"controller": manager.pid, **control_plane_roots(cluster, but=("kueue-manager",))},
            options,
            watched=(manager.alive,),
        )
        if options.count_writes:
            result.notes.append(count_writes(cluster, "kueue", scenario.total))
        return result


async def run_kueue_harness(scenario: Scenario, options: RunOptions) -> RunResult:
    """Kueue's runner with minimalkueue, as `make run-performance-scheduler` runs them (envtest,
    here with this control plane's etcd and kube-apiserver), on the scaled generator config."""
    result = RunResult("Kueue", "harness", scenario.total)
    work = options.work_dir / "kueue-harness"
    out = work / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    config = work / "generator.yaml"
    config.write_text(yaml.safe_dump(scenario.generator_config(), sort_keys=False))
    minimal = testenv.binary("kueue-minimalkueue")
    argv = [
        str(testenv.binary("kueue-perf-runner")),
        f"--o={out}",
        f"--crds={kueue_module_dir() / KUEUE_CRDS}",
        f"--generatorConfig={config}",
        f"--minimalKueue={minimal}",
        f"--timeout={int(options.time_limit)}s",
    ]
    env = {
        **os.environ,
        "KUBEBUILDER_ASSETS": str(testenv.bin_dir()),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    env.pop("KUBECONFIG", None)
    log = work / "runner.log"
    result.logs = work
    started = time.monotonic()
    with log.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its envtest etcd and apiserver, stopped with it
            preexec_fn=processes.die_with_parent,
        )
        sampler: Sampler | None = None
        sampling: asyncio.Task[None] | None = None
        try:
            # Its CPU and memory come from its own stats file; this samples the tree too.
            while sampler is None and proc.returncode is None:
                kids = [p for p in process_tree(proc.pid) if _exe_name(p) == minimal.name]
                if kids:
                    sampler = Sampler({"controller": kids[0]})
                    sampling = asyncio.create_task(sampler.run())
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await proc.wait()
            try:
                async with asyncio.timeout(options.time_limit + 120):
                    await proc.wait()
            except TimeoutError:
                result.errors.append("the runner did not end in time")
        finally:
            if sampling is not None:
                sampling.cancel()
            # SIGTERM lets it stop envtest; then whatever is left of its process group goes.
            await asyncio.to_thread(processes.stop, proc.pid, 30.0)
            await proc.wait()
    runner_wall = time.monotonic() - started
    if proc.returncode != 0:
        result.errors.append(f"the runner exited with {proc.returncode} (log: {log})")
    stats_file = out / f"{minimal.name}.stats.yaml"
    if stats_file.exists():
        stats = yaml.safe_load(stats_file.read_text())
        result.notes.append(
            f"minimalkueue's own wall time (Kueue's maxWallMs) {float(stats['wallMs']) / 1000:.1f}s"
        )
        result.processes["controller"] = ProcessFigures(
            (float(stats["userMs"]) + float(stats["sysMs"])) / 1000,
            float(stats["maxrss"]) / 1024,
        )
    elif sampler is not None:
        result.processes["controller"] = sampler.figures["controller"]
    result.wall = runner_span(log)
    result.notes.append(f"runner wall time {runner_wall:.1f}s (envtest start and stop included)")
    return _read_runner_csv(result, out / "wlStates.csv")


def runner_span(log: Path) -> float | None:
    """From the runner's "Generator started" to its "Recorder done" (which it logs once every
    ClusterQueue has no pending and no admitted workload left): seconds."""
    marks: dict[str, dt.datetime] = {}
    with log.open(errors="replace") as lines:
        for line in lines:
            for mark in ("Generator started", "Recorder done"):
                if mark in line and mark not in marks:
                    marks[mark] = _go_time(line.split("\t", 1)[0])
    if len(marks) < 2:
        return None
    return (marks["Recorder done"] - marks["Generator started"]).total_seconds()


def _go_time(stamp: str) -> dt.datetime:
    """An RFC 3339 time with up to nanoseconds, as zap writes it."""
    head, _, rest = stamp.rstrip("Z").partition(".")
    fraction = (rest + "000000")[:6]
    return dt.datetime.fromisoformat(f"{head}.{fraction}+00:00")


def _exe_name(pid: int) -> str:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name
    except OSError:
        return ""


def _read_runner_csv(result: RunResult, path: Path) -> RunResult:
    if not path.exists():
        result.errors.append(f"no {path.name}: the runner wrote no results")
        return result
    waits: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            cls = row["class name"]
            counts[cls] = counts.get(cls, 0) + 1
            admitted = int(row["ms to admitted"])
            finished = int(row["ms to finish"])
            result.created += 1
            result.evictions += int(row["num evictions"])
            if admitted > 0 or finished > 0:
                result.admitted += 1
                waits.setdefault(cls, []).append(admitted / 1000)
            if finished > 0:
                result.finished += 1
    result.classes = {name: class_figures(counts[name], waits.get(name, [])) for name in counts}
    result.complete = result.finished == result.workloads
    return result


# -- reporting ------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def results_table(results: Sequence[RunResult]) -> str:
    rows = []
    for r in results:
        rate = r.admissions_per_second
        rows.append(
            [
                r.system,
                r.setup,
                f"{r.admitted}/{r.workloads}",
                f"{r.finished}/{r.workloads}",
                _seconds(r.wall),
                "-" if rate is None else f"{rate:.1f}",
                str(r.evictions),
                f"{r.controller.cpu_seconds:.1f}",
                f"{r.controller.peak_rss_mib:.0f}",
            ]
        )
    headers = ["SYSTEM", "SETUP", "ADMITTED", "FINISHED", "WALL s", "ADMISSIONS/s", "EVICTIONS"]
    return format_table([*headers, "CONTROLLER CPU s", "CONTROLLER PEAK RSS MiB"], rows)


def classes_table(results: Sequence[RunResult]) -> str:
    rows = []
    for r in results:
        for name, c in r.classes.items():
            rows.append(
                [
                    r.system,
                    r.setup,
                    name,
                    f"{c.admitted}/{c.count}",
                    _seconds(c.mean),
                    _seconds(c.p50),
                    _seconds(c.p95),
                    _seconds(c.release_mean),
                    _seconds(c.release_p95),
                ]
            )
    headers = ["SYSTEM", "SETUP", "CLASS", "ADMITTED", "MEAN s", "P50 s", "P95 s"]
    return format_table([*headers, "RELEASED MEAN s", "RELEASED P95 s"], rows)


def ratios_table(kohort: RunResult, kueue: RunResult) -> str:
    """kohort / Kueue for one setup."""

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if a is None or not b else f"{a / b:.1f}x"

    rows = [
        ["wall time", ratio(kohort.wall, kueue.wall)],
        [
            "admissions per second",
            ratio(kohort.admissions_per_second, kueue.admissions_per_second),
        ],
        [
            "controller CPU seconds",
            ratio(kohort.controller.cpu_seconds, kueue.controller.cpu_seconds),
        ],
        [
            "controller peak RSS",
            ratio(kohort.controller.peak_rss_mib, kueue.controller.peak_rss_mib),
        ],
    ]
    for name, c in kohort.classes.items():
        other = kueue.classes.get(name)
        if other is not None:
            rows.append([f"{name}: mean time to admission", ratio(c.mean, other.mean)])
            rows.append([f"{name}: p95 time to admission", ratio(c.p95, other.p95)])
    return format_table([f"kohort / Kueue ({kohort.setup})", "RATIO"], rows)


Runner = Callable[[Scenario, RunOptions], Awaitable[RunResult]]
