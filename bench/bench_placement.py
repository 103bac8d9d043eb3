"""Whether admitted means bound: a churn of gangs of mixed shapes through kohort on the local
control plane, on each gang backend, timed from kohort's release of a gang to the moment its
last pod is bound.

    .venv/bin/python bench/bench_placement.py [--backend volcano|kubernetes|both]
        [--gangs 200] [--seed 1] [--pace 1.5] [--runtime 20] [--smoke] [--wait-idle]

The cluster: kwok nodes in blocks of racks (by default 2 blocks x 4 racks x 4 nodes of 8 GPUs
and 32 CPU), each labelled with its block, its rack, a zone (topology.kubernetes.io/zone, one
per block) and its hostname; a Topology of block, rack and hostname, named by the ResourceFlavor
`default`; three teams' ClusterQueues (3/8, 3/8 and 2/8 of the GPUs and CPUs) in one cohort,
borrowing without limit and reclaiming (`Any`, at once), each with a LocalQueue in the team's
namespace. kohort's webhook and controller run in this process (hack/demo.py's KohortStack),
with the measured configuration but no waste budget (gangs here run for seconds), as the
cluster tests run them; the bench's own watches and writes run in a thread with an event loop of
its own, so that the controller's passes do not delay the moments it records.

The churn: one gang every `--pace` seconds, in a seeded mix of shapes (SHAPES, in turn, each
round shuffled) and kinds (batch/v1 Jobs; one in ten a JobSet when its controller is built, one
in ten a StatefulSet), each deleted `--runtime` seconds after all its pods are bound, or
`--give-up` seconds after a release whose pods are not all bound by then.

Measured per release (a gang evicted and admitted again is released again): the release, the
moment a watch sees its Job or JobSet unsuspended or its StatefulSet's first pod ungated; the
moment a watch sees the last of its pods bound (spec.nodeName); and, when they are not all bound
`--window` seconds after the release, why: the unbound pods' PodScheduled messages and the gang
backend's object (its conditions; a Volcano PodGroup's Events too). Printed: the share of
releases bound within the window (goal 100 %), p50 / p95 / max of release to bound, by shape and
kind, the releases not bound in time with why, where the gangs that ask for a domain landed, how
many gangs waited in kohort and their last pending reasons by cause, the wall time (first create
to last delete) and the whole configuration. docs/performance.md reports figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller import quota
from controller.api import kinds, names
from controller.cluster import clients
from controller.cluster.clients import ApiError, Client, JSONDict
from controller.settings import Settings
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Backend
from hack import scale, testenv
from hack.demo import KohortStack, apply_queues
from hack.localcluster import ClusterOptions, GangApi, LocalCluster, NodePool
from hack.objects import (
    GPU,
    cluster_queue,
    gang_job,
    gang_jobset,
    gang_statefulset,
    local_queue,
    resource_flavor,
    topology,
)
from hack.tables import format_table
from tests.support import GangSetup

BLOCK_LABEL = "bench.kohort.dev/block"
RACK_LABEL = "bench.kohort.dev/rack"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Every pod of a gang carries its gang's name here: the (anti-)affinity and spread rules select
# the gang's own pods by it.
GANG_LABEL = "bench.kohort.dev/gang"
TOPOLOGY = "bench-fabric"
FLAVOR = "default"  # the flavor hack.objects.cluster_queue names
COHORT = "research"
# Each team's share of the cluster's GPUs and CPUs, as nominal quota.
TEAM_SHARES = {"team-a": 3, "team-b": 3, "team-c": 2}
SHARE_UNIT = 8
CPU_PER_GPU = 2
HOST_PORT = 29500
# A pod set's topology request, on its pod template (docs/concepts.md, Topology).
REQUIRED_TOPOLOGY = "kohort.dev/podset-required-topology"
PREFERRED_TOPOLOGY = "kohort.dev/podset-preferred-topology"
SLICE_TOPOLOGY = "kohort.dev/podset-slice-required-topology"
SLICE_SIZE = "kohort.dev/podset-slice-size"
# The measured controller configuration without the waste budget, as tests/cluster runs it.
KOHORT_SETTINGS = Settings(core=replace(quota.Config.measured(), waste_budget=None))
WORKLOAD_PREFIX = {"Job": "job-", "JobSet": "jobset-", "StatefulSet": "sts-"}
OWNER_KINDS = {"Job": kinds.JOBS, "JobSet": kinds.JOBSETS, "StatefulSet": kinds.STATEFULSETS}
Kind = Literal["Job", "JobSet", "StatefulSet"]


def log(msg: str) -> None:
    print(f"[bench-placement {dt.datetime.now():%H:%M:%S}] {msg}", flush=True)


# -- the cluster ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Blocks of racks of identical GPU nodes; a block is also a zone."""

    blocks: int = 2
    racks_per_block: int = 4
    nodes_per_rack: int = 4
    gpus_per_node: int = 8
    cpu_per_node: int = 32

    def pools(self) -> list[NodePool]:
        return [
            NodePool(
                f"b{b}-r{r}",
                self.nodes_per_rack,
                cpu=str(self.cpu_per_node),
                gpus=self.gpus_per_node,
                labels={BLOCK_LABEL: f"b{b}", RACK_LABEL: f"b{b}-r{r}", ZONE_LABEL: f"zone-{b}"},
            )
            for b in range(self.blocks)
            for r in range(self.racks_per_block)
        ]

    def node_labels(self) -> dict[str, dict[str, str]]:
        return {name: dict(pool.labels) for pool in self.pools() for name in pool.node_names()}

    def racks(self) -> list[str]:
        return [pool.labels[RACK_LABEL] for pool in self.pools()]

    @property
    def nodes(self) -> int:
        return self.blocks * self.racks_per_block * self.nodes_per_rack

    @property
    def rack_gpus(self) -> int:
        return self.nodes_per_rack * self.gpus_per_node

    def describe(self) -> str:
        return (
            f"{self.blocks} blocks x {self.racks_per_block} racks x {self.nodes_per_rack} kwok"
            f" nodes of {self.gpus_per_node} GPUs and {self.cpu_per_node} CPU ({self.nodes} nodes,"
            f" {self.nodes * self.gpus_per_node} GPUs); labels {BLOCK_LABEL}=b<i>,"
            f" {RACK_LABEL}=b<i>-r<j>, {ZONE_LABEL}=zone-<i> (a zone per block),"
            f" {HOSTNAME_LABEL}=<node>"
        )


