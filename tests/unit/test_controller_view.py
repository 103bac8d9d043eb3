"""The controller's view of the cluster: gangs found from objects, and the core's snapshot."""

from __future__ import annotations

import copy
from typing import Any

from controller.api import Workload, names
from controller.cluster.informers import Backoff, Informer, newer_or_same
from controller.cluster.snapshots import build_snapshot, queue_spec
from controller.cluster.view import ClusterView, build_view
from controller.cluster.writers import (
    PodGroupSettings,
    podgroup_object,
    set_condition,
    workload_object,
)
from controller.reconciler import explain
from controller.workloads.base import Admission, Backend
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.statefulset import StatefulSetAdapter
from controller.workloads.testing import make_job, make_statefulset
from webhook.validation import model_problem

JSON = dict[str, Any]


def held(obj: JSON, adapter: Any, queue: str = "research") -> JSON:
    """The object as kohort's webhook stores it (gang fields and hold added)."""
    editor = Editor(copy.deepcopy(obj))
    adapter.default(editor, Admission(queue))
    editor.doc["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
    editor.doc["metadata"]["creationTimestamp"] = "2026-11-22T01:00:00Z"
    return editor.doc


def cluster_queue(name: str, nominal: dict[str, str], cohort: str | None = None) -> JSON:
    resources = [{"name": r, "nominalQuota": q} for r, q in nominal.items()]
    spec: JSON = {
        "resourceGroups": [
            {
                "coveredResources": [r["name"] for r in resources],
                "flavors": [{"name": "default", "resources": resources}],
            }
        ]
    }
    if cohort:
        spec["cohort"] = cohort
    return {"metadata": {"name": name}, "spec": spec}


def local_queue(namespace: str, name: str, cq: str) -> JSON:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"clusterQueue": cq}}


def node(name: str, cpu: str = "8", gpus: int = 0, taints: list[JSON] | None = None) -> JSON:
    allocatable = {"cpu": cpu, "memory": "64Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "labels": {"pool": "a"}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def view_of(**objects: list[JSON]) -> ClusterView:
    kinds = [
        "jobs",
        "statefulsets",
        "leaderworkersets",
        "pods",
        "workloads",
        "cluster_queues",
        "local_queues",
        "nodes",
        "podgroups",
    ]
    return build_view(**{k: objects.get(k, []) for k in kinds})  # type: ignore[arg-type]


def test_a_held_job_is_one_gang_named_after_its_template_label() -> None:
    job = held(make_job("train", namespace="team-a", parallelism=4, completions=4), JobAdapter())

    view = view_of(jobs=[job])

    gang = view.gangs["team-a/job-train"]
    assert gang.min_member == 4
    assert gang.queue == "research"
    assert gang.workload is None
    assert gang.pod_sets[0].requests == {"cpu": 1000, "memory": 2**30 * 1000}


def test_a_job_the_webhook_never_saw_is_not_a_gang() -> None:
    view = view_of(jobs=[make_job("raw", namespace="team-a")])

    assert view.gangs == {}


def test_a_completed_job_is_a_finished_gang() -> None:
    job = held(make_job("done", namespace="team-a"), JobAdapter())
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}

    assert view_of(jobs=[job]).gangs["team-a/job-done"].finished == "Succeeded"


def test_a_workload_whose_owner_is_gone_is_an_orphan() -> None:
    workload = {
        "metadata": {
            "namespace": "team-a",
            "name": "job-gone",
            "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE},
        }
    }

    assert view_of(workloads=[workload]).orphans == [workload]


def test_statefulset_pods_join_their_gang_by_the_pod_group_label() -> None:
    sts = held(make_statefulset("serve", namespace="team-a", replicas=2), StatefulSetAdapter())
    pod = {
        "metadata": {
            "namespace": "team-a",
            "name": "serve-0",
            "labels": {names.POD_GROUP_LABEL: "sts-serve"},
            "ownerReferences": [{"kind": "StatefulSet", "name": "serve", "controller": True}],
        },
        "spec": {"schedulingGates": [{"name": names.ADMISSION_GATE}], "containers": []},
    }

    gang = view_of(statefulsets=[sts], pods=[pod]).gangs["team-a/sts-serve"]

    assert [p["metadata"]["name"] for p in gang.gated_pods()] == ["serve-0"]


def test_cluster_queue_quota_sums_flavors_and_keeps_cohort_weight_and_policy() -> None:
    cq = cluster_queue("team-a", {"nvidia.com/gpu": "8", "cpu": "16"}, cohort="research")
    cq["spec"]["resourceGroups"][0]["flavors"].append(
        {"name": "spot", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "4"}]}
    )
    cq["spec"]["fairSharing"] = {"weight": "2"}
    cq["spec"]["preemption"] = {"reclaimWithinCohort": "Any"}

    spec = queue_spec(cq)

    assert spec.quotas["nvidia.com/gpu"].nominal == 12_000
    assert spec.quotas["cpu"].nominal == 16_000
    assert spec.cohort == "research"
    assert spec.weight == 2.0
    assert spec.reclaim_within_cohort == "Any"


