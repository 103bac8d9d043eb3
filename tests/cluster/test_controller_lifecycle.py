"""A gang's life after admission: it finishes, it is deleted, or its pods never start.

- a finished Job gives its quota back and the next gang in the queue starts;
- a deleted Job takes its Workload and PodGroup with it;
- waitForPodsReady: a released gang whose pods do not all run in time is evicted whole, held
  again and requeued with backoff, and `kubectl describe job` says why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from controller.settings import Settings
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import (
    Probe,
    cluster_queue,
    condition,
    gang_job,
    local_queue,
    pending_reason,
    reserved,
)
from tests.cluster import test_e2e_gangs as shared
from tests.conftest import TestNodes
from tests.support import eventually, pod_isolation

pytestmark = pytest.mark.volcano


def cpu_job(namespace: str, name: str, pods: int, **extra: Any) -> dict[str, Any]:
    return gang_job(
        name,
        queue="work",
        pods=pods,
        requests={"cpu": "1"},
        isolation=pod_isolation(namespace),
        **extra,
    )


def queue(cluster: LocalCluster, namespace: str, cpu: str) -> str:
    name = f"{namespace}-cq"
    apply_queues(
        cluster.rest, [cluster_queue(name, {"cpu": cpu}), local_queue(namespace, "work", name)]
    )
    return name


async def test_a_finished_gang_gives_its_quota_back_to_the_next_in_line(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 1, cpu="8")
    cq = queue(cluster, namespace, cpu="2")
    team = Probe(admin, namespace)
    await team.create(kinds.JOBS, cpu_job(namespace, "first", 2, complete_after="4s"))
    await team.create(kinds.JOBS, cpu_job(namespace, "second", 2))

    waiting = await eventually(
        lambda: team.workload("job-second"),
        lambda wl: pending_reason(wl).startswith("Waiting for quota"),
        what="second gang waiting for the first one's quota",
    )
    assert not reserved(waiting)

    finished = await eventually(
        lambda: team.workload("job-first"),
        lambda wl: (condition(wl, "Finished") or {}).get("status") == "True",
        within=60,
        what="first gang Finished",
    )
    assert not reserved(finished)
    await eventually(
        lambda: team.bound("job-second"), lambda b: len(b) == 2, what="second gang running"
    )
    status = (await team.cluster_queue(cq))["status"]
    assert status["admittedWorkloads"] == 1


async def test_deleting_a_job_removes_its_workload_and_podgroup(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 1, cpu="8")
    queue(cluster, namespace, cpu="4")
    team = Probe(admin, namespace)
    await team.create(kinds.JOBS, cpu_job(namespace, "brief", 2))
    await eventually(
        lambda: team.podgroup("job-brief"), lambda pg: pg is not None, what="PodGroup created"
    )

    await admin.delete(kinds.JOBS, "brief", namespace)

    await eventually(
        lambda: _workload_and_podgroup(team, "job-brief"),
        lambda both: both == (None, None),
        within=60,
        what="Workload and PodGroup gone",
    )


async def _workload_and_podgroup(team: Probe, name: str) -> tuple[Any, Any]:
    return await team.workload(name), await team.podgroup(name)


@pytest.fixture
async def impatient(cluster: LocalCluster) -> AsyncIterator[KohortStack]:
    """A stack whose controller gives released gangs 5 seconds to start, requeueing after 2."""
    settings = Settings(pods_ready_timeout=5.0, requeue_base=2.0, resync_period=1.0)
    running = await KohortStack(cluster, settings=settings).start()
    yield running
    await running.stop()


async def test_a_gang_whose_pods_never_start_is_evicted_whole_and_requeued_with_backoff(
    impatient: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    impatient.enroll(namespace)
    test_nodes("worker", 1, cpu="8")
    queue(cluster, namespace, cpu="4")
    team = Probe(admin, namespace)
    job = cpu_job(namespace, "stuck", 2)
    job["spec"]["template"]["spec"]["schedulerName"] = "nobody-schedules-this"
    await team.create(kinds.JOBS, job)

    evicted = await eventually(
        lambda: team.workload("job-stuck"),
        lambda wl: (condition(wl, "Evicted") or {}).get("reason") == "PodsReadyTimeout",
        within=60,
        what="Workload evicted for PodsReadyTimeout",
    )
    assert "of 2 pods running" in (condition(evicted, "Evicted") or {}).get("message", "")
    requeued = await eventually(
        lambda: team.workload("job-stuck"),
        lambda wl: (
            int(((wl or {}).get("status") or {}).get("requeueState", {}).get("count", 0)) >= 2
        ),
        within=90,
        what="a second eviction after the backoff",
    )
    assert requeued is not None
    events = await team.event_messages("Job", "stuck")
    assert any(e.startswith("PodsReadyTimeout: Evicted") for e in events), events
    assert any(e.startswith("Admitted:") for e in events), events

    assert "PodsReadyTimeout" in await shared.describe_job(cluster, namespace, "stuck")
