"""A release that keeps failing, on the real control plane (issue 33: a Job was admitted, held
its quota and stayed suspended for good while its PodGroup's creation failed with HTTP 404, and
nothing said so). The controller runs with the coscheduling backend on a control plane that
serves no such PodGroups, as if the backend went away after the controller started (at start it
refuses such a cluster: tests/cluster/test_gang_backend_discovery.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Backend
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import (
    Probe,
    cluster_queue,
    condition,
    gang_job,
    local_queue,
    pending_reason,
    usage,
)
from tests.cluster.conftest import SETTINGS
from tests.conftest import TestNodes
from tests.support import GangSetup, eventually, pod_isolation

RELEASE_TIMEOUT = 8.0


@pytest.fixture(scope="module")
def gang_setup() -> GangSetup:
    """The control plane of kube-scheduler's gang scheduling: no Volcano, no coscheduling."""
    return GangSetup(Backend.KUBERNETES, "v1alpha1")


@pytest.fixture(scope="module")
async def stack(cluster: LocalCluster) -> AsyncIterator[KohortStack]:
    settings = replace(SETTINGS, release_timeout=RELEASE_TIMEOUT, pods_ready_timeout=None)
    podgroups = PodGroupSettings(Backend.COSCHEDULING)
    running = KohortStack(cluster, settings=settings, podgroups=podgroups, run_controller=False)
    await running.start()
    await running.start_controller(discover=False)
    yield running
    await running.stop()


def _cpu_used(cq: dict[str, Any]) -> str | None:
    return usage(cq, "cpu")


async def test_a_release_that_keeps_failing_is_visible_and_gives_the_quota_back_after_a_bound(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("cpu", 1, cpu="8")
    queue = f"{namespace}-q"
    apply_queues(
        cluster.rest,
        [cluster_queue(queue, {"cpu": "4"}), local_queue(namespace, "team", queue)],
    )
    team = Probe(admin, namespace)
    job = gang_job(
        "train", queue="team", pods=2, requests={"cpu": "1"}, isolation=pod_isolation(namespace)
    )
    await team.create(kinds.JOBS, job)

    told = await eventually(
        lambda: team.workload("job-train"),
        lambda wl: pending_reason(wl).startswith("Admitted but not released:"),
        what="the admitted Workload saying why it is not released",
    )
    assert (condition(told, "QuotaReserved") or {}).get("status") == "True"
    assert pending_reason(told).startswith(
        "Admitted but not released: creating its PodGroup job-train"
        " (scheduling.x-k8s.io/v1alpha1) failed: HTTP 404: "
    ), pending_reason(told)
    events = await team.events("Job", "train")
    assert any(e["reason"] == "ReleaseFailed" and e["type"] == "Warning" for e in events)
    held = await admin.get(kinds.JOBS, "train", namespace)
    assert held["spec"]["suspend"] is True

    evicted = await eventually(
        lambda: team.workload("job-train"),
        lambda wl: (condition(wl, "Evicted") or {}).get("status") == "True",
        within=RELEASE_TIMEOUT + 30,
        what="the gang evicted once its release failed for --release-timeout",
    )
    assert (condition(evicted, "Evicted") or {}).get("reason") == "ReleaseFailed"
    assert "its release kept failing for" in pending_reason(evicted)
    assert evicted["status"]["requeueState"]["releaseFailures"] == 1
    await eventually(
        lambda: team.cluster_queue(queue),
        lambda cq: _cpu_used(cq) == "0",
        within=10,
        what="its quota given back while it waits out its backoff",
    )
