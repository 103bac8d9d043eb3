"""Elastic Jobs on the real control plane (issue 38): a Job that declares a minimum starts with
the most pods its queue has room for, as one gang of that size, and the Job controller makes
no more of its pods than that; a Job scaled down runs on with the pods it keeps, and gives the
rest of its quota back."""

from __future__ import annotations

import asyncio

import pytest

from controller.api import kinds, names
from controller.cluster.clients import Client, JSONDict
from hack import objects
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from tests.conftest import TestNodes
from tests.support import eventually, pod_isolation

pytestmark = pytest.mark.volcano


def team_of(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    nodes: TestNodes,
    cpu: str,
) -> objects.Probe:
    """The test's namespace in kohort's care, with a LocalQueue `team` of `cpu` CPUs of quota
    on two nodes of 8 CPUs."""
    stack.enroll(namespace)
    nodes("worker", 2, cpu="8")
    queue = f"{namespace}-cq"
    apply_queues(
        cluster.rest,
        [objects.cluster_queue(queue, {"cpu": cpu}), objects.local_queue(namespace, "team", queue)],
    )
    return objects.Probe(admin, namespace)


def cpu_job(namespace: str, name: str, pods: int) -> JSONDict:
    isolation = pod_isolation(namespace)
    return objects.gang_job(
        name, queue="team", pods=pods, requests={"cpu": "1"}, isolation=isolation
    )


MINIMUM = names.MIN_PARALLELISM_ANNOTATION


def elastic_job(namespace: str, name: str, pods: int, annotations: dict[str, str]) -> JSONDict:
    """`cpu_job` with `annotations` (its minimum, kohort's or Kueue's key)."""
    job = cpu_job(namespace, name, pods)
    job["metadata"]["annotations"] = annotations
    return job


async def bound(team: objects.Probe, gang: str, pods: int, what: str) -> list[str]:
    """The names of the gang's bound pods, once there are `pods` of them."""
    return await eventually(
        lambda: team.bound(gang), lambda p: len(p) == pods, within=90, what=what
    )


@pytest.mark.usefixtures("drained")
async def test_a_job_of_8_with_a_minimum_of_4_on_a_queue_with_room_for_6_runs_6_at_once(
    stack: KohortStack, cluster: LocalCluster, namespace: str, admin: Client, test_nodes: TestNodes
) -> None:
    team = team_of(stack, cluster, namespace, admin, test_nodes, cpu="6")
    await team.create(kinds.JOBS, elastic_job(namespace, "train", 8, {MINIMUM: "4"}))

    assert len(await bound(team, "job-train", 6, "6 pods of the Job bound")) == 6
    wl = await team.workload("job-train")
    assert wl is not None and objects.reserved(wl)
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
    assert len(await team.pods("job-train")) == 6
    assert len(await team.bound("job-train")) == 6
    wl = await team.workload("job-train")
    assert wl is not None and objects.reserved(wl)
    evicted = objects.condition(wl, "Evicted")
    assert evicted is None or evicted["status"] == "False"


@pytest.mark.usefixtures("drained")
async def test_a_job_scaled_down_frees_its_quota_in_the_next_pass_and_keeps_its_other_pods(
    stack: KohortStack, cluster: LocalCluster, namespace: str, admin: Client, test_nodes: TestNodes
) -> None:
    team = team_of(stack, cluster, namespace, admin, test_nodes, cpu="4")
    await team.create(kinds.JOBS, cpu_job(namespace, "first", 4))
    before = await bound(team, "job-first", 4, "the first Job's 4 pods bound")
    await team.create(kinds.JOBS, cpu_job(namespace, "next", 2))
    await eventually(
        lambda: team.workload("job-next"),
        lambda wl: wl is not None and "quota" in objects.pending_reason(wl).lower(),
        within=60,
        what="the next Job waiting for quota",
    )

    await admin.patch(kinds.JOBS, "first", {"spec": {"parallelism": 2}}, namespace)

    await bound(team, "job-next", 2, "the next Job bound on the quota the first gave back")
    kept = await bound(team, "job-first", 2, "the first Job down to 2 pods")
    assert set(kept) <= set(before), "the pods it keeps are the ones that ran"
    wl = await team.workload("job-first")
    assert wl is not None and objects.reserved(wl)
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 2
    evicted = objects.condition(wl, "Evicted")
    assert evicted is None or evicted["status"] == "False"
    group = await team.podgroup("job-first", kinds.VOLCANO_PODGROUPS)
    assert group is not None and group["spec"]["minMember"] == 2


@pytest.mark.usefixtures("drained")
async def test_an_indexed_job_admitted_smaller_runs_as_many_indexes_as_pods(
    stack: KohortStack, cluster: LocalCluster, namespace: str, admin: Client, test_nodes: TestNodes
) -> None:
    team = team_of(stack, cluster, namespace, admin, test_nodes, cpu="3")
    job = elastic_job(namespace, "workers", 4, {names.KUEUE_MIN_PARALLELISM_ANNOTATION: "2"})
    job["spec"]["completionMode"] = "Indexed"
    await team.create(kinds.JOBS, job)

    await bound(team, "job-workers", 3, "3 of the Indexed Job's pods bound")
    running = await admin.get(kinds.JOBS, "workers", namespace)
    assert (running["spec"]["parallelism"], running["spec"]["completions"]) == (3, 3)
    indexes = {
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        for p in await team.pods("job-workers")
    }
    assert indexes == {"0", "1", "2"}


@pytest.mark.usefixtures("drained")
async def test_a_borrowing_job_of_8_min_4_is_shrunk_to_4_when_the_lenders_job_comes(
    stack: KohortStack, cluster: LocalCluster, namespace: str, admin: Client, test_nodes: TestNodes
) -> None:
    # team (4 CPUs) borrows from lender (4 CPUs, takes back what it lent) on two 8-CPU nodes.
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    cohort = f"{namespace}-cohort"
    apply_queues(
        cluster.rest,
        [
            objects.cluster_queue(f"{namespace}-cq", {"cpu": "4"}, cohort=cohort),
            objects.cluster_queue(
                f"{namespace}-lender", {"cpu": "4"}, cohort=cohort, reclaim="Any"
            ),
            objects.local_queue(namespace, "team", f"{namespace}-cq"),
            objects.local_queue(namespace, "lender", f"{namespace}-lender"),
        ],
    )
    team = objects.Probe(admin, namespace)
    await team.create(kinds.JOBS, elastic_job(namespace, "wide", 8, {MINIMUM: "4"}))
    before = await bound(team, "job-wide", 8, "the borrowing Job's 8 pods bound")

    mine = cpu_job(namespace, "mine", 4)
    mine["metadata"]["labels"][names.QUEUE_LABEL] = "lender"
    await team.create(kinds.JOBS, mine)

    await bound(team, "job-mine", 4, "the lender's Job bound")
    kept = await bound(team, "job-wide", 4, "the borrowing Job down to 4 pods")
    assert set(kept) <= set(before), "the pods it keeps are the ones that ran"
    running = await admin.get(kinds.JOBS, "wide", namespace)
    assert (running["spec"]["suspend"], running["spec"]["parallelism"]) == (False, 4)
    wl = await team.workload("job-wide")
    assert wl is not None and objects.reserved(wl)
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 4
    shrunk = objects.condition(wl, "Shrunk")
    assert shrunk is not None and shrunk["status"] == "True"
    assert "job-mine" in shrunk["message"]
    evicted = objects.condition(wl, "Evicted")
    assert evicted is None or evicted["status"] == "False"
