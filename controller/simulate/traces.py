"""Trace loaders: read the shared traces in place and turn them into jobs, queues and nodes.

Rule: loaders never write; every derived number (gang shape, CPU and memory per GPU, quotas)
is computed here and stated in the docstrings, so a reader can check it against SOURCES.md.
"""

from __future__ import annotations

import csv
import math
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from controller.quota.snapshot import GPU, Node, PodSet, QueueSpec, Quota, TopologyRequest

# The shared traces sit beside the repository (`../shared/traces`); KOHORT_TRACES overrides.
DEFAULT_TRACES = Path(
    os.environ.get("KOHORT_TRACES") or Path(__file__).resolve().parents[3] / "shared" / "traces"
)

# Philly has no CPU or memory: every GPU comes with this much of each, on nodes and in requests.
CPU_PER_GPU = 4_000  # milli-CPU
MEMORY_PER_GPU = 32 * 2**30 * 1000  # milli-bytes (32 GiB)
GPU_UNIT = 1000  # milli-GPU per GPU
# The label a node of a known GPU type carries (flavors.py): only when GPU types are modelled.
GPU_TYPE_LABEL = "kohort.dev/gpu-type"
# Philly's machines by GPUs per machine: cluster_machine_list gives each machine's GPU memory
# (2-GPU machines 12 GB per GPU, 8-GPU machines 24 GB), the only GPU type the trace tells; the
# homogeneous node list's 8-GPU nodes are of the 8-GPU machines' type.
PHILLY_TYPE_OF_8_GPU_NODES = "24GB"


@dataclass(frozen=True, slots=True)
class Job:
    """One trace job: a gang of `pods` pods of `gpus_per_pod` GPUs each, then the pod groups of
    `more_groups`, (pods, GPUs per pod) each: a job whose GPUs are not a multiple of a node's
    has a second group, one pod of the GPUs left over (see `gang_shape`)."""

    name: str
    queue: str
    submit: float
    duration: float
    pods: int
    gpus_per_pod: int
    cpu_per_pod: int = 0  # milli-CPU; 0 = proportional to GPUs
    memory_per_pod: int = 0  # milli-bytes; 0 = proportional to GPUs
    priority: int = 0
    more_groups: tuple[tuple[int, int], ...] = ()
    # Every pod's node selector: the GPU model(s) the job must run on (flavors.py), if any.
    node_selector: tuple[tuple[str, str], ...] = ()
    # Every pod set's topology request (topology.py), if any.
    topology: TopologyRequest | None = None
    # Elastic: the fewest pods of its first group it may start with (None: all of them).
    min_pods: int | None = None

    @property
    def groups(self) -> tuple[tuple[int, int], ...]:
        """Every pod group, (pods, GPUs per pod), the first one first."""
        return ((self.pods, self.gpus_per_pod), *self.more_groups)

    @property
    def gpus(self) -> int:
        gpus = self.pods * self.gpus_per_pod
        for pods, per_pod in self.more_groups:
            gpus += pods * per_pod
        return gpus

    def pod_sets(self) -> tuple[PodSet, ...]:
        """One pod set per group, named "main", "main-1", "main-2", ...; the first elastic
        down to `min_pods` when the job is."""
        sets = tuple(
            self._pod_set("main" if i == 0 else f"main-{i}", pods, per_pod)
            for i, (pods, per_pod) in enumerate(self.groups)
        )
        if self.min_pods is None:
            return sets
        return (replace(sets[0], min_count=self.min_pods), *sets[1:])

    def gpus_with(self, counts: Mapping[str, int]) -> int:
        """Its GPUs with `counts` pods of its pod sets (pod set name -> pods; others whole)."""
        return sum(
            counts.get(ps.name, ps.count) * per_pod
            for ps, (_, per_pod) in zip(self.pod_sets(), self.groups, strict=True)
        )

    def _pod_set(self, name: str, pods: int, gpus_per_pod: int) -> PodSet:
        cpu = self.cpu_per_pod or gpus_per_pod * CPU_PER_GPU
        memory = self.memory_per_pod or gpus_per_pod * MEMORY_PER_GPU
        requests = {"cpu": cpu, "memory": memory}
        if gpus_per_pod:
            requests[GPU] = gpus_per_pod * GPU_UNIT
        return PodSet(pods, requests, name, dict(self.node_selector), topology=self.topology)


