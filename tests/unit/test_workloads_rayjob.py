"""RayJob: one gang of its cluster's head and workers and of its submitter pod, held by
spec.suspend. The RayCluster and the submitter Job KubeRay makes for it are no gangs of their
own; its cluster's pods are gated until it runs, its submitter (made only once the cluster
runs) is in its quota but not in its minMember. What KubeRay cannot suspend is refused."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from controller.api import kinds, kube, names
from controller.api.conditions import WorkloadCondition
from controller.state.objects import min_resources
from controller.workloads.base import Finished, is_gated
from controller.workloads.job import JobAdapter
from controller.workloads.raycluster import RayClusterAdapter
from controller.workloads.rayjob import RayJobAdapter
from controller.workloads.registry import REGISTRY
from hack.objects import cluster_queue
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_raycluster, make_rayjob
from tests.unit import suspended_kinds as support
from tests.unit.controller_world import World, start
from webhook.mutation import mutate
from webhook.reviews import patch_of

ADAPTER = REGISTRY.instance(RayJobAdapter)
KUBERAY = "system:serviceaccount:ray-system:kuberay-operator"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


def pod_sets(raw: dict[str, Any]) -> list[tuple[str, int]]:
    [gang] = ADAPTER.gangs(support.view(ADAPTER, raw))
    return [(p.name, p.count) for p in gang.pod_sets]


def test_a_rayjob_is_one_gang_of_its_head_its_workers_and_its_submitter() -> None:
    job = support.stored(make_rayjob(groups={"cpu": 2, "gpu": 1}))

    [gang] = ADAPTER.gangs(support.view(ADAPTER, job))

    assert gang.name == "rayjob-ray"
    assert [(p.name, p.count) for p in gang.pod_sets] == [
        ("head", 1),
        ("cpu", 2),
        ("gpu", 1),
        ("submitter", 1),
    ]
    # KubeRay's own submitter: 500m CPU and 200Mi, in the gang's quota.
    assert gang.pod_sets[-1].requests == {"cpu": 500, "memory": 200 * 2**20 * 1000}


def test_the_submitter_is_not_in_min_member_since_kuberay_makes_it_once_the_cluster_runs() -> None:
    job = support.stored(make_rayjob(groups={"cpu": 2}, memory=None))

    [gang] = ADAPTER.gangs(support.view(ADAPTER, job))

    assert gang.min_member == 1 + 2
    # What the gang scheduler waits for: the head and workers, not the submitter.
    assert min_resources(gang) == {"cpu": 2000 + 2 * 1000, "memory": 0}


def test_a_new_rayjob_is_suspended_its_cluster_gated_and_its_submitter_in_its_gang() -> None:
    ops = patch_of(mutate(make_review(make_rayjob()), support.SETTINGS))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops

    job = support.mutated(make_rayjob())

    head, cpu, submitter = support.templates(ADAPTER, job)
    for template in (head, cpu, submitter):
        assert support.decorated(template, "rayjob-ray")
    assert support.gated(head) and support.gated(cpu)
    assert not support.gated(submitter)  # a Job's pod, made only once the RayJob runs
    # KubeRay refuses to suspend a RayJob that keeps its cluster once done.
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert support.allowed(job)
    assert not support.allowed(support.unsuspended(job), old=job)
    assert support.allowed(support.unsuspended(job), old=job, user=support.CONTROLLER)


def test_without_a_submitter_template_the_webhook_writes_the_one_kuberay_would_use() -> None:
    job = support.mutated(make_rayjob())

    template = job["spec"]["submitterPodTemplate"]
    [container] = template["spec"]["containers"]
    assert container["name"] == "ray-job-submitter"
    assert container["image"] == "registry.example/train:1"  # the head's
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
    assert template["spec"]["restartPolicy"] == "Never"


def test_a_submitter_template_of_the_users_own_is_kept_and_counted() -> None:
    job = support.stored(make_rayjob(submitter=True))

    [container] = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    assert container["name"] == "main"
    [gang] = ADAPTER.gangs(support.view(ADAPTER, job))
    assert gang.pod_sets[-1].requests["cpu"] == 250


def test_in_http_mode_there_is_no_submitter_pod() -> None:
    job = support.stored(make_rayjob(mode="HTTPMode"))

    assert "submitterPodTemplate" not in job["spec"]
    assert pod_sets(job) == [("head", 1), ("cpu", 2)]


def test_in_sidecar_mode_the_submitter_container_is_counted_in_the_head() -> None:
    job = support.stored(make_rayjob(mode="SidecarMode", memory=None))

    assert pod_sets(job) == [("head", 1), ("cpu", 2)]
    [gang] = ADAPTER.gangs(support.view(ADAPTER, job))
    assert gang.pod_sets[0].requests == {"cpu": 2000 + 500, "memory": 200 * 2**20 * 1000}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda s: s.update(clusterSelector={"ray.io/cluster": "shared"}), "spec.clusterSelector"),
        (lambda s: s.pop("rayClusterSpec"), "spec.rayClusterSpec is missing"),
        (lambda s: s.update(submissionMode="InteractiveMode"), "InteractiveMode"),
        (lambda s: s.update(shutdownAfterJobFinishes=False), "shutdownAfterJobFinishes: false"),
        (
            lambda s: s.update(deletionStrategy={"deletionRules": [{"policy": "DeleteCluster"}]}),
            "deletionRules",
        ),
        (
            lambda s: s["rayClusterSpec"].update(enableInTreeAutoscaling=True),
            "spec.rayClusterSpec.enableInTreeAutoscaling: true",
        ),
        (
            lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0].update(suspend=True),
            "spec.rayClusterSpec.workerGroupSpecs[0].suspend: true",
        ),
        (
            lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0].update(replicas=-1),
            "spec.rayClusterSpec.workerGroupSpecs[0].replicas must be a non-negative integer",
        ),
    ],
    ids=[
        "existing cluster",
        "no cluster",
        "interactive",
        "cluster kept",
        "deletion rules",
        "autoscaling",
        "suspended group",
        "negative",
    ],
)
def test_a_rayjob_kuberay_could_not_suspend_or_size_is_refused_with_the_reason(
    change: Any, words: str
) -> None:
    job = make_rayjob()
    change(job["spec"])

    assert words in support.denial(job)
    job["spec"]["suspend"] = True
    assert not support.allowed(job)


def test_a_rayjob_without_a_submitter_template_that_the_webhook_never_saw_is_refused() -> None:
    job = make_rayjob()
    job["spec"].update(suspend=True, shutdownAfterJobFinishes=True)
    assert not support.allowed(job)
    assert ADAPTER.gangs(support.view(ADAPTER, job)) == []


def test_an_update_that_drops_what_the_webhook_wrote_gets_it_back() -> None:
    held = support.mutated(make_rayjob())
    applied_again = copy.deepcopy(held)
    del applied_again["spec"]["submitterPodTemplate"]
    del applied_again["spec"]["shutdownAfterJobFinishes"]

    kept = support.updated(applied_again, old=held)

    assert kept["spec"]["submitterPodTemplate"] == held["spec"]["submitterPodTemplate"]
    assert kept["spec"]["shutdownAfterJobFinishes"] is True
    assert support.allowed(kept, old=held)


def test_releasing_a_rayjob_on_a_flavor_puts_it_in_every_template_and_hold_takes_it_back() -> None:
    held = support.stored(make_rayjob(groups={"cpu": 2}))

    released, held_again = support.released_and_held(ADAPTER, held)

    assert released["spec"]["suspend"] is False
    for template in support.templates(ADAPTER, released):
        assert template["spec"]["nodeSelector"] == {"gpu": "h100"}
        assert support.GPU_TOLERATION in template["spec"]["tolerations"]
    assert held_again["spec"]["suspend"] is True
    assert support.templates(ADAPTER, held_again) == support.templates(ADAPTER, held)


@pytest.mark.parametrize(
    ("status", "finished"),
    [
        ("Running", None),
        ("Suspended", None),
        ("Complete", Finished.SUCCEEDED),
        ("Failed", Finished.FAILED),
        ("ValidationFailed", Finished.FAILED),
    ],
)
def test_a_rayjob_is_finished_once_kuberay_says_its_deployment_is_done(
    status: str, finished: Finished | None
) -> None:
    job = support.stored(make_rayjob())
    job["status"] = {"jobDeploymentStatus": status}
    assert ADAPTER.finished(support.view(ADAPTER, job)) is finished


def owned(obj: dict[str, Any], kind: kinds.Kind, name: str, uid: str) -> dict[str, Any]:
    """`obj` controlled by the object `name` of `kind`."""
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": kind.api_version, "kind": kind.kind, "name": name, "uid": uid}
        | {"controller": True}
    ]
    return obj


def kuberay_cluster(job: dict[str, Any], name: str = "ray-x7k2p") -> dict[str, Any]:
    """The RayCluster KubeRay makes for a RayJob: its labels, annotations and cluster spec."""
    cluster = make_raycluster(name, namespace=job["metadata"]["namespace"], queue=None)
    cluster["metadata"]["labels"] = dict(job["metadata"]["labels"])
    cluster["spec"] = copy.deepcopy(job["spec"]["rayClusterSpec"])
    cluster["metadata"]["uid"] = f"uid-{name}"
    return owned(cluster, kinds.RAYJOBS, job["metadata"]["name"], job["metadata"]["uid"])


def submitter_job(job: dict[str, Any]) -> dict[str, Any]:
    """The submitter Job KubeRay makes for a RayJob, named after it."""
    made = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job["metadata"]["name"], "namespace": job["metadata"]["namespace"]},
        "spec": {"backoffLimit": 2, "template": copy.deepcopy(job["spec"]["submitterPodTemplate"])},
    }
    return owned(made, kinds.RAYJOBS, job["metadata"]["name"], job["metadata"]["uid"])


def test_the_raycluster_kuberay_makes_for_a_rayjob_is_left_to_the_rayjobs_gang() -> None:
    job = support.stored(make_rayjob())
    cluster = kuberay_cluster(job)

    assert patch_of(mutate(make_review(cluster), support.SETTINGS)) == []
    assert support.allowed(cluster, user=KUBERAY)
    assert not support.allowed(cluster)  # only KubeRay makes a RayJob's cluster
    rayclusters = REGISTRY.instance(RayClusterAdapter)
    assert rayclusters.gangs(support.view(rayclusters, cluster)) == []
    # Its templates name the RayJob's gang, and carry the gate.
    for template in support.templates(rayclusters, cluster):
        assert support.decorated(template, "rayjob-ray") and support.gated(template)


def test_the_submitter_job_is_left_to_the_rayjobs_gang_and_its_pod_joins_it_ungated() -> None:
    job = support.stored(make_rayjob())
    submitter = submitter_job(job)

    assert patch_of(mutate(make_review(submitter), support.SETTINGS)) == []
    assert support.allowed(submitter, user=KUBERAY)
    assert not support.allowed(submitter)
    assert REGISTRY.instance(JobAdapter).gangs(msgspec.convert(submitter, kube.Job)) == []

    pod = job_pod(submitter, "ray-submit-abcde")
    response = mutate(make_review(pod, user=JOB_CONTROLLER), support.SETTINGS)
    assert response["response"]["allowed"]
    assert not any("schedulingGates" in op["path"] for op in patch_of(response))
    assert support.allowed(pod, user=JOB_CONTROLLER)


def job_pod(job: dict[str, Any], name: str) -> dict[str, Any]:
    template = copy.deepcopy(job["spec"]["template"])
    template["metadata"].update(name=name, namespace=job["metadata"]["namespace"])
    pod = {"apiVersion": "v1", "kind": "Pod", **template}
    return owned(pod, kinds.JOBS, job["metadata"]["name"], f"uid-job-{name}")


def kuberay_pod(cluster: dict[str, Any], name: str, group: str | None) -> dict[str, Any]:
    """A pod KubeRay made for `cluster`: the head's (group None) or a worker group's."""
    spec = cluster["spec"]
    template = copy.deepcopy(
        spec["headGroupSpec"]["template"]
        if group is None
        else next(g for g in spec["workerGroupSpecs"] if g["groupName"] == group)["template"]
    )
    labels = template["metadata"]["labels"]
    labels[names.RAY_NODE_TYPE_LABEL] = "head" if group is None else "worker"
    labels[names.RAY_GROUP_LABEL] = group or "headgroup"
    template["metadata"].update(name=name, namespace=cluster["metadata"]["namespace"])
    pod = {"apiVersion": "v1", "kind": "Pod", **template}
    return owned(pod, kinds.RAYCLUSTERS, cluster["metadata"]["name"], cluster["metadata"]["uid"])


def test_pods_of_a_rayjob_are_the_pod_sets_of_their_group_and_its_submitter() -> None:
    job = support.stored(make_rayjob(groups={"cpu": 1}))
    cluster = kuberay_cluster(job)
    made = [
        kuberay_pod(cluster, "ray-head", None),
        kuberay_pod(cluster, "ray-cpu-x", "cpu"),
        job_pod(submitter_job(job), "ray-abcde"),
    ]
    found = [ADAPTER.pod_set_of(msgspec.convert(p, kube.Pod)) for p in made]
    assert found == ["head", "cpu", "submitter"]


def rayjob_world() -> World:
    """A RayJob `ray` (head, two 1-CPU workers, KubeRay's submitter) in a queue it fits."""
    job = support.stored(make_rayjob(namespace="ns", queue="lq", cpu="1"))
    quota = cluster_queue("cq", {"cpu": "6", "memory": "16Gi"})
    return World((kinds.CLUSTER_QUEUES, quota), (kinds.RAYJOBS, job))


async def test_an_admitted_rayjob_is_unsuspended_then_its_clusters_pods_are_released(
    started: list[World],
) -> None:
    world = await start(started, rayjob_world())

    await world.reconciler.reconcile_once()
    await world.api.settle()

    now = world.api.read_back(kinds.RAYJOBS, "ray", "ns")
    assert now is not None and now["spec"]["suspend"] is False
    wl = world.workload("rayjob-ray")
    assert wl is not None
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
        ("head", 1),
        ("cpu", 2),
        ("submitter", 1),
    ]
    podgroup = world.api.read_back(kinds.VOLCANO_PODGROUPS, "rayjob-ray", "ns")
    assert podgroup is not None and podgroup["spec"]["minMember"] == 3

    # KubeRay makes the cluster from the RayJob, and its pods from the cluster: gated.
    cluster = kuberay_cluster(now)
    world.api.put(kinds.RAYCLUSTERS, cluster)
    now["status"] = {"jobDeploymentStatus": "Initializing", "rayClusterName": "ray-x7k2p"}
    world.api.put(kinds.RAYJOBS, now)
    pods = ["ray-head", "ray-cpu-a", "ray-cpu-b"]
    for name, group in zip(pods, (None, "cpu", "cpu"), strict=True):
        world.api.put(kinds.PODS, kuberay_pod(cluster, name, group))
    await world.api.settle()
    await world.reconciler.reconcile_once()
    await world.api.settle()

    for name in pods:
        pod = world.api.read_back(kinds.PODS, name, "ns")
        assert pod is not None and not is_gated(msgspec.convert(pod, kube.Pod)), name
    assert world.workload("raycluster-ray-x7k2p") is None  # no gang of its own


async def test_a_finished_rayjob_gives_its_quota_back(started: list[World]) -> None:
    world = await start(started, rayjob_world())
    await world.reconciler.reconcile_once()
    await world.api.settle()
    now = world.api.read_back(kinds.RAYJOBS, "ray", "ns")
    assert now is not None and now["spec"]["suspend"] is False  # admitted, running

    now["status"] = {"jobDeploymentStatus": "Complete"}
    world.api.put(kinds.RAYJOBS, now)
    await world.api.settle()
    await world.reconciler.reconcile_once()
    await world.api.settle()

    wl = world.workload("rayjob-ray")
    assert wl is not None
    conditions = {c["type"]: c["status"] for c in wl["status"]["conditions"]}
    assert conditions[WorkloadCondition.FINISHED] == "True"
    assert conditions.get(WorkloadCondition.QUOTA_RESERVED) != "True"
