"""The controller runs the very engine the simulator measures.

A seeded trace of gangs in three queues of one cohort (borrowing, reclaim, evictions) runs
through the simulator's loop; the sequence of cluster states it went through (jobs arriving,
jobs finishing, at the instants the loop decided) is then replayed as objects on an API server
in memory, through the controller's informers, state, engine, reconciler and writers. Both
make the same admissions, evictions and pending reasons, in the same order.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from controller.api import kinds, names
from controller.api.quantity import format_quantity
from controller.cluster.cache import Cache
from controller.cluster.writers import Writers
from controller.metrics import ControllerMetrics
from controller.quota import (
    Config,
    Decisions,
    EvictionCause,
    FlavorQuota,
    Node,
    PendingCause,
    QueueSpec,
    Quota,
    ResourceGroup,
)
from controller.reconciler import Reconciler
from controller.settings import Settings
from controller.simulate.loop import simulate
from controller.simulate.policies import EnginePolicy
from controller.simulate.traces import CPU_PER_GPU, MEMORY_PER_GPU, Job, gpu_node
from controller.state.cluster import ClusterState
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Mutation
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.registry import REGISTRY
from hack.objects import resource_flavor
from tests.fakes.memory_api import MemoryApi

JSON = dict[str, Any]
QUEUES = ("team-a", "team-b", "team-c")


def trace(seed: int = 3, jobs: int = 80) -> list[Job]:
    """Long gangs of team-b and team-c fill the cluster, borrowing team-a's quota; then all
    three teams send shorter gangs of 1-16 GPUs, and team-a reclaims what it lent."""
    rng = random.Random(seed)
    out = []
    t = 0
    for i in range(jobs):
        t += rng.choice([0, 0, 30, 60, 300])
        if i < jobs // 2:
            queue, duration = QUEUES[i % 2 + 1], rng.choice([3600, 7200, 14400])
        else:
            queue, duration = rng.choice(QUEUES), rng.choice([600, 1800, 3600])
        gpus = rng.choice([1, 2, 4, 8, 8, 16])
        pods, per_pod = (2, 8) if gpus == 16 else (1, gpus)
        # Named as the controller names a Job's gang: `namespace/job-<name>`.
        out.append(Job(f"{queue}/job-j{i:03d}", queue, float(t), float(duration), pods, per_pod))
    return out


def queue(name: str, gpus: int) -> QueueSpec:
    """A queue with one flavor, named as in its ClusterQueue (the controller keeps the name)."""
    quotas = {
        "nvidia.com/gpu": Quota(gpus * 1000),
        "cpu": Quota(gpus * CPU_PER_GPU),
        "memory": Quota(gpus * MEMORY_PER_GPU),
    }
    group = ResourceGroup(tuple(quotas), (FlavorQuota("default", quotas),))
    return QueueSpec(
        name,
        {},
        "research",
        reclaim_within_cohort="Any",
        min_runtime=300,
        evict_after=600,
        groups=(group,),
    )


QUEUE_SPECS = [queue(name, 16) for name in QUEUES]
NODES = [gpu_node(f"node-{i}", 8) for i in range(6)]


def kohort(backfill: bool = False) -> EnginePolicy:
    """The simulator's policy running the decision core as the controller configures it (its
    starvation guard sooner, with backfill reservations or holding nodes, and fair order
    weighing what queues borrowed in the last half hour, so that this short trace shows them)."""
    config = replace(
        Config.measured(), starvation_after=3600.0, usage_half_life=1800.0, backfill=backfill
    )
    return EnginePolicy("kohort", QUEUE_SPECS, NODES, config)


@dataclass
class Recorder:
    """The cycles an engine ran: when, and what they decided."""

    cycles: list[tuple[float, Decisions]] = field(default_factory=list)
    # The starvation guard's backfill reservation after each cycle.
    reservations: list[Any] = field(default_factory=list)

    def wrap(self, engine: Any) -> None:
        cycle = engine.cycle

        def recorded(now: float) -> Decisions:
            decisions: Decisions = cycle(now)
            self.cycles.append((now, decisions))
            self.reservations.append(engine.reservation)
            return decisions

        engine.cycle = recorded


@dataclass
class Step:
    """One instant the simulator decided at: the jobs that arrived and finished just before."""

    now: float
    arrived: list[Job] = field(default_factory=list)
    finished: list[Job] = field(default_factory=list)


class RecordingPolicy:
    """The simulator's kohort policy, with the loop's calls recorded as cluster states."""

    def __init__(self, policy: EnginePolicy) -> None:
        self.policy = policy
        self.name = policy.name
        self.steps: list[Step] = []
        self.seen: set[str] = set()
        self._next = Step(0.0)

    def submit(self, job: Job, now: float) -> None:
        if job.name not in self.seen:  # an evicted job comes back by itself
            self.seen.add(job.name)
            self._next.arrived.append(job)
        self.policy.submit(job, now)

    def finish(self, job: Job, now: float) -> None:
        self._next.finished.append(job)
        self.policy.finish(job, now)

    def step(self, now: float) -> Any:
        self._next.now = now
        self.steps.append(self._next)
        self._next = Step(0.0)
        return self.policy.step(now)

    def partial_gpus(self) -> int:
        return 0

    def partial_jobs(self) -> int:
        return 0

    def wake_at(self) -> float | None:
        return self.policy.wake_at()


def cluster_queue(spec: QueueSpec) -> JSON:
    [group] = spec.groups
    [flavor] = group.flavors
    return {
        "apiVersion": names.API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": spec.name},
        "spec": {
            "cohort": spec.cohort,
            "preemption": {
                "reclaimWithinCohort": spec.reclaim_within_cohort,
                "minimumRuntimeSeconds": int(spec.min_runtime),
                "evictAfterSeconds": int(spec.evict_after),
            },
            "resourceGroups": [
                {
                    "coveredResources": list(group.resources),
                    "flavors": [
                        {
                            "name": flavor.flavor,
                            "resources": [
                                {"name": r, "nominalQuota": format_quantity(q.nominal)}
                                for r, q in flavor.quotas.items()
                            ],
                        }
                    ],
                }
            ],
        },
    }


def kube_node(node: Node) -> JSON:
    return {
        "metadata": {"name": node.name, "labels": dict(node.labels)},
        "status": {
            "allocatable": {r: format_quantity(v) for r, v in node.allocatable.items()},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def held_job(job: Job) -> JSON:
    """The trace job as a held Job, its pods requesting exactly the trace's pod set."""
    namespace, _, gang = job.name.partition("/")
    (pod_set,) = job.pod_sets()
    requests = {r: format_quantity(v) for r, v in pod_set.requests.items()}
    obj: JSON = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": gang.removeprefix("job-"),
            "namespace": namespace,
            "labels": {names.QUEUE_LABEL: "lq"},
        },
        "spec": {
            "parallelism": job.pods,
            "completions": job.pods,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "resources": {"requests": requests}}],
                }
            },
        },
    }
    editor = Editor(obj)
    REGISTRY.instance(JobAdapter).default(editor, Mutation("lq"))
    return editor.doc