def team_quotas(layout: Layout) -> dict[str, dict[str, str]]:
    gpus = layout.nodes * layout.gpus_per_node
    cpu = layout.nodes * layout.cpu_per_node
    return {
        team: {GPU: str(gpus * share // SHARE_UNIT), "cpu": str(cpu * share // SHARE_UNIT)}
        for team, share in TEAM_SHARES.items()
    }


def create_queues(cluster: LocalCluster, stack: KohortStack, layout: Layout) -> None:
    """The Topology, the flavor naming it, each team's namespace, ClusterQueue and LocalQueue."""
    rest = cluster.rest
    rest.create(
        kinds.TOPOLOGIES.path(), topology(TOPOLOGY, [BLOCK_LABEL, RACK_LABEL, HOSTNAME_LABEL])
    )
    rest.create(kinds.RESOURCE_FLAVORS.path(), resource_flavor(FLAVOR, topology=TOPOLOGY))
    objects = []
    for team, quotas in team_quotas(layout).items():
        rest.create(
            kinds.NAMESPACES.path(),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}},
            exist_ok=True,
        )
        stack.enroll(team)
        objects.append(cluster_queue(team, quotas, cohort=COHORT, reclaim="Any"))
        objects.append(local_queue(team, team, team))
    apply_queues(rest, objects)


# -- the gangs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedGang:
    index: int
    team: str
    kind: Kind
    shape: str
    pods: int
    gpus: int  # per pod
    racks: tuple[str, ...] = ()  # node-affinity: the racks its pods may go to
    slice_size: int = 0

    @property
    def name(self) -> str:
        return f"g{self.index:03d}-{self.shape}"

    @property
    def gang(self) -> str:
        """Its Workload's (and PodGroup's) name."""
        return WORKLOAD_PREFIX[self.kind] + self.name

    @property
    def key(self) -> tuple[str, str]:
        return (self.team, self.gang)

    def describe(self) -> str:
        extra = f", racks {'+'.join(self.racks)}" if self.racks else ""
        extra += f", slices of {self.slice_size}" if self.slice_size else ""
        return f"{self.kind} {self.pods}x{self.gpus} GPU{extra}"


def _one_per_node(spec: JSONDict, gang: PlannedGang) -> None:
    term = {
        "labelSelector": {"matchLabels": {GANG_LABEL: gang.name}},
        "topologyKey": HOSTNAME_LABEL,
    }
    spec["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }


def _zone_spread(spec: JSONDict, gang: PlannedGang) -> None:
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE_LABEL,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {GANG_LABEL: gang.name}},
        }
    ]


def _node_affinity(spec: JSONDict, gang: PlannedGang) -> None:
    term = {"matchExpressions": [{"key": RACK_LABEL, "operator": "In", "values": list(gang.racks)}]}
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def _host_port(spec: JSONDict, gang: PlannedGang) -> None:
    port = {"containerPort": HOST_PORT, "hostPort": HOST_PORT, "protocol": "TCP"}
    spec["containers"][0]["ports"] = [port]


@dataclass(frozen=True)
class Shape:
    """A kind of gang: what its pods ask of placement, and its sizes (pods, GPUs per pod)."""

    name: str
    asks: str
    pods: tuple[int, ...]
    gpus: tuple[int, ...]
    spec_rules: Callable[[JSONDict, PlannedGang], None] | None = None
    annotations: Callable[[PlannedGang], dict[str, str]] | None = None


SHAPES = (
    Shape("plain", "nothing", (2, 3, 4, 6, 8), (1, 2, 4, 8)),
    Shape(
        "one-per-node",
        f"required pod anti-affinity among its pods on {HOSTNAME_LABEL}",
        (2, 3, 4, 6, 8),
        (2, 4, 8),
        spec_rules=_one_per_node,
    ),
    Shape(
        "zone-spread",
        f"a spread over {ZONE_LABEL}, maxSkew 1, DoNotSchedule, among its pods",
        (2, 4, 6),
        (1, 2, 4),
        spec_rules=_zone_spread,
    ),
    Shape(
        "node-affinity",
        f"a required node affinity: {RACK_LABEL} In two racks drawn at random",
        (2, 4),
        (2, 4, 8),
        spec_rules=_node_affinity,
    ),
    Shape(
        "host-port",
        f"host port {HOST_PORT}/TCP on every pod (every such gang the same port)",
        (2, 3, 4),
        (1, 2, 4),
        spec_rules=_host_port,
    ),
    Shape(
        "rack-required",
        f"{REQUIRED_TOPOLOGY}: {RACK_LABEL}",
        (2, 4),
        (2, 4, 8),
        annotations=lambda gang: {REQUIRED_TOPOLOGY: RACK_LABEL},
    ),
    Shape(
        "rack-preferred",
        f"{PREFERRED_TOPOLOGY}: {RACK_LABEL}",
        (2, 4, 6, 8),
        (2, 4, 8),
        annotations=lambda gang: {PREFERRED_TOPOLOGY: RACK_LABEL},
    ),
    Shape(
        "slices",
        f"{REQUIRED_TOPOLOGY}: {BLOCK_LABEL}, {SLICE_TOPOLOGY}: {RACK_LABEL}, {SLICE_SIZE}: 2 or 4",
        (4, 8),
        (2, 4, 8),
        annotations=lambda gang: {
            REQUIRED_TOPOLOGY: BLOCK_LABEL,
            SLICE_TOPOLOGY: RACK_LABEL,
            SLICE_SIZE: str(gang.slice_size),
        },
    ),
)
SHAPE_NAMES = {shape.name: shape for shape in SHAPES}


