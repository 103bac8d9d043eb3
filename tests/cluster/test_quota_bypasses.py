"""Every way found to run more than a queue allows, tried as a user on the real control plane.

One queue of 2 CPUs; every pod asks for 1. Each test tries one way around the quota and checks
that it is refused with a message that says what to do, or neutralised by the controller, and
that the CPUs of the namespace's bound pods never exceed the queue's 2 while it tries.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from controller.api import kinds, names
from controller.api.kinds import Kind
from controller.cluster.clients import JSON_PATCH, ApiError, Client
from controller.workloads.edits import lookup
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import (
    GPU,
    Probe,
    cluster_queue,
    condition,
    gang_job,
    gang_statefulset,
    local_queue,
    pod_template,
)
from tests.conftest import TestNodes
from tests.support import eventually, pod_isolation

pytestmark = pytest.mark.volcano

REPLICASETS = Kind("apps", "v1", "replicasets", "ReplicaSet")
CPU_QUOTA = 2
ONE_CPU = {"cpu": "1"}


class Team:
    """A user of the namespace's LocalQueue `lq`, with the CPUs its bound pods hold sampled
    all along: the most ever seen must stay within the queue's quota."""

    def __init__(self, admin: Client, namespace: str) -> None:
        self.admin = admin
        self.namespace = namespace
        self.probe = Probe(admin, namespace)
        self.most_cpus = 0

    async def sample(self) -> None:
        while True:
            held = 0
            for pod in await self.probe.pods():
                if lookup(pod, ["spec", "nodeName"]) and lookup(pod, ["status", "phase"]) not in (
                    "Succeeded",
                    "Failed",
                ):
                    for c in lookup(pod, ["spec", "containers"]) or []:
                        held += int(lookup(c, ["resources", "requests", "cpu"]) or 0)
            self.most_cpus = max(self.most_cpus, held)
            await asyncio.sleep(0.2)

    async def create(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.probe.create(kind, obj)

    async def patch(self, kind: Kind, name: str, body: Any) -> dict[str, Any]:
        return await self.admin.patch(kind, name, body, self.namespace)

    async def refused(self, attempt: Awaitable[Any], *words: str) -> str:
        """The apiserver's refusal of `attempt`, which must carry every one of `words`."""
        with pytest.raises(ApiError) as refusal:
            await attempt
        message = refusal.value.body
        assert refusal.value.status in (400, 403, 422), message
        for word in words:
            assert word in message, message
        return message

    async def read(self, kind: Kind, name: str) -> dict[str, Any]:
        return await self.admin.get(kind, name, self.namespace)


@pytest.fixture
async def team(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> AsyncIterator[Team]:
    stack.enroll(namespace)
    test_nodes("cpu", 1, cpu="16")
    apply_queues(
        cluster.rest,
        [
            cluster_queue(f"{namespace}-cq", {"cpu": str(CPU_QUOTA), "memory": "64Gi"}),
            local_queue(namespace, "lq", f"{namespace}-cq"),
        ],
    )
    user = Team(admin, namespace)
    sampler = asyncio.create_task(user.sample())
    yield user
    sampler.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sampler
    assert user.most_cpus <= CPU_QUOTA, f"{user.most_cpus} CPUs were bound at once"


def job(namespace: str, name: str, pods: int) -> dict[str, Any]:
    return gang_job(
        name, queue="lq", pods=pods, requests=ONE_CPU, isolation=pod_isolation(namespace)
    )


def statefulset(namespace: str, name: str, replicas: int) -> dict[str, Any]:
    return gang_statefulset(
        name, queue="lq", replicas=replicas, requests=ONE_CPU, isolation=pod_isolation(namespace)
    )


def pod(namespace: str, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    template = pod_template(
        ONE_CPU,
        isolation=pod_isolation(namespace),
        labels={names.QUEUE_LABEL: "lq", **(labels or {})},
    )
    metadata = {"name": name, **template["metadata"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


async def reason_of(team: Team, gang: str) -> str:
    wl = await team.probe.workload(gang)
    return str(lookup(wl, ["status", "pendingReason"]) or "")


async def until(
    probe: Callable[[], Awaitable[Any]], accept: Callable[[Any], bool], what: str
) -> Any:
    return await eventually(probe, accept, within=60, what=what)


# -- 1, 2: leaving the queue while held ---------------------------------------------------------


async def test_opting_a_held_job_out_of_kohort_is_refused(team: Team) -> None:
    await team.create(kinds.JOBS, job(team.namespace, "big", 3))  # 3 CPUs: never fits 2
    await until(lambda: reason_of(team, "job-big"), lambda r: "Inadmissible" in r, "held")

    await team.refused(
        team.patch(kinds.JOBS, "big", {"metadata": {"labels": {names.OPT_OUT_LABEL: "true"}}}),
        "cannot leave it",
    )
    await team.refused(
        team.patch(kinds.JOBS, "big", {"spec": {"suspend": False}}),
        "unsuspended only by kohort's controller",
    )
    assert (await team.read(kinds.JOBS, "big"))["spec"]["suspend"] is True


async def test_opting_a_held_pod_or_statefulset_out_of_kohort_is_refused(team: Team) -> None:
    big_pod = pod(team.namespace, "big")
    big_pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
    await team.create(kinds.PODS, big_pod)
    await team.create(kinds.STATEFULSETS, statefulset(team.namespace, "web", 3))
    opt_out = {"metadata": {"labels": {names.OPT_OUT_LABEL: "true"}}}

    await team.refused(team.patch(kinds.PODS, "big", opt_out), "cannot leave it")
    await team.refused(team.patch(kinds.STATEFULSETS, "web", opt_out), "cannot leave it")
    assert await team.probe.bound() == []


async def test_removing_the_queue_label_from_a_suspended_job_is_refused(team: Team) -> None:
    big = job(team.namespace, "big", 3)
    # A Job left with no label at all gets its template's labels, queue label included.
    big["metadata"]["labels"]["team"] = "a"
    await team.create(kinds.JOBS, big)

    unlabel = [{"op": "remove", "path": "/metadata/labels/kohort.dev~1queue-name"}]
    await team.refused(
        team.admin.patch(kinds.JOBS, "big", unlabel, team.namespace, content_type=JSON_PATCH),
        "cannot leave it",
    )
    await team.refused(
        team.patch(kinds.JOBS, "big", {"spec": {"suspend": False}}),
        "unsuspended only by kohort's controller",
    )


# -- 3: resizing after admission ----------------------------------------------------------------


async def test_scaling_an_admitted_statefulset_up_sends_it_back_through_its_queue(
    team: Team,
) -> None:
    await team.create(kinds.STATEFULSETS, statefulset(team.namespace, "web", 2))
    await until(lambda: team.probe.bound("sts-web"), lambda b: len(b) == 2, "2 pods running")

    await team.patch(kinds.STATEFULSETS, "web", {"spec": {"replicas": 6}})

    wl = await until(
        lambda: team.probe.workload("sts-web"),
        lambda w: (condition(w, "Evicted") or {}).get("reason") == "Resized",
        "the StatefulSet evicted as resized",
    )
    assert "from 2 to 6 pods" in str(condition(wl, "Evicted"))
    await until(lambda: team.probe.bound("sts-web"), lambda b: b == [], "no pod of it running")
    await until(
        lambda: reason_of(team, "sts-web"),
        lambda r: "Inadmissible: needs 6 cpu" in r,
        "told it can never fit its queue with 6 replicas",
    )


async def test_raising_an_admitted_jobs_parallelism_suspends_and_requeues_it(team: Team) -> None:
    await team.create(kinds.JOBS, job(team.namespace, "train", 2))
    await until(lambda: team.probe.bound("job-train"), lambda b: len(b) == 2, "2 pods running")

    await team.patch(kinds.JOBS, "train", {"spec": {"parallelism": 4}})

    await until(
        lambda: team.read(kinds.JOBS, "train"),
        lambda j: j["spec"]["suspend"] is True,
        "the Job suspended again",
    )
    wl = await team.probe.workload("job-train")
    assert (condition(wl, "Evicted") or {}).get("reason") == "Resized"


async def test_a_statefulset_copied_with_kohorts_labels_gets_a_gang_of_its_own(
    team: Team,
) -> None:
    await team.create(kinds.STATEFULSETS, statefulset(team.namespace, "web", 2))
    await until(lambda: team.probe.bound("sts-web"), lambda b: len(b) == 2, "web runs")
    copy = await team.read(kinds.STATEFULSETS, "web")  # as `kubectl get -o yaml` shows it
    template = copy["spec"]["template"]
    template["spec"]["schedulingGates"] = []
    copy = statefulset(team.namespace, "copy", 2)
    template["metadata"]["labels"]["app"] = "copy"  # its own selector; web's gang names kept
    copy["spec"]["template"]["metadata"] = template["metadata"]
    await team.create(kinds.STATEFULSETS, copy)

    stored = await team.read(kinds.STATEFULSETS, "copy")
    assert stored["spec"]["template"]["metadata"]["labels"][names.POD_GROUP_LABEL] == "sts-copy"
    await until(
        lambda: reason_of(team, "sts-copy"),
        lambda r: r.startswith("Waiting for quota"),
        "the copy waiting for its own quota",
    )
    assert len(await team.probe.bound("sts-web")) == 2


async def test_a_bare_pod_cannot_join_or_pose_as_another_workloads_gang(team: Team) -> None:
    intruder = {names.POD_GROUP_LABEL: "sts-web", names.POD_GROUP_TOTAL_COUNT_LABEL: "1"}
    await team.refused(
        team.create(kinds.PODS, pod(team.namespace, "intruder", intruder)),
        "choose another name for a plain pod group",
    )
    lws = {names.LWS_NAME_LABEL: "llm", names.LWS_GROUP_INDEX_LABEL: "0"}
    await team.refused(
        team.create(kinds.PODS, pod(team.namespace, "impostor", lws)),
        "only a LeaderWorkerSet's StatefulSets create pods",
    )


# -- 4: plain pod groups ------------------------------------------------------------------------


async def test_pods_sharing_a_group_label_without_its_size_are_refused(team: Team) -> None:
    group = {names.POD_GROUP_LABEL: "ring"}
    await team.refused(
        team.create(kinds.PODS, pod(team.namespace, "ring-0", group)),
        names.POD_GROUP_TOTAL_COUNT_LABEL,
    )


async def test_a_pod_group_is_charged_for_all_its_pods_not_one(team: Team) -> None:
    group = {names.POD_GROUP_LABEL: "ring", names.POD_GROUP_TOTAL_COUNT_LABEL: "3"}
    for i in range(3):
        await team.create(kinds.PODS, pod(team.namespace, f"ring-{i}", group))

    await until(
        lambda: reason_of(team, "ring"), lambda r: "Inadmissible: needs 3 cpu" in r, "refused whole"
    )
    assert await team.probe.bound() == []


# -- 5: PodGroups --------------------------------------------------------------------------------


async def test_a_hand_made_podgroup_in_kohorts_volcano_queue_is_refused(team: Team) -> None:
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "mine"},
        "spec": {"minMember": 1, "queue": names.VOLCANO_QUEUE},
    }
    await team.refused(
        team.create(kinds.VOLCANO_PODGROUPS, podgroup), "made only by kohort's controller"
    )
    podgroup["spec"]["queue"] = "default"  # someone else's queue: not kohort's business
    await team.create(kinds.VOLCANO_PODGROUPS, podgroup)


async def test_editing_kohorts_podgroup_is_refused_while_volcano_still_writes_it(
    team: Team,
) -> None:
    train = gang_job(
        "train",
        queue="lq",
        pods=2,
        requests={"cpu": "1", "memory": "500Mi"},  # Go spells 524288000 its own way
        isolation=pod_isolation(team.namespace),
    )
    await team.create(kinds.JOBS, train)
    await until(
        lambda: team.probe.podgroup("job-train"),
        lambda pg: lookup(pg, ["status", "phase"]) == "Running",
        "the gang's PodGroup Running: Volcano writes it back whole, and that is allowed",
    )

    await team.refused(
        team.patch(kinds.VOLCANO_PODGROUPS, "job-train", {"spec": {"minMember": 1}}),
        "only kohort's controller may change it",
    )
    await team.refused(
        team.patch(kinds.VOLCANO_PODGROUPS, "job-train", {"spec": {"queue": "default"}}),
        "only kohort's controller may change it",
    )


async def test_a_pod_that_claims_a_job_owner_without_coming_from_the_job_controller_is_refused(
    team: Team,
) -> None:
    await team.create(kinds.JOBS, job(team.namespace, "train", 1))
    await until(lambda: team.probe.bound("job-train"), lambda b: len(b) == 1, "the Job runs")
    owner = await team.read(kinds.JOBS, "train")
    fake = pod(team.namespace, "extra", {names.POD_GROUP_LABEL: "job-train"})
    fake["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
    ]
    await team.refused(
        team.create(kinds.PODS, fake), "only the Job controller creates a Job's pods"
    )
    # Gated too: kohort ungates the pods of a Job whose release gated its template.
    fake["spec"]["schedulingGates"] = [{"name": names.ADMISSION_GATE}]
    await team.refused(
        team.create(kinds.PODS, fake), "only the Job controller creates a Job's pods"
    )


# -- 6: choosing the scheduler or the node ------------------------------------------------------


async def test_changing_the_scheduler_of_an_admitted_statefulset_is_refused(team: Team) -> None:
    await team.create(kinds.STATEFULSETS, statefulset(team.namespace, "web", 2))
    await until(lambda: team.probe.bound("sts-web"), lambda b: len(b) == 2, "2 pods running")

    change = {"spec": {"template": {"spec": {"schedulerName": "default-scheduler"}}}}
    await team.refused(
        team.patch(kinds.STATEFULSETS, "web", change), "schedulerName was set by kohort"
    )


async def test_a_pod_that_names_its_node_is_refused(team: Team, test_nodes: TestNodes) -> None:
    [node] = test_nodes("pinned", 1, cpu="4")
    pinned = pod(team.namespace, "pinned")
    pinned["spec"]["nodeName"] = node
    # Whichever refuses first (kohort, or the apiserver, seeing the gate kohort's mutation
    # added), the pod is never created.
    await team.refused(team.create(kinds.PODS, pinned), "spec.nodeName")
    sts = statefulset(team.namespace, "pinned", 1)
    sts["spec"]["template"]["spec"]["nodeName"] = node
    await team.refused(team.create(kinds.STATEFULSETS, sts), "spec.template.spec.nodeName")


# -- 17: shared ResourceClaims -----------------------------------------------------------------


async def test_a_job_or_pod_sharing_a_resource_claim_is_refused_and_told_to_use_a_template(
    team: Team,
) -> None:
    shared = {"resourceClaims": [{"name": "gpus", "resourceClaimName": "team-gpus"}]}
    sharing = job(team.namespace, "sharing", 2)
    sharing["spec"]["template"]["spec"].update(shared)
    await team.refused(
        team.create(kinds.JOBS, sharing),
        "spec.template.spec.resourceClaims.0 names ResourceClaim 'team-gpus' directly",
    )
    bare = pod(team.namespace, "sharing")
    bare["spec"].update(shared)
    await team.refused(team.create(kinds.PODS, bare), "use resourceClaimTemplateName")


# -- 8: pods of other controllers ---------------------------------------------------------------


async def test_pods_of_a_replicaset_in_a_queue_are_admitted_one_by_one_through_quota(
    team: Team,
) -> None:
    template = pod_template(
        ONE_CPU, isolation=pod_isolation(team.namespace), labels={"app": "serve"}
    )
    template["metadata"]["labels"][names.QUEUE_LABEL] = "lq"
    template["spec"]["restartPolicy"] = "Always"
    await team.create(
        REPLICASETS,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "serve"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "serve"}},
                "template": template,
            },
        },
    )

    await until(team.probe.bound, lambda b: len(b) == 2, "two of its pods running")
    workloads = await until(
        team.probe.workloads, lambda w: len(w) == 3, "a Workload for each of its 3 pods"
    )
    waiting = await until(
        lambda: _waiting(team),
        lambda w: len(w) == 1,
        "the third pod's Workload saying why it waits",
    )
    assert "Waiting for quota: needs 1 cpu" in waiting[0]
    assert len(workloads) == 3
    await team.admin.delete(REPLICASETS, "serve", team.namespace)


