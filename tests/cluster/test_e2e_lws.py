"""LeaderWorkerSets with the real LWS controller (sigs.k8s.io/lws, built by hack/build-testenv.sh)
and its own webhooks: each group is one gang, admitted, bound, scaled, rolled and reclaimed
whole."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import (
    Probe,
    borrower_and_lender,
    cluster_queue,
    condition,
    gang_leader_worker_set,
    local_queue,
    pending_reason,
    reserved,
)
from tests.conftest import TestNodes
from tests.support import eventually, holds_for, pod_isolation

pytestmark = pytest.mark.volcano

LWS_REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"


@pytest.fixture(scope="module")
def lws_controller(cluster: LocalCluster) -> None:
    cluster.start_workload_controller("lws-manager")


async def _bound_per_group(team: Probe, groups: Sequence[str]) -> dict[str, int]:
    return {g: len(await team.bound(g)) for g in groups}


async def _whole_or_nothing(team: Probe, groups: Sequence[str], size: int) -> dict[str, int]:
    """Bound pods per group; fails at once when a group is partly bound with its pods all
    made (a partial start)."""
    counts = {}
    for group in groups:
        bound = len(await team.bound(group))
        made = len(await team.pods(group))
        assert bound in (0, size) or made < size, f"group {group}: {bound} of {made} bound"
        counts[group] = bound
    return counts


async def test_each_group_of_a_leader_worker_set_is_admitted_whole_and_a_second_set_that_does_not_fit_holds_nothing_until_scaled_down(  # noqa: E501
    stack: KohortStack,
    lws_controller: None,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    cq = f"{namespace}-cq"
    apply_queues(
        cluster.rest, [cluster_queue(cq, {"cpu": "16"}), local_queue(namespace, "serving", cq)]
    )
    team = Probe(admin, namespace)
    isolation = pod_isolation(namespace)
    llm = gang_leader_worker_set(
        "llm", queue="serving", replicas=2, size=3, requests={"cpu": "2"}, isolation=isolation
    )
    await team.create(kinds.LEADERWORKERSETS, llm)
    groups = ["lws-llm-0", "lws-llm-1"]
    await eventually(
        lambda: _bound_per_group(team, groups),
        lambda bound: bound == {"lws-llm-0": 3, "lws-llm-1": 3},
        within=90,
        what="both groups of llm bound, leader and two workers each",
    )
    for group in groups:
        workload = await team.workload(group)
        assert reserved(workload), workload
        assert workload is not None
        assert {ps["name"]: ps["count"] for ps in workload["spec"]["podSets"]} == {
            "leader": 1,
            "worker": 2,
        }
        podgroup = await team.podgroup(group)
        assert podgroup is not None and podgroup["spec"]["minMember"] == 3

    # 12 of 16 CPUs are taken: a group of three 2-CPU pods does not fit the quota.
    big = gang_leader_worker_set(
        "big", queue="serving", replicas=1, size=3, requests={"cpu": "2"}, isolation=isolation
    )
    await team.create(kinds.LEADERWORKERSETS, big)
    waiting = await eventually(
        lambda: team.workload("lws-big-0"),
        lambda wl: "quota" in pending_reason(wl).lower(),
        within=60,
        what="big's group waiting for quota, with the reason on its Workload",
    )
    assert not reserved(waiting)
    await eventually(
        lambda: team.pods("lws-big-0"),
        lambda pods: len(pods) == 3,
        within=60,
        what="the LWS controller making all three pods of big's group",
    )
    await holds_for(
        lambda: team.bound("lws-big-0"),
        lambda bound: bound == [],
        duration=5,
        what="no pod of big's group bound while it waits",
    )

    # Scaling llm down to one group frees its quota: big's group runs, whole.
    await admin.patch(kinds.LEADERWORKERSETS, "llm", {"spec": {"replicas": 1}}, namespace)
    await eventually(
        lambda: _bound_per_group(team, ["lws-llm-0", "lws-llm-1", "lws-big-0"]),
        lambda bound: bound == {"lws-llm-0": 3, "lws-llm-1": 0, "lws-big-0": 3},
        within=90,
        what="llm's second group gone and big's group bound in its place",
    )
    # Scaling back up: the new group waits for quota and holds nothing.
    await admin.patch(kinds.LEADERWORKERSETS, "llm", {"spec": {"replicas": 2}}, namespace)
    await eventually(
        lambda: team.workload("lws-llm-1"),
        lambda wl: wl is not None and not reserved(wl) and pending_reason(wl) != "",
        within=60,
        what="llm's second group back, waiting",
    )
    await holds_for(
        lambda: team.bound("lws-llm-1"),
        lambda bound: bound == [],
        duration=5,
        what="the scaled-up group holds no node while it waits",
    )


async def test_a_rolling_update_of_a_leader_worker_set_brings_every_group_back_whole(
    stack: KohortStack,
    lws_controller: None,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    cq = f"{namespace}-cq"
    apply_queues(
        cluster.rest, [cluster_queue(cq, {"cpu": "16"}), local_queue(namespace, "serving", cq)]
    )
    team = Probe(admin, namespace)
    lws = gang_leader_worker_set(
        "rolling",
        queue="serving",
        replicas=2,
        size=2,
        requests={"cpu": "2"},
        isolation=pod_isolation(namespace),
    )
    await team.create(kinds.LEADERWORKERSETS, lws)
    groups = ["lws-rolling-0", "lws-rolling-1"]
    await eventually(
        lambda: _bound_per_group(team, groups),
        lambda bound: bound == {g: 2 for g in groups},
        within=90,
        what="both groups bound",
    )
    before = {p["metadata"]["labels"][LWS_REVISION_LABEL] for p in await team.pods()}
    assert len(before) == 1

    # A new worker template: LWS replaces the groups one by one.
    patch = {
        "spec": {
            "leaderWorkerTemplate": {
                "workerTemplate": {"metadata": {"annotations": {"example.com/rev": "2"}}}
            }
        }
    }
    await admin.patch(kinds.LEADERWORKERSETS, "rolling", patch, namespace)

    # (While a group is replaced, its old pods of the same PodGroup may still run beside its
    # new ones: whole-or-nothing is judged once the update is done.)
    async def revisions() -> tuple[set[str], dict[str, int]]:
        pods = await team.pods()
        counts = await _bound_per_group(team, groups)
        return {p["metadata"]["labels"][LWS_REVISION_LABEL] for p in pods}, counts

    final = await eventually(
        revisions,
        lambda seen: len(seen[0]) == 1 and seen[0] != before and seen[1] == {g: 2 for g in groups},
        within=180,
        interval=1.0,
        what="every pod at the new revision, both groups bound whole",
    )
    assert final[0].isdisjoint(before)
    for group in groups:
        assert reserved(await team.workload(group))


async def test_a_borrowed_group_is_evicted_whole_for_its_lender_and_comes_back(
    stack: KohortStack,
    lws_controller: None,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    apply_queues(cluster.rest, borrower_and_lender(namespace, {"cpu": "8"}))
    team = Probe(admin, namespace)
    isolation = pod_isolation(namespace)
    # team-a: two groups of four 2-CPU pods, the second on team-b's idle quota.
    await team.create(
        kinds.LEADERWORKERSETS,
        gang_leader_worker_set(
            "a", queue="team-a", replicas=2, size=4, requests={"cpu": "2"}, isolation=isolation
        ),
    )
    a_groups = ["lws-a-0", "lws-a-1"]
    await eventually(
        lambda: _bound_per_group(team, a_groups),
        lambda bound: bound == {g: 4 for g in a_groups},
        within=90,
        what="both of team-a's groups bound, one on borrowed quota",
    )
    await team.create(
        kinds.LEADERWORKERSETS,
        gang_leader_worker_set(
            "b", queue="team-b", replicas=1, size=4, requests={"cpu": "2"}, isolation=isolation
        ),
    )
    await eventually(
        lambda: _whole_or_nothing(team, [*a_groups, "lws-b-0"], 4),
        lambda bound: bound["lws-b-0"] == 4 and sorted(bound[g] for g in a_groups) == [0, 4],
        within=120,
        what="one of team-a's groups evicted whole and team-b's group bound",
    )
    evicted = [g for g in a_groups if not reserved(await team.workload(g))]
    assert len(evicted) == 1
    preempted = condition(await team.workload(evicted[0]), "Preempted")
    assert preempted is not None and preempted["reason"] == "InCohortReclamation"
    # The LWS controller makes the evicted group's pods again; they stay held while it waits.
    await eventually(
        lambda: team.pods(evicted[0]),
        lambda pods: len(pods) == 4,
        within=60,
        what="the evicted group's pods made again by the LWS controller",
    )
    assert await team.bound(evicted[0]) == []

    await admin.delete(kinds.LEADERWORKERSETS, "b", namespace)
    await eventually(
        lambda: _bound_per_group(team, a_groups),
        lambda bound: bound == {g: 4 for g in a_groups},
        within=120,
        what="the evicted group admitted and bound again once team-b's group is gone",
    )
