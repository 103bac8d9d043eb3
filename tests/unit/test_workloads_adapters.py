"""Each workload kind: its gangs, how it is held, released and evicted."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from controller.api import kinds, kube, names
from controller.workloads.base import (
    Delete,
    Denied,
    Finished,
    Mutation,
    Patch,
    PatchType,
    WorkloadAdapter,
    gang_name,
)
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.jobset import JobSetAdapter
from controller.workloads.leaderworkerset import LeaderWorkerSetAdapter
from controller.workloads.pod import PodAdapter
from controller.workloads.pytorchjob import PyTorchJobAdapter
from controller.workloads.raycluster import RayClusterAdapter
from controller.workloads.rayjob import RayJobAdapter
from controller.workloads.registry import ADAPTERS, REGISTRY
from controller.workloads.requests import pod_requests
from controller.workloads.statefulset import StatefulSetAdapter
from tests.fakes.workloads import make_job, make_lws, make_pod, make_statefulset

CPU, GI = 1000, 2**30 * 1000


def held(obj: dict[str, Any], adapter: WorkloadAdapter) -> Any:
    """The object as kohort's webhook stores it, read as the controller's typed view."""
    editor = Editor(obj)
    adapter.default(editor, Mutation("research"))
    return msgspec.convert(editor.doc, adapter.model)


@pytest.mark.parametrize(
    ("parallelism", "completions", "want_size"),
    [(4, 4, 4), (4, 2, 2), (3, None, 3), (None, None, 1)],
    ids=["equal", "fewer-completions", "completions-unset", "both-unset"],
)
def test_job_gang_size_is_min_of_parallelism_and_completions(
    parallelism: int | None, completions: int | None, want_size: int
) -> None:
    job = held(
        make_job(parallelism=parallelism, completions=completions), REGISTRY.instance(JobAdapter)
    )
    [gang] = REGISTRY.instance(JobAdapter).gangs(job)
    assert gang.min_member == want_size
    assert gang.name == "job-train"


def test_a_paused_job_runs_as_no_gang_until_it_is_scaled_up() -> None:
    assert (
        REGISTRY.instance(JobAdapter).gangs(
            held(make_job(parallelism=0, completions=5), REGISTRY.instance(JobAdapter))
        )
        == []
    )


def test_a_job_the_webhook_never_saw_runs_as_no_gang() -> None:
    assert REGISTRY.instance(JobAdapter).gangs(msgspec.convert(make_job(), kube.Job)) == []


def test_job_pod_set_counts_parallelism_pods_with_their_requests() -> None:
    job = held(
        make_job(parallelism=8, completions=16, cpu="500m", gpus=1), REGISTRY.instance(JobAdapter)
    )
    [gang] = REGISTRY.instance(JobAdapter).gangs(job)
    [pods] = gang.pod_sets
    assert pods.count == 8
    assert pods.requests == {"cpu": 500, "memory": GI, "nvidia.com/gpu": 1000}


def test_job_with_negative_parallelism_is_denied_naming_the_field() -> None:
    with pytest.raises(Denied, match=r"spec\.parallelism"):
        REGISTRY.instance(JobAdapter).unheld(make_job(parallelism=-1))


def test_job_is_held_by_suspend_and_released_by_unsuspending_it() -> None:
    adapter = REGISTRY.instance(JobAdapter)
    job = held(make_job(), adapter)
    assert adapter.hold(job, []) == []
    [release] = adapter.release(job, [])
    assert isinstance(release, Patch) and release.body == {"spec": {"suspend": False}}
    job.spec.suspend = False
    assert adapter.release(job, []) == []
    [hold] = adapter.hold(job, [])
    assert isinstance(hold, Patch) and hold.body == {"spec": {"suspend": True}}


def test_a_complete_job_has_succeeded_and_a_failed_one_failed() -> None:
    adapter = REGISTRY.instance(JobAdapter)
    job = held(make_job(), adapter)
    assert adapter.finished(job) is None
    job.status.conditions.append(kube.Condition(type="Complete", status="True"))
    assert adapter.finished(job) is Finished.SUCCEEDED
    job.status.conditions[0] = kube.Condition(type="Failed", status="True")
    assert adapter.finished(job) is Finished.FAILED


def test_statefulset_is_one_gang_of_all_replicas() -> None:
    [gang] = StatefulSetAdapter().gangs(held(make_statefulset(replicas=5), StatefulSetAdapter()))
    assert (gang.name, gang.min_member, gang.pod_sets[0].count) == ("sts-serve", 5, 5)


def test_leaderworkerset_has_one_gang_per_group_with_leader_and_worker_pod_sets() -> None:
    adapter = LeaderWorkerSetAdapter()
    gangs = adapter.gangs(held(make_lws(replicas=3, size=4, cpu="1"), adapter))
    assert [g.name for g in gangs] == ["lws-llm-0", "lws-llm-1", "lws-llm-2"]
    leader, workers = gangs[0].pod_sets
    assert (leader.count, leader.requests["cpu"]) == (1, 2 * CPU)
    assert (workers.count, workers.requests["cpu"]) == (3, CPU)
    assert all(g.min_member == 4 for g in gangs)


def test_leaderworkerset_without_leader_template_uses_the_worker_template_for_the_leader() -> None:
    adapter = LeaderWorkerSetAdapter()
    [gang] = adapter.gangs(held(make_lws(replicas=1, size=2, leader=False, cpu="3"), adapter))
    assert [(p.name, p.requests["cpu"]) for p in gang.pod_sets] == [
        ("leader", 3 * CPU),
        ("worker", 3 * CPU),
    ]


def test_a_bare_pod_is_a_gang_of_one_and_a_pod_of_a_managed_statefulset_is_not() -> None:
    adapter = REGISTRY.instance(PodAdapter)
    [gang] = adapter.gangs(held(make_pod(), adapter))
    assert (gang.name, gang.min_member) == ("pod-worker-0", 1)
    of_managed_set = make_pod(owner_kind="StatefulSet", labels={names.POD_GROUP_LABEL: "sts-a"})
    assert adapter.gangs(held(of_managed_set, adapter)) == []


@pytest.mark.parametrize("owner", ["ReplicaSet", "StatefulSet"])
def test_a_pod_of_a_controller_kohort_does_not_manage_is_a_gang_of_one(owner: str) -> None:
    adapter = REGISTRY.instance(PodAdapter)
    pod = held(make_pod(owner_kind=owner), adapter)
    assert pod.metadata.labels[names.POD_GROUP_TOTAL_COUNT_LABEL] == "1"
    [gang] = adapter.gangs(pod)
    assert gang.min_member == 1


def test_pods_sharing_a_group_label_need_the_groups_size() -> None:
    pod = make_pod(labels={names.POD_GROUP_LABEL: "ring"})
    with pytest.raises(Denied, match="pod-group-total-count to the number of pods"):
        REGISTRY.instance(PodAdapter).default(Editor(pod), Mutation("research"))


def test_a_plain_pod_group_is_one_gang_of_its_total_count() -> None:
    adapter = REGISTRY.instance(PodAdapter)
    group = {names.POD_GROUP_LABEL: "ring", names.POD_GROUP_TOTAL_COUNT_LABEL: "4"}
    [gang] = adapter.gangs(held(make_pod(labels=group), adapter))
    assert (gang.name, gang.min_member, gang.pod_sets[0].count) == ("ring", 4, 4)


def test_a_pod_of_a_job_that_is_not_in_a_queue_is_refused() -> None:
    with pytest.raises(Denied, match=r"put kohort\.dev/queue-name on the Job itself"):
        REGISTRY.instance(PodAdapter).default(
            Editor(make_pod(owner_kind="Job")), Mutation("research")
        )


def test_releasing_a_plain_group_ungates_at_most_its_size_and_only_alike_pods() -> None:
    group = {names.POD_GROUP_LABEL: "ring", names.POD_GROUP_TOTAL_COUNT_LABEL: "2"}
    pods = [
        msgspec.convert(make_pod(f"p{i}", labels=group, gates=(names.ADMISSION_GATE,)), kube.Pod)
        for i in range(3)
    ]
    big = make_pod("p9", labels=group, gates=(names.ADMISSION_GATE,))
    big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"
    pods.insert(0, msgspec.convert(big, kube.Pod))
    writes = REGISTRY.instance(PodAdapter).release(pods[1], pods)
    assert sorted(w.name for w in writes) == ["p0", "p1"]


def test_pod_of_an_lws_group_gets_its_groups_podgroup() -> None:
    pod = make_pod(
        labels={names.LWS_NAME_LABEL: "llm", names.LWS_GROUP_INDEX_LABEL: "2"},
        owner_kind="StatefulSet",
    )
    editor = Editor(pod)
    REGISTRY.instance(PodAdapter).default(editor, Mutation("research"))
    annotations = editor.doc["metadata"]["annotations"]
    assert annotations[names.VOLCANO_GROUP_ANNOTATION] == "lws-llm-2"


def test_gated_pods_are_released_by_removing_only_the_admission_gate() -> None:
    pod = make_pod(gates=("example.com/other", names.ADMISSION_GATE))
    pod["metadata"]["resourceVersion"] = "7"
    view = msgspec.convert(pod, kube.Pod)
    [release] = REGISTRY.instance(PodAdapter).release(view, [view])
    assert isinstance(release, Patch) and release.type is PatchType.JSON
    assert release.body == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
    ]
    assert REGISTRY.instance(PodAdapter).hold(view, [view]) == []


def test_an_ungated_pod_of_a_gang_is_held_again_by_deleting_it() -> None:
    sts = msgspec.convert(make_statefulset(), kube.StatefulSet)
    view = msgspec.convert(make_pod(), kube.Pod)
    assert StatefulSetAdapter().release(sts, [view]) == []
    assert StatefulSetAdapter().hold(sts, [view]) == [Delete(kube.Pod.KIND, "team-a", "worker-0")]


def statefulset_pod(name: str, owner_uid: str | None) -> kube.Pod:
    pod = make_pod(name, gates=(names.ADMISSION_GATE,), labels={names.POD_GROUP_LABEL: "sts-serve"})
    if owner_uid is not None:
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": "serve",
                "uid": owner_uid,
                "controller": True,
            }
        ]
    return msgspec.convert(pod, kube.Pod)


def test_a_statefulset_releases_only_its_own_pods_below_its_replicas() -> None:
    sts_obj = make_statefulset()  # 3 replicas
    sts_obj["metadata"]["uid"] = "uid-serve"
    sts = msgspec.convert(sts_obj, kube.StatefulSet)
    pods = [
        statefulset_pod("serve-0", "uid-serve"),
        statefulset_pod("serve-2", "uid-serve"),
        statefulset_pod("serve-3", "uid-serve"),  # a scale-up not judged yet
        statefulset_pod("intruder", None),  # only carries the gang's label
        statefulset_pod("serve-1", "uid-other"),  # another set's pod
    ]
    released = [w.name for w in StatefulSetAdapter().release(sts, pods)]
    assert released == ["serve-0", "serve-2"]


def test_a_leaderworkerset_releases_only_pods_its_statefulsets_made() -> None:
    lws = msgspec.convert(make_lws(), kube.LeaderWorkerSet)
    name = lws.metadata.name
    labels = {names.LWS_NAME_LABEL: name, names.LWS_GROUP_INDEX_LABEL: "0"}
    made = make_pod(
        f"{name}-0", gates=(names.ADMISSION_GATE,), labels=labels, owner_kind="StatefulSet"
    )
    fake = make_pod("fake", gates=(names.ADMISSION_GATE,), labels=labels)
    pods = [msgspec.convert(p, kube.Pod) for p in (made, fake)]
    for pod in pods:
        assert pod.metadata.labels[names.LWS_NAME_LABEL] == name
    released = [w.name for w in LeaderWorkerSetAdapter().release(lws, pods)]
    assert released == [f"{name}-0"]


def test_pod_requests_count_sidecars_and_the_largest_init_container() -> None:
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "1"}}}, {"resources": {}}],
        "initContainers": [
            {"resources": {"requests": {"cpu": "4"}}},
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests(msgspec.convert(spec, kube.PodSpec)) == {"cpu": 4000 + 100}


def test_long_names_give_gang_names_that_fit_a_label_value() -> None:
    long = gang_name("job", "x" * 80)
    assert len(long) <= 63 and long != gang_name("job", "x" * 81)


def test_every_kind_is_registered_once() -> None:
    assert len(ADAPTERS) == 8
    assert isinstance(REGISTRY.adapter_for("batch", "v1", "Job"), JobAdapter)
    assert isinstance(REGISTRY.adapter_for("apps", "v1", "StatefulSet"), StatefulSetAdapter)
    assert isinstance(
        REGISTRY.adapter_for("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
        LeaderWorkerSetAdapter,
    )
    assert isinstance(REGISTRY.adapter_for("jobset.x-k8s.io", "v1alpha2", "JobSet"), JobSetAdapter)
    assert isinstance(REGISTRY.adapter_for("kubeflow.org", "v1", "PyTorchJob"), PyTorchJobAdapter)
    assert isinstance(REGISTRY.adapter_for("ray.io", "v1", "RayCluster"), RayClusterAdapter)
    assert isinstance(REGISTRY.adapter_for("ray.io", "v1", "RayJob"), RayJobAdapter)
    assert isinstance(REGISTRY.adapter_for("", "v1", "Pod"), PodAdapter)
    assert REGISTRY.adapter_for("apps", "v1", "Deployment") is None


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        ({names.LWS_NAME_LABEL: "llm", names.LWS_GROUP_INDEX_LABEL: "0"}, "LeaderWorkerSet"),
        (
            {names.POD_GROUP_LABEL: "sts-serve", names.POD_GROUP_TOTAL_COUNT_LABEL: "1"},
            "choose another name",
        ),
    ],
    ids=["lws labels on a bare pod", "a plain group named like a StatefulSet's gang"],
)
def test_a_pod_that_pretends_to_belong_to_another_workload_is_refused(
    labels: dict[str, str], want: str
) -> None:
    with pytest.raises(Denied, match=want):
        REGISTRY.instance(PodAdapter).default(Editor(make_pod(labels=labels)), Mutation("research"))
    assert want in (REGISTRY.instance(PodAdapter).unheld(make_pod(labels=labels)) or "")


def test_the_sets_of_kinds_other_code_asks_about_follow_from_the_adapters_facts() -> None:
    assert REGISTRY.kinds == tuple(ADAPTERS)
    assert " ".join(k.kind for k in REGISTRY.kinds) == (
        "Job StatefulSet LeaderWorkerSet JobSet PyTorchJob RayCluster RayJob Pod"
    )
    # Whose CRDs a cluster may lack, who makes Jobs for their gang, whose pods are gated, whose
    # operator alone makes pods, and the gang names no plain pod group may take.
    assert REGISTRY.optional_kinds == {
        kinds.LEADERWORKERSETS,
        kinds.JOBSETS,
        kinds.PYTORCHJOBS,
        kinds.RAYCLUSTERS,
        kinds.RAYJOBS,
    }
    assert REGISTRY.makers_of(kinds.JOBS) == (kinds.JOBSETS, kinds.RAYJOBS)
    assert REGISTRY.makers_of(kinds.RAYCLUSTERS) == (kinds.RAYJOBS,)
    assert REGISTRY.gated_pod_makers == (kinds.STATEFULSETS, kinds.PYTORCHJOBS, kinds.RAYCLUSTERS)
    assert REGISTRY.operator_pod_makers == (kinds.PYTORCHJOBS, kinds.RAYCLUSTERS)
    assert REGISTRY.instance(PodAdapter).reserved_prefixes() == (
        "job-",
        "sts-",
        "lws-",
        "jobset-",
        "pytorchjob-",
        "raycluster-",
        "rayjob-",
    )


def test_an_adapter_that_asks_about_other_kinds_must_come_from_a_registry() -> None:
    with pytest.raises(LookupError, match="take it from a registry"):
        JobAdapter().gangs(msgspec.convert(make_job(), kube.Job))
    with pytest.raises(ValueError, match="registered twice: Job"):
        REGISTRY.with_kinds(JobAdapter())