def plan_gangs(count: int, seed: int, layout: Layout, *, jobsets: bool) -> list[PlannedGang]:
    """`count` gangs: shapes in turn (each round shuffled), one in ten a JobSet (when `jobsets`;
    never sliced: its leader is a pod set of one) and one in ten a StatefulSet, teams drawn by
    their share, sizes drawn from the shape's."""
    rng = random.Random(seed)
    teams, weights = list(TEAM_SHARES), list(TEAM_SHARES.values())
    gangs: list[PlannedGang] = []
    turn: list[Shape] = []
    for index in range(count):
        if not turn:
            turn = list(SHAPES)
            rng.shuffle(turn)
        shape = turn.pop()
        kind: Kind = "Job"
        if index % 10 == 4 and jobsets and shape.name != "slices":
            kind = "JobSet"
        elif index % 10 == 9:
            kind = "StatefulSet"
        pods, gpus = rng.choice(shape.pods), rng.choice(shape.gpus)
        racks = (
            tuple(sorted(rng.sample(layout.racks(), 2))) if shape.name == "node-affinity" else ()
        )
        slice_size = (
            rng.choice([s for s in (2, 4) if pods % s == 0]) if shape.name == "slices" else 0
        )
        team = rng.choices(teams, weights)[0]
        gangs.append(PlannedGang(index, team, kind, shape.name, pods, gpus, racks, slice_size))
    return gangs


def manifest(gang: PlannedGang) -> JSONDict:
    """The gang's Job, JobSet (a leader and pods-1 workers) or StatefulSet, in its team's
    LocalQueue, every pod template carrying the gang label and its shape's rules."""
    requests = {GPU: str(gang.gpus), "cpu": str(gang.gpus * CPU_PER_GPU)}
    templates: list[JSONDict]
    if gang.kind == "Job":
        obj = gang_job(gang.name, queue=gang.team, pods=gang.pods, requests=requests)
        templates = [obj["spec"]["template"]]
    elif gang.kind == "JobSet":
        obj = gang_jobset(gang.name, queue=gang.team, workers=gang.pods - 1, requests=requests)
        templates = [rj["template"]["spec"]["template"] for rj in obj["spec"]["replicatedJobs"]]
    else:
        obj = gang_statefulset(gang.name, queue=gang.team, replicas=gang.pods, requests=requests)
        templates = [obj["spec"]["template"]]
    shape = SHAPE_NAMES[gang.shape]
    for template in templates:
        template["metadata"].setdefault("labels", {})[GANG_LABEL] = gang.name
        if shape.annotations is not None:
            template["metadata"].setdefault("annotations", {}).update(shape.annotations(gang))
        if shape.spec_rules is not None:
            shape.spec_rules(template["spec"], gang)
    return obj


def placed_as_asked(
    gang: PlannedGang, nodes: Sequence[str], layout: Layout, sets: Sequence[Sequence[str]] = ()
) -> bool | None:
    """Whether bound pods on `nodes` (one entry per pod; `sets`: the same per pod set) are where
    the gang's shape asks: each pod set in one rack (required or preferred), each in one block
    with every rack holding whole slices (a necessary condition: which pod is in which slice is
    not visible), one node per pod of the gang, zones within one pod of each other, the chosen
    racks; None for shapes that ask nothing of where. Topology is asked per pod set (a JobSet's
    leader and workers each have their own); the pod rules select the whole gang's pods."""
    if gang.shape in ("rack-required", "rack-preferred", "slices") and len(sets) > 1:
        return all(placed_as_asked(gang, one, layout) for one in sets)
    labels = layout.node_labels()

    def counts(label: str) -> Counter[str]:
        return Counter(labels.get(node, {}).get(label, "?") for node in nodes)

    if gang.shape in ("rack-required", "rack-preferred"):
        return len(counts(RACK_LABEL)) == 1
    if gang.shape == "slices":
        racks = counts(RACK_LABEL)
        return len(counts(BLOCK_LABEL)) == 1 and all(
            n % gang.slice_size == 0 for n in racks.values()
        )
    if gang.shape in ("one-per-node", "host-port"):
        return len(set(nodes)) == len(nodes)
    if gang.shape == "zone-spread":
        zones = counts(ZONE_LABEL)
        per_zone = [zones.get(f"zone-{b}", 0) for b in range(layout.blocks)]
        return max(per_zone) - min(per_zone) <= 1
    if gang.shape == "node-affinity":
        return set(counts(RACK_LABEL)) <= set(gang.racks)
    return None


# -- what the watches see -------------------------------------------------------------------


class _Gate(msgspec.Struct):
    name: str = ""


class _PodMeta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = {}
    deletionTimestamp: str | None = None


class _PodSpec(msgspec.Struct):
    nodeName: str | None = None
    schedulingGates: list[_Gate] = []


class _PodStatus(msgspec.Struct):
    phase: str = ""


class _Pod(msgspec.Struct):
    metadata: _PodMeta = msgspec.field(default_factory=_PodMeta)
    spec: _PodSpec = msgspec.field(default_factory=_PodSpec)
    status: _PodStatus = msgspec.field(default_factory=_PodStatus)


_decode_pod = msgspec.json.Decoder(_Pod).decode


@dataclass(frozen=True)
class PodState:
    node: str
    gated: bool
    live: bool  # not being deleted, not finished
    pod_set: str = ""  # a JobSet's replicated job; "" for kinds of one pod set


@dataclass
class Release:
    """One release of a gang (monotonic seconds), and what came of it."""

    at: float
    bound_at: float | None = None
    nodes: tuple[str, ...] = ()  # where its pods were bound, one entry per pod
    # The same per pod set (a JobSet's leader and workers are two; topology is asked per set).
    set_nodes: tuple[tuple[str, ...], ...] = ()
    # Why it was not all bound `window` seconds after the release (said then).
    why: str = ""
    # Its Workload's Evicted message, when kohort evicted it.
    evicted: str = ""
    # How it ended: "runtime" (deleted after its runtime), "given up" (deleted unbound),
    # "held" (held again by kohort: evicted), "" (still running at the end of the run).
    end: str = ""
    ended_at: float | None = None

    @property
    def latency(self) -> float | None:
        return None if self.bound_at is None else self.bound_at - self.at

    def finish(self, end: str, now: float) -> None:
        self.end, self.ended_at = end, now

    def evicted_unbound_within(self, window: float) -> bool:
        """Held again by kohort (reclaim, preemption) within `window` seconds of the release,
        before all its pods were bound."""
        return (
            self.end == "held"
            and self.bound_at is None
            and self.ended_at is not None
            and self.ended_at - self.at <= window
        )


