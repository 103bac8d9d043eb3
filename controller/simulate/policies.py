"""Scheduling policies the simulator compares, all driven through one small interface.

Rule: a policy only decides; the event loop owns time, job state and metrics. Each step returns
which jobs started (every pod bound) and which were evicted.

- `kohort`: the decision core: DRS order, quota and placement fit, placement-aware reclaim,
  minimum runtime, starvation guard (with `backfill`, its reservations for gangs).
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
  oldest first, and places it whole if it fits, so no gang holds anything before it is placed;
  a gang that does not fit blocks nobody behind it. Spreading (Volcano's built-in node order).
- `gang-fifo-no-enqueue-binpack`: the same, packing nodes (Volcano with the binpack plugin
  weighted on GPUs, as docs/installation.md sets Volcano up for kohort).
- `kube-default`: no gangs, no queues: pods bound one by one in arrival order, spreading; the
  pods of jobs submitted at the same instant interleave.
- `kueue-tas` (with a topology layout, topology.py): `kohort` choosing the domains of gangs'
  topology requests by Kueue's TAS algorithm (controller/quota/kueue_tas.py) instead of best
  fit; without requests it decides as `kohort`.

With GPU types as flavors (`flavors` of make_policy, see flavors.py), the policies with queues
and quotas (quota-drf, naive-reclaim, kohort, kohort-spread) count each queue's GPUs per type,
and quota-drf's binder binds a job's pods only to the nodes of the flavors it was admitted on.
The others have no such quotas: kube-default has no queues, and the gang-fifo variants check the
cluster's capacity as one pool, as Volcano does. Every policy binds a pod only where its own
node selector (the GPU model a job names) allows.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from controller import defaults
from controller.quota import Config, Engine, FlavorSpec, Gang, Node, PodSet, QueueSpec, Quota
from controller.quota.flavor_assignment import flavored
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
    # The GPUs a started elastic job was admitted with, when fewer than it asks for.
    gpus: dict[str, int] = field(default_factory=dict)
    # Running elastic jobs shrunk in place for a gang admitted in the step: the GPUs each runs
    # with now.
    shrunk: dict[str, int] = field(default_factory=dict)


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

    def placed(self, job: Job) -> dict[str, int]:
        """The nodes a started job's pods run on, and its GPUs on each."""
        ...


def _gang(job: Job, queue: str | None = None, pod_sets: Sequence[PodSet] | None = None) -> Gang:
    sets = tuple(pod_sets) if pod_sets is not None else job.pod_sets()
    return Gang(job.name, queue or job.queue, sets, job.priority, job.submit)


def released(
    job: Job, given: Mapping[str, Mapping[str, str]], flavors: Mapping[str, FlavorSpec]
) -> tuple[PodSet, ...] | None:
    """The pod sets of `job` as released on the flavors it was admitted on (pod set ->
    resource -> flavor): each with its flavors' node labels added. None when it got none."""
    if not given:
        return None
    return tuple(
        flavored(
            pod_set, [flavors.get(f) for f in sorted(set(given.get(pod_set.name, {}).values()))]
        )
        for pod_set in job.pod_sets()
    )


def _pod_set_key(pod_set: PodSet) -> tuple[object, ...]:
    return (
        pod_set.count,
        tuple(sorted(pod_set.requests.items())),
        tuple(sorted(pod_set.node_selector.items())),
        pod_set.tolerations,
        pod_set.topology,
    )


