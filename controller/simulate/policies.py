"""Scheduling policies the simulator compares, all driven through one small interface.

Rule: a policy only decides; the event loop owns time, job state and metrics. Each step returns
which jobs started (every pod bound) and which were evicted.

- `kohort`: the decision core: DRS order, quota and placement fit, placement-aware reclaim,
  minimum runtime, starvation guard.
- `kohort-spread`: the same, placing pods on the emptiest nodes, with a tighter waste budget.
- `naive-reclaim`: the same core with issue 7's naive victims (newest first, no placement
  awareness, no minimum runtime, no starvation guard).
- `quota-drf`: Kueue-like: quotas and DRS order, Kueue's classic reclaim, no placement check;
  admitted pods are then bound one by one by a kube-scheduler model (partial placements).
- `gang-fifo`: Volcano with its default actions: one FIFO over all jobs, no quotas. The enqueue
  action admits a gang by an aggregate check only (its request + everything running + everything
  already enqueued <= the cluster's capacity); allocate then places enqueued gangs whole, oldest
  first, spreading like Volcano's built-in node order.
- `gang-fifo-binpack`: the same, packing nodes (Volcano with its binpack plugin, which the
  configuration of Volcano's Helm chart enables).
- `gang-fifo-no-enqueue`: Volcano without the enqueue action: allocate takes every pending gang,
  oldest first, and places it whole if it fits, so no gang holds anything before it is placed.
- `kube-default`: no gangs, no queues: pods bound one by one in arrival order, spreading; the
  pods of jobs submitted at the same instant interleave.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from controller import defaults
from controller.quota import Config, Engine, Gang, Node, QueueSpec, Quota
from controller.quota.placement import NodeIndex, Packing, PodShape
from controller.quota.snapshot import GPU
from controller.quota.state import GangInfo, gang_info
from controller.simulate.traces import GPU_UNIT, Job


@dataclass(slots=True)
class Step:
    started: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    # Admissions that needed evictions, and how many each needed.
    reclaims: list[int] = field(default_factory=list)


class Policy(Protocol):
    name: str

    def submit(self, job: Job, now: float) -> None: ...
    def finish(self, job: Job, now: float) -> None: ...
    def step(self, now: float) -> Step: ...
    def partial_gpus(self) -> int: ...
    def partial_jobs(self) -> int: ...
    def wake_at(self) -> float | None:
        """When the policy wants a step although nothing arrives or finishes (its timers)."""
        ...


def _gang(job: Job, queue: str | None = None) -> Gang:
    return Gang(job.name, queue or job.queue, job.pod_sets(), job.priority, job.submit)


def _whole_cluster_queue(nodes: Sequence[Node]) -> QueueSpec:
    """One queue named "all" whose quota is the whole cluster's allocatable capacity."""
    capacity: dict[str, int] = {}
    for node in nodes:
        for r, v in node.allocatable.items():
            capacity[r] = capacity.get(r, 0) + v
    return QueueSpec("all", {r: Quota(v) for r, v in capacity.items()})


class EnginePolicy:
    """Whole gangs through the decision core; admitted gangs start at once on their plan."""

    def __init__(
        self,
        name: str,
        queues: Sequence[QueueSpec],
        nodes: Sequence[Node],
        config: Config,
        *,
        single_queue: bool = False,
    ) -> None:
        self.name = name
        self.single_queue = single_queue
        if single_queue:
            queues = (_whole_cluster_queue(nodes),)
        self.engine = Engine(queues, nodes, config)

    def submit(self, job: Job, now: float) -> None:
        self.engine.add_pending(_gang(job, "all" if self.single_queue else None))

    def finish(self, job: Job, now: float) -> None:
        self.engine.finish(job.name)

    def step(self, now: float) -> Step:
        decisions = self.engine.cycle(now)
        step = Step([a.gang for a in decisions.admissions], [e.gang for e in decisions.evictions])
        per_preemptor = Counter(e.preemptor for e in decisions.evictions)
        step.reclaims = sorted(per_preemptor.values())
        admitted = {a.gang for a in decisions.admissions}
        missing = sorted(set(per_preemptor) - admitted)
        if missing:
            raise AssertionError(f"evictions for preemptors that were not admitted: {missing}")
        return step

    def partial_gpus(self) -> int:
        return 0

    def partial_jobs(self) -> int:
        return 0

    def wake_at(self) -> float | None:
        return self.engine.recheck_at


