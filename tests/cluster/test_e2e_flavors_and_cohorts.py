"""Resource flavors and a tree of cohorts on the real control plane (Volcano places the gangs).

- Two GPU pools with their own labels, one of them tainted, and a queue with quota on both: a
  gang lands entirely on the nodes of the flavor it was given, and the next one moves to the
  second flavor when the first flavor's quota is used.
- org -> dept1 (team-a, team-b), dept2 (team-c): team-a borrows from its sibling before its
  department borrows from dept2, and each lender gets its quota back by reclaim.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import kinds, names
from controller.cluster.clients import Client
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster, Taint
from hack.objects import (
    GPU,
    Probe,
    cohort,
    condition,
    flavored_cluster_queue,
    gang_job,
    gang_statefulset,
    local_queue,
    reserved,
    resource_flavor,
)
from tests.conftest import TestNodes
from tests.support import eventually, pod_isolation

pytestmark = pytest.mark.volcano

GPU_TYPE = "kohort.dev/gpu-type"


def flavor(name: str, gpu_type: str, *, tainted: bool = False) -> dict[str, Any]:
    """A ResourceFlavor for the nodes labelled `gpu_type`; tainted: its nodes repel pods that
    were not given its toleration."""
    if not tainted:
        return resource_flavor(name, node_labels={GPU_TYPE: gpu_type})
    return resource_flavor(
        name,
        node_labels={GPU_TYPE: gpu_type},
        node_taints=[{"key": GPU_TYPE, "value": gpu_type, "effect": "NoSchedule"}],
        tolerations=[
            {"key": GPU_TYPE, "operator": "Equal", "value": gpu_type, "effect": "NoSchedule"}
        ],
    )


def queue(
    name: str,
    gpus_by_flavor: dict[str, int],
    *,
    cohort: str | None = None,
    reclaim: str | None = None,
) -> dict[str, Any]:
    """A ClusterQueue with GPU and CPU (4 per GPU) quota on each flavor, in the order given."""
    quotas = {f: {GPU: str(n), "cpu": str(4 * n)} for f, n in gpus_by_flavor.items()}
    return flavored_cluster_queue(name, quotas, cohort=cohort, reclaim=reclaim)


def gpu_job(namespace: str, name: str, queue_name: str, pods: int, gpus: int) -> dict[str, Any]:
    return gang_job(
        name,
        queue=queue_name,
        pods=pods,
        requests={GPU: str(gpus), "cpu": "1"},
        isolation=pod_isolation(namespace),
    )


async def _nodes_of(team: Probe, gang: str) -> set[str]:
    return {p["spec"]["nodeName"] for p in await team.pods(gang) if p["spec"].get("nodeName")}


async def test_a_gang_lands_on_its_flavors_nodes_and_the_next_moves_to_the_second_flavor(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    a100 = set(test_nodes("a100", 2, gpus=4, labels={GPU_TYPE: "a100"}))
    h100 = set(
        test_nodes("h100", 2, gpus=4, labels={GPU_TYPE: "h100"}, taints=(Taint(GPU_TYPE, "h100"),))
    )
    fa, fh = f"{namespace}-a100", f"{namespace}-h100"
    for obj in (flavor(fa, "a100"), flavor(fh, "h100", tainted=True)):
        cluster.rest.create(f"/apis/{names.API_VERSION}/resourceflavors", obj)
    apply_queues(
        cluster.rest,
        [queue(f"{namespace}-q", {fa: 8, fh: 8}), local_queue(namespace, "team", f"{namespace}-q")],
    )
    team = Probe(admin, namespace)

    await team.create(kinds.JOBS, gpu_job(namespace, "first", "team", 2, 4))
    on = await eventually(
        lambda: _nodes_of(team, "job-first"),
        lambda nodes: len(nodes) == 2,
        within=90,
        what="the first gang's 2 pods bound",
    )
    assert on == a100
    first = await team.workload("job-first")
    assert first is not None
    (assignment,) = first["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"] == {GPU: fa, "cpu": fa}

    await team.create(kinds.JOBS, gpu_job(namespace, "second", "team", 2, 4))
    on = await eventually(
        lambda: _nodes_of(team, "job-second"),
        lambda nodes: len(nodes) == 2,
        within=90,
        what="the second gang's 2 pods bound",
    )
    # a100's quota is used: the second gang gets h100, whose toleration it was given on release.
    assert on == h100
    job = await admin.get(kinds.JOBS, "second", namespace)
    template = job["spec"]["template"]["spec"]
    assert template["nodeSelector"][GPU_TYPE] == "h100"
    assert any(t.get("key") == GPU_TYPE for t in template["tolerations"])

    await team.create(kinds.JOBS, gpu_job(namespace, "third", "team", 1, 4))
    waiting = await eventually(
        lambda: team.workload("job-third"),
        lambda wl: bool(wl and (wl.get("status") or {}).get("pendingReason")),
        what="the third gang's pending reason",
    )
    assert not reserved(waiting)
    assert "Waiting for quota" in waiting["status"]["pendingReason"]
    assert await team.bound("job-third") == []
    cq = await admin.get(kinds.CLUSTER_QUEUES, f"{namespace}-q")
    usage = {
        (f["name"], r["name"]): r["total"]
        for f in cq["status"]["flavorsUsage"]
        for r in f["resources"]
    }
    assert usage[(fa, GPU)] == "8" and usage[(fh, GPU)] == "8"


async def test_gated_statefulset_pods_get_their_flavors_selector_and_toleration(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("a100", 1, gpus=4, labels={GPU_TYPE: "a100"})
    h100 = set(
        test_nodes("h100", 2, gpus=4, labels={GPU_TYPE: "h100"}, taints=(Taint(GPU_TYPE, "h100"),))
    )
    fh = f"{namespace}-h100"
    cluster.rest.create(
        f"/apis/{names.API_VERSION}/resourceflavors", flavor(fh, "h100", tainted=True)
    )
    apply_queues(
        cluster.rest,
        [queue(f"{namespace}-q", {fh: 8}), local_queue(namespace, "team", f"{namespace}-q")],
    )
    team = Probe(admin, namespace)
    sts = gang_statefulset(
        "serve",
        queue="team",
        replicas=2,
        requests={GPU: "4", "cpu": "1"},
        isolation=pod_isolation(namespace),
    )
    await team.create(kinds.STATEFULSETS, sts)
    on = await eventually(
        lambda: _nodes_of(team, "sts-serve"),
        lambda nodes: len(nodes) == 2,
        within=90,
        what="both StatefulSet pods ungated and bound",
    )
    assert on == h100
    for pod in await team.pods("sts-serve"):
        assert not pod["spec"].get("schedulingGates")
        assert pod["spec"]["nodeSelector"][GPU_TYPE] == "h100"
        assert any(t.get("key") == GPU_TYPE for t in pod["spec"]["tolerations"])


async def _gpus_running(team: Probe, gangs: list[str]) -> dict[str, int]:
    return {g: len(await team.bound(g)) for g in gangs}


async def _borrowed(admin: Client, name: str) -> str | None:
    obj = await admin.get(kinds.COHORTS, name)
    for f in (obj.get("status") or {}).get("flavorsUsage", []):
        for r in f["resources"]:
            if r["name"] == GPU:
                return str(r["borrowed"])
    return None


async def test_a_team_borrows_from_its_sibling_first_and_each_lender_reclaims_its_quota(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("gpu", 3, gpus=4)
    org, dept1, dept2 = (f"{namespace}-{n}" for n in ("org", "dept1", "dept2"))
    for obj in (cohort(org), cohort(dept1, parent=org), cohort(dept2, parent=org)):
        cluster.rest.create(f"/apis/{names.API_VERSION}/cohorts", obj)
    flavor_name = f"{namespace}-gpu"
    cluster.rest.create(f"/apis/{names.API_VERSION}/resourceflavors", resource_flavor(flavor_name))
    apply_queues(
        cluster.rest,
        [
            queue(f"{namespace}-a", {flavor_name: 4}, cohort=dept1),
            queue(f"{namespace}-b", {flavor_name: 4}, cohort=dept1, reclaim="Any"),
            queue(f"{namespace}-c", {flavor_name: 4}, cohort=dept2, reclaim="Any"),
            *(
                local_queue(namespace, t, f"{namespace}-{t[-1]}")
                for t in ("team-a", "team-b", "team-c")
            ),
        ],
    )
    team = Probe(admin, namespace)
    a_gangs = ["job-a1", "job-a2", "job-a3"]
    for name in ("a1", "a2"):
        await team.create(kinds.JOBS, gpu_job(namespace, name, "team-a", 1, 4))
    await eventually(
        lambda: _gpus_running(team, a_gangs[:2]),
        lambda b: b == {"job-a1": 1, "job-a2": 1},
        within=90,
        what="team-a running on its own GPUs and its sibling's",
    )
    # team-a borrows team-b's 4 GPUs; dept1 as a whole is within its 8 and borrows nothing.
    assert await eventually(lambda: _borrowed(admin, dept1), lambda v: v == "0") == "0"

    await team.create(kinds.JOBS, gpu_job(namespace, "a3", "team-a", 1, 4))
    await eventually(
        lambda: _gpus_running(team, a_gangs),
        lambda b: sum(b.values()) == 3,
        within=90,
        what="team-a's third gang running on dept2's idle GPUs",
    )
    await eventually(
        lambda: _borrowed(admin, dept1),
        lambda v: v == "4",
        what="dept1 borrowing 4 GPUs from the org",
    )

    # dept2 takes its quota back: one whole gang of team-a goes.
    await team.create(kinds.JOBS, gpu_job(namespace, "c1", "team-c", 1, 4))
    after_c = await eventually(
        lambda: _gpus_running(team, [*a_gangs, "job-c1"]),
        lambda b: b["job-c1"] == 1 and sum(b[g] for g in a_gangs) == 2,
        within=90,
        what="team-c's gang running, one gang of team-a evicted",
    )
    first_victim = next(g for g in a_gangs if after_c[g] == 0)
    evicted = await team.workload(first_victim)
    assert evicted is not None and not reserved(evicted)
    preempted = condition(evicted, "Preempted")
    assert preempted is not None and preempted["reason"] == "InCohortReclamation"
    await eventually(lambda: _borrowed(admin, dept1), lambda v: v == "0", what="dept1 even")

    # team-b takes back what its sibling borrowed: a second gang of team-a goes.
    await team.create(kinds.JOBS, gpu_job(namespace, "b1", "team-b", 1, 4))
    await eventually(
        lambda: _gpus_running(team, [*a_gangs, "job-b1", "job-c1"]),
        lambda b: b["job-b1"] == 1 and b["job-c1"] == 1 and sum(b[g] for g in a_gangs) == 1,
        within=90,
        what="team-b's gang running, a second gang of team-a evicted, team-c untouched",
    )
