"""One seeded fault run on the local control plane, and the table of many.

A run makes its own namespace, nodes and two cohorts of two ClusterQueues under one parent
Cohort (the second may take at most 2 CPUs from it), submits a burst of
gangs of every kind (Jobs, StatefulSets, LeaderWorkerSets run by the real LWS controller, plain
pod groups) in random order, injects one fault at
a random moment while admissions, evictions and releases are in flight, samples the cluster
all the time through `invariants.Checker`, and waits until every gang has run to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import enum
import json
import random
import signal
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.api import kinds, names
from controller.cluster import clients
from controller.cluster.clients import ApiError, Client, JSONDict
from controller.workloads.edits import lookup
from hack.chaos.invariants import Checker, Snapshot, finished, holds_quota
from hack.chaos.stack import ProcessStack
from hack.demo import apply_queues
from hack.localcluster import LocalCluster, NodePool, Taint
from hack.objects import (
    cluster_queue,
    cohort,
    gang_job,
    gang_leader_worker_set,
    gang_statefulset,
    local_queue,
    pod_template,
)
from hack.tables import format_table

NODE_KEY = "kohort.dev/chaos-run"
CPU_PER_QUEUE = 6
NODES, CPU_PER_NODE = 6, 4  # as much CPU as the four queues' nominal quota
QUEUES = ("a1", "a2", "b1", "b2")  # a1, a2 in cohort x; b1, b2 in cohort y; both in "org"
# Cohort y may take at most this much CPU from org: a limit one level above the queues.
Y_BORROWING_LIMIT = "2"
BORROWERS = ("a2", "b2")
SAMPLE_EVERY = 0.25
# A write under way shows as a problem for an instant; through a fault it lasts as long as the
# fault plus a takeover. Longer than this, it is a violation.
GRACE_SECONDS = 30.0


class Fault(enum.StrEnum):
    LEADER_KILL = "leader-kill"
    LEADER_PAUSE = "leader-pause"
    APISERVER_RESTART = "apiserver-restart"
    ETCD_RESTART = "etcd-restart"
    WATCH_EXPIRED = "watch-expired"
    WEBHOOK_KILL = "webhook-kill"


@dataclass(frozen=True)
class GangPlan:
    kind: str  # "job", "sts", "lws", "pods"
    name: str
    queue: str
    pods: int  # per gang
    runtime: float
    submit_at: float
    # Gangs of one plan: a LeaderWorkerSet's groups; one for every other kind.
    groups: int = 1

    @property
    def gangs(self) -> list[str]:
        if self.kind == "lws":
            return [f"lws-{self.name}-{i}" for i in range(self.groups)]
        return [{"job": f"job-{self.name}", "sts": f"sts-{self.name}"}.get(self.kind, self.name)]

    @property
    def deleted_by_user(self) -> bool:
        """Whether its user deletes it once its pods have run (it never finishes by itself)."""
        return self.kind in ("sts", "lws")


def plan_burst(rng: random.Random, gangs: int, seconds: float) -> list[GangPlan]:
    """The first third of the burst goes to a2 and b2 only: small gangs running longer, which
    borrow all they can from a1 and b1; the rest to any queue, so lenders come back and reclaim
    from them while gangs arrive."""
    plans = []
    for i in range(gangs):
        kind = rng.choices(["job", "sts", "lws", "pods"], weights=[5, 2, 2, 2])[0]
        at = rng.uniform(0, seconds)
        early = at < seconds / 3
        pods = rng.randint(1, 2) if early else rng.randint(1, 4)
        plans.append(
            GangPlan(
                kind,
                f"{kind}-{i:02d}",
                rng.choice(BORROWERS if early else QUEUES),
                pods,
                round(rng.uniform(8, 12) if early else rng.uniform(2, 5), 1),
                at,
                groups=rng.randint(1, 2) if kind == "lws" and pods <= 2 else 1,
            )
        )
    return sorted(plans, key=lambda p: p.submit_at)


@dataclass
class RunResult:
    seed: int
    fault: Fault
    gangs: int
    finished: int = 0
    violations: list[str] = field(default_factory=list)
    fault_at: float | None = None
    recovered_after: float | None = None
    seconds: float = 0.0
    refused_creates: int = 0
    admissions: int = 0
    remade_pods: int = 0  # pods of evicted plain pod groups their owner made again
    evictions: int = 0
    relists: int = 0
    lease_takeover: float | None = None
    writes_after_lease_loss: int = 0
    # Writes the paused leader made before it lost the Lease, as the audit log shows them: the
    # proof that the log names the replica at all.
    writes_before_lease_loss: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations and self.finished == self.gangs


class Run:
    def __init__(
        self,
        cluster: LocalCluster,
        stack: ProcessStack,
        api: Client,
        seed: int,
        fault: Fault,
        *,
        gangs: int = 24,
        burst_seconds: float = 6.0,
        deadline: float = 180.0,
    ) -> None:
        self.cluster, self.stack, self.api = cluster, stack, api
        self.seed, self.fault = seed, fault
        self.rng = random.Random(seed)
        self.namespace = f"chaos-{seed}-{fault.value}"[:63]
        self.queues = [f"{self.namespace}-{q}" for q in QUEUES]
        self.cohorts = [f"{self.namespace}-{c}" for c in ("org", "x", "y")]
        self.plans = plan_burst(self.rng, gangs, burst_seconds)
        self.fault_delay = self.rng.uniform(0.5, burst_seconds)
        self.deadline = deadline
        self.result = RunResult(seed, fault, gangs)
        self.checker = Checker(GRACE_SECONDS)
        self.nodes: list[str] = []
        self.started = 0.0
        self.fault_done = asyncio.Event()
        self._reserved: set[str] = set()
        self._admitted_after_fault = False
        self._running_since: dict[str, float] = {}
        self._deleted: set[str] = set()
        self._last = Snapshot()
        self._submitted: set[str] = set()
        self._making: set[str] = set()  # pods of evicted plain groups being made again
        self._tasks: list[asyncio.Task[None]] = []
        self.fault_errors: list[str] = []

    # ---- set-up and clean-up ---------------------------------------------------------------

    async def _setup(self) -> None:
        rest = self.cluster.rest
        rest.apply(f"/api/v1/namespaces/{self.namespace}", _namespace(self.namespace))
        self.stack.enroll(self.namespace)
        pool = NodePool(
            self.namespace[:40],
            NODES,
            cpu=str(CPU_PER_NODE),
            labels={NODE_KEY: self.namespace},
            taints=(Taint(NODE_KEY, self.namespace),),
        )
        self.nodes = await asyncio.to_thread(self.cluster.add_nodes, pool)
        org, x, y = self.cohorts
        for tree_node in (
            cohort(org),
            cohort(x, parent=org),
            cohort(y, parent=org, borrowing_limits={"cpu": Y_BORROWING_LIMIT}),
        ):
            await asyncio.to_thread(
                rest.create, f"/apis/{names.API_VERSION}/cohorts", tree_node, exist_ok=True
            )
        objects: list[JSONDict] = []
        for queue, member_of in zip(self.queues, ("x", "x", "y", "y"), strict=True):
            objects.append(
                cluster_queue(
                    queue,
                    {"cpu": str(CPU_PER_QUEUE)},
                    cohort=f"{self.namespace}-{member_of}",
                    borrowing_limits={"cpu": str(CPU_PER_QUEUE)},
                    reclaim="Any",
                )
            )
            objects.append(local_queue(self.namespace, queue.rsplit("-", 1)[1], queue))
        apply_queues(rest, objects)

    async def _cleanup(self) -> None:
        api, ns = self.api, self.namespace
        for kind in (kinds.JOBS, kinds.LEADERWORKERSETS, kinds.STATEFULSETS):
            with contextlib.suppress(ApiError):
                items, _ = await api.list(kind, ns)
                for obj in items:
                    await api.delete(kind, obj["metadata"]["name"], ns)
        with contextlib.suppress(ApiError):
            pods, _ = await api.list(kinds.PODS, ns)
            for pod in pods:
                await api.delete(kinds.PODS, pod["metadata"]["name"], ns)
        for queue in self.queues:
            with contextlib.suppress(ApiError):
                await api.delete(kinds.CLUSTER_QUEUES, queue)
        for name in reversed(self.cohorts):
            with contextlib.suppress(ApiError):
                await api.delete(kinds.COHORTS, name)
        await asyncio.to_thread(self.cluster.remove_nodes, self.nodes)
        with contextlib.suppress(ApiError):
            await api.delete(kinds.NAMESPACES, ns)

    # ---- the run ---------------------------------------------------------------------------

    async def run(self) -> RunResult:
        await self._setup()
        audit_offset = _size(self.cluster.audit_log_path)
        log_offsets = {r.name: _size(r.log_path) for r in self.stack.controllers}
        self.started = time.monotonic()
        submit = asyncio.create_task(self._submit_all())
        inject = asyncio.create_task(self._inject())
        try:
            done = False
            while not done:
                done = await self._sample()
                if time.monotonic() - self.started > self.deadline:
                    break
                await asyncio.sleep(SAMPLE_EVERY)
            for task in (submit, inject):
                if time.monotonic() - self.started > self.deadline:
                    task.cancel()
                # Waited for, not awaited inside suppress(CancelledError): that would also
                # swallow a cancellation of this run itself.
                await asyncio.wait({task})
                if not task.cancelled():
                    task.result()
        finally:
            for task in (submit, inject, *self._tasks):
                task.cancel()
            self.result.seconds = time.monotonic() - self.started
            self.result.violations += [str(v) for v in self.checker.violations]
            self.result.violations += self.fault_errors
            self.result.relists = sum(
                _count(r.log_path, log_offsets[r.name], "expired, relisting")
                for r in self.stack.controllers
            )
            if self.fault is Fault.LEADER_PAUSE:
                self._audit_paused_leader(audit_offset)
            self._report_unfinished()
            await self._cleanup()
        return self.result

    async def _submit_all(self) -> None:
        for plan in self.plans:
            wait = plan.submit_at - (time.monotonic() - self.started)
            if wait > 0:
                await asyncio.sleep(wait)
            for obj in self._objects(plan):
                await self._create(kinds.PODS if plan.kind == "pods" else _kind(plan), obj)
            self._submitted.add(plan.name)

    def _objects(self, plan: GangPlan) -> list[JSONDict]:
        isolation = _isolation(self.namespace)
        runtime = f"{plan.runtime}s"
        if plan.kind == "job":
            job = gang_job(
                plan.name,
                queue=plan.queue,
                pods=plan.pods,
                requests={"cpu": "1"},
                isolation=isolation,
                complete_after=runtime,
            )
            return [job]
        if plan.kind == "lws":
            lws = gang_leader_worker_set(
                plan.name,
                queue=plan.queue,
                replicas=plan.groups,
                size=plan.pods,
                requests={"cpu": "1"},
                isolation=isolation,
            )
            return [lws]
        if plan.kind == "sts":
            sts = gang_statefulset(
                plan.name,
                queue=plan.queue,
                replicas=plan.pods,
                requests={"cpu": "1"},
                isolation=isolation,
            )
            return [sts]
        pods = []
        for i in range(plan.pods):
            template = pod_template(
                {"cpu": "1"},
                isolation=isolation,
                complete_after=runtime,
                labels={
                    names.QUEUE_LABEL: plan.queue,
                    names.POD_GROUP_LABEL: plan.name,
                    names.POD_GROUP_TOTAL_COUNT_LABEL: str(plan.pods),
                },
            )
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"{plan.name}-{i}", **template["metadata"]},
                    "spec": template["spec"],
                }
            )
        return pods

    async def _create(self, kind: kinds.Kind, obj: JSONDict) -> None:
        """Create, as a user's script would: retry while the API server is away or a webhook
        cannot be called; any other refusal is a violation (the burst asks for nothing wrong)."""
        while True:
            try:
                await self.api.create(kind, obj, self.namespace)
                return
            except ApiError as err:
                if err.status == 409:
                    return  # made by an earlier try whose answer was lost
                if err.status not in (0, 429) and err.status < 500:
                    name = obj["metadata"]["name"]
                    self.result.violations.append(f"{kind.kind} {name} refused: {err}")
                    return
                self.result.refused_creates += 1
                await asyncio.sleep(0.5)

    async def _sample(self) -> bool:
        """Check the invariants on one snapshot; True once every gang has run to its end."""
        try:
            snapshot = await self._snapshot()
        except (ApiError, OSError, TimeoutError):
            return False  # the API server is down: nothing to judge
        at = time.monotonic()
        self.checker.observe(snapshot, at)
        self._last = snapshot
        reserved = {wl["metadata"]["name"] for wl in snapshot.workloads if holds_quota(wl)}
        if self.result.fault_at is not None and reserved - self._reserved:
            self._admitted_after_fault = True
        self.result.admissions += len(reserved - self._reserved)
        self._reserved = reserved
        self.result.evictions = max(
            self.result.evictions,
            sum(
                int(lookup(wl, ["status", "requeueState", "count"]) or 0)
                for wl in snapshot.workloads
            ),
        )
        if (
            self.result.fault_at is not None
            and self.result.recovered_after is None
            and self.fault_done.is_set()
            and not self.checker.last_problems
            and (self._admitted_after_fault or not _waiting(snapshot))
        ):
            self.result.recovered_after = at - (self.started + self.result.fault_at)
        await self._finish_long_running(snapshot, at)
        self._remake_evicted_pod_groups(snapshot)
        done = self._finished(snapshot)
        self.result.finished = len(done)
        return len(done) == len(self.plans) and self.fault_done.is_set()

    async def _snapshot(self) -> Snapshot:
        api, ns = self.api, self.namespace
        jobs, _ = await api.list(kinds.JOBS, ns)
        statefulsets, _ = await api.list(kinds.STATEFULSETS, ns)
        leader_worker_sets, _ = await api.list(kinds.LEADERWORKERSETS, ns)
        pods, _ = await api.list(kinds.PODS, ns)
        podgroups, _ = await api.list(kinds.VOLCANO_PODGROUPS, ns)
        workloads, _ = await api.list(kinds.WORKLOADS, ns)
        queues = [await api.get(kinds.CLUSTER_QUEUES, q) for q in self.queues]
        cohorts = [await api.get(kinds.COHORTS, c) for c in self.cohorts]
        return Snapshot(
            queues, workloads, jobs, statefulsets, pods, podgroups, cohorts, leader_worker_sets
        )

    async def _finish_long_running(self, snapshot: Snapshot, at: float) -> None:
        """A StatefulSet's or LeaderWorkerSet's user deletes it once all its pods have run for
        its runtime."""
        existing = {
            **{("sts", _name(s)): s for s in snapshot.statefulsets},
            **{("lws", _name(s)): s for s in snapshot.leader_worker_sets},
        }
        for plan in self.plans:
            if not plan.deleted_by_user or plan.name in self._deleted:
                continue
            if (plan.kind, plan.name) not in existing:
                continue
            gangs = set(plan.gangs)
            running = [
                p
                for p in snapshot.pods
                if lookup(p, ["metadata", "labels", names.POD_GROUP_LABEL]) in gangs
                and (p.get("status") or {}).get("phase") == "Running"
                and not lookup(p, ["metadata", "deletionTimestamp"])
            ]
            if len(running) < plan.pods * plan.groups:
                self._running_since.pop(plan.name, None)
                continue
            since = self._running_since.setdefault(plan.name, at)
            if at - since >= plan.runtime:
                kind = kinds.STATEFULSETS if plan.kind == "sts" else kinds.LEADERWORKERSETS
                with contextlib.suppress(ApiError):
                    await self.api.delete(kind, plan.name, self.namespace)
                self._deleted.add(plan.name)

    def _remake_evicted_pod_groups(self, snapshot: Snapshot) -> None:
        """A plain pod group's owner makes its pods again once an eviction deleted them (kohort
        says so in the eviction's Event); they rejoin the group's Workload."""
        workloads = {wl["metadata"]["name"]: wl for wl in snapshot.workloads}
        existing = {p["metadata"]["name"] for p in snapshot.pods}
        for plan in self.plans:
            wl = workloads.get(plan.gangs[0])
            if plan.kind != "pods" or plan.name not in self._submitted or wl is None:
                continue
            evictions = int(lookup(wl, ["status", "requeueState", "count"]) or 0)
            if holds_quota(wl) or finished(wl) or not evictions:
                continue
            for obj in self._objects(plan):
                name = obj["metadata"]["name"]
                if name not in existing and name not in self._making:
                    self._making.add(name)
                    self.result.remade_pods += 1
                    self._tasks.append(asyncio.create_task(self._make(obj)))

    async def _make(self, pod: JSONDict) -> None:
        try:
            await self._create(kinds.PODS, pod)
        finally:
            self._making.discard(pod["metadata"]["name"])

    def _finished(self, snapshot: Snapshot) -> set[str]:
        workloads = {wl["metadata"]["name"]: wl for wl in snapshot.workloads}
        existing = {("sts", _name(s)) for s in snapshot.statefulsets}
        existing |= {("lws", _name(s)) for s in snapshot.leader_worker_sets}
        done = set()
        for plan in self.plans:
            if plan.deleted_by_user:
                if plan.name in self._deleted and (plan.kind, plan.name) not in existing:
                    done.add(plan.name)
            elif finished(workloads.get(plan.gangs[0])):
                done.add(plan.name)
        return done

    def _report_unfinished(self) -> None:
        if self.result.finished == len(self.plans):
            return
        done = self._finished(self._last)
        waiting = [self._describe(p) for p in self.plans if p.name not in done]
        self.result.violations.append(
            f"only {self.result.finished} of {len(self.plans)} gangs ran to their end within"
            f" {self.deadline:.0f}s; left: {'; '.join(waiting)}"
        )

    def _describe(self, plan: GangPlan) -> str:
        """Where an unfinished gang stands, from the last snapshot."""
        return "; ".join(self._describe_gang(plan.kind, gang) for gang in plan.gangs)

    def _describe_gang(self, kind: str, gang: str) -> str:
        last = self._last
        wl = next((w for w in last.workloads if w["metadata"]["name"] == gang), None)
        state = "no Workload"
        if wl is not None:
            state = "holds quota" if holds_quota(wl) else "no quota"
            reason = lookup(wl, ["status", "pendingReason"])
            state += f" ({reason})" if reason else ""
        pods = [
            p for p in last.pods if lookup(p, ["metadata", "labels", names.POD_GROUP_LABEL]) == gang
        ]
        phases = ",".join(sorted(str(lookup(p, ["status", "phase"])) for p in pods)) or "none"
        return f"{kind} {gang}: {state}, pods {phases}"

    # ---- faults ----------------------------------------------------------------------------

    async def _inject(self) -> None:
        await asyncio.sleep(self.fault_delay)
        self.result.fault_at = time.monotonic() - self.started
        try:
            await FAULTS[self.fault](self)
        except Exception as err:  # the fault itself went wrong: the run says so
            self.fault_errors.append(f"{self.fault.value} failed: {type(err).__name__}: {err}")
        finally:
            self.fault_done.set()

    async def leader(self) -> str:
        try:
            lease = await self.api.get(
                kinds.LEASES, self.stack.lease_name, self.stack.lease_namespace
            )
        except ApiError:
            return ""
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    async def _wait_for_leader(self, other_than: str, within: float = 60.0) -> str:
        start = time.monotonic()
        while time.monotonic() - start < within:
            holder = await self.leader()
            if holder and holder != other_than:
                return holder
            await asyncio.sleep(0.1)
        raise RuntimeError(f"no replica took the Lease (over from {other_than or 'nobody'})")

    async def kill_leader(self) -> None:
        leader = await self._wait_for_leader(other_than="")
        replica = self.stack.replica(leader)
        replica.kill()
        killed = time.monotonic()
        try:
            await self._wait_for_leader(other_than=leader)
            self.result.lease_takeover = time.monotonic() - killed
        finally:
            replica.start()  # back as a standby

    async def pause_leader(self) -> None:
        leader = await self._wait_for_leader(other_than="")
        replica = self.stack.replica(leader)
        replica.signal(signal.SIGSTOP)
        paused = time.monotonic()
        try:
            await self._wait_for_leader(other_than=leader)
            self.result.lease_takeover = time.monotonic() - paused
            self._paused = (leader, await self._lease_acquired())
            await asyncio.sleep(2.0)  # the new leader admits and releases meanwhile
        finally:
            replica.signal(signal.SIGCONT)

    async def _lease_acquired(self) -> str:
        lease = await self.api.get(kinds.LEASES, self.stack.lease_name, self.stack.lease_namespace)
        return str(lease["spec"].get("acquireTime") or "")

    async def restart_apiserver(self) -> None:
        downtime = self.rng.uniform(0, 2)
        await asyncio.to_thread(self.cluster.restart, "kube-apiserver", downtime=downtime)

    async def restart_etcd(self) -> None:
        downtime = self.rng.uniform(0, 2)
        await asyncio.to_thread(self.cluster.restart, "etcd", downtime=downtime)

    async def expire_watches(self) -> None:
        """Move etcd's revision past what the watches saw, compact it, and cut every watch by
        restarting the API server: they resume from compacted versions and get 410 Gone."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/chaos-tick"
        for i in range(5):
            tick = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"i": str(i)}}
            await asyncio.to_thread(
                self.cluster.rest.apply, path, {**tick, "metadata": {"name": "chaos-tick"}}
            )
        await asyncio.to_thread(self.cluster.compact_etcd)
        await asyncio.to_thread(self.cluster.restart, "kube-apiserver")

    async def kill_webhooks(self) -> None:
        self.stack.kill_webhooks()
        await asyncio.sleep(self.rng.uniform(2, 5))
        await asyncio.to_thread(self.stack.start_webhooks)

    def _audit_paused_leader(self, offset: int) -> None:
        paused = getattr(self, "_paused", None)
        if paused is None:
            return
        leader, acquired = paused
        lost = _parse_time(acquired)
        agent = self.stack.replica(leader).user_agent
        writes = []
        for entry in _audit_entries(self.cluster.audit_log_path, offset):
            if entry.get("userAgent") != agent:
                continue
            received = _parse_time(str(entry.get("requestReceivedTimestamp") or ""))
            if received is None or lost is None or received <= lost:
                self.result.writes_before_lease_loss += 1
                continue
            ref = entry.get("objectRef") or {}
            code = int((entry.get("responseStatus") or {}).get("code") or 0)
            if ref.get("resource") == "leases":
                if code < 400:
                    break  # it won the Lease again (the other replica let it lapse): its right
                continue  # a refused attempt at the Lease is how it learns it lost
            writes.append(f"{entry.get('verb')} {ref.get('resource')}/{ref.get('name')} ({code})")
        self.result.writes_after_lease_loss = len(writes)
        if writes:
            self.result.violations.append(
                f"{leader} wrote after losing the Lease: {', '.join(writes[:5])}"
            )


