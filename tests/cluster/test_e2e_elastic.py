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
from hack.objects import (
    Probe,
    cluster_queue,
    condition,
    gang_job,
    local_queue,
    pending_reason,
    reserved,
)
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


@pytest.mark.usefixtures("drained")
async def test_a_job_scaled_down_frees_its_quota_in_the_next_pass_and_keeps_its_other_pods(
    stack: KohortStack, cluster: LocalCluster, namespace: str, admin: Client, test_nodes: TestNodes
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    apply_queues(
        cluster.rest,
        [
            cluster_queue(f"{namespace}-cq", {"cpu": "4"}),
            local_queue(namespace, "team", f"{namespace}-cq"),
        ],
    )
    team = Probe(admin, namespace)
    isolation = pod_isolation(namespace)
    first = gang_job("first", queue="team", pods=4, requests={"cpu": "1"}, isolation=isolation)
    await team.create(kinds.JOBS, first)
    before = await eventually(
        lambda: team.bound("job-first"),
        lambda pods: len(pods) == 4,
        within=90,
        what="the first Job's 4 pods bound",
    )
    after = gang_job("next", queue="team", pods=2, requests={"cpu": "1"}, isolation=isolation)
    await team.create(kinds.JOBS, after)
    await eventually(
        lambda: team.workload("job-next"),
        lambda wl: wl is not None and "quota" in pending_reason(wl).lower(),
        within=60,
        what="the next Job waiting for quota",
    )
    await admin.patch(kinds.JOBS, "first", {"spec": {"parallelism": 2}}, namespace)

    await eventually(
        lambda: team.bound("job-next"),
        lambda pods: len(pods) == 2,
        within=90,
        what="the next Job bound on the quota the first gave back",
    )
    kept = await eventually(
        lambda: team.bound("job-first"),
        lambda pods: len(pods) == 2,
        within=60,
        what="the first Job down to 2 pods",
    )
    assert set(kept) <= set(before), "the pods it keeps are the ones that ran"
    wl = await team.workload("job-first")
    assert wl is not None and reserved(wl)
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 2
    evicted = condition(wl, "Evicted")
    assert evicted is None or evicted["status"] == "False"
    group = await team.podgroup("job-first", kinds.VOLCANO_PODGROUPS)
    assert group is not None and group["spec"]["minMember"] == 2