def test_snapshot_counts_foreign_pods_as_used_and_pending_gangs_in_their_cluster_queue() -> None:
    job = held(make_job("train", namespace="team-a", parallelism=2, completions=2), JobAdapter())
    foreign = {
        "metadata": {"namespace": "other", "name": "web"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}],
        },
        "status": {"phase": "Running"},
    }
    view = view_of(
        jobs=[job],
        pods=[foreign],
        cluster_queues=[cluster_queue("cq-a", {"cpu": "10"})],
        local_queues=[local_queue("team-a", "research", "cq-a")],
        nodes=[node("n1"), node("n2", taints=[{"key": "x", "effect": "NoSchedule"}])],
    )
    gang = view.gangs["team-a/job-train"]

    parts = build_snapshot(view, now=0.0, pending=[gang], admitted=[])

    n1 = next(n for n in parts.snapshot.nodes if n.name == "n1")
    assert n1.used["cpu"] == 3000
    n2 = next(n for n in parts.snapshot.nodes if n.name == "n2")
    assert [t.key for t in n2.taints] == ["x"]
    assert parts.snapshot.pending[0].queue == "cq-a"
    assert parts.snapshot.pending[0].name == "team-a/job-train"


def test_pending_reasons_read_like_answers_to_why_is_my_job_not_running() -> None:
    assert explain("quota: needs 8 nvidia.com/gpu, queue can take 6 more").startswith(
        "Waiting for quota: needs 8 nvidia.com/gpu"
    )
    assert explain("quota ok; placement: needs 1 pod x 8 nvidia.com/gpu").startswith(
        "Quota ok but no node fits: needs 1 pod"
    )


def test_a_store_never_goes_back_to_an_older_resource_version() -> None:
    informer = Informer(None, None)  # type: ignore[arg-type]
    new = {"metadata": {"namespace": "a", "name": "x", "resourceVersion": "20"}}
    old = {"metadata": {"namespace": "a", "name": "x", "resourceVersion": "7"}}

    informer.put(new)
    informer.put(old)

    assert informer.get("a", "x") is new
    assert newer_or_same(new, old) and not newer_or_same(old, new)


def test_backoff_grows_with_jitter_up_to_its_cap() -> None:
    backoff = Backoff(base=1.0, cap=8.0)

    delays = [backoff.next_delay() for _ in range(6)]

    assert 0.5 <= delays[0] <= 1.0
    assert 4.0 <= delays[-1] <= 8.0
    backoff.reset()
    assert backoff.next_delay() <= 1.0


def test_a_volcano_podgroup_asks_for_the_whole_gang_in_the_configured_queue() -> None:
    job = held(make_job("train", namespace="team-a", parallelism=4, completions=4), JobAdapter())
    job["spec"]["template"]["spec"]["priorityClassName"] = "high"
    gang = view_of(jobs=[job]).gangs["team-a/job-train"]
    gang.workload = {"metadata": {"name": "job-train", "uid": "wl-uid"}}

    pg = podgroup_object(gang, PodGroupSettings(Backend.VOLCANO, "research"))

    assert pg is not None
    assert pg["spec"] == {
        "minMember": 4,
        "minResources": {"cpu": "4", "memory": str(4 * 2**30)},
        "queue": "research",
        "priorityClassName": "high",
    }
    owner = pg["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Workload", "job-train", "wl-uid")


def test_no_podgroup_is_made_without_a_gang_backend() -> None:
    job = held(make_job("train", namespace="team-a"), JobAdapter())
    gang = view_of(jobs=[job]).gangs["team-a/job-train"]
    gang.workload = {"metadata": {"name": "job-train", "uid": "wl-uid"}}

    assert podgroup_object(gang, PodGroupSettings(Backend.NONE)) is None


def test_a_coscheduling_podgroup_has_min_member_and_resources_but_no_volcano_fields() -> None:
    job = held(make_job("train", namespace="team-a", parallelism=2, completions=2), JobAdapter())
    gang = view_of(jobs=[job]).gangs["team-a/job-train"]
    gang.workload = {"metadata": {"name": "job-train", "uid": "wl-uid"}}

    pg = podgroup_object(gang, PodGroupSettings(Backend.COSCHEDULING))

    assert pg is not None
    assert pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert pg["spec"] == {"minMember": 2, "minResources": {"cpu": "2", "memory": str(2 * 2**30)}}


def test_the_workload_the_controller_writes_passes_the_api_model_the_webhook_enforces() -> None:
    job = held(make_job("train", namespace="team-a", parallelism=2, completions=2), JobAdapter())
    job["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    job["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    gang = view_of(jobs=[job]).gangs["team-a/job-train"]

    body = workload_object(gang, priority=100)

    assert model_problem("Workload", body) is None
    body["status"] = {
        "conditions": set_condition([], "QuotaReserved", "True", "QuotaReserved", "fits", 0.0),
        "admission": {
            "clusterQueue": "research",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 2,
                    "resourceUsage": {"cpu": "2"},
                    "nodes": [{"node": "n1", "count": 2}],
                }
            ],
            "admittedAt": "2027-01-15T08:00:00Z",
        },
    }
    assert model_problem("Workload", body) is None
    model = Workload.model_validate(body)
    assert model.spec.pod_sets[0].tolerations[0].operator == "Exists"