FAULTS: dict[Fault, Callable[[Run], Awaitable[None]]] = {
    Fault.LEADER_KILL: Run.kill_leader,
    Fault.LEADER_PAUSE: Run.pause_leader,
    Fault.APISERVER_RESTART: Run.restart_apiserver,
    Fault.ETCD_RESTART: Run.restart_etcd,
    Fault.WATCH_EXPIRED: Run.expire_watches,
    Fault.WEBHOOK_KILL: Run.kill_webhooks,
}


def _kind(plan: GangPlan) -> kinds.Kind:
    return {"job": kinds.JOBS, "sts": kinds.STATEFULSETS, "lws": kinds.LEADERWORKERSETS}[plan.kind]


def _name(obj: JSONDict) -> str:
    return str(obj["metadata"]["name"])


def _namespace(name: str) -> JSONDict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _isolation(namespace: str) -> dict[str, Any]:
    return {
        "nodeSelector": {NODE_KEY: namespace},
        "tolerations": [
            {"key": NODE_KEY, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}
        ],
    }


def _waiting(snapshot: Snapshot) -> bool:
    return any(not holds_quota(wl) and not finished(wl) for wl in snapshot.workloads)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _count(path: Path, offset: int, needle: str) -> int:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace").count(needle)
    except OSError:
        return 0