async def _waiting(team: Team) -> list[str]:
    reasons = [lookup(w, ["status", "pendingReason"]) for w in await team.probe.workloads()]
    return [str(r) for r in reasons if r]


# -- 7: a ClusterQueue's namespaceSelector ------------------------------------------------------


async def test_a_job_from_a_namespace_its_queue_does_not_select_never_runs(
    team: Team, cluster: LocalCluster
) -> None:
    selective = cluster_queue(f"{team.namespace}-cq", {"cpu": str(CPU_QUOTA)})
    selective["spec"]["namespaceSelector"] = {
        "matchLabels": {"team": "a"},
        "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}],
    }
    apply_queues(cluster.rest, [selective])
    await team.create(kinds.JOBS, job(team.namespace, "train", 1))

    reason = await until(
        lambda: reason_of(team, "job-train"),
        lambda r: "does not admit workloads from namespace" in r,
        "told its namespace is not selected",
    )
    assert "team=a,env notin (prod)" in reason
    assert (await team.read(kinds.JOBS, "train"))["spec"]["suspend"] is True

    cluster.rest.patch(
        f"/api/v1/namespaces/{team.namespace}", {"metadata": {"labels": {"team": "a"}}}
    )
    await until(
        lambda: team.probe.bound("job-train"), lambda b: len(b) == 1, "it runs once selected"
    )