@dataclass
class GangRecord:
    plan: PlannedGang
    created_at: float | None = None
    create_error: str = ""
    deleted_at: float | None = None
    admitted: bool = False  # Admitted=True at its Workload's last event
    admissions: int = 0
    evictions: int = 0
    # The last pendingReason seen while it was not admitted, and whether it ever waited for a
    # reason other than not having been considered yet.
    last_reason: str = ""
    waited: bool = False
    released: bool = False
    # Deleted by the bench for not being released within the pending limit.
    abandoned: bool = False
    releases: list[Release] = field(default_factory=list)
    pods: dict[str, PodState] = field(default_factory=dict)

    @property
    def current(self) -> Release | None:
        """The release in progress: the last one, while it has not ended."""
        if self.releases and not self.releases[-1].end:
            return self.releases[-1]
        return None

    def bound_pods(self) -> list[str]:
        return [p.node for p in self.pods.values() if p.live and p.node]

    def bound_per_set(self) -> tuple[tuple[str, ...], ...]:
        sets: dict[str, list[str]] = {}
        for pod in self.pods.values():
            if pod.live and pod.node:
                sets.setdefault(pod.pod_set, []).append(pod.node)
        return tuple(tuple(sorted(nodes)) for _, nodes in sorted(sets.items()))

    def ungated(self) -> bool:
        return any(p.live and not p.gated for p in self.pods.values())


NOT_CONSIDERED = "Not considered yet"


# -- one run --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchOptions:
    gangs: int = 200
    seed: int = 1
    pace: float = 1.5
    runtime: float = 20.0
    window: float = 10.0
    give_up: float = 60.0
    # A gang not released this long after its creation (or after an eviction) is deleted.
    pending_limit: float = 300.0
    layout: Layout = field(default_factory=Layout)
    jobsets: bool = True
    time_limit: float = 1800.0
    wait_idle: bool = False
    work_dir: Path | None = None
    progress_every: float = 30.0


def cluster_options(setup: GangSetup, options: BenchOptions, *, jobsets: bool) -> ClusterOptions:
    """The control plane of a backend: Volcano, or kube-scheduler with its gang API."""
    native = setup.backend is Backend.KUBERNETES
    gang_api: GangApi = "v1beta1" if setup.gang_api == "v1beta1" else "v1alpha1"
    return ClusterOptions(
        node_pools=tuple(options.layout.pools()),
        scheduler="kube-scheduler" if native else "volcano",
        gang_api=gang_api if native else None,
        workload_controllers=("jobset-manager",) if jobsets else (),
        controller_manager_flags=(scale.NODE_MONITOR_GRACE,),
    )


def describe_backend(setup: GangSetup) -> str:
    pins = testenv.versions()
    if setup.backend is Backend.KUBERNETES:
        version = pins["K8S_GANG_VERSION"] if setup.gang_api == "v1beta1" else pins["K8S_VERSION"]
        what = "Workloads" if setup.gang_api == "v1alpha1" else "PodGroups"
        return (
            f"kube-scheduler {version} with its own gang scheduling (scheduling.k8s.io"
            f" {setup.gang_api} {what}), its default profile (NodeResourcesFit LeastAllocated:"
            " it spreads), no Volcano"
        )
    return (
        f"Volcano {pins['VOLCANO_VERSION']} (vc-scheduler and vc-controller-manager; actions"
        " enqueue, allocate, backfill; binpack on nvidia.com/gpu weight 10, nodeorder's"
        " leastrequested and balancedresource 0: hack/localcluster.py VOLCANO_SCHEDULER_CONF);"
        " no kube-scheduler"
    )


@dataclass
class BackendResult:
    setup: GangSetup
    options: BenchOptions
    records: list[GangRecord] = field(default_factory=list)
    configuration: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wall: float | None = None
    logs: Path | None = None

    @property
    def releases(self) -> list[tuple[GangRecord, Release]]:
        return [(r, rel) for r in self.records for rel in r.releases]

    def within_window(self) -> list[tuple[GangRecord, Release]]:
        window = self.options.window
        return [
            (r, rel)
            for r, rel in self.releases
            if rel.latency is not None and rel.latency <= window
        ]

    def late(self) -> list[tuple[GangRecord, Release]]:
        window = self.options.window
        return [
            (r, rel) for r, rel in self.releases if rel.latency is not None and rel.latency > window
        ]

    def never_bound(self) -> list[tuple[GangRecord, Release]]:
        return [(r, rel) for r, rel in self.releases if rel.latency is None]

    @property
    def created(self) -> int:
        return sum(r.created_at is not None and not r.create_error for r in self.records)

    @property
    def admitted(self) -> int:
        return sum(r.admissions > 0 for r in self.records)

    @property
    def released(self) -> int:
        return sum(bool(r.releases) for r in self.records)

    @property
    def deleted(self) -> int:
        return sum(r.deleted_at is not None for r in self.records)


