"""The controller's state: gangs found from objects, the engine they feed, the writes planned."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec

from controller.api import kinds, names
from controller.api.kinds import Kind
from controller.api.workload import Workload
from controller.cluster.cache import models
from controller.cluster.clients import decoder
from controller.quota import Admission, Fungibility, PendingCause, PodPlacement, Quota
from controller.settings import Settings
from controller.state import objects
from controller.state.cluster import ClusterState
from controller.state.cohorts import queue_spec
from controller.state.objects import PodGroupSettings, admitted_status, podgroup_for, workload_for
from controller.state.steps import CreateWorkload, DeletePodGroup, DeleteWorkload
from controller.workloads.base import Backend, Mutation, Patch, is_gated
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.registry import REGISTRY
from controller.workloads.statefulset import StatefulSetAdapter
from tests.fakes.workloads import make_job, make_statefulset
from webhook.validation import model_problem

JSON = dict[str, Any]
MODELS = models(REGISTRY, kinds.VOLCANO_PODGROUPS)
NOW = 1_800_000_000.0


def held(obj: JSON, adapter: Any, queue: str = "research") -> JSON:
    """The object as kohort's webhook stores it (gang fields and hold added)."""
    editor = Editor(copy.deepcopy(obj))
    adapter.default(editor, Mutation(queue))
    editor.doc["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
    editor.doc["metadata"]["creationTimestamp"] = "2026-11-22T01:00:00Z"
    return editor.doc


def typed(kind: Kind, obj: JSON) -> Any:
    return decoder(MODELS[kind])(json.dumps(obj).encode())


def state_of(*objects: tuple[Kind, JSON], settings: Settings | None = None) -> ClusterState:
    state = ClusterState(settings or Settings(), PodGroupSettings())
    for kind, obj in objects:
        state.observe(kind, None, typed(kind, obj))
    return state


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


def node(name: str, cpu: str = "8", taints: list[JSON] | None = None) -> JSON:
    return {
        "metadata": {"name": name, "labels": {"pool": "a"}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def workload_of(gang_name: str, namespace: str = "team-a") -> JSON:
    return {
        "metadata": {
            "namespace": namespace,
            "name": gang_name,
            "uid": f"wl-{gang_name}",
            "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE},
        },
        "spec": {"queueName": "research", "podSets": [{"name": "main", "count": 1}]},
    }


def test_a_held_job_is_one_gang_named_after_its_template_label() -> None:
    job = held(
        make_job("train", namespace="team-a", parallelism=4, completions=4),
        REGISTRY.instance(JobAdapter),
    )

    state = state_of((kinds.JOBS, job))

    gang = state.index.get(("team-a", "job-train"))
    assert gang is not None and gang.shape is not None
    assert gang.shape.min_member == 4
    assert gang.queue == "research"
    assert gang.workload is None
    assert gang.shape.pod_sets[0].requests == {"cpu": 1000, "memory": 2**30 * 1000}


def test_a_new_gang_in_a_queue_gets_a_workload_first() -> None:
    job = held(make_job("train", namespace="team-a"), REGISTRY.instance(JobAdapter))

    work = state_of((kinds.JOBS, job)).sync(NOW).work

    [step] = work[("team-a", "job-train")]
    assert isinstance(step, CreateWorkload)
    assert step.workload.spec.queue_name == "research"


def test_a_job_the_webhook_never_saw_is_not_a_gang() -> None:
    state = state_of((kinds.JOBS, make_job("raw", namespace="team-a")))

    assert list(state.index) == []


def test_a_completed_job_is_a_finished_gang() -> None:
    job = held(make_job("done", namespace="team-a"), REGISTRY.instance(JobAdapter))
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}

    gang = state_of((kinds.JOBS, job)).index.get(("team-a", "job-done"))

    assert gang is not None and gang.finished == "Succeeded"


def test_a_workload_whose_owner_is_gone_is_deleted_with_its_podgroup() -> None:
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"namespace": "team-a", "name": "job-gone"},
        "spec": {"minMember": 1},
    }
    state = state_of(
        (kinds.WORKLOADS, workload_of("job-gone")), (kinds.VOLCANO_PODGROUPS, podgroup)
    )
    alone = state_of((kinds.WORKLOADS, workload_of("job-gone")))

    steps = state.sync(NOW).work[("team-a", "job-gone")]

    assert [type(s) for s in steps] == [DeletePodGroup, DeleteWorkload]
    assert [type(s) for s in alone.sync(NOW).work[("team-a", "job-gone")]] == [DeleteWorkload]


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

    gang = state_of((kinds.STATEFULSETS, sts), (kinds.PODS, pod)).index.get(("team-a", "sts-serve"))

    assert gang is not None
    assert list(gang.pods) == ["serve-0"] and is_gated(gang.pods["serve-0"])


