"""POST /mutate as a pure function: the patch, applied with jsonpatch, gives the held gang."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from controller.api import names
from controller.workloads.base import Backend, Placement
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_job, make_lws, make_pod, make_statefulset
from webhook.mutation import mutate
from webhook.reviews import patch_of
from webhook.settings import Settings

SETTINGS = Settings()


def mutated(obj: dict[str, Any], settings: Settings = SETTINGS, **kwargs: Any) -> dict[str, Any]:
    response = mutate(make_review(obj), settings, **kwargs)
    assert response["response"]["allowed"], response
    result: dict[str, Any] = jsonpatch.apply_patch(obj, patch_of(response))
    return result


def test_job_in_a_queue_is_suspended_and_its_pods_join_one_volcano_podgroup() -> None:
    job = mutated(make_job(name="train"))
    template = job["spec"]["template"]
    assert job["spec"]["suspend"] is True
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["metadata"]["annotations"][names.VOLCANO_GROUP_ANNOTATION] == "job-train"
    assert template["metadata"]["labels"] == {
        names.QUEUE_LABEL: "research",
        names.MANAGED_LABEL: names.MANAGED_VALUE,
        names.POD_GROUP_LABEL: "job-train",
    }
    assert "schedulingGates" not in template["spec"]


def test_the_patch_escapes_slashes_in_label_keys() -> None:
    # The template already has labels, so kohort's are added one key at a time.
    paths = [op["path"] for op in patch_of(mutate(make_review(make_statefulset()), SETTINGS))]
    assert "/spec/template/metadata/labels/kohort.dev~1queue-name" in paths
    assert not [p for p in paths if "kohort.dev/" in p]


def test_missing_maps_are_added_whole_in_one_operation() -> None:
    ops = patch_of(mutate(make_review(make_job()), SETTINGS))
    [metadata] = [op for op in ops if op["path"] == "/spec/template/metadata"]
    assert metadata["value"]["labels"][names.QUEUE_LABEL] == "research"
    assert metadata["value"]["annotations"] == {
        names.SAFE_TO_EVICT_ANNOTATION: "false",  # the autoscaler never drains a gang's node
        names.VOLCANO_GROUP_ANNOTATION: "job-train",
    }
    assert len(ops) == 3  # template metadata with labels and annotations, schedulerName, suspend


def test_coscheduling_backend_uses_the_pod_group_label() -> None:
    settings = Settings(placement=Placement.for_backend(Backend.COSCHEDULING))
    template = mutated(make_job(), settings)["spec"]["template"]
    assert template["metadata"]["labels"][names.COSCHEDULING_GROUP_LABEL] == "job-train"
    assert names.VOLCANO_GROUP_ANNOTATION not in template["metadata"].get("annotations", {})
    assert template["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


NATIVE = Settings(placement=Placement.for_backend(Backend.KUBERNETES))


def test_kubernetes_backend_points_a_jobs_pods_at_their_gangs_scheduling_workload() -> None:
    job = mutated(make_job(), NATIVE)
    template = job["spec"]["template"]
    assert job["spec"]["suspend"] is True
    # Both API versions' fields: the apiserver keeps the one it serves and drops the other.
    assert template["spec"]["workloadRef"] == {"name": "job-train", "podGroup": "gang"}
    assert template["spec"]["schedulingGroup"] == {"podGroupName": "job-train"}
    assert template["spec"]["schedulerName"] == "default-scheduler"
    assert names.VOLCANO_GROUP_ANNOTATION not in template["metadata"].get("annotations", {})
    assert names.COSCHEDULING_GROUP_LABEL not in template["metadata"]["labels"]


def test_kubernetes_backend_gives_a_pod_its_workload_ref_when_it_is_created() -> None:
    pod = make_pod(labels={names.LWS_NAME_LABEL: "llm"}, owner_kind="StatefulSet")
    first = mutated(pod, NATIVE)
    assert "workloadRef" not in first["spec"]  # no group yet: written once it has one
    assert "schedulingGroup" not in first["spec"]
    first["metadata"]["labels"][names.LWS_GROUP_INDEX_LABEL] = "0"
    second = mutated(first, NATIVE)
    assert second["spec"]["workloadRef"] == {"name": "lws-llm-0", "podGroup": "gang"}
    assert second["spec"]["schedulingGroup"] == {"podGroupName": "lws-llm-0"}
    assert {"name": names.ADMISSION_GATE} in second["spec"]["schedulingGates"]


def test_backend_none_holds_the_gang_but_leaves_placement_alone() -> None:
    settings = Settings(placement=Placement.for_backend(Backend.NONE))
    job = mutated(make_job(scheduler_name="default-scheduler"), settings)
    assert job["spec"]["suspend"] is True
    assert job["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"


def test_a_users_own_scheduler_is_kept_with_a_warning() -> None:
    response = mutate(make_review(make_job(scheduler_name="my-scheduler")), SETTINGS)
    job = jsonpatch.apply_patch(make_job(scheduler_name="my-scheduler"), patch_of(response))
    assert job["spec"]["template"]["spec"]["schedulerName"] == "my-scheduler"
    [warning] = response["response"]["warnings"]
    assert "my-scheduler" in warning and "all-or-nothing" in warning


def test_the_apiserver_default_scheduler_counts_as_unset() -> None:
    job = mutated(make_job(scheduler_name="default-scheduler"))
    assert job["spec"]["template"]["spec"]["schedulerName"] == "volcano"


def test_statefulset_gets_parallel_pods_and_the_admission_gate() -> None:
    sts = mutated(make_statefulset(policy=None))
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert {"name": names.ADMISSION_GATE} in sts["spec"]["template"]["spec"]["schedulingGates"]
    assert sts["spec"]["template"]["metadata"]["labels"]["app"] == "serve"


def test_statefulset_with_the_apiserver_default_ordered_ready_becomes_parallel() -> None:
    # The API server defaults podManagementPolicy before webhooks run: without the user's
    # manifest saying OrderedReady, it is taken as unset.
    assert mutated(make_statefulset(policy="OrderedReady"))["spec"]["podManagementPolicy"] == (
        "Parallel"
    )


def explicit_ordered_ready_by_kubectl_apply() -> dict[str, Any]:
    sts = make_statefulset(policy="OrderedReady")
    manifest = json.dumps({"spec": {"podManagementPolicy": "OrderedReady"}})
    sts["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": manifest}
    return sts


def explicit_ordered_ready_by_server_side_apply() -> dict[str, Any]:
    sts = make_statefulset(policy="OrderedReady")
    sts["metadata"]["managedFields"] = [
        {
            "manager": "kubectl",
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:podManagementPolicy": {}, "f:replicas": {}}},
        }
    ]
    return sts


@pytest.mark.parametrize(
    "statefulset",
    [explicit_ordered_ready_by_kubectl_apply(), explicit_ordered_ready_by_server_side_apply()],
    ids=["kubectl-apply", "server-side-apply"],
)
def test_statefulset_with_explicit_ordered_ready_is_denied_with_a_message_saying_why(
    statefulset: dict[str, Any],
) -> None:
    response = mutate(make_review(statefulset), SETTINGS)["response"]
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "OrderedReady" in message and "gang" in message and "Parallel" in message


def test_leaderworkerset_templates_get_the_gate_and_scheduler_but_no_podgroup() -> None:
    lws = mutated(make_lws())
    for role in ("leaderTemplate", "workerTemplate"):
        template = lws["spec"]["leaderWorkerTemplate"][role]
        assert template["spec"]["schedulerName"] == "volcano"
        assert {"name": names.ADMISSION_GATE} in template["spec"]["schedulingGates"]
        assert names.VOLCANO_GROUP_ANNOTATION not in template["metadata"].get("annotations", {})


def test_lws_pod_without_group_index_yet_is_gated_and_grouped_when_reinvoked() -> None:
    pod = make_pod(labels={names.LWS_NAME_LABEL: "llm"}, owner_kind="StatefulSet")
    first = mutated(pod)
    assert names.VOLCANO_GROUP_ANNOTATION not in first["metadata"].get("annotations", {})
    assert {"name": names.ADMISSION_GATE} in first["spec"]["schedulingGates"]
    # Another webhook (LWS's own) adds the group index; reinvocation completes the pod.
    first["metadata"]["labels"][names.LWS_GROUP_INDEX_LABEL] = "0"
    second = mutated(first)
    assert second["metadata"]["annotations"][names.VOLCANO_GROUP_ANNOTATION] == "lws-llm-0"


def test_managed_pod_arriving_without_the_gate_gets_it() -> None:
    pod = mutated(make_pod(owner_kind="StatefulSet"))
    assert {"name": names.ADMISSION_GATE} in pod["spec"]["schedulingGates"]


def test_pod_of_a_released_job_is_not_gated() -> None:
    pod = mutated(make_pod(owner_kind="Job", labels={names.POD_GROUP_LABEL: "job-train"}))
    assert "schedulingGates" not in pod["spec"]


@pytest.mark.parametrize(
    "obj",
    [
        make_job(queue=None),
        make_statefulset(queue=None),
        make_pod(queue=None),
        make_job(labels={names.OPT_OUT_LABEL: "true"}),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}},
    ],
    ids=["job", "statefulset", "pod", "opted-out", "other-kind"],
)
def test_unmanaged_objects_pass_unchanged(obj: dict[str, Any]) -> None:
    response = mutate(make_review(obj), SETTINGS)["response"]
    assert response == {"uid": response["uid"], "allowed": True}


def test_namespace_opt_in_puts_unlabelled_workloads_in_the_default_queue() -> None:
    job = mutated(make_job(queue=None), default_queue="default")
    assert job["metadata"]["labels"][names.QUEUE_LABEL] == "default"
    assert job["spec"]["template"]["metadata"]["labels"][names.QUEUE_LABEL] == "default"
    assert job["spec"]["suspend"] is True


def test_namespace_opt_in_keeps_an_explicit_queue() -> None:
    job = mutated(make_job(queue="research"), default_queue="default")
    assert job["metadata"]["labels"][names.QUEUE_LABEL] == "research"


def test_updates_are_not_mutated() -> None:
    job = make_job(suspend=False)
    response = mutate(make_review(job, operation="UPDATE", old=job), SETTINGS)["response"]
    assert "patch" not in response


def test_job_created_with_generate_name_gets_a_podgroup_from_the_request_uid() -> None:
    job = make_job()
    del job["metadata"]["name"]
    job["metadata"]["generateName"] = "train-"
    review = make_review(job, uid="705ab4f5-6393-11e8-b7cc-42010a800002")
    patched = jsonpatch.apply_patch(job, patch_of(mutate(review, SETTINGS)))
    group = patched["spec"]["template"]["metadata"]["labels"][names.POD_GROUP_LABEL]
    assert group.startswith("job-train-") and len(group) == len("job-train-") + 5


def test_an_update_that_drops_the_gate_from_a_statefulset_template_gets_it_back() -> None:
    stored = mutated(make_statefulset())
    reapplied = make_statefulset(policy="Parallel")  # the user's manifest, applied again
    review = make_review(reapplied, operation="UPDATE", old=stored)
    response = mutate(review, SETTINGS)
    result = jsonpatch.apply_patch(reapplied, patch_of(response))
    assert result["spec"]["template"] == stored["spec"]["template"]


def test_an_update_never_suspends_a_running_job_again() -> None:
    running = mutated(make_job())
    running["spec"]["suspend"] = False
    review = make_review(running, operation="UPDATE", old=running)
    assert patch_of(mutate(review, SETTINGS)) == []


def test_an_update_puts_back_a_dropped_namespace_default_queue_but_adds_none_to_old_objects() -> (
    None
):
    stored = mutated(make_job(queue=None), default_queue="default")
    dropped = make_job(queue=None)
    review = make_review(dropped, operation="UPDATE", old=stored)
    again = jsonpatch.apply_patch(
        dropped, patch_of(mutate(review, SETTINGS, default_queue="default"))
    )
    assert again["metadata"]["labels"] == {names.QUEUE_LABEL: "default"}
    # A workload created before its namespace opted in stays unmanaged.
    old = make_job(queue=None)
    review = make_review(old, operation="UPDATE", old=old)
    assert patch_of(mutate(review, SETTINGS, default_queue="default")) == []


def test_mutation_never_changes_the_review_it_is_given() -> None:
    review = make_review(make_statefulset())
    before = json.dumps(review, sort_keys=True)
    mutate(review, SETTINGS)
    assert json.dumps(review, sort_keys=True) == before


def test_a_new_workloads_pods_carry_safe_to_evict_false_for_the_autoscaler() -> None:
    stored = mutated(make_statefulset())
    annotations = stored["spec"]["template"]["metadata"]["annotations"]
    assert annotations[names.SAFE_TO_EVICT_ANNOTATION] == "false"


def test_an_update_of_a_workload_made_before_safe_to_evict_leaves_its_template_as_it_is() -> None:
    stored = mutated(make_statefulset())
    del stored["spec"]["template"]["metadata"]["annotations"][names.SAFE_TO_EVICT_ANNOTATION]
    changed = copy.deepcopy(stored)
    changed["metadata"]["labels"]["team"] = "a"
    response = mutate(make_review(changed, operation="UPDATE", old=stored), SETTINGS)
    result = jsonpatch.apply_patch(changed, patch_of(response))
    assert result["spec"]["template"] == stored["spec"]["template"]  # its pods do not roll


def test_a_users_own_safe_to_evict_is_kept() -> None:
    job = make_job()
    job["spec"]["template"].setdefault("metadata", {})["annotations"] = {
        names.SAFE_TO_EVICT_ANNOTATION: "true"
    }
    patched = jsonpatch.apply_patch(job, patch_of(mutate(make_review(job), SETTINGS)))
    annotations = patched["spec"]["template"]["metadata"]["annotations"]
    assert annotations[names.SAFE_TO_EVICT_ANNOTATION] == "true"