@dataclass(slots=True)
class _BoundJob:
    job: Job
    seq: int  # the binder's count of adds: queue entries of an earlier add are stale
    shapes: list[tuple[PodShape, int]]  # per pod group: its pods' shape and GPUs per pod
    pending: int  # pods not bound yet
    bound: list[tuple[int, int]] = field(default_factory=list)  # (node index, pod group)
    gpus: int = 0  # GPUs of the bound pods
    partial: bool = False  # was left partly bound by some bind


class PodBinder:
    """A model of the default kube-scheduler: pods bound one at a time, spreading.

    Its active queue orders pods by priority, then by when they were created. A job's pods are
    created in one burst (by the Job controller, on submission or, under Kueue, on admission),
    so the pods of jobs created at the same instant interleave: one pod of each such job in
    turn, in the order the jobs were added, while jobs created at different instants go oldest
    first, each whole. A pod that fits no node waits (with every pod of the same shape) until
    the next bind, and the others go on. A job whose pods are only partly bound holds those
    GPUs while it waits for the rest: two gangs created together can each hold part of what
    the other needs, forever.
    """

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.index = NodeIndex(nodes)
        self.jobs: dict[str, _BoundJob] = {}
        # Shape -> its waiting pods as (-priority, created, pod's rank in its job, add's seq,
        # pod group, job name): the active queue, split by shape.
        self.waiting: dict[tuple[object, ...], list[tuple[int, float, int, int, int, str]]] = {}
        self.adds = 0
        self.shape_cache: dict[tuple[object, ...], list[tuple[PodShape, int]]] = {}
        self.partial_seen = 0
        self.held = 0  # GPUs bound to jobs that have not started

    def add(self, job: Job, now: float) -> None:
        """Queue the pods of `job`, created at `now`."""
        self.adds += 1
        shapes = self._shapes(job)
        rank = 0
        for group, ((shape, _), (pods, _)) in enumerate(zip(shapes, job.groups, strict=True)):
            waiting = self.waiting.setdefault((shape.request, shape.selector), [])
            for _ in range(pods):
                heapq.heappush(waiting, (-job.priority, now, rank, self.adds, group, job.name))
                rank += 1
        self.jobs[job.name] = _BoundJob(job, self.adds, shapes, rank)

    def _shapes(self, job: Job) -> list[tuple[PodShape, int]]:
        """Per pod group of `job`: its pods' shape and GPUs per pod (the same for every job of
        the same groups and per-pod requests)."""
        key = (job.groups, job.cpu_per_pod, job.memory_per_pod)
        shapes = self.shape_cache.get(key)
        if shapes is None:
            shapes = [
                (self.index.shape(pod_set), per_pod)
                for pod_set, (_, per_pod) in zip(job.pod_sets(), job.groups, strict=True)
            ]
            self.shape_cache[key] = shapes
        return shapes

    def remove(self, name: str) -> None:
        """Forget `name` and free its nodes; its queued pods are dropped when they come up."""
        bound = self.jobs.pop(name)
        for node, group in bound.bound:
            self.index.give(node, bound.shapes[group][0].request)
        if bound.pending:
            self.held -= bound.gpus

    def _head(self, key: tuple[object, ...]) -> tuple[int, float, int, int, int, str] | None:
        """The first live pod waiting in shape `key`, dropping those of removed jobs."""
        waiting = self.waiting[key]
        while waiting:
            entry = waiting[0]
            job = self.jobs.get(entry[5])
            if job is not None and job.seq == entry[3]:
                return entry
            heapq.heappop(waiting)
        return None

    def bind(self) -> list[str]:
        """Bind what fits in queue order; return the jobs whose last pod was just bound."""
        started: list[str] = []
        touched: list[_BoundJob] = []
        heads = []
        for key in self.waiting:
            head = self._head(key)
            if head is not None:
                heads.append((head, key))
        heapq.heapify(heads)
        while heads:
            (_, _, _, _, group, name), key = heapq.heappop(heads)
            job = self.jobs[name]
            shape, per_pod = job.shapes[group]
            node = self.index.find(shape, "spread")
            if node is None:
                continue  # no pod of this shape fits before capacity comes back
            self.index.take(node, shape.request)
            heapq.heappop(self.waiting[key])
            job.bound.append((node, group))
            job.gpus += per_pod
            job.pending -= 1
            self.held += per_pod
            if job.pending == 0:
                self.held -= job.gpus
                started.append(name)
            else:
                touched.append(job)
            head = self._head(key)
            if head is not None:
                heapq.heappush(heads, (head, key))
        for job in touched:
            if job.pending and not job.partial:
                job.partial = True
                self.partial_seen += 1
        return started


