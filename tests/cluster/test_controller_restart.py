"""Two controller replicas as real processes: Lease leader election and restart safety.

Issue 5, scenario 8 and the leader-election point: while the leader admits a burst of 50 gangs
it is killed with SIGKILL; the standby takes over within the lease duration and finishes, the
killed one comes back. At no time does a queue hold more than its quota, and at the end every
gang is either fully released (Workload holds quota, PodGroup exists, Job unsuspended) or fully
held (no quota, no PodGroup, Job suspended), and no Workload is missing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from controller.api import kinds
from controller.cluster import clients
from controller.cluster.clients import Client
from hack.chaos.stack import ControllerReplica as Replica
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import Probe, cluster_queue, gang_job, local_queue, reserved
from tests.conftest import TestNodes
from tests.support import eventually, pod_isolation

pytestmark = pytest.mark.volcano

GANGS = 50
QUOTA_CPU = 80  # 40 gangs of 2 pods x 1 cpu fit; 10 wait
LEASE_SECONDS = 4


@pytest.fixture
async def webhook_only(cluster: LocalCluster) -> AsyncIterator[KohortStack]:
    running = await KohortStack(cluster, run_controller=False).start()
    yield running
    await running.stop()


@pytest.fixture
def replicas(
    webhook_only: KohortStack, namespace: str, tmp_path: Path
) -> Iterator[dict[str, Replica]]:
    made = {
        n: Replica(
            webhook_only.controller_kubeconfig,
            webhook_only.ident,
            namespace,
            n,
            tmp_path,
            lease_seconds=LEASE_SECONDS,
        )
        for n in ("alpha", "beta")
    }
    yield made
    for replica in made.values():
        replica.stop()


async def lease_holder(api: Client, namespace: str) -> str:
    try:
        lease = await api.get(kinds.LEASES, "kohort-controller", namespace)
    except clients.ApiError:
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


async def test_a_leader_killed_mid_burst_never_lets_a_queue_exceed_quota_nor_half_release(
    cluster: LocalCluster,
    namespace: str,
    webhook_only: KohortStack,
    replicas: dict[str, Replica],
    test_nodes: TestNodes,
    drained: None,
) -> None:
    webhook_only.enroll(namespace)
    test_nodes("worker", 6, cpu="16")
    cq = f"{namespace}-cq"
    apply_queues(
        cluster.rest,
        [cluster_queue(cq, {"cpu": str(QUOTA_CPU)}), local_queue(namespace, "burst", cq)],
    )
    api = await clients.connect(str(cluster.kubeconfig))
    team = Probe(api, namespace)
    try:
        replicas["alpha"].start()
        leader = await eventually(
            lambda: lease_holder(api, namespace),
            lambda h: h == "alpha",
            within=60,
            what="alpha holding the Lease",
        )
        replicas["beta"].start()
        await eventually(
            lambda: _get(replicas["beta"], "/readyz"),
            lambda r: r[0] == 200,
            within=60,
            what="beta's caches synced (ready as a standby)",
        )

        async def burst() -> None:
            for i in range(GANGS):
                job = gang_job(
                    f"g{i:02d}",
                    queue="burst",
                    pods=2,
                    requests={"cpu": "1"},
                    isolation=pod_isolation(namespace),
                )
                await team.create(kinds.JOBS, job)

        submitting = asyncio.create_task(burst())
        # Kill the leader at its first admission, while the burst is still arriving.
        await eventually(
            lambda: _reserved_cpu(team),
            lambda cpu: cpu > 0,
            within=60,
            interval=0.05,
            what="the first admissions",
        )
        replicas[leader].kill()
        killed_at = time.monotonic()
        at_kill = await _reserved_cpu(team)
        await submitting

        await eventually(
            lambda: lease_holder(api, namespace),
            lambda h: h == "beta",
            within=LEASE_SECONDS + 15,
            what="beta taking the Lease over",
        )
        takeover = time.monotonic() - killed_at
        replicas["alpha"].start()  # the killed replica comes back as a standby

        taken_over = time.monotonic()
        workloads = await eventually(
            lambda: _settled(team),
            lambda state: state is not None,
            within=180,
            what="all 50 gangs settled: 40 released, 10 held",
        )
        assert workloads is not None
        settled = time.monotonic() - taken_over
        status, metrics = _get_sync(replicas["beta"], "/metrics")
        print(
            f"\nkilled alpha with {at_kill} cpu reserved; beta took over after {takeover:.1f}s"
            f" (lease {LEASE_SECONDS}s); admissions by beta:"
            f" {_metric(metrics, 'kohort_admitted_workloads_total'):.0f}, all 50 settled"
            f" {settled:.1f}s after the takeover"
        )
        assert status == 200
        assert "kohort_admitted_workloads_total" in metrics
        assert takeover < LEASE_SECONDS + 10
    finally:
        await api.close()


async def _reserved_cpu(team: Probe) -> int:
    """CPU held by Workloads with quota; fails the test at once if it exceeds the quota."""
    total = 0
    for wl in await team.workloads():
        if reserved(wl):
            total += sum(ps["count"] for ps in wl["spec"]["podSets"])
    assert total <= QUOTA_CPU, f"queue over quota: {total} > {QUOTA_CPU} cpu reserved"
    return total


async def _settled(team: Probe) -> list[str] | None:
    """None until every gang is all-released or all-held and quota is used up; asserts safety."""
    workloads = {wl["metadata"]["name"]: wl for wl in await team.workloads()}
    await _reserved_cpu(team)
    if len(workloads) < GANGS:
        return None
    jobs, _ = await team.api.list(kinds.JOBS, team.namespace)
    podgroups, _ = await team.api.list(kinds.VOLCANO_PODGROUPS, team.namespace)
    groups = {pg["metadata"]["name"] for pg in podgroups}
    released = 0
    for job in jobs:
        gang = f"job-{job['metadata']['name']}"
        holds = reserved(workloads.get(gang))
        suspended = job["spec"].get("suspend") is True
        if holds != (not suspended) or holds != (gang in groups):
            return None  # half way: the controller is still converging
        released += holds
    return sorted(workloads) if released == QUOTA_CPU // 2 else None


async def _get(replica: Replica, path: str) -> tuple[int, str]:
    return await asyncio.to_thread(replica.get, path)


def _get_sync(replica: Replica, path: str) -> tuple[int, str]:
    return replica.get(path)


def _metric(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )
