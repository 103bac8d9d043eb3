"""Elastic Jobs on the real control plane (issue 38): a Job that declares a minimum starts with
the most pods its queue has room for, as one gang of that size, and the Job controller makes
no more of its pods than that."""

from __future__ import annotations

import asyncio

import pytest

from controller.api import kinds, names
from controller.cluster.clients import Client
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import Probe, cluster_queue, condition, gang_job, local_queue, reserved
from tests.conftest import TestNodes
from tests.support import eventually, pod_isolation

pytestmark = pytest.mark.volcano


@pytest.mark.usefixtures("drained")
async def test_a_job_of_8_with_a_minimum_of_4_on_a_queue_with_room_for_6_runs_6_at_once(
    stack: KohortStack, cluster: LocalCluster, namespace: str, admin: Client, test_nodes: TestNodes
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    apply_queues(
        cluster.rest,
        [
            cluster_queue(f"{namespace}-cq", {"cpu": "6"}),
            local_queue(namespace, "team", f"{namespace}-cq"),
        ],
    )
    job = gang_job(
        "train", queue="team", pods=8, requests={"cpu": "1"}, isolation=pod_isolation(namespace)
    )
    job["metadata"]["annotations"] = {names.MIN_PARALLELISM_ANNOTATION: "4"}
    team = Probe(admin, namespace)
    await team.create(kinds.JOBS, job)

    bound = await eventually(
        lambda: team.bound("job-train"),
        lambda pods: len(pods) == 6,
        within=90,
        what="6 pods of the Job bound",
    )
    assert len(bound) == 6
    wl = await team.workload("job-train")
    assert wl is not None and reserved(wl)
    assert wl["spec"]["podSets"][0]["count"] == 8
    assert wl["spec"]["podSets"][0]["minCount"] == 4
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 6
    group = await team.podgroup("job-train", kinds.VOLCANO_PODGROUPS)
    assert group is not None and group["spec"]["minMember"] == 6
    running = await admin.get(kinds.JOBS, "train", namespace)
    assert (running["spec"]["parallelism"], running["spec"]["completions"]) == (6, 8)

    # A few passes later: still 6 pods, no more made, and kohort's own change of parallelism
    # taken for no resize.
    await asyncio.sleep(5)
    pods = await team.pods("job-train")
    assert len(pods) == 6
    assert len(await team.bound("job-train")) == 6
    wl = await team.workload("job-train")
    assert wl is not None and reserved(wl)
    evicted = condition(wl, "Evicted")
    assert evicted is None or evicted["status"] == "False"