class GangBinder:
    """A model of Volcano's allocate action with the gang plugin: enqueued gangs, oldest first,
    each bound whole if every pod fits, else skipped until capacity comes back."""

    def __init__(self, nodes: Sequence[Node], packing: Packing) -> None:
        self.index = NodeIndex(nodes)
        self.packing = packing
        # (-priority, submit, name) of the gangs not bound yet, in allocate's order.
        self.waiting: list[tuple[int, float, str]] = []
        self.gangs: dict[str, GangInfo] = {}
        self.plans: dict[str, list[tuple[int, int, int]]] = {}
        # Whether a gang arrived or capacity came back since the last bind.
        self.changed = False
        # Gangs are bound whole: never partly.
        self.held = 0
        self.partial_seen = 0

    def add(self, job: Job, now: float) -> None:
        """Enqueue `job`'s gang; allocate orders gangs by priority, then submit time."""
        self.gangs[job.name] = gang_info(_gang(job), self.index)
        bisect.insort(self.waiting, (-job.priority, job.submit, job.name))
        self.changed = True

    def remove(self, name: str) -> None:
        info = self.gangs.pop(name)
        plan = self.plans.pop(name, None)
        if plan is None:
            self.waiting.remove((-info.gang.priority, info.gang.created, name))
            return
        shapes = {ps: shape for ps, shape, _ in info.shapes}
        self.index.release((shapes[ps].request, node, n) for ps, node, n in plan)
        self.changed = True

    def bind(self) -> list[str]:
        """Bind what fits, oldest first; return the gangs bound."""
        if not self.changed:
            return []
        self.changed = False
        bound: list[str] = []
        unfit: set[object] = set()
        still: list[tuple[int, float, str]] = []
        for key in self.waiting:
            info = self.gangs[key[2]]
            if info.class_key not in unfit:
                plan, failure = self.index.place(info.shapes, self.packing)
                if failure is None:
                    self.plans[info.name] = plan
                    bound.append(info.name)
                    continue
                unfit.add(info.class_key)
            still.append(key)
        self.waiting = still
        return bound