class Controller:
    """The controller's decision path on an API server in memory, its clock set by the replay."""

    def __init__(self, policy: EnginePolicy) -> None:
        self.now = 0.0
        self.api = MemoryApi(clock=lambda: self.now)
        for runtime in policy.engine.queues.values():
            name = runtime.name
            self.api.put(kinds.CLUSTER_QUEUES, cluster_queue(runtime.state.spec))
            lq = {"metadata": {"name": "lq", "namespace": name}, "spec": {"clusterQueue": name}}
            self.api.put(kinds.LOCAL_QUEUES, lq)
        for node in NODES:
            self.api.put(kinds.NODES, kube_node(node))
        self.api.put(kinds.RESOURCE_FLAVORS, resource_flavor("default"))
        # No pods run here: the Workload's plan is where its pods are. A preempted gang is back
        # in its queue at once, as the simulator resubmits an evicted job.
        settings = Settings(pods_ready_timeout=None, core=policy.engine.config)
        self.state = ClusterState(settings, PodGroupSettings())
        self.recorder = Recorder()
        self.recorder.wrap(self.state.engine)
        self.cache = Cache(self.api, podgroup_kind=kinds.VOLCANO_PODGROUPS)
        self.reconciler = Reconciler(
            self.state,
            Writers(self.api, self.cache.informers),
            settings,
            ControllerMetrics(),
            clock=lambda: self.now,
        )
        self.cache.listen(self.reconciler.notify)

    async def replay(self, step: Step) -> None:
        self.now = step.now
        for job in step.finished:
            namespace, _, gang = job.name.partition("/")
            done = self.api.read_back(kinds.JOBS, gang.removeprefix("job-"), namespace)
            assert done is not None
            done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
            self.api.put(kinds.JOBS, done)
        for job in step.arrived:
            self.api.put(kinds.JOBS, held_job(job))
        await self.api.settle()
        await self.reconciler.reconcile_once()


@pytest.fixture(params=[False, True], ids=["holding-nodes", "backfill"])
def backfill(request: pytest.FixtureRequest) -> bool:
    chosen: bool = request.param
    return chosen


@pytest.fixture
async def controller(backfill: bool) -> AsyncIterator[Controller]:
    running = Controller(kohort(backfill))
    running.cache.start()
    await running.cache.wait_synced()
    yield running
    await running.cache.stop()


async def test_the_controller_decides_exactly_what_the_simulator_measured(
    controller: Controller, backfill: bool
) -> None:
    policy = kohort(backfill)
    simulated = Recorder()
    simulated.wrap(policy.engine)
    recording = RecordingPolicy(policy)
    simulate(trace(), recording, total_gpus=48, weights=dict.fromkeys(QUEUES, 1.0), progress=None)

    for step in recording.steps:
        await controller.replay(step)

    replayed = controller.recorder.cycles
    # The scenario exercises what the engine remembers: reclaims, every kind of wait.
    evictions = [e for _, d in simulated.cycles for e in d.evictions]
    assert any(e.cause is EvictionCause.RECLAIMED for e in evictions)
    causes = {p.cause for _, d in simulated.cycles for p in d.pending.values()}
    assert {PendingCause.QUOTA, PendingCause.NO_NODE_FITS} <= causes
    assert any(d.reservations for _, d in simulated.cycles)  # the starvation guard held nodes
    # With backfill, reservations of future capacity came from the runtimes learned meanwhile.
    assert any(r is not None for r in simulated.reservations) == backfill
    assert controller.recorder.reservations == simulated.reservations
    assert len(replayed) == len(simulated.cycles) == len(recording.steps)
    for (t_sim, sim), (t_ctl, ctl) in zip(simulated.cycles, replayed, strict=True):
        assert t_ctl == t_sim
        assert ctl.admissions == sim.admissions, f"admissions differ at t={t_sim}"
        assert ctl.evictions == sim.evictions, f"evictions differ at t={t_sim}"
        assert list(ctl.pending.items()) == list(sim.pending.items()), f"reasons at t={t_sim}"
    # Both remember the same recent usage, to the last bit: borrowing that weighed in the order.
    remembered = policy.engine.recent_usage()
    assert any(recent.share > 0 for recent in remembered.values())
    assert controller.state.engine.recent_usage() == remembered
