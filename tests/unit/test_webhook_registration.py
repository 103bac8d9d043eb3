"""How requests reach the webhook: labelled objects, opted-in namespaces, opt-outs."""

from __future__ import annotations

from typing import Any

from controller.api import names
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_job, make_pod
from webhook.registration import (
    JOB_POD_CREATION,
    mutating_configuration,
    not_a_job_pod_creation,
    service_account_user,
    url_client,
    validating_configuration,
)
from webhook.settings import DEFAULT_CONTROLLER_SERVICE_ACCOUNT, Settings
from webhook.validation import validate

CLIENT = url_client("https://127.0.0.1:9443", b"-----BEGIN CERTIFICATE-----\n")


def by_name(config: dict[str, Any]) -> dict[str, Any]:
    return {w["name"]: w for w in config["webhooks"]}


def test_labelled_objects_go_to_mutate_and_opted_in_namespaces_to_the_default_queue_path() -> None:
    hooks = by_name(mutating_configuration("kohort", CLIENT))
    labelled = hooks["workloads.mutate.kohort.dev"]
    implied = hooks["namespace-default.mutate.kohort.dev"]
    assert labelled["clientConfig"]["url"].endswith("/mutate")
    assert implied["clientConfig"]["url"].endswith("/mutate-default-queue")
    assert implied["namespaceSelector"]["matchLabels"] == {names.NAMESPACE_OPT_IN_LABEL: "true"}
    assert {"key": names.QUEUE_LABEL, "operator": "DoesNotExist"} in implied["objectSelector"][
        "matchExpressions"
    ]
    for hook in (labelled, implied):
        assert hook["reinvocationPolicy"] == "IfNeeded"
        assert {"key": names.OPT_OUT_LABEL, "operator": "NotIn", "values": ["true"]} in hook[
            "objectSelector"
        ]["matchExpressions"]


def test_system_namespaces_are_never_sent_to_the_webhook() -> None:
    for config in (
        mutating_configuration("kohort", CLIENT),
        validating_configuration("kohort", CLIENT),
    ):
        for hook in config["webhooks"]:
            selector = hook.get("namespaceSelector")
            if selector is None:  # the quota objects: cluster-scoped ones included
                continue
            [excluded] = [e for e in selector["matchExpressions"] if e["operator"] == "NotIn"]
            assert {"kube-system", "kube-node-lease"} <= set(excluded["values"])


def test_mutation_fails_open_and_validation_fails_closed() -> None:
    assert {w["failurePolicy"] for w in mutating_configuration("k", CLIENT)["webhooks"]} == {
        "Ignore"
    }
    assert {w["failurePolicy"] for w in validating_configuration("k", CLIENT)["webhooks"]} == {
        "Fail"
    }


def test_updates_are_routed_to_mutation_only_when_asked() -> None:
    def operations(config: dict[str, Any]) -> set[str]:
        hook = by_name(config)["workloads.mutate.kohort.dev"]
        return {op for rule in hook["rules"] for op in rule["operations"]}

    assert operations(mutating_configuration("k", CLIENT)) == {"CREATE"}
    assert operations(mutating_configuration("k", CLIENT, mutate_updates=True)) == {
        "CREATE",
        "UPDATE",
    }


def test_unlabelled_creations_in_opted_in_namespaces_are_validated_unless_turned_off() -> None:
    """Else, while the webhook is down, they would be created unheld (mutation fails open)."""
    assert (
        len(validating_configuration("k", CLIENT, validate_namespace_default=False)["webhooks"])
        == 3
    )
    config = validating_configuration("k", CLIENT)
    implied = by_name(config)["namespace-default.validate.kohort.dev"]
    assert implied["clientConfig"]["url"].endswith("/validate-default-queue")
    assert implied["namespaceSelector"]["matchLabels"] == {names.NAMESPACE_OPT_IN_LABEL: "true"}
    assert {op for rule in implied["rules"] for op in rule["operations"]} == {"CREATE"}
    assert implied["failurePolicy"] == "Fail"


CONTROLLER = service_account_user("kohort-system", "kohort-controller")
WORKLOAD_WEBHOOKS = (
    "workloads.mutate.kohort.dev",
    "namespace-default.mutate.kohort.dev",
    "workloads.validate.kohort.dev",
    "namespace-default.validate.kohort.dev",
)


def conditions(hook: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["expression"] for c in hook.get("matchConditions", [])}