def _gpus_on_nodes(
    job: Job, names: Sequence[str], plan: Iterable[tuple[int, int, int]]
) -> dict[str, int]:
    """A job's GPUs on each node, from (pod set index, node index, pods) of its plan."""
    out: dict[str, int] = {}
    for ps, node, pods in plan:
        name = names[node]
        out[name] = out.get(name, 0) + pods * job.groups[ps][1]
    return out


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
        flavors: Sequence[FlavorSpec] = (),
    ) -> None:
        self.name = name
        self._jobs: dict[str, Job] = {}
        self.single_queue = single_queue
        if single_queue:
            queues = (_whole_cluster_queue(nodes),)
        self.flavors = {f.name: f for f in flavors}
        self.engine = Engine(queues, nodes, config, flavors=flavors)

    def submit(self, job: Job, now: float) -> None:
        if job.min_pods is not None:
            self._jobs[job.name] = job
        self.engine.add_pending(_gang(job, "all" if self.single_queue else None))

    def finish(self, job: Job, now: float) -> None:
        self._jobs.pop(job.name, None)
        self.engine.finish(job.name, at=now)  # (its queue's runtimes learn how long it ran)

    def step(self, now: float) -> Step:
        decisions = self.engine.cycle(now)
        step = Step([a.gang for a in decisions.admissions], [e.gang for e in decisions.evictions])
        for a in decisions.admissions:
            job = self._jobs.get(a.gang)
            if job is not None and (gpus := job.gpus_with(a.counts)) < job.gpus:
                step.gpus[a.gang] = gpus
        for shrink in decisions.shrinks:
            job = self._jobs[shrink.gang]
            step.shrunk[shrink.gang] = job.gpus_with({shrink.pod_set: shrink.count})
        per_preemptor = Counter(e.preemptor for e in decisions.evictions)
        step.reclaims = sorted(per_preemptor.values())
        admitted = {a.gang for a in decisions.admissions}
        preemptors = set(per_preemptor) | {s.preemptor for s in decisions.shrinks}
        missing = sorted(preemptors - admitted)
        if missing:
            raise AssertionError(f"evictions for preemptors that were not admitted: {missing}")
        return step

    def partial_gpus(self) -> int:
        return 0

    def partial_jobs(self) -> int:
        return 0

    def wake_at(self) -> float | None:
        return self.engine.recheck_at

    def placed(self, job: Job) -> dict[str, int]:
        _, running = self.engine.running[job.name]
        return _gpus_on_nodes(job, self.engine.index.names, running.plan)


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

    def add(self, job: Job, now: float, pod_sets: Sequence[PodSet] | None = None) -> None:
        """Queue the pods of `job`, created at `now` (as `pod_sets` if given: its pod sets as
        released on their flavors)."""
        self.adds += 1
        shapes = self._shapes(job, pod_sets)
        rank = 0
        for group, ((shape, _), (pods, _)) in enumerate(zip(shapes, job.groups, strict=True)):
            waiting = self.waiting.setdefault((shape.request, shape.selector), [])
            for _ in range(pods):
                heapq.heappush(waiting, (-job.priority, now, rank, self.adds, group, job.name))
                rank += 1
        self.jobs[job.name] = _BoundJob(job, self.adds, shapes, rank)

    def _shapes(
        self, job: Job, pod_sets: Sequence[PodSet] | None = None
    ) -> list[tuple[PodShape, int]]:
        """Per pod group of `job`: its pods' shape and GPUs per pod (the same for every job of
        the same groups, per-pod requests and node selectors)."""
        if pod_sets is None:
            key: tuple[object, ...] = (
                job.groups,
                job.cpu_per_pod,
                job.memory_per_pod,
                job.node_selector,
                job.topology,
            )
        else:
            key = tuple(_pod_set_key(ps) for ps in pod_sets)
        shapes = self.shape_cache.get(key)
        if shapes is None:
            sets = job.pod_sets() if pod_sets is None else pod_sets
            shapes = [
                (self.index.shape(pod_set), per_pod)
                for pod_set, (_, per_pod) in zip(sets, job.groups, strict=True)
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

    def placed(self, job: Job) -> dict[str, int]:
        bound = self.jobs[job.name]
        plan = ((group, node, 1) for node, group in bound.bound)
        return _gpus_on_nodes(job, self.index.names, plan)

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

    def add(self, job: Job, now: float, pod_sets: Sequence[PodSet] | None = None) -> None:
        """Enqueue `job`'s gang (its pods as `pod_sets` if given); allocate orders gangs by
        priority, then submit time."""
        self.gangs[job.name] = gang_info(_gang(job, pod_sets=pod_sets), self.index)
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

    def placed(self, job: Job) -> dict[str, int]:
        return _gpus_on_nodes(job, self.index.names, self.plans[job.name])

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

    def placed(self, job: Job) -> dict[str, int]:
        return self.binder.placed(job)


class Binder(Protocol):
    """Binds admitted jobs to nodes (PodBinder, GangBinder)."""

    held: int  # GPUs bound to jobs that have not started
    partial_seen: int  # jobs that were ever partly bound

    def add(self, job: Job, now: float, pod_sets: Sequence[PodSet] | None = None) -> None:
        """Take `job`, admitted at `now`, to be bound (as `pod_sets`: its pod sets as released
        on the flavors it was admitted on; None: as the job has them)."""
        ...

    def remove(self, name: str) -> None: ...
    def bind(self) -> list[str]: ...
    def placed(self, job: Job) -> dict[str, int]: ...


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
        flavors: Sequence[FlavorSpec] = (),
    ) -> None:
        config = Config(placement=False, victims="classic")
        super().__init__(name, queues, nodes, config, single_queue=single_queue, flavors=flavors)
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
            job = self.jobs[a.gang]
            self.binder.add(job, now, released(job, a.flavors, self.flavors))
        per_preemptor = Counter(e.preemptor for e in decisions.evictions)
        return Step(self.binder.bind(), evicted, sorted(per_preemptor.values()))

    def partial_gpus(self) -> int:
        return self.binder.held

    def partial_jobs(self) -> int:
        return self.binder.partial_seen

    def placed(self, job: Job) -> dict[str, int]:
        return self.binder.placed(job)


