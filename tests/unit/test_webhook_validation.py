"""POST /validate: held gangs stay held unless kohort's controller releases them."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from controller.api import names
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_job, make_lws, make_pod, make_statefulset
from webhook.mutation import mutate
from webhook.reviews import patch_of
from webhook.settings import ControllerIdentity, Settings
from webhook.validation import validate

CONTROLLER_SA = "system:serviceaccount:kohort-system:kohort-controller"
SETTINGS = Settings(
    controller=ControllerIdentity.of(
        service_accounts=["kohort-system/kohort-controller"], groups=["kohort:controllers"]
    )
)


def held(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as stored after the mutating webhook."""
    result: dict[str, Any] = jsonpatch.apply_patch(
        obj, patch_of(mutate(make_review(obj), SETTINGS))
    )
    return result


def updated(obj: dict[str, Any], change: Any) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    change(new)
    return new


def unsuspend(job: dict[str, Any]) -> None:
    job["spec"]["suspend"] = False


def ungate(pod: dict[str, Any]) -> None:
    pod["spec"]["schedulingGates"] = []


def move_queue(obj: dict[str, Any]) -> None:
    obj["metadata"]["labels"][names.QUEUE_LABEL] = "other"


def drop_queue(obj: dict[str, Any]) -> None:
    del obj["metadata"]["labels"][names.QUEUE_LABEL]


def ungate_template(sts: dict[str, Any]) -> None:
    sts["spec"]["template"]["spec"]["schedulingGates"] = []


def scale(obj: dict[str, Any]) -> None:
    obj["spec"]["parallelism"] = 2


def opt_out(obj: dict[str, Any]) -> None:
    obj["metadata"]["labels"][names.OPT_OUT_LABEL] = "true"


def opt_back_in(obj: dict[str, Any]) -> None:
    del obj["metadata"]["labels"][names.OPT_OUT_LABEL]


def add_queue(obj: dict[str, Any]) -> None:
    obj["metadata"].setdefault("labels", {})[names.QUEUE_LABEL] = "research"


