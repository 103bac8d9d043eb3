"""A `pods` quota on the real control plane (issue 33: it was accepted and never counted): a
ClusterQueue of 7 pods admits one 5-pod Job and holds the second, saying pods are short, and its
status shows the 5 pods in use."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import (
    Probe,
    cluster_queue,
    gang_job,
    local_queue,
    pending_reason,
    reserved,
    usage,
)
from tests.conftest import TestNodes
from tests.support import eventually, holds_for, pod_isolation

pytestmark = pytest.mark.volcano


def _pods_used(cq: dict[str, Any]) -> str | None:
    return usage(cq, "pods")


async def test_a_pods_quota_limits_admissions(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("cpu", 2, cpu="16")
    queue = f"{namespace}-pods"
    apply_queues(
        cluster.rest,
        [
            cluster_queue(queue, {"cpu": "32", "pods": "7"}),
            local_queue(namespace, "team", queue),
        ],
    )
    team = Probe(admin, namespace)
    for name in ("first", "second"):
        job = gang_job(
            name, queue="team", pods=5, requests={"cpu": "1"}, isolation=pod_isolation(namespace)
        )
        await team.create(kinds.JOBS, job)

    await eventually(
        lambda: team.bound("job-first"),
        lambda bound: len(bound) == 5,
        within=90,
        what="the first 5-pod Job admitted and its pods bound",
    )
    waiting = await eventually(
        lambda: team.workload("job-second"),
        lambda wl: "pods" in pending_reason(wl),
        what="the second Job waiting for pods quota",
    )
    assert not reserved(waiting)
    assert "needs 5 pods, queue can take 2 more (nominal 7" in pending_reason(waiting)
    await eventually(
        lambda: team.cluster_queue(queue),
        lambda cq: _pods_used(cq) == "5",
        what="the ClusterQueue's status showing 5 pods used",
    )
    await holds_for(
        lambda: team.bound("job-second"),
        lambda bound: not bound,
        duration=5,
        what="the second Job held whole",
    )