POLICIES = (
    "kube-default",
    "gang-fifo",
    "gang-fifo-binpack",
    "gang-fifo-no-enqueue",
    "gang-fifo-no-enqueue-binpack",
    "quota-drf",
    "naive-reclaim",
    "kohort",
    "kohort-spread",
)
# Policies that compare choices of domains (with a topology layout, topology.py); not run by
# default without one.
TOPOLOGY_POLICIES = ("kueue-tas",)
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
    backfill: bool = defaults.STARVATION_BACKFILL,
    drain: bool = False,
    waste_budget: float | None = defaults.WASTE_BUDGET,
    oldest_first_after: float | None = None,
    usage_half_life: float = defaults.USAGE_HALF_LIFE_SECONDS,
    packing: Packing = "best-fit",
    flavors: Sequence[FlavorSpec] = (),
) -> Policy:
    """Build one of POLICIES (or TOPOLOGY_POLICIES) over the same queues and nodes. The
    `kohort` policy's defaults are the controller's (controller/defaults.py); its queues get
    `min_runtime` and `evict_after` as a ClusterQueue's spec.preemption would give them.
    `flavors`: the ResourceFlavors the queues' resource groups name (GPU types, flavors.py;
    with a topology layout, each with the topology); the gang-fifo variants and kube-default
    ignore them (they have no per-flavor quota)."""

    def gang_fifo(node_order: Packing) -> Policy:
        binder = GangBinder(nodes, node_order)
        return AdmitThenBindPolicy(name, queues, nodes, binder, single_queue=True)

    def gang_fifo_no_enqueue(node_order: Packing) -> Policy:
        config = Config(packing=node_order, victims="classic")
        return EnginePolicy(name, queues, nodes, config, single_queue=True)

    patient = [replace(q, min_runtime=min_runtime, evict_after=evict_after) for q in queues]
    kohort = replace(
        Config.measured(),
        packing=packing,
        starvation_after=starvation_after,
        backfill=backfill,
        drain=drain,
        waste_budget=waste_budget,
        oldest_first_after=oldest_first_after,
        usage_half_life=usage_half_life,
    )
    factories: dict[str, Callable[[], Policy]] = {
        "kube-default": lambda: KubeDefaultPolicy(nodes),
        "gang-fifo": lambda: gang_fifo("spread"),
        "gang-fifo-binpack": lambda: gang_fifo("best-fit"),
        "gang-fifo-no-enqueue": lambda: gang_fifo_no_enqueue("spread"),
        "gang-fifo-no-enqueue-binpack": lambda: gang_fifo_no_enqueue("best-fit"),
        "quota-drf": lambda: AdmitThenBindPolicy(
            name, queues, nodes, PodBinder(nodes), flavors=flavors
        ),
        "naive-reclaim": lambda: EnginePolicy(
            name, queues, nodes, Config(packing=packing, victims="naive"), flavors=flavors
        ),
        "kohort": lambda: EnginePolicy(name, patient, nodes, kohort, flavors=flavors),
        "kueue-tas": lambda: EnginePolicy(
            name, patient, nodes, replace(kohort, topology="kueue-tas"), flavors=flavors
        ),
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
            flavors=flavors,
        ),
    }
    return factories[name]()


def gpus_of(node: Node) -> int:
    return node.allocatable.get(GPU, 0) // GPU_UNIT