def template_scheduler(sts: dict[str, Any]) -> None:
    sts["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"


def template_node(sts: dict[str, Any]) -> None:
    sts["spec"]["template"]["spec"]["nodeName"] = "n1"


def regroup(pod: dict[str, Any]) -> None:
    pod["metadata"]["labels"][names.POD_GROUP_LABEL] = "sts-admitted-gang"


def resize_group(pod: dict[str, Any]) -> None:
    pod["metadata"]["labels"][names.POD_GROUP_TOTAL_COUNT_LABEL] = "1"


def scale_set(sts: dict[str, Any]) -> None:
    sts["spec"]["replicas"] = 6


HELD_JOB = held(make_job())
HELD_POD = held(make_pod(owner_kind="StatefulSet"))
HELD_STS = held(make_statefulset())
RUNNING_JOB = updated(HELD_JOB, unsuspend)
OPTED_OUT_JOB = updated(make_job(suspend=True), opt_out)
GROUP_POD = held(
    make_pod(labels={names.POD_GROUP_LABEL: "ring", names.POD_GROUP_TOTAL_COUNT_LABEL: "4"})
)

# (old object, change, user, groups, want allowed, words the denial must contain)
ANTI_BYPASS: dict[str, tuple[Any, ...]] = {
    "user unsuspends a held Job": (HELD_JOB, unsuspend, "alice", (), False, "unsuspended"),
    "controller unsuspends a held Job": (HELD_JOB, unsuspend, CONTROLLER_SA, (), True, ""),
    "controller group unsuspends": (HELD_JOB, unsuspend, "bob", ("kohort:controllers",), True, ""),
    "user removes the pod gate": (HELD_POD, ungate, "alice", (), False, "scheduling gate"),
    "controller removes the pod gate": (HELD_POD, ungate, CONTROLLER_SA, (), True, ""),
    "user ungates the sts template": (HELD_STS, ungate_template, "alice", (), False, "gate"),
    "user moves a running Job": (RUNNING_JOB, move_queue, "alice", (), False, "cannot change"),
    "user unlabels a running Job": (RUNNING_JOB, drop_queue, "alice", (), False, "cannot leave"),
    "user moves a pending Job": (HELD_JOB, move_queue, "alice", (), True, ""),
    "user moves a StatefulSet": (HELD_STS, move_queue, "alice", (), False, "cannot change"),
    "user scales a held Job": (HELD_JOB, scale, "alice", (), True, ""),
    "user opts a held Job out": (HELD_JOB, opt_out, "alice", (), False, "cannot leave"),
    "user opts a held pod out": (HELD_POD, opt_out, "alice", (), False, "cannot leave"),
    "user opts a held StatefulSet out": (HELD_STS, opt_out, "alice", (), False, "cannot leave"),
    "user unlabels a held Job": (HELD_JOB, drop_queue, "alice", (), False, "cannot leave"),
    "user queues an existing Job": (
        make_job(queue=None, suspend=True),
        add_queue,
        "alice",
        (),
        False,
        "when it is created",
    ),
    "user opts an opted-out Job back in": (
        OPTED_OUT_JOB,
        opt_back_in,
        "alice",
        (),
        False,
        "cannot be put in a kohort queue",
    ),
    "user changes a StatefulSet template's scheduler": (
        HELD_STS,
        template_scheduler,
        "alice",
        (),
        False,
        "spec.template.spec.schedulerName was set by kohort",
    ),
    "user pins a StatefulSet template to a node": (
        HELD_STS,
        template_node,
        "alice",
        (),
        False,
        "spec.template.spec.nodeName binds pods to a node",
    ),
    "user moves a held pod to another gang": (
        HELD_POD,
        regroup,
        "alice",
        (),
        False,
        f"metadata.labels.{names.POD_GROUP_LABEL} was set by kohort",
    ),
    "user shrinks a pod group's size": (
        GROUP_POD,
        resize_group,
        "alice",
        (),
        False,
        names.POD_GROUP_TOTAL_COUNT_LABEL,
    ),
    "user scales a StatefulSet (requeued by the controller)": (
        HELD_STS,
        scale_set,
        "alice",
        (),
        True,
        "",
    ),
    "user unsuspends an unmanaged Job": (
        make_job(queue=None, suspend=True),
        unsuspend,
        "alice",
        (),
        True,
        "",
    ),
}


@pytest.mark.parametrize(
    ("old", "change", "user", "groups", "want_allowed", "want_words"),
    ANTI_BYPASS.values(),
    ids=ANTI_BYPASS.keys(),
)
def test_anti_bypass(
    old: dict[str, Any],
    change: Any,
    user: str,
    groups: tuple[str, ...],
    want_allowed: bool,
    want_words: str,
) -> None:
    review = make_review(
        updated(old, change), operation="UPDATE", old=old, user=user, groups=groups
    )
    response = validate(review, SETTINGS)["response"]
    assert response["allowed"] is want_allowed, response
    if not want_allowed:
        assert want_words in response["status"]["message"]


def test_a_managed_job_created_without_the_hold_is_denied() -> None:
    response = validate(make_review(make_job(suspend=False)), SETTINGS)["response"]
    assert response["allowed"] is False
    assert "spec.suspend: true" in response["status"]["message"]


@pytest.mark.parametrize(
    "obj",
    [held(make_job()), held(make_statefulset()), held(make_lws()), make_job(queue=None)],
    ids=["job", "statefulset", "lws", "unmanaged"],
)
def test_workloads_mutated_by_kohort_pass_validation(obj: dict[str, Any]) -> None:
    assert validate(make_review(obj), SETTINGS)["response"]["allowed"] is True


def test_a_managed_statefulset_without_the_gate_is_denied() -> None:
    response = validate(make_review(make_statefulset(policy="Parallel")), SETTINGS)["response"]
    assert response["allowed"] is False
    assert names.ADMISSION_GATE in response["status"]["message"]


def test_deletes_are_allowed() -> None:
    review = make_review(None, operation="DELETE", old=HELD_JOB, kind="Job")
    assert validate(review, SETTINGS)["response"]["allowed"] is True


def test_in_an_opted_in_namespace_an_unheld_new_workload_without_a_label_is_denied() -> None:
    # What arrives when the mutating webhook failed open: no queue label, no hold.
    review = make_review(make_job(queue=None, suspend=False))
    response = validate(review, SETTINGS, default_queue="default")["response"]
    assert response["allowed"] is False
    assert "spec.suspend: true" in response["status"]["message"]


def test_in_an_opted_in_namespace_workloads_from_before_the_opt_in_stay_free() -> None:
    old = make_job(queue=None, suspend=True)
    review = make_review(updated(old, unsuspend), operation="UPDATE", old=old)
    assert validate(review, SETTINGS, default_queue="default")["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("obj", "want_words"),
    [
        (
            make_pod(labels={names.POD_GROUP_LABEL: "ring"}, gates=(names.ADMISSION_GATE,)),
            "set kohort.dev/pod-group-total-count to the number of pods",
        ),
        (make_pod(owner_kind="Job"), "put kohort.dev/queue-name on the Job itself"),
        (
            make_pod(
                labels={names.POD_GROUP_LABEL: "ring", names.POD_GROUP_TOTAL_COUNT_LABEL: "-2"},
                gates=(names.ADMISSION_GATE,),
            ),
            "must be the number of pods in the group",
        ),
    ],
    ids=["group without size", "pod of an unqueued Job", "negative group size"],
)
def test_pods_that_would_run_outside_their_gang_are_refused(
    obj: dict[str, Any], want_words: str
) -> None:
    response = validate(make_review(obj), SETTINGS)["response"]
    assert response["allowed"] is False
    assert want_words in response["status"]["message"]


def test_a_leaderworkerset_pod_the_mutating_webhook_missed_is_refused_until_it_is_labelled() -> (
    None
):
    # Gated by its StatefulSet's template, but its group's gang label is added only when the
    # pod is created; if mutation failed open, the group could never be complete.
    lws_labels = {names.LWS_NAME_LABEL: "llm", names.LWS_GROUP_INDEX_LABEL: "3"}
    missed = make_pod(labels=lws_labels, owner_kind="StatefulSet", gates=(names.ADMISSION_GATE,))

    refused = validate(make_review(missed), SETTINGS)["response"]
    allowed = validate(make_review(held(missed)), SETTINGS)["response"]

    assert refused["allowed"] is False
    assert names.POD_GROUP_LABEL in refused["status"]["message"]
    assert "LeaderWorkerSet llm" in refused["status"]["message"]
    assert held(missed)["metadata"]["labels"][names.POD_GROUP_LABEL] == "lws-llm-3"
    assert allowed["allowed"] is True


def test_a_pod_or_template_that_names_its_node_is_refused() -> None:
    pod = held(make_pod())
    pod["spec"]["nodeName"] = "n1"
    response = validate(make_review(pod), SETTINGS)["response"]
    assert response["allowed"] is False
    assert "spec.nodeName binds pods to a node" in response["status"]["message"]
    sts = held(make_statefulset())
    template_node(sts)
    response = validate(make_review(sts), SETTINGS)["response"]
    assert "spec.template.spec.nodeName" in response["status"]["message"]


def podgroup(queue: str = "default", managed: bool = False, min_member: int = 4) -> dict[str, Any]:
    labels = {names.MANAGED_LABEL: names.MANAGED_VALUE} if managed else {}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "team-a", "labels": labels},
        "spec": {"minMember": min_member, "queue": queue},
    }