# -- 9: the reclaim floor -----------------------------------------------------------------------


async def test_reclaim_never_takes_a_lender_below_its_nominal_quota(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    """Queue a (nominal 8 GPUs) runs 12: a3 alone on n0, a1 and a2 (younger) on n1. Queue b
    (nominal 8, using none) needs one 8-GPU pod. Evicting a1 and a2 loses less work but leaves
    a at 4; evicting a3 alone fits b and leaves a at its nominal 8."""
    stack.enroll(namespace)
    n0, n1 = test_nodes("gpu", 2, gpus=8)
    for node, pool in ((n0, "p0"), (n1, "p1")):
        cluster.rest.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {"pool": pool}}})
    cohort = f"{namespace}-lab"
    apply_queues(
        cluster.rest,
        [
            cluster_queue(f"{namespace}-a", {GPU: "8", "cpu": "16"}, cohort=cohort),
            cluster_queue(f"{namespace}-b", {GPU: "8", "cpu": "16"}, cohort=cohort, reclaim="Any"),
            local_queue(namespace, "a", f"{namespace}-a"),
            local_queue(namespace, "b", f"{namespace}-b"),
        ],
    )
    team = Probe(admin, namespace)

    def gpu_job(name: str, queue: str, gpus: int, pool: str | None) -> dict[str, Any]:
        isolation = pod_isolation(namespace)
        if pool:
            isolation["nodeSelector"]["pool"] = pool
        return gang_job(
            name, queue=queue, pods=1, requests={GPU: str(gpus), "cpu": "1"}, isolation=isolation
        )

    await team.create(kinds.JOBS, gpu_job("a3", "a", 4, "p0"))
    await until(lambda: team.bound("job-a3"), lambda b: len(b) == 1, "a3 running on n0")
    await asyncio.sleep(15)  # a3 has run longest: evicting it throws away the most work
    for name in ("a1", "a2"):
        await team.create(kinds.JOBS, gpu_job(name, "a", 4, "p1"))
    for name in ("a1", "a2"):
        await until(lambda n=name: team.bound(f"job-{n}"), lambda b: len(b) == 1, f"{name} runs")

    await team.create(kinds.JOBS, gpu_job("b1", "b", 8, None))
    young: list[int] = []

    async def probe() -> list[str]:
        young.append(len(await team.bound("job-a1")) + len(await team.bound("job-a2")))
        return await team.bound("job-b1")

    await until(probe, lambda b: len(b) == 1, "b's 8-GPU pod running")
    assert set(young) == {2}, "a1 and a2 were never evicted"
    assert await team.bound("job-a3") == []
    evicted = await team.workload("job-a3")
    assert (condition(evicted, "Preempted") or {}).get("reason") == "InCohortReclamation"


# -- 11: gangs that can never be admitted say so ------------------------------------------------


async def test_a_gang_asking_for_a_resource_its_queue_does_not_cover_is_told_so(
    team: Team,
) -> None:
    hungry = gang_job(
        "hungry",
        queue="lq",
        pods=1,
        requests={"cpu": "1", "ephemeral-storage": "1Gi"},
        isolation=pod_isolation(team.namespace),
    )
    await team.create(kinds.JOBS, hungry)

    reason = await until(
        lambda: reason_of(team, "job-hungry"), lambda r: "Inadmissible" in r, "inadmissible"
    )
    assert (
        f"ClusterQueue {team.namespace}-cq does not cover ephemeral-storage (it covers cpu,"
        " memory)" in reason
    )
    events = await team.probe.events("Job", "hungry")
    assert any(e["reason"] == "Inadmissible" and e["type"] == "Warning" for e in events), events