def gang_shape(gpus: int, pod_gpus: int = 8) -> tuple[tuple[int, int], ...]:
    """The pod groups, (pods, GPUs per pod), of a job of n GPUs, as a job larger than a machine
    runs: on whole machines, then one machine for the rest. A job of at most `pod_gpus` GPUs is
    one pod of n (a GPU-less job one pod of none); a larger one floor(n/pod_gpus) pods of
    `pod_gpus` GPUs and, when n is not a multiple of `pod_gpus`, one pod of the rest (12 GPUs
    on 8-GPU nodes: a pod of 8 and a pod of 4, not two of 6). Nothing is rounded up."""
    if gpus <= pod_gpus:
        return ((1, gpus),)
    whole, rest = divmod(gpus, pod_gpus)
    if rest == 0:
        return ((whole, pod_gpus),)
    return ((whole, pod_gpus), (1, rest))


def with_elastic(jobs: Sequence[Job], share: float) -> list[Job]:
    """`jobs` with a `share` of them elastic, down to half their GPUs: of the jobs of one pod
    group of two pods or more (with 8-GPU pods, the jobs of 16, 24 and 32 GPUs), those whose
    name's CRC-32 falls in the first `share` of its range (the same jobs in every run), each
    with `min_pods` = half its pods, rounded up."""
    bound = share * 2**32
    return [
        replace(job, min_pods=(job.pods + 1) // 2)
        if not job.more_groups and job.pods >= 2 and zlib.crc32(job.name.encode()) < bound
        else job
        for job in jobs
    ]


def gpu_node(name: str, gpus: int, gpu_type: str = "") -> Node:
    """A node of `gpus` GPUs with CPU and memory in proportion, labelled with `gpu_type` if
    one is given."""
    return Node(
        name,
        {GPU: gpus * GPU_UNIT, "cpu": gpus * CPU_PER_GPU, "memory": gpus * MEMORY_PER_GPU},
        {GPU_TYPE_LABEL: gpu_type} if gpu_type else {},
    )


@dataclass(frozen=True, slots=True)
class PhillyTrace:
    jobs: tuple[Job, ...]
    vc_nodes: dict[str, int]


def load_philly(
    root: Path = DEFAULT_TRACES,
    *,
    start: str = "2017-10-01",
    end: str = "2017-12-01",
    compression: float = 1.0,
    pod_gpus: int = 8,
) -> PhillyTrace:
    """Jobs submitted in [start, end), inter-arrival times divided by `compression`, each a
    gang of pods of at most `pod_gpus` GPUs (`gang_shape`).

    Durations stay as recorded; submit times are seconds from the first job in the window.
    Jobs of virtual clusters missing from philly_vc.csv are dropped.
    """
    folder = root / "philly"
    with (folder / "philly_vc.csv").open() as f:
        vc_nodes = {row["vc"]: int(row["node num"]) for row in csv.DictReader(f)}
    rows: list[tuple[float, str, float, int]] = []
    with (folder / "philly.csv").open() as f:
        for row in csv.DictReader(f):
            stamp = row["timestamp"]
            if not (start <= stamp < end) or row["cluster"] not in vc_nodes:
                continue
            submitted = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()
            rows.append((submitted, row["cluster"], float(row["duration"]), int(row["num_gpus"])))
    rows.sort(key=lambda r: r[0])  # stable: jobs of the same second keep the trace's order
    first = rows[0][0] if rows else 0.0
    jobs = []
    for k, (submitted, vc, duration, gpus) in enumerate(rows):
        (pods, per_pod), *more = gang_shape(gpus, pod_gpus)
        jobs.append(
            Job(
                f"philly-{k:06d}",
                vc,
                (submitted - first) / compression,
                duration,
                pods,
                per_pod,
                more_groups=tuple(more),
            )
        )
    return PhillyTrace(tuple(jobs), vc_nodes)


def philly_nodes(
    root: Path = DEFAULT_TRACES, *, mixed: bool, typed: bool = False
) -> tuple[Node, ...]:
    """352 homogeneous 8-GPU nodes (the VCs' total), or the real 2/8-GPU machine list.

    `typed`: label each node with its GPU type, the machine list's GPU memory ("12GB" on the
    2-GPU machines, "24GB" on the 8-GPU ones; the homogeneous nodes "24GB")."""
    if not mixed:
        with (root / "philly" / "philly_vc.csv").open() as f:
            total = sum(int(row["node num"]) for row in csv.DictReader(f))
        kind = PHILLY_TYPE_OF_8_GPU_NODES if typed else ""
        return tuple(gpu_node(f"node-{i:04d}", 8, kind) for i in range(total))
    nodes = []
    with (root / "philly" / "cluster_machine_list").open() as f:
        for row in csv.reader(f):
            if not row or row[0].startswith("machineId"):
                continue
            kind = row[2].strip().replace(" ", "") if typed and len(row) > 2 else ""
            nodes.append(gpu_node(row[0].strip(), int(row[1]), kind))
    return tuple(nodes)


def philly_queues(
    vc_nodes: dict[str, int],
    total_gpus: int,
    *,
    reclaim: bool = True,
    min_runtime: float = 0.0,
    weight_by_size: bool = False,
) -> tuple[QueueSpec, ...]:
    """One queue per virtual cluster in one cohort, nominal = its node share of `total_gpus`.

    Borrowing is unlimited; CPU and memory quotas follow the GPU quota at the same ratio as the
    nodes. Fair-sharing weight = 1 for every queue, or with `weight_by_size` the VC's node count
    over the mean node count (a big VC's borrowing then counts for less).
    """
    nodes = sum(vc_nodes.values())
    mean_nodes = nodes / max(1, len(vc_nodes))
    queues = []
    for vc, count in sorted(vc_nodes.items()):
        gpus = total_gpus * count // nodes
        quotas = {
            GPU: Quota(gpus * GPU_UNIT),
            "cpu": Quota(gpus * CPU_PER_GPU),
            "memory": Quota(gpus * MEMORY_PER_GPU),
        }
        queues.append(
            QueueSpec(
                vc,
                quotas,
                cohort="philly",
                weight=count / mean_nodes if weight_by_size else 1.0,
                reclaim_within_cohort="Any" if reclaim else "Never",
                min_runtime=min_runtime,
            )
        )
    return tuple(queues)


@dataclass(frozen=True, slots=True)
class OpenbPod:
    name: str
    cpu: int  # milli-CPU
    memory: int  # milli-bytes
    gpus: int  # whole GPUs after rounding fractions up
    fractional: bool
    # The GPU models it may run on (gpu_spec, split at "|"; empty: any). Only GPU pods have one.
    models: tuple[str, ...] = ()


def load_openb_nodes(root: Path = DEFAULT_TRACES, *, typed: bool = False) -> tuple[Node, ...]:
    """The GPU nodes; `typed`: each labelled with its GPU model (the `model` column)."""
    nodes = []
    with (root / "openb" / "openb_node_list_gpu_node.csv").open() as f:
        for row in csv.DictReader(f):
            mib = int(row["memory_mib"])
            model = (row.get("model") or "").strip()
            nodes.append(
                Node(
                    row["sn"],
                    {
                        "cpu": int(row["cpu_milli"]),
                        "memory": mib * 2**20 * 1000,
                        GPU: int(row["gpu"]) * GPU_UNIT,
                    },
                    {GPU_TYPE_LABEL: model} if typed and model else {},
                )
            )
    return tuple(nodes)


def load_openb_pods(root: Path = DEFAULT_TRACES, *, variant: str = "default") -> list[OpenbPod]:
    """Pods in trace order (creation time, then name); a fraction of a GPU rounds up to one.

    A GPU pod's `models` are those its gpu_spec names (none in the default and multigpu50
    variants; the upstream gpuspec* variants name them for some pods)."""
    path = root / "openb" / f"openb_pod_list_{variant}.csv"
    pods: list[tuple[int, OpenbPod]] = []
    with path.open() as f:
        for k, row in enumerate(csv.DictReader(f)):
            num, milli = int(row["num_gpu"]), int(row["gpu_milli"])
            whole = num if milli >= 1000 or num == 0 else math.ceil(num * milli / 1000)
            created = int(row.get("creation_time") or k)
            spec = (row.get("gpu_spec") or "").split("|") if num else []
            models = tuple(sorted({m.strip() for m in spec if m.strip()}))
            pods.append(
                (
                    created,
                    OpenbPod(
                        row["name"],
                        int(row["cpu_milli"]),
                        int(row["memory_mib"]) * 2**20 * 1000,
                        whole,
                        0 < milli < 1000 and num > 0,
                        models,
                    ),
                )
            )
    pods.sort(key=lambda p: (p[0], p[1].name))
    return [p for _, p in pods]


def iter_published_fgd(root: Path = DEFAULT_TRACES) -> Iterator[dict[str, str]]:
    """Rows of the paper's published allocation results (fgd_analysis_allo_discrete.csv)."""
    with (root / "openb" / "fgd_analysis_allo_discrete.csv").open() as f:
        yield from csv.DictReader(f)