def _audit_entries(path: Path, offset: int) -> list[dict[str, Any]]:
    entries = []
    try:
        with path.open("rb") as f:
            f.seek(offset)
            for line in f:
                with contextlib.suppress(ValueError):
                    entries.append(json.loads(line))
    except OSError:
        pass
    return entries


def _parse_time(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


# ---- the table ------------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary_table(results: list[RunResult]) -> str:
    rows = []
    for fault in Fault:
        runs = [r for r in results if r.fault is fault]
        if not runs:
            continue
        recovery = [r.recovered_after for r in runs if r.recovered_after is not None]
        takeover = [r.lease_takeover for r in runs if r.lease_takeover is not None]
        rows.append(
            [
                fault.value,
                str(len(runs)),
                str(sum(len(r.violations) for r in runs)),
                f"{sum(r.finished for r in runs)}/{sum(r.gangs for r in runs)}",
                str(sum(r.evictions for r in runs)),
                str(sum(r.remade_pods for r in runs)),
                f"{_percentile(recovery, 0.5):.1f}" if recovery else "-",
                f"{_percentile(recovery, 0.95):.1f}" if recovery else "-",
                f"{statistics.median(takeover):.1f}" if takeover else "-",
                str(sum(r.refused_creates for r in runs)),
                str(sum(r.relists for r in runs)),
            ]
        )
    headers = [
        "FAULT",
        "RUNS",
        "VIOLATIONS",
        "GANGS FINISHED",
        "EVICTIONS",
        "PODS MADE AGAIN",
        "RECOVERY P50 S",
        "RECOVERY P95 S",
        "TAKEOVER P50 S",
        "REFUSED CREATES",
        "410 RELISTS",
    ]
    return format_table(headers, rows)


async def run_many(
    cluster: LocalCluster,
    stack: ProcessStack,
    schedule: list[tuple[int, Fault]],
    *,
    gangs: int = 24,
    on_result: Callable[[RunResult], None] | None = None,
    time_limit: float | None = None,
) -> list[RunResult]:
    """The runs of `schedule` (seed, fault) one after another, until `time_limit` seconds."""
    api = await clients.connect(str(cluster.kubeconfig))
    results: list[RunResult] = []
    start = time.monotonic()
    try:
        for seed, fault in schedule:
            if time_limit is not None and time.monotonic() - start > time_limit:
                break
            result = await Run(cluster, stack, api, seed, fault, gangs=gangs).run()
            results.append(result)
            if on_result is not None:
                on_result(result)
    finally:
        await api.close()
    return results