PODGROUP_SETTINGS = Settings(controller=SETTINGS.controller, volcano_queue="kohort")


def review_of_podgroup(new: Any, old: Any = None, user: str = "alice") -> Any:
    operation = "CREATE" if old is None else "UPDATE"
    return make_review(new, operation=operation, old=old, user=user, kind="PodGroup")


@pytest.mark.parametrize(
    ("new", "old", "user", "want_words"),
    [
        (podgroup("kohort"), None, "alice", "made only by kohort's controller"),
        (podgroup(managed=True), None, "alice", "made only by kohort's controller"),
        (podgroup("kohort", min_member=1), podgroup("kohort"), "alice", "only kohort's controller"),
        (podgroup("default"), podgroup("kohort"), "alice", "only kohort's controller"),
        (podgroup("kohort"), podgroup("default"), "alice", "cannot be made kohort's"),
        (podgroup("kohort"), None, CONTROLLER_SA, ""),
        (podgroup("default"), None, "alice", ""),
    ],
    ids=[
        "hand-made in kohort's queue",
        "hand-made with kohort's label",
        "kohort's PodGroup shrunk",
        "kohort's PodGroup moved out",
        "a PodGroup moved into kohort's queue",
        "made by the controller",
        "someone else's PodGroup in another queue",
    ],
)
def test_only_kohorts_controller_makes_or_edits_kohorts_podgroups(
    new: Any, old: Any, user: str, want_words: str
) -> None:
    response = validate(review_of_podgroup(new, old, user), PODGROUP_SETTINGS)["response"]
    assert response["allowed"] is (not want_words), response
    if want_words:
        assert want_words in response["status"]["message"]


