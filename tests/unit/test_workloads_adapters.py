"""Each workload kind: its gangs, how it is held, released and evicted."""

from __future__ import annotations

import pytest

from controller.api import names
from controller.workloads.base import Admission, Denied, Hold, gang_name
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.leaderworkerset import LeaderWorkerSetAdapter
from controller.workloads.pod import PodAdapter
from controller.workloads.registry import adapter_for
from controller.workloads.requests import pod_requests
from controller.workloads.statefulset import StatefulSetAdapter
from controller.workloads.testing import make_job, make_lws, make_pod, make_statefulset

CPU, GI = 1000, 2**30 * 1000


@pytest.mark.parametrize(
    ("parallelism", "completions", "want_size"),
    [(4, 4, 4), (4, 2, 2), (3, None, 3), (None, None, 1), (0, 5, 0)],
    ids=["equal", "fewer-completions", "completions-unset", "both-unset", "paused"],
)
def test_job_gang_size_is_min_of_parallelism_and_completions(
    parallelism: int | None, completions: int | None, want_size: int
) -> None:
    [gang] = JobAdapter().gangs(make_job(parallelism=parallelism, completions=completions))
    assert gang.min_member == want_size
    assert gang.name == "job-train"


def test_job_pod_set_counts_parallelism_pods_with_their_requests() -> None:
    [gang] = JobAdapter().gangs(make_job(parallelism=8, completions=16, cpu="500m", gpus=1))
    [pods] = gang.pod_sets
    assert pods.count == 8
    assert pods.requests == {"cpu": 500, "memory": GI, "nvidia.com/gpu": 1000}


def test_job_with_negative_parallelism_is_denied_naming_the_field() -> None:
    with pytest.raises(Denied, match=r"spec\.parallelism"):
        JobAdapter().gangs(make_job(parallelism=-1))


def test_job_is_held_by_suspend_and_released_by_the_controller() -> None:
    job = JobAdapter()
    editor = Editor(make_job())
    job.default(editor, Admission("research"))
    assert job.hold is Hold.SUSPEND and job.is_held(editor.doc)
    job.release(editor)
    assert not job.is_held(editor.doc)
    job.evict(editor)
    assert job.is_held(editor.doc)


def test_statefulset_is_one_gang_of_all_replicas() -> None:
    [gang] = StatefulSetAdapter().gangs(make_statefulset(replicas=5))
    assert (gang.name, gang.min_member, gang.pod_sets[0].count) == ("sts-serve", 5, 5)


def test_leaderworkerset_has_one_gang_per_group_with_leader_and_worker_pod_sets() -> None:
    gangs = LeaderWorkerSetAdapter().gangs(make_lws(replicas=3, size=4, cpu="1"))
    assert [g.name for g in gangs] == ["lws-llm-0", "lws-llm-1", "lws-llm-2"]
    leader, workers = gangs[0].pod_sets
    assert (leader.count, leader.requests["cpu"]) == (1, 2 * CPU)
    assert (workers.count, workers.requests["cpu"]) == (3, CPU)
    assert all(g.min_member == 4 for g in gangs)


def test_leaderworkerset_without_leader_template_uses_the_worker_template_for_the_leader() -> None:
    [gang] = LeaderWorkerSetAdapter().gangs(make_lws(replicas=1, size=2, leader=False))
    assert [p.template_path[-1] for p in gang.pod_sets] == ["workerTemplate", "workerTemplate"]


def test_pod_of_an_lws_group_gets_its_groups_podgroup() -> None:
    pod = make_pod(
        labels={names.LWS_NAME_LABEL: "llm", names.LWS_GROUP_INDEX_LABEL: "2"},
        owner_kind="StatefulSet",
    )
    editor = Editor(pod)
    PodAdapter().default(editor, Admission("research"))
    annotations = editor.doc["metadata"]["annotations"]
    assert annotations[names.VOLCANO_GROUP_ANNOTATION] == "lws-llm-2"


def test_pod_is_released_by_removing_only_the_admission_gate() -> None:
    editor = Editor(make_pod(gates=("example.com/other", names.ADMISSION_GATE)))
    pods = PodAdapter()
    assert pods.is_held(editor.doc)
    pods.release(editor)
    assert not pods.is_held(editor.doc)
    assert editor.doc["spec"]["schedulingGates"] == [{"name": "example.com/other"}]


def test_pod_requests_count_sidecars_and_the_largest_init_container() -> None:
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "1"}}}, {"resources": {}}],
        "initContainers": [
            {"resources": {"requests": {"cpu": "4"}}},
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests(spec) == {"cpu": 4000 + 100}


def test_long_names_give_gang_names_that_fit_a_label_value() -> None:
    long = gang_name("job", "x" * 80)
    assert len(long) <= 63 and long != gang_name("job", "x" * 81)


def test_every_kind_is_registered_once() -> None:
    assert isinstance(adapter_for("batch", "v1", "Job"), JobAdapter)
    assert isinstance(adapter_for("apps", "v1", "StatefulSet"), StatefulSetAdapter)
    assert isinstance(
        adapter_for("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"), LeaderWorkerSetAdapter
    )
    assert isinstance(adapter_for("", "v1", "Pod"), PodAdapter)
    assert adapter_for("apps", "v1", "Deployment") is None