def test_cluster_queue_quota_is_kept_per_flavor_with_cohort_weight_and_policy() -> None:
    cq = cluster_queue("team-a", {"nvidia.com/gpu": "8", "cpu": "16"}, cohort="research")
    cq["spec"]["resourceGroups"][0]["flavors"].append(
        {
            "name": "spot",
            "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": "4", "borrowingLimit": "2"},
                {"name": "cpu", "nominalQuota": "8", "lendingLimit": "1"},
            ],
        }
    )
    cq["spec"]["fairSharing"] = {"weight": "2"}
    cq["spec"]["preemption"] = {"reclaimWithinCohort": "Any"}
    cq["spec"]["flavorFungibility"] = {"whenCanBorrow": "TryNextFlavor"}

    spec = queue_spec(typed(kinds.CLUSTER_QUEUES, cq))

    [group] = spec.groups
    assert group.resources == ("nvidia.com/gpu", "cpu")
    assert [f.flavor for f in group.flavors] == ["default", "spot"]
    default, spot = group.flavors
    assert default.quotas["nvidia.com/gpu"] == Quota(nominal=8_000)
    assert spot.quotas["nvidia.com/gpu"] == Quota(nominal=4_000, borrowing_limit=2_000)
    assert spot.quotas["cpu"] == Quota(nominal=8_000, lending_limit=1_000)
    assert spec.quotas == {}
    assert spec.fungibility == Fungibility("TryNextFlavor", "TryNextFlavor")
    assert spec.cohort == "research"
    assert spec.weight == 2.0
    assert spec.reclaim_within_cohort == "Any"


def test_the_engine_counts_foreign_pods_as_used_and_pending_gangs_in_their_cluster_queue() -> None:
    job = held(
        make_job("train", namespace="team-a", parallelism=2, completions=2),
        REGISTRY.instance(JobAdapter),
    )
    foreign = {
        "metadata": {"namespace": "other", "name": "web"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}],
        },
        "status": {"phase": "Running"},
    }
    state = state_of(
        (kinds.JOBS, job),
        (kinds.WORKLOADS, workload_of("job-train")),
        (kinds.PODS, foreign),
        (kinds.CLUSTER_QUEUES, cluster_queue("cq-a", {"cpu": "10"})),
        (kinds.LOCAL_QUEUES, local_queue("team-a", "research", "cq-a")),
        (kinds.NODES, node("n1")),
        (kinds.NODES, node("n2", taints=[{"key": "x", "effect": "NoSchedule"}])),
    )

    state.sync(NOW)

    engine = state.engine
    n1 = engine.index.by_name["n1"]
    assert engine.index.free[n1][engine.index.order.index("cpu")] == 8000 - 3000
    n2 = engine.index.by_name["n2"]
    assert [t.key for t in engine.index.class_of[n2].taints] == ["x"]
    queue, _ = engine.pending["team-a/job-train"]
    assert queue is not None and queue.name == "cq-a"


def test_pods_shutting_down_hold_their_nodes_even_once_their_gang_is_admitted_again() -> None:
    # A preempted gang goes back in its queue at once: it can be admitted again, on n1, while
    # its old pod on n2 still shuts down.
    job = held(
        make_job("train", namespace="team-a", parallelism=1, completions=1),
        REGISTRY.instance(JobAdapter),
    )
    body = workload_for(gang_with_workload(job), priority=0).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    readmitted = Admission("team-a/job-train", "research", (PodPlacement("main", "n1", 1),))
    status = admitted_status(gang_with_workload(job), readmitted, NOW)
    body["status"] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    old_pod = {
        "metadata": {
            "namespace": "team-a",
            "name": "train-old",
            "labels": {names.POD_GROUP_LABEL: "job-train"},
            "ownerReferences": [
                {"kind": "Job", "name": "train", "uid": "uid-train", "controller": True}
            ],
            "deletionTimestamp": "2026-11-22T01:05:00Z",
        },
        "spec": {
            "nodeName": "n2",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}],
        },
        "status": {"phase": "Running"},
    }
    state = state_of(
        (kinds.JOBS, job),
        (kinds.WORKLOADS, body),
        (kinds.PODS, old_pod),
        (kinds.CLUSTER_QUEUES, cluster_queue("cq-a", {"cpu": "10"})),
        (kinds.LOCAL_QUEUES, local_queue("team-a", "research", "cq-a")),
        (kinds.NODES, node("n1")),
        (kinds.NODES, node("n2")),
    )

    state.sync(NOW)

    index = state.engine.index
    assert state.mirror.members[("team-a", "job-train")].state == "admitted"
    assert index.free[index.by_name["n2"]][index.order.index("cpu")] == 8000 - 3000