def test_volcano_writing_back_kohorts_podgroup_with_its_own_quantities_is_allowed() -> None:
    """Volcano's PodGroups have no status subresource: its scheduler updates the whole object,
    with quantities spelled as Go spells them."""
    ours = podgroup("kohort", managed=True)
    ours["spec"]["minResources"] = {"memory": "524288000", "cpu": "4"}
    written_back = copy.deepcopy(ours)
    written_back["spec"]["minResources"] = {"memory": "524288k", "cpu": "4"}
    written_back["status"] = {"phase": "Inqueue"}
    review = review_of_podgroup(written_back, ours, "system:serviceaccount:volcano:scheduler")
    assert validate(review, PODGROUP_SETTINGS)["response"]["allowed"] is True
    written_back["spec"]["minResources"]["memory"] = "1Gi"
    review = review_of_podgroup(written_back, ours, "system:serviceaccount:volcano:scheduler")
    assert validate(review, PODGROUP_SETTINGS)["response"]["allowed"] is False


def test_a_pod_of_a_job_made_before_its_namespace_opted_in_runs_as_its_job_does() -> None:
    """The Job has no gang (it was made before the opt-in, or opted out): its pods are left
    alone on the namespace's default-queue path, not refused and not gated."""
    pod = make_pod(owner_kind="Job", queue=None)
    for owner in pod["metadata"]["ownerReferences"]:
        owner["controller"] = True
    job_controller = "system:serviceaccount:kube-system:job-controller"
    mutated = mutate(make_review(pod, user=job_controller), SETTINGS, default_queue="default")
    assert mutated["response"]["allowed"] is True
    assert "patch" not in mutated["response"]
    review = make_review(pod, user=job_controller)
    assert validate(review, SETTINGS, default_queue="default")["response"]["allowed"] is True
    labelled = make_pod(owner_kind="Job")  # its template was labelled, the Job was not
    answer = validate(make_review(labelled, user=job_controller), SETTINGS)["response"]
    assert answer["allowed"] is False
    assert "put kohort.dev/queue-name on the Job itself" in answer["status"]["message"]


LWS_CONTROLLER = "system:serviceaccount:lws-system:lws-controller-manager"
KUBERAY = "system:serviceaccount:ray-system:kuberay-operator"


def lws_statefulset(**changes: Any) -> dict[str, Any]:
    """The leader StatefulSet a LeaderWorkerSet's controller makes: no queue label of its own."""
    sts = make_statefulset("llm", queue=None, **changes)
    sts["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "name": "llm",
            "uid": "uid-llm",
            "controller": True,
        }
    ]
    return sts


def test_a_statefulset_a_leader_worker_set_made_in_an_opted_in_namespace_is_left_as_made() -> None:
    sts = lws_statefulset()
    mutated = mutate(make_review(sts), SETTINGS, default_queue="default")
    assert mutated["response"]["allowed"]
    assert patch_of(mutated) == [], "no queue label, gang fields or gate of its own"
    review = make_review(sts, user=LWS_CONTROLLER)
    validated = validate(review, SETTINGS, default_queue="default")
    assert validated["response"]["allowed"], validated["response"].get("status")

    scaled = lws_statefulset(replicas=4)
    update = make_review(scaled, operation="UPDATE", old=sts, user=LWS_CONTROLLER)
    assert patch_of(mutate(update, SETTINGS, default_queue="default")) == []
    assert validate(update, SETTINGS, default_queue="default")["response"]["allowed"]