class Driver:
    """Submits the gangs, follows Workloads, owners and pods, deletes each gang after its
    runtime, and diagnoses releases that are not bound in time: all in one event loop."""

    def __init__(
        self,
        api: Client,
        gangs: Sequence[PlannedGang],
        options: BenchOptions,
        gang_kind: kinds.Kind | None,
        stop: threading.Event,
    ) -> None:
        self.api = api
        self.options = options
        self.gang_kind = gang_kind
        self.stop = stop
        self.records = {g.key: GangRecord(g) for g in gangs}
        self.by_owner = {(g.team, g.kind, g.name): self.records[g.key] for g in gangs}
        self.layout_nodes = options.layout.node_labels()
        self.tasks: set[asyncio.Task[None]] = set()
        self.errors: list[str] = []
        self.foreign = 0

    # ---- watches ----------------------------------------------------------------------------

    def see_workload(self, event: str, data: bytes, now: float) -> None:
        if event == "DELETED":
            return
        wl = scale.decode_workload(data)
        record = self.records.get((wl.metadata.namespace, wl.metadata.name))
        if record is None:
            self.foreign += 1
            return
        conditions = {c.type: c for c in wl.status.conditions}

        def true(kind: str) -> bool:
            return kind in conditions and conditions[kind].status == "True"

        admitted = true("Admitted") and not true("Finished")
        if admitted and not record.admitted:
            record.admissions += 1
        elif record.admitted and not admitted and not true("Finished"):
            record.evictions += 1
            if record.releases and "Evicted" in conditions:
                record.releases[-1].evicted = conditions["Evicted"].message
        record.admitted = admitted
        reason = wl.status.pendingReason or ""
        if not admitted and reason:
            record.last_reason = reason
            record.waited = record.waited or not reason.startswith(NOT_CONSIDERED)

    def owner_seer(self, kind: Kind) -> scale.Seen:
        def see(event: str, data: bytes, now: float) -> None:
            if event == "DELETED":
                return
            owner = scale.decode_job(data)
            record = self.by_owner.get((owner.metadata.namespace, kind, owner.metadata.name))
            if record is not None:
                self.released(record, owner.spec.suspend is False, now)

        return see

    def see_pod(self, event: str, data: bytes, now: float) -> None:
        pod = _decode_pod(data)
        gang = pod.metadata.labels.get(names.POD_GROUP_LABEL, "")
        record = self.records.get((pod.metadata.namespace, gang))
        if record is None:
            return
        if event == "DELETED":
            record.pods.pop(pod.metadata.uid, None)
        else:
            record.pods[pod.metadata.uid] = PodState(
                pod.spec.nodeName or "",
                any(g.name == names.ADMISSION_GATE for g in pod.spec.schedulingGates),
                pod.metadata.deletionTimestamp is None
                and pod.status.phase not in ("Succeeded", "Failed"),
                pod.metadata.labels.get(names.JOBSET_REPLICATED_JOB_LABEL, ""),
            )
        if record.plan.kind == "StatefulSet":
            self.released(record, record.ungated(), now)
        self.check_bound(record, now)

    def forget_pods(self) -> None:
        for record in self.records.values():
            record.pods.clear()

    # ---- releases ---------------------------------------------------------------------------

    def released(self, record: GangRecord, released: bool, now: float) -> None:
        if released and not record.released:
            release = Release(now)
            record.releases.append(release)
            self.spawn(self.diagnose_late(record, release))
            self.spawn(self.give_up(record, release))
            self.check_bound(record, now)
        elif record.released and not released and record.current is not None:
            record.current.finish("held", now)
            self.spawn(self.abandon_if_unreleased(record, now))
        record.released = released

    def check_bound(self, record: GangRecord, now: float) -> None:
        release = record.current
        if release is None or release.bound_at is not None:
            return
        bound = record.bound_pods()
        if len(bound) >= record.plan.pods:
            release.bound_at = now
            release.nodes = tuple(sorted(bound))
            release.set_nodes = record.bound_per_set()
            self.spawn(self.delete_after_runtime(record, release))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def delete_after_runtime(self, record: GangRecord, release: Release) -> None:
        assert release.bound_at is not None
        await asyncio.sleep(max(0.0, release.bound_at + self.options.runtime - time.monotonic()))
        if not release.end:
            release.finish("runtime", time.monotonic())
            await self.delete(record)

    async def abandon_if_unreleased(self, record: GangRecord, since: float) -> None:
        """Deletes a gang not released within the pending limit of `since`, so that a gang
        that is never released cannot hold the run up."""
        await asyncio.sleep(max(0.0, since + self.options.pending_limit - time.monotonic()))
        if record.deleted_at is None and not any(rel.at >= since for rel in record.releases):
            record.abandoned = True
            await self.delete(record)

    async def give_up(self, record: GangRecord, release: Release) -> None:
        await asyncio.sleep(max(0.0, release.at + self.options.give_up - time.monotonic()))
        if not release.end and release.bound_at is None:
            release.finish("given up", time.monotonic())
            await self.delete(record)

    async def delete(self, record: GangRecord) -> None:
        plan = record.plan
        try:
            await self.api.delete(OWNER_KINDS[plan.kind], plan.name, plan.team)
        except ApiError as err:
            self.errors.append(f"delete {plan.team}/{plan.name}: {err}")
        record.deleted_at = time.monotonic()

    async def diagnose_late(self, record: GangRecord, release: Release) -> None:
        await asyncio.sleep(max(0.0, release.at + self.options.window - time.monotonic()))
        if release.bound_at is None and not release.end:
            try:
                release.why = await self.why_unbound(record)
            except ApiError as err:
                release.why = f"(could not look: {err})"

    async def why_unbound(self, record: GangRecord) -> str:
        """What a user would look at: how many pods exist and are bound, the unbound pods'
        PodScheduled messages, the gang backend's object and (Volcano) its Events."""
        plan = record.plan
        pods, _ = await self.api.list(
            kinds.PODS, plan.team, label_selector=f"{names.POD_GROUP_LABEL}={plan.gang}"
        )
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        unbound = [p for p in live if not p["spec"].get("nodeName")]
        gated = [
            p
            for p in unbound
            if any(
                g.get("name") == names.ADMISSION_GATE
                for g in p["spec"].get("schedulingGates") or []
            )
        ]
        parts = [f"{len(live) - len(unbound)}/{plan.pods} pods bound, {len(live)} exist"]
        if gated:
            parts.append(f"{len(gated)} still gated")
        said = Counter(
            f"{c.get('reason', '')}: {c.get('message', '')}"
            for p in unbound
            for c in (p.get("status") or {}).get("conditions") or []
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        )
        for text, count in said.most_common(2):
            parts.append(f"{count} pod(s) PodScheduled=False {_short(text)}")
        if self.gang_kind is not None:
            parts.extend(await self.gang_object_says(plan))
        return "; ".join(parts)

    async def gang_object_says(self, plan: PlannedGang) -> list[str]:
        assert self.gang_kind is not None
        kind = self.gang_kind.kind
        try:
            obj = await self.api.get(self.gang_kind, plan.gang, plan.team)
        except ApiError as err:
            return [f"{kind}: {'missing' if err.status == 404 else err}"]
        status = obj.get("status") or {}
        parts = []
        if status.get("phase"):
            parts.append(f"{kind} phase {status['phase']}")
        for c in status.get("conditions") or []:
            if c.get("message"):
                parts.append(
                    f"{kind} {c.get('type')}={c.get('status')}: {_short(str(c['message']))}"
                )
        if self.gang_kind == kinds.VOLCANO_PODGROUPS:
            data = await self.api.fetch(
                "GET",
                kinds.EVENTS.path(plan.team),
                query={
                    "fieldSelector": f"involvedObject.kind=PodGroup,involvedObject.name={plan.gang}"
                },
            )
            events = msgspec.json.decode(data).get("items") or []
            recent = Counter(
                f"{e.get('reason')}: {e.get('message')}"
                for e in events
                if e.get("type") == "Warning"
            )
            parts.extend(f"Event {_short(text)} (x{n})" for text, n in recent.most_common(1))
        return parts or [f"{kind}: no status"]

    # ---- the run ----------------------------------------------------------------------------

    async def submit(self) -> None:
        for index, record in enumerate(self.records.values()):
            if self.stop.is_set():
                return
            if index:
                await asyncio.sleep(self.options.pace)
            plan = record.plan
            record.created_at = time.monotonic()
            try:
                await self.api.create(OWNER_KINDS[plan.kind], manifest(plan), plan.team)
            except ApiError as err:
                record.create_error = str(err)
                record.deleted_at = time.monotonic()
                self.errors.append(f"create {plan.team}/{plan.name}: {err}")
                continue
            self.spawn(self.abandon_if_unreleased(record, record.created_at))

    def done(self) -> bool:
        return all(r.deleted_at is not None for r in self.records.values())

    def progress(self, started: float) -> str:
        records = self.records.values()
        created = sum(r.created_at is not None for r in records)
        released = sum(bool(r.releases) for r in records)
        bound = sum(any(rel.bound_at is not None for rel in r.releases) for r in records)
        deleted = sum(r.deleted_at is not None for r in records)
        waiting = sum(r.created_at is not None and not r.releases for r in records)
        return (
            f"{time.monotonic() - started:5.0f}s: created {created}, released {released},"
            f" all bound {bound}, deleted {deleted} of {len(self.records)}; {waiting} not"
            " released yet"
        )

    async def run(self) -> float | None:
        """Until every gang is deleted, the time limit, or `stop`: the wall time (first create
        to last delete) when every gang was deleted."""
        watches = [
            scale.follow_kind(self.api, kinds.WORKLOADS, self.see_workload),
            scale.follow_kind(
                self.api,
                kinds.PODS,
                self.see_pod,
                relisted=self.forget_pods,
                label_selector=names.POD_GROUP_LABEL,
            ),
            *(
                scale.follow_kind(self.api, OWNER_KINDS[kind], self.owner_seer(kind))
                for kind in ("Job", "JobSet")
                if any(r.plan.kind == kind for r in self.records.values())
            ),
        ]
        watching = [asyncio.create_task(w) for w in watches]
        started = time.monotonic()
        submitting = asyncio.create_task(self.submit())
        next_report = started + self.options.progress_every
        try:
            while not self.done():
                for task in (*watching, submitting):
                    if task.done() and task.exception() is not None:
                        raise RuntimeError(f"a watch or the submitter failed: {task.exception()!r}")
                if self.stop.is_set() or time.monotonic() > started + self.options.time_limit:
                    self.errors.append(
                        f"stopped at the time limit of {self.options.time_limit:.0f}s"
                    )
                    return None
                if time.monotonic() >= next_report:
                    next_report += self.options.progress_every
                    log(self.progress(started))
                await asyncio.sleep(0.5)
            first = min(r.created_at for r in self.records.values() if r.created_at is not None)
            last = max(r.deleted_at for r in self.records.values() if r.deleted_at is not None)
            return last - first
        finally:
            for task in (*watching, submitting, *self.tasks):
                task.cancel()
            await asyncio.gather(*watching, submitting, *self.tasks, return_exceptions=True)