class KubeDefaultPolicy:
    """The default kube-scheduler alone (PodBinder): a job's pods are created when it is
    submitted, so the pods of jobs submitted at the same instant interleave, and two gangs
    that arrive together on too few GPUs can each hold part of them and neither start."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.name = "kube-default"
        self.binder = PodBinder(nodes)

    def submit(self, job: Job, now: float) -> None:
        self.binder.add(job, now)

    def finish(self, job: Job, now: float) -> None:
        self.binder.remove(job.name)

    def step(self, now: float) -> Step:
        return Step(self.binder.bind())

    def partial_gpus(self) -> int:
        return self.binder.held

    def partial_jobs(self) -> int:
        return self.binder.partial_seen

    def wake_at(self) -> float | None:
        return None


class Binder(Protocol):
    """Binds admitted jobs to nodes (PodBinder, GangBinder)."""

    held: int  # GPUs bound to jobs that have not started
    partial_seen: int  # jobs that were ever partly bound

    def add(self, job: Job, now: float) -> None:
        """Take `job`, admitted at `now`, to be bound."""
        ...

    def remove(self, name: str) -> None: ...
    def bind(self) -> list[str]: ...


class AdmitThenBindPolicy(EnginePolicy):
    """Admission by the decision core without a placement check, then a binder places what was
    admitted; a gang that is admitted but cannot be placed keeps its quota while it waits.

    - quota-drf (Kueue-like): the queues' quotas, pods bound one by one (PodBinder). A
      job's pods are created when it is admitted, so the pods of the jobs admitted in the same
      cycle interleave, and those admitted earlier go first.
    - gang-fifo (Volcano's default actions): one queue whose quota is the cluster's capacity,
      which is the enqueue action's aggregate check (the proportion plugin's check for a queue
      without capability; the overcommit plugin's 1.2x is looser); gangs bound whole by the
      allocate action (GangBinder). Such a queue never preempts, nor do Volcano's defaults.
    """

    def __init__(
        self,
        name: str,
        queues: Sequence[QueueSpec],
        nodes: Sequence[Node],
        binder: Binder,
        *,
        single_queue: bool = False,
    ) -> None:
        config = Config(placement=False, victims="classic")
        super().__init__(name, queues, nodes, config, single_queue=single_queue)
        self.binder = binder
        self.jobs: dict[str, Job] = {}

    def submit(self, job: Job, now: float) -> None:
        self.jobs[job.name] = job
        super().submit(job, now)

    def finish(self, job: Job, now: float) -> None:
        super().finish(job, now)
        self.binder.remove(job.name)

    def step(self, now: float) -> Step:
        decisions = self.engine.cycle(now)
        evicted = [e.gang for e in decisions.evictions]
        for name in evicted:
            self.binder.remove(name)
        for a in decisions.admissions:
            self.binder.add(self.jobs[a.gang], now)
        per_preemptor = Counter(e.preemptor for e in decisions.evictions)
        return Step(self.binder.bind(), evicted, sorted(per_preemptor.values()))

    def partial_gpus(self) -> int:
        return self.binder.held

    def partial_jobs(self) -> int:
        return self.binder.partial_seen


POLICIES = (
    "kube-default",
    "gang-fifo",
    "gang-fifo-binpack",
    "gang-fifo-no-enqueue",
    "quota-drf",
    "naive-reclaim",
    "kohort",
    "kohort-spread",
)
# kohort-spread: kohort spreading pods (the emptiest node first) instead of best fit, with a
# tighter waste budget. Measured on Philly 8x: lower p95 wait (small jobs start at once), higher
# mean wait (large gangs find fewer empty nodes).
SPREAD_WASTE_BUDGET = 0.03


def make_policy(
    name: str,
    queues: Sequence[QueueSpec],
    nodes: Sequence[Node],
    *,
    min_runtime: float = defaults.MINIMUM_RUNTIME_SECONDS,
    evict_after: float = defaults.EVICT_AFTER_SECONDS,
    starvation_after: float | None = defaults.STARVATION_AFTER_SECONDS or None,
    drain: bool = False,
    waste_budget: float | None = defaults.WASTE_BUDGET,
    oldest_first_after: float | None = None,
    packing: Packing = "best-fit",
) -> Policy:
    """Build one of POLICIES over the same queues and nodes. The `kohort` policy's defaults are
    the controller's (controller/defaults.py); its queues get `min_runtime` and `evict_after`
    as a ClusterQueue's spec.preemption would give them."""

    def gang_fifo(node_order: Packing) -> Policy:
        binder = GangBinder(nodes, node_order)
        return AdmitThenBindPolicy(name, queues, nodes, binder, single_queue=True)

    def gang_fifo_no_enqueue() -> Policy:
        config = Config(packing="spread", victims="classic")
        return EnginePolicy(name, queues, nodes, config, single_queue=True)

    patient = [replace(q, min_runtime=min_runtime, evict_after=evict_after) for q in queues]
    kohort = replace(
        Config.measured(),
        packing=packing,
        starvation_after=starvation_after,
        drain=drain,
        waste_budget=waste_budget,
        oldest_first_after=oldest_first_after,
    )
    factories: dict[str, Callable[[], Policy]] = {
        "kube-default": lambda: KubeDefaultPolicy(nodes),
        "gang-fifo": lambda: gang_fifo("spread"),
        "gang-fifo-binpack": lambda: gang_fifo("best-fit"),
        "gang-fifo-no-enqueue": gang_fifo_no_enqueue,
        "quota-drf": lambda: AdmitThenBindPolicy(name, queues, nodes, PodBinder(nodes)),
        "naive-reclaim": lambda: EnginePolicy(
            name, queues, nodes, Config(packing=packing, victims="naive")
        ),
        "kohort": lambda: EnginePolicy(name, patient, nodes, kohort),
        "kohort-spread": lambda: EnginePolicy(
            name,
            patient,
            nodes,
            replace(
                kohort,
                packing="spread",
                waste_budget=SPREAD_WASTE_BUDGET,
                drain=False,
                oldest_first_after=None,
            ),
        ),
    }
    return factories[name]()


def gpus_of(node: Node) -> int:
    return node.allocatable.get(GPU, 0) // GPU_UNIT