def test_only_the_lws_controller_makes_or_scales_a_statefulset_an_lws_controls() -> None:
    sts = lws_statefulset()
    made = validate(make_review(sts), SETTINGS, default_queue="default")["response"]
    assert not made["allowed"]
    assert "ownerReference" in made["status"]["message"]
    scaled = make_review(lws_statefulset(replicas=4), operation="UPDATE", old=sts)
    assert not validate(scaled, SETTINGS, default_queue="default")["response"]["allowed"]


def test_a_pod_of_its_own_that_claims_a_raycluster_as_its_controller_is_refused() -> None:
    pod = make_pod("miner", queue="research")
    pod["spec"]["schedulingGates"] = [{"name": names.ADMISSION_GATE}]
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": "ray",
            "uid": "u",
            "controller": True,
        }
    ]
    refused = validate(make_review(pod), SETTINGS)["response"]
    assert not refused["allowed"]
    assert "RayCluster controller" in refused["status"]["message"]
    assert validate(make_review(pod, user=KUBERAY), SETTINGS)["response"]["allowed"]


def test_a_statefulset_of_its_own_in_an_opted_in_namespace_is_still_held() -> None:
    sts = make_statefulset("serve", queue=None)
    paths = [op["path"] for op in patch_of(mutate(make_review(sts), SETTINGS, default_queue="d"))]
    assert "/spec/template/spec/schedulingGates" in paths
    validated = validate(make_review(sts), SETTINGS, default_queue="d")
    assert not validated["response"]["allowed"], "unheld in an opted-in namespace"


def test_a_worker_statefulset_owned_by_its_groups_leader_pod_is_left_as_made() -> None:
    sts = make_statefulset("llm-0", queue=None)
    sts["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "llm-0", "uid": "uid-pod", "controller": True}
    ]
    assert patch_of(mutate(make_review(sts), SETTINGS, default_queue="default")) == []
    validated = validate(make_review(sts, user=LWS_CONTROLLER), SETTINGS, default_queue="default")
    assert validated["response"]["allowed"], validated["response"].get("status")


def claims(*entries: dict[str, str]) -> Any:
    def change(obj: dict[str, Any]) -> None:
        spec = obj["spec"] if obj.get("kind") == "Pod" else obj["spec"]["template"]["spec"]
        spec["resourceClaims"] = list(entries)

    return change


SHARED = {"name": "gpus", "resourceClaimName": "team-gpus"}
PER_POD = {"name": "gpus", "resourceClaimTemplateName": "two-gpus"}


def test_a_managed_job_whose_pods_share_a_claim_is_refused_and_told_to_use_a_template() -> None:
    job = updated(held(make_job()), claims(SHARED))
    response = validate(make_review(job), SETTINGS)["response"]
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "spec.template.spec.resourceClaims.0 names ResourceClaim 'team-gpus'" in message
    assert "use resourceClaimTemplateName with a ResourceClaimTemplate instead" in message


def test_a_managed_pod_that_names_a_resource_claim_is_refused() -> None:
    pod = updated(held(make_pod()), claims(PER_POD, SHARED))
    response = validate(make_review(pod), SETTINGS)["response"]
    assert response["allowed"] is False
    assert "spec.resourceClaims.1 names ResourceClaim 'team-gpus'" in response["status"]["message"]


def test_pods_that_claim_devices_through_a_template_are_allowed() -> None:
    job = updated(held(make_job()), claims(PER_POD))
    assert validate(make_review(job), SETTINGS)["response"]["allowed"] is True


def test_an_unmanaged_job_may_share_a_resource_claim() -> None:
    job = updated(make_job(queue=None), claims(SHARED))
    assert validate(make_review(job), SETTINGS)["response"]["allowed"] is True


def test_a_suspended_managed_job_cannot_be_edited_to_share_a_resource_claim() -> None:
    job = held(make_job())
    response = validate(
        make_review(updated(job, claims(SHARED)), operation="UPDATE", old=job), SETTINGS
    )["response"]
    assert response["allowed"] is False
    assert "names ResourceClaim 'team-gpus' directly" in response["status"]["message"]