async def _drive(
    kubeconfig: Path,
    gangs: Sequence[PlannedGang],
    options: BenchOptions,
    gang_kind: kinds.Kind | None,
    stop: threading.Event,
) -> tuple[list[GangRecord], float | None, list[str], int]:
    api = await clients.connect(str(kubeconfig))
    try:
        driver = Driver(api, gangs, options, gang_kind, stop)
        wall = await driver.run()
        return list(driver.records.values()), wall, driver.errors, driver.foreign
    finally:
        await api.close()


def wait_until_no_control_plane() -> None:
    """Waits (polling every 60 s) until no kube-apiserver runs on this machine."""
    while subprocess.run(["pgrep", "-f", "kube-apiserver"], capture_output=True).returncode == 0:
        log("another control plane runs here; waiting for it to stop (polling every 60 s)")
        time.sleep(60)


@contextlib.contextmanager
def kohort_log(path: Path) -> Iterator[None]:
    """kohort's log records (INFO and up) go to `path` while the run lasts."""
    logger = logging.getLogger("kohort")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


def jobset_manager_built() -> bool:
    try:
        testenv.binary("jobset-manager")
    except testenv.TestenvMissing:
        return False
    return True


async def run_backend(setup: GangSetup, options: BenchOptions) -> BackendResult:
    """One run on a fresh control plane with `setup`'s gang backend."""
    result = BackendResult(setup, options)
    jobsets = options.jobsets and jobset_manager_built()
    if options.jobsets and not jobsets:
        result.notes.append("jobset-manager is not built: no JobSets (`make testenv` builds it)")
    gangs = plan_gangs(options.gangs, options.seed, options.layout, jobsets=jobsets)
    result.configuration = configuration(setup, options, gangs)
    work = Path(options.work_dir or tempfile.mkdtemp(prefix="kohort-bench-placement-"))
    result.logs = work / str(setup)
    if options.wait_idle:
        await asyncio.to_thread(wait_until_no_control_plane)
    log(f"{setup}: starting a control plane ({options.layout.nodes} kwok nodes) in {result.logs}")
    result.logs.mkdir(parents=True, exist_ok=True)
    with (
        kohort_log(result.logs / "kohort.log"),
        LocalCluster(cluster_options(setup, options, jobsets=jobsets), result.logs) as cluster,
    ):
        # The controller starts once the queues exist, so that its first lists hold them.
        stack = KohortStack(
            cluster,
            settings=KOHORT_SETTINGS,
            podgroups=PodGroupSettings(setup.backend),
            run_controller=False,
        )
        await stack.start()
        stop = threading.Event()
        try:
            create_queues(cluster, stack, options.layout)
            await stack.start_controller()
            log(f"{setup}: kohort runs; submitting {len(gangs)} gangs, one every {options.pace:g}s")
            records, wall, errors, foreign = await asyncio.to_thread(
                asyncio.run,
                _drive(cluster.kubeconfig, gangs, options, stack.podgroups.kind, stop),
            )
            result.records, result.wall = records, wall
            result.errors += errors
            if foreign:
                result.notes.append(f"{foreign} Workload events of no gang of the bench")
        finally:
            stop.set()
            await stack.stop()
    return result