def test_a_gang_whose_local_queue_is_missing_waits_and_says_so() -> None:
    job = held(make_job("train", namespace="team-a"), REGISTRY.instance(JobAdapter))
    state = state_of((kinds.JOBS, job), (kinds.WORKLOADS, workload_of("job-train")))

    state.sync(NOW)

    member = state.mirror.members[("team-a", "job-train")]
    assert member.state == "waiting" and member.why is not None
    assert member.why.cause is PendingCause.NO_LOCAL_QUEUE
    assert member.why.describe() == "LocalQueue 'research' does not exist in namespace team-a"


def gang_with_workload(job: JSON) -> Any:
    state = state_of((kinds.JOBS, job), (kinds.WORKLOADS, workload_of("job-train")))
    return state.index.get(("team-a", "job-train"))


def test_a_volcano_podgroup_asks_for_the_whole_gang_in_the_configured_queue() -> None:
    job = held(
        make_job("train", namespace="team-a", parallelism=4, completions=4),
        REGISTRY.instance(JobAdapter),
    )
    job["spec"]["template"]["spec"]["priorityClassName"] = "high"

    step = podgroup_for(gang_with_workload(job), PodGroupSettings(Backend.VOLCANO, "research"))

    assert step is not None
    body = step.podgroup
    assert body.spec.min_member == 4
    assert body.spec.min_resources == {"cpu": "4", "memory": str(4 * 2**30)}
    assert (body.spec.queue, body.spec.priority_class_name) == ("research", "high")
    [owner] = body.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("Workload", "job-train", "wl-job-train")


def test_kubernetes_backend_makes_a_scheduling_workload_whose_gang_is_the_whole_gang() -> None:
    job = held(
        make_job("train", namespace="team-a", parallelism=4, completions=4),
        REGISTRY.instance(JobAdapter),
    )

    step = podgroup_for(gang_with_workload(job), PodGroupSettings(Backend.KUBERNETES))

    assert step is not None and step.kind == kinds.SCHEDULING_WORKLOADS
    body = msgspec.to_builtins(step.podgroup)
    assert (body["apiVersion"], body["kind"]) == ("scheduling.k8s.io/v1alpha1", "Workload")
    assert body["spec"] == {"podGroups": [{"name": "gang", "policy": {"gang": {"minCount": 4}}}]}
    [owner] = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Workload", "job-train")