def all_hooks(**options: Any) -> dict[str, Any]:
    return by_name(mutating_configuration("k", CLIENT, **options)) | by_name(
        validating_configuration("k", CLIENT, **options)
    )


def test_the_controllers_requests_skip_every_workload_webhook_but_not_the_quota_one() -> None:
    """During an outage the controller still releases and evicts gangs: its patches of Jobs
    and pods never wait for (or fail on) the webhook, which would allow them anyway."""
    hooks = all_hooks(controller_users=[CONTROLLER])
    for name in WORKLOAD_WEBHOOKS:
        assert conditions(hooks[name])["not-kohort-controller"] == (
            "request.userInfo.username != 'system:serviceaccount:kohort-system:kohort-controller'"
        ), name
    assert "matchConditions" not in hooks["queues.validate.kohort.dev"]
    assert Settings().controller.users == {CONTROLLER}
    assert DEFAULT_CONTROLLER_SERVICE_ACCOUNT == "kohort-system:kohort-controller"


def test_several_controller_users_are_listed_once_and_quoted_for_cel() -> None:
    hooks = all_hooks(controller_users=["b", "a", "b", "o'brien"])
    assert conditions(hooks["workloads.validate.kohort.dev"])["not-kohort-controller"] == (
        "!(request.userInfo.username in ['a', 'b', 'o\\'brien'])"
    )


def test_without_controller_users_every_request_is_sent() -> None:
    hooks = all_hooks()
    assert "not-kohort-controller" not in conditions(hooks["workloads.validate.kohort.dev"])
    assert "matchConditions" not in hooks["workloads.mutate.kohort.dev"]


def test_only_validation_skips_the_creation_of_a_released_jobs_pods() -> None:
    hooks = all_hooks()
    for name in ("workloads.validate.kohort.dev", "namespace-default.validate.kohort.dev"):
        assert (
            conditions(hooks[name])["not-a-job-pod-creation"]
            == (not_a_job_pod_creation()["expression"])
        )
        assert "request.userInfo.username in [" in conditions(hooks[name])["not-a-job-pod-creation"]
    for name in ("workloads.mutate.kohort.dev", "namespace-default.mutate.kohort.dev"):
        assert "not-a-job-pod-creation" not in conditions(hooks[name])


def job_pod(**labels: str) -> dict[str, Any]:
    pod = make_pod("train-abc12", owner_kind="Job", labels=labels)
    for owner in pod["metadata"]["ownerReferences"]:
        owner["controller"] = True
    return pod


def test_what_the_routing_skips_the_webhook_would_allow_anyway() -> None:
    """The match conditions only save a call; they never let through what validation refuses.

    A released Job's pod (owned by the Job, in the gang its template names, on no node) is
    allowed for anyone, on both validation paths; so are the controller's releases.
    """
    settings = Settings()
    pod = job_pod(**{names.POD_GROUP_LABEL: "job-train"})
    assert pod["metadata"]["ownerReferences"][0]["apiVersion"].startswith("batch/")
    for default_queue in (None, "default"):
        answer = validate(
            make_review(pod, user="system:serviceaccount:kube-system:job-controller"),
            settings,
            default_queue=default_queue,
        )
        assert answer["response"]["allowed"] is True, answer
    # Not skipped, and refused: the same pod from anyone else (it would run outside quota).
    answer = validate(make_review(pod, user="alice"), settings)
    assert answer["response"]["allowed"] is False
    assert "only the Job controller creates a Job's pods" in answer["response"]["status"]["message"]
    held = make_job(suspend=True)
    released = make_job(suspend=False)
    review = make_review(released, operation="UPDATE", old=held, user=CONTROLLER)
    assert validate(review, settings)["response"]["allowed"] is True
    # Not skipped, and refused: the same release by anyone else.
    review = make_review(released, operation="UPDATE", old=held, user="alice")
    assert validate(review, settings)["response"]["allowed"] is False


def test_a_pod_that_only_claims_a_job_owner_is_still_sent_when_it_names_a_node() -> None:
    """The skipped shape excludes a node name and a missing gang: the webhook judges those."""
    for needed in (
        "has(object.metadata.ownerReferences)",
        "o.controller == true",
        "o.kind == 'Job'",
        f"object.metadata.labels['{names.POD_GROUP_LABEL}'] != ''",
        "(!has(object.spec.nodeName) || object.spec.nodeName == '')",
        "request.operation == 'CREATE'",
    ):
        assert needed in JOB_POD_CREATION