# -- the report -----------------------------------------------------------------------------


def configuration(
    setup: GangSetup, options: BenchOptions, gangs: Sequence[PlannedGang]
) -> list[str]:
    layout = options.layout
    quotas = team_quotas(layout)
    kinds_made = Counter(g.kind for g in gangs)
    shapes_made = Counter(g.shape for g in gangs)
    lines = [
        f"kohort {_commit()}; gang backend {setup}: {describe_backend(setup)}",
        f"nodes: {layout.describe()}",
        f"Topology {TOPOLOGY}: levels {BLOCK_LABEL}, {RACK_LABEL}, {HOSTNAME_LABEL};"
        f" ResourceFlavor {FLAVOR} names it (no node labels: every node)",
        "queues: "
        + ", ".join(f"{team} {q[GPU]} GPU / {q['cpu']} CPU nominal" for team, q in quotas.items())
        + f"; cohort {COHORT}, no borrowing limit, reclaimWithinCohort Any, evictAfterSeconds 0,"
        " minimumRuntimeSeconds 0; a LocalQueue per team in its namespace",
        "kohort: webhook and controller in this process (hack/demo.py KohortStack), measured"
        " configuration without waste budget, pods-ready timeout"
        f" {KOHORT_SETTINGS.pods_ready_timeout:g}s",
        f"churn: {len(gangs)} gangs, seed {options.seed}, one every {options.pace:g}s; each"
        f" deleted {options.runtime:g}s after all its pods are bound, or {options.give_up:g}s"
        f" after a release that is not all bound by then, or {options.pending_limit:g}s after"
        f" its creation or eviction if not released by then; window {options.window:g}s;"
        f" time limit {options.time_limit:g}s",
        "kinds: "
        + ", ".join(f"{k} {n}" for k, n in sorted(kinds_made.items()))
        + f"; every pod requests {CPU_PER_GPU} CPU per GPU",
    ]
    for shape in SHAPES:
        lines.append(
            f"shape {shape.name} ({shapes_made[shape.name]} gangs): {shape.asks};"
            f" pods {_choices(shape.pods)}, GPUs per pod {_choices(shape.gpus)}"
        )
    return lines


def _choices(values: Sequence[int]) -> str:
    return "/".join(str(v) for v in values)


def _commit() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "log", "-1", "--format=%h %s"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "(commit unknown)"
    return f"commit {head}" + (" (with uncommitted changes)" if dirty else "")


def _short(text: str, limit: int = 220) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.1f} %)" if whole else "0/0"


def _latencies(pairs: Sequence[tuple[GangRecord, Release]]) -> list[float]:
    return sorted(rel.latency for _, rel in pairs if rel.latency is not None)


def _distribution(values: Sequence[float]) -> tuple[str, str, str]:
    if not values:
        return ("-", "-", "-")
    return (
        _seconds(scale.percentile(values, 0.50)),
        _seconds(scale.percentile(values, 0.95)),
        _seconds(values[-1]),
    )


def reason_cause(reason: str) -> tuple[str, str]:
    """A pending reason as (cause, detail): the cause is its text up to the first colon or
    semicolon; the detail the rest with numbers and times left out, so that alike reasons
    count together."""
    head = re.split(r"[:;]", reason, maxsplit=1)[0]
    rest = reason[len(head) + 1 :].strip()
    rest = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>", rest)
    rest = re.sub(r"\d+(\.\d+)?", "N", rest)
    return head.strip(), _short(rest, 110)


def report(result: BackendResult) -> str:
    options = result.options
    window = options.window
    lines = [f"== {result.setup}", *(f"  {line}" for line in result.configuration), ""]
    releases = result.releases
    within, late, never = result.within_window(), result.late(), result.never_bound()
    cut_short = [(r, rel) for r, rel in never if rel.evicted_unbound_within(window)]
    latencies = _latencies(releases)
    p50, p95, most = _distribution(latencies)
    lines += [
        f"gangs: {len(result.records)} planned, {result.created} created, {result.admitted}"
        f" admitted, {result.released} released, {result.deleted} deleted;"
        f" {len(releases)} releases (a gang evicted and admitted again is released again),"
        f" {sum(r.evictions for r in result.records)} evictions;"
        f" {sum(r.abandoned for r in result.records)} deleted unreleased after"
        f" {options.pending_limit:g}s",
        f"releases all bound within {window:g}s: {_share(len(within), len(releases))}"
        f" (goal 100 %); bound later: {len(late)}; never all bound: {len(never)}, of which"
        f" {len(cut_short)} evicted by kohort within {window:g}s of their release (reclaim or"
        " preemption, not placement); without those:"
        f" {_share(len(within), len(releases) - len(cut_short))}",
        f"release to all bound (s): p50 {p50}, p95 {p95}, max {most}"
        f" (over the {len(latencies)} releases that were all bound)",
        "wall time: "
        + (f"{result.wall:.0f}s (first create to last delete)" if result.wall else "incomplete"),
        "",
        _breakdown(result, "SHAPE", lambda g: g.shape),
        "",
        _breakdown(result, "KIND", lambda g: g.kind),
        "",
    ]
    missed = [(r, rel) for r, rel in releases if rel.latency is None or rel.latency > window]
    lines.append(f"releases not all bound within {window:g}s: {len(missed)}")
    if missed:
        rows = [
            [
                f"{r.plan.team}/{r.plan.gang}",
                r.plan.describe(),
                _seconds(rel.latency) if rel.latency is not None else "never",
                {"runtime": "ran", "given up": "deleted unbound", "held": "evicted"}.get(
                    rel.end, "running at the end"
                ),
                rel.why or (f"evicted before {window:g}s: {rel.evicted}" if rel.evicted else "-"),
            ]
            for r, rel in missed
        ]
        lines.append(
            format_table(["GANG", "WHAT", "BOUND AFTER s", "THEN", f"WHY AT {window:g}s"], rows)
        )
    lines += ["", _misplaced(result), "", _waits(result)]
    if result.errors or result.notes:
        lines.append("")
    lines += [f"error: {e}" for e in result.errors] + [f"note: {n}" for n in result.notes]
    if result.logs is not None:
        lines.append(f"logs in {result.logs}")
    return "\n".join(lines)