def test_kubernetes_backend_at_v1beta1_makes_a_scheduling_podgroup_of_the_whole_gang() -> None:
    job = held(
        make_job("train", namespace="team-a", parallelism=4, completions=4),
        REGISTRY.instance(JobAdapter),
    )

    settings = PodGroupSettings(Backend.KUBERNETES, gang_api="v1beta1")
    step = podgroup_for(gang_with_workload(job), settings)

    assert step is not None and step.kind == kinds.SCHEDULING_PODGROUPS
    body = msgspec.to_builtins(step.podgroup)
    assert (body["apiVersion"], body["kind"]) == ("scheduling.k8s.io/v1beta1", "PodGroup")
    assert body["metadata"]["name"] == "job-train"
    assert body["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    # The pods' priority class, which kube-scheduler requires the PodGroup to have too.
    job["spec"]["template"]["spec"]["priorityClassName"] = "high"
    step = podgroup_for(gang_with_workload(job), settings)
    assert step is not None
    assert msgspec.to_builtins(step.podgroup)["spec"]["priorityClassName"] == "high"


def test_no_podgroup_is_made_without_a_gang_backend() -> None:
    job = held(make_job("train", namespace="team-a"), REGISTRY.instance(JobAdapter))

    assert podgroup_for(gang_with_workload(job), PodGroupSettings(Backend.NONE)) is None


def test_a_coscheduling_podgroup_has_min_member_and_resources_but_no_volcano_fields() -> None:
    job = held(
        make_job("train", namespace="team-a", parallelism=2, completions=2),
        REGISTRY.instance(JobAdapter),
    )

    step = podgroup_for(gang_with_workload(job), PodGroupSettings(Backend.COSCHEDULING))

    assert step is not None and step.kind == kinds.COSCHEDULING_PODGROUPS
    body = msgspec.to_builtins(step.podgroup)
    assert body["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert body["spec"] == {"minMember": 2, "minResources": {"cpu": "2", "memory": str(2 * 2**30)}}


def test_the_workload_the_controller_writes_passes_the_api_model_the_webhook_enforces() -> None:
    job = held(
        make_job("train", namespace="team-a", parallelism=2, completions=2),
        REGISTRY.instance(JobAdapter),
    )
    job["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    job["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    gang = gang_with_workload(job)

    created = workload_for(gang, priority=100)
    body = created.model_dump(mode="json", by_alias=True, exclude_none=True)

    assert model_problem("Workload", body) is None
    placement = (PodPlacement("main", "n1", 2),)
    status = admitted_status(gang, Admission("team-a/job-train", "research", placement), NOW)
    body["status"] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert model_problem("Workload", body) is None
    model = Workload.model_validate(body)
    assert model.spec.pod_sets[0].tolerations[0].operator == "Exists"
    assert model.status is not None and model.status.admission is not None
    assert model.status.admission.pod_set_assignments[0].nodes[0].node == "n1"


def test_an_admissions_record_coming_back_changes_nothing_in_the_engine() -> None:
    job = held(make_job("train", namespace="team-a", parallelism=3, completions=3), JobAdapter())
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"
    pending = workload_of("job-train")
    state = state_of(
        (kinds.JOBS, job),
        (kinds.WORKLOADS, pending),
        (kinds.RESOURCE_FLAVORS, {"metadata": {"name": "default"}, "spec": {}}),
        (kinds.CLUSTER_QUEUES, cluster_queue("cq-a", {"cpu": "20", "memory": "10Gi"})),
        (kinds.LOCAL_QUEUES, local_queue("team-a", "research", "cq-a")),
        (kinds.NODES, node("n1")),
        (kinds.NODES, node("n2")),
        (kinds.NODES, node("n3")),
    )
    state.sync(NOW)
    [admission] = state.decide(NOW + 0.25).admissions
    assert len({p.node for p in admission.placement}) == 3  # one pod per node: 5 of 8 cpu
    plan = state.plan_admissions([admission], NOW + 0.25)
    [write] = [s for s in plan.records[("team-a", "job-train")] if hasattr(s, "status")]
    admitted = {**pending, "status": objects.as_patch(write.status)}
    decided = state.mirror.members[("team-a", "job-train")]
    calls: list[str] = []
    for name in ("move", "finish", "add_admitted", "add_pending", "remove_pending"):
        method = getattr(state.engine, name)
        setattr(state.engine, name, lambda *a, _n=name, _m=method: calls.append(_n) or _m(*a))

    state.observe(
        kinds.WORKLOADS, typed(kinds.WORKLOADS, pending), typed(kinds.WORKLOADS, admitted)
    )
    state.sync(NOW + 1)

    assert calls == []
    assert state.mirror.members[("team-a", "job-train")] == decided
    assert state.engine.running["team-a/job-train"][1].plan


def test_an_admission_releases_the_gang_pinned_to_the_hostnames_of_its_planned_nodes() -> None:
    job = held(
        make_job("train", namespace="team-a", parallelism=2, completions=2),
        REGISTRY.instance(JobAdapter),
    )
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"
    hosts = []
    for name in ("n1", "n2", "n3"):
        obj = node(name)
        obj["metadata"]["labels"]["kubernetes.io/hostname"] = f"host-{name}"
        hosts.append((kinds.NODES, obj))
    state = state_of(
        (kinds.JOBS, job),
        (kinds.WORKLOADS, workload_of("job-train")),
        (kinds.RESOURCE_FLAVORS, {"metadata": {"name": "default"}, "spec": {}}),
        (kinds.CLUSTER_QUEUES, cluster_queue("cq-a", {"cpu": "20", "memory": "10Gi"})),
        (kinds.LOCAL_QUEUES, local_queue("team-a", "research", "cq-a")),
        *hosts,
    )
    state.sync(NOW)
    [admission] = state.decide(NOW).admissions

    plan = state.plan_admissions([admission], NOW)

    [release] = [s for s in plan.releases[("team-a", "job-train")] if isinstance(s, Patch)]
    affinity = release.body["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    [term] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    planned = sorted(f"host-{p.node}" for p in admission.placement)
    assert term["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": planned}
    ]