def _misplaced(result: BackendResult) -> str:
    """The bound releases whose pods are not where their shape asks (preferred racks aside:
    falling back to a block is what they allow), with the rack of every pod."""
    layout = result.options.layout
    labels = layout.node_labels()
    rows = []
    for record, release in result.releases:
        if release.bound_at is None or record.plan.shape == "rack-preferred":
            continue
        if placed_as_asked(record.plan, release.nodes, layout, release.set_nodes) is False:
            racks = Counter(labels.get(node, {}).get(RACK_LABEL, "?") for node in release.nodes)
            rows.append(
                [
                    f"{record.plan.team}/{record.plan.gang}",
                    record.plan.describe(),
                    ", ".join(f"{rack} x{n}" for rack, n in sorted(racks.items())),
                    ", ".join(sorted(set(release.nodes))),
                ]
            )
    head = f"bound releases not placed as their shape asks (rack-preferred aside): {len(rows)}"
    if not rows:
        return head
    return head + "\n" + format_table(["GANG", "WHAT", "PODS PER RACK", "NODES"], rows)


def _breakdown(result: BackendResult, title: str, group: Callable[[PlannedGang], str]) -> str:
    window = result.options.window
    layout = result.options.layout
    rows = []
    for name in sorted({group(r.plan) for r in result.records}):
        pairs = [(r, rel) for r, rel in result.releases if group(r.plan) == name]
        gangs = [r for r in result.records if group(r.plan) == name]
        bound = [(r, rel) for r, rel in pairs if rel.latency is not None]
        asked = [placed_as_asked(r.plan, rel.nodes, layout, rel.set_nodes) for r, rel in bound]
        judged = [a for a in asked if a is not None]
        p50, p95, most = _distribution(_latencies(pairs))
        rows.append(
            [
                name,
                str(len(gangs)),
                str(len(pairs)),
                str(sum(1 for _, rel in bound if (rel.latency or 0) <= window)),
                str(len(pairs) - len(bound)),
                p50,
                p95,
                most,
                f"{sum(judged)}/{len(judged)}" if judged else "-",
            ]
        )
    headers = [title, "GANGS", "RELEASES", f"BOUND <={window:g}s", "NEVER BOUND"]
    return format_table([*headers, "P50 s", "P95 s", "MAX s", "PLACED AS ASKED"], rows)


def _waits(result: BackendResult) -> str:
    waited = [r for r in result.records if r.waited]
    never = [
        r
        for r in result.records
        if r.created_at is not None and not r.create_error and not r.admissions
    ]
    causes = Counter(reason_cause(r.last_reason) for r in waited)
    lines = [
        f"gangs that waited in kohort (a pending reason other than '{NOT_CONSIDERED}'):"
        f" {len(waited)} of {len(result.records)}; never admitted: {len(never)}",
        "their last pending reason, by cause:",
    ]
    rows = [[cause, detail, str(n)] for (cause, detail), n in causes.most_common()]
    lines.append(format_table(["CAUSE", "DETAIL (numbers as N)", "GANGS"], rows) if rows else "  -")
    abandoned = [r for r in result.records if r.abandoned]
    if abandoned:
        lines.append(
            f"deleted unreleased {result.options.pending_limit:g}s after their creation or"
            " eviction, with their last pending reason:"
        )
        rows = [
            [f"{r.plan.team}/{r.plan.gang}", r.plan.describe(), _short(r.last_reason or "-")]
            for r in abandoned
        ]
        lines.append(format_table(["GANG", "WHAT", "LAST PENDING REASON"], rows))
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------


def smoke(options: BenchOptions) -> BenchOptions:
    """The smoke size: 20 gangs, one a second, each running 5 s (a few minutes a backend)."""
    return replace(
        options, gangs=20, pace=1.0, runtime=5.0, give_up=45.0, pending_limit=90.0, time_limit=300.0
    )


def setups(backend: str, gang_api: str) -> list[GangSetup]:
    out = []
    if backend in ("volcano", "both"):
        out.append(GangSetup(Backend.VOLCANO))
    if backend in ("kubernetes", "both"):
        out.append(GangSetup(Backend.KUBERNETES, gang_api))
    return out


async def main_async(args: argparse.Namespace) -> int:
    options = BenchOptions(
        gangs=args.gangs,
        seed=args.seed,
        pace=args.pace,
        runtime=args.runtime,
        window=args.window,
        give_up=args.give_up,
        pending_limit=args.pending_limit,
        jobsets=args.jobsets,
        time_limit=args.time_limit,
        wait_idle=args.wait_idle,
        work_dir=Path(args.work_dir) if args.work_dir else None,
    )
    if args.smoke:
        options = smoke(options)
    results = []
    for setup in setups(args.backend, args.gang_api):
        results.append(await run_backend(setup, options))
        print()
        print(report(results[-1]), flush=True)
    return 0 if all(not r.errors for r in results) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("volcano", "kubernetes", "both"), default="both")
    parser.add_argument(
        "--gang-api",
        choices=("v1alpha1", "v1beta1"),
        default="v1alpha1",
        help="kube-scheduler's gang API for --backend kubernetes (v1beta1: K8S_GANG_VERSION)",
    )
    parser.add_argument("--gangs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pace", type=float, default=1.5, help="seconds between two gangs")
    parser.add_argument(
        "--runtime",
        type=float,
        default=20.0,
        help="seconds a gang runs once all its pods are bound",
    )
    parser.add_argument(
        "--window", type=float, default=10.0, help="bound within this many seconds of release"
    )
    parser.add_argument(
        "--give-up", type=float, default=60.0, help="delete a release not all bound after this long"
    )
    parser.add_argument(
        "--pending-limit",
        type=float,
        default=300.0,
        help="delete a gang not released this long after its creation or eviction",
    )
    parser.add_argument("--time-limit", type=float, default=1800.0)
    parser.add_argument("--no-jobsets", dest="jobsets", action="store_false")
    parser.add_argument(
        "--smoke", action="store_true", help="20 gangs, one a second, 5 s runtime (a few minutes)"
    )
    parser.add_argument(
        "--wait-idle",
        action="store_true",
        help="before each control plane starts, wait until no other kube-apiserver runs here",
    )
    parser.add_argument("--work-dir", help="where logs go (default: a new temporary dir)")
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
