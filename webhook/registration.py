"""The Mutating and Validating webhook configurations that route requests to kohort.

Namespace opt-in: an AdmissionReview does not carry the namespace's labels, and the webhook
never calls the API server while answering. So the routing does it: one mutating webhook sends
objects labelled `kohort.dev/queue-name` to `/mutate`; a second one, whose namespaceSelector
matches namespaces labelled `kohort.dev/managed=true`, sends unlabelled objects there to
`/mutate-default-queue`, where the LocalQueue `default` is implied. Objects labelled
`kohort.dev/opt-out=true` match neither.

Availability: the webhooks of workloads skip, by `matchConditions` (CEL, evaluated by the API
server), the requests the webhook would allow anyway and that must go on while no replica
answers: those of kohort's controller (it releases and evicts gangs), and, for validation, the
creation of a released Job's pods. So with every replica down, held gangs stay held and new
managed workloads are refused (validation fails closed), while the controller still admits,
releases and evicts, and admitted Jobs still get their pods.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from controller.api import kinds, names
from controller.workloads.registry import REGISTRY, Registry
from webhook.server import (
    MUTATE_DEFAULT_QUEUE_PATH,
    MUTATE_PATH,
    VALIDATE_DEFAULT_QUEUE_PATH,
    VALIDATE_PATH,
)
from webhook.settings import JOB_CONTROLLERS

ClientConfig = Callable[[str], dict[str, Any]]
SYSTEM_NAMESPACES = ("kube-system", "kube-node-lease", "kube-public")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def workload_resources(registry: Registry = REGISTRY) -> list[tuple[str, str, str]]:
    """The workload kinds kohort manages but pods (which are routed on CREATE only)."""
    return [(k.group, k.version, k.plural) for k in registry.kinds if k != kinds.PODS]


PODS: list[tuple[str, str, str]] = [(kinds.PODS.group, kinds.PODS.version, kinds.PODS.plural)]
QUOTA_RESOURCES = [
    k.plural
    for k in (
        kinds.CLUSTER_QUEUES,
        kinds.COHORTS,
        kinds.LOCAL_QUEUES,
        kinds.RESOURCE_FLAVORS,
        kinds.TOPOLOGIES,
        kinds.WORKLOADS,
    )
]


def url_client(base_url: str, ca_pem: bytes) -> ClientConfig:
    """Reach the webhook by URL (local clusters, tests): https://127.0.0.1:PORT."""
    ca_bundle = base64.b64encode(ca_pem).decode()
    return lambda path: {"url": base_url.rstrip("/") + path, "caBundle": ca_bundle}


def service_client(service: str, namespace: str, port: int = 443) -> ClientConfig:
    """Reach the webhook through its Service; the rotator fills in caBundle."""
    return lambda path: {
        "service": {"name": service, "namespace": namespace, "path": path, "port": port}
    }


def _rules(operations: Sequence[str], resources: Sequence[tuple[str, str, str]]) -> list[Any]:
    return [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "resources": [resource],
            "operations": list(operations),
            "scope": "Namespaced",
        }
        for group, version, resource in resources
    ]


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def not_from(users: Iterable[str]) -> list[dict[str, Any]]:
    """A match condition that skips requests made by `users` (none when there are none)."""
    names_ = sorted(set(users))
    if not names_:
        return []
    if len(names_) == 1:
        expression = f"request.userInfo.username != {_cel_string(names_[0])}"
    else:
        listed = ", ".join(_cel_string(n) for n in names_)
        expression = f"!(request.userInfo.username in [{listed}])"
    return [{"name": "not-kohort-controller", "expression": expression}]


def service_account_user(namespace: str, name: str) -> str:
    """The user name a ServiceAccount's requests arrive with."""
    return f"system:serviceaccount:{namespace}:{name}"


# The pods a released Job's controller creates: owned by a Job, in the gang the Job's template
# names, bound to no node. The validating webhook allows every such creation (a Job's pods
# exist only once kohort released it), so the API server need not ask it; this keeps admitted
# Jobs starting and replacing pods while no webhook replica answers.
JOB_POD_CREATION = " && ".join(
    [
        "request.resource.group == ''",
        "request.resource.resource == 'pods'",
        "request.operation == 'CREATE'",
        "has(object.metadata.ownerReferences)",
        "object.metadata.ownerReferences.exists(o, has(o.controller) && o.controller == true"
        " && o.kind == 'Job' && o.apiVersion.startsWith('batch/'))",
        "has(object.metadata.labels)",
        f"'{names.POD_GROUP_LABEL}' in object.metadata.labels",
        f"object.metadata.labels['{names.POD_GROUP_LABEL}'] != ''",
        "(!has(object.spec.nodeName) || object.spec.nodeName == '')",
    ]
)


def not_a_job_pod_creation(job_controllers: Iterable[str] = JOB_CONTROLLERS) -> dict[str, Any]:
    """Skip the pods the Job controller creates for a released Job (nobody else's)."""
    listed = ", ".join(_cel_string(u) for u in sorted(set(job_controllers)))
    by_job_controller = f"request.userInfo.username in [{listed}]"
    return {
        "name": "not-a-job-pod-creation",
        "expression": f"!({by_job_controller} && {JOB_POD_CREATION})",
    }


PODGROUPS: list[tuple[str, str, str]] = [
    (k.group, k.version, k.plural) for k in (kinds.VOLCANO_PODGROUPS, kinds.COSCHEDULING_PODGROUPS)
]


def kohorts_podgroups(volcano_queue: str | None) -> dict[str, Any]:
    """A match condition that sends the webhook only PodGroups that are, or are made, kohort's
    (labelled managed-by kohort, or in kohort's Volcano queue): other PodGroups never wait."""

    def kohorts(obj: str) -> str:
        label = f"'{names.MANAGED_LABEL}'"
        test = (
            f"(has({obj}.metadata.labels) && {label} in {obj}.metadata.labels"
            f" && {obj}.metadata.labels[{label}] == '{names.MANAGED_VALUE}')"
        )
        if volcano_queue:
            test += (
                f" || (has({obj}.spec) && has({obj}.spec.queue)"
                f" && {obj}.spec.queue == {_cel_string(volcano_queue)})"
            )
        return f"({test})"

    expression = f"{kohorts('object')} || (oldObject != null && {kohorts('oldObject')})"
    return {"name": "kohorts-podgroups", "expression": expression}


def _not_opted_out() -> dict[str, Any]:
    return {"key": names.OPT_OUT_LABEL, "operator": "NotIn", "values": ["true"]}


def default_namespace_selector(excluded: Sequence[str] = ()) -> dict[str, Any]:
    values = sorted({*SYSTEM_NAMESPACES, *excluded})
    return {
        "matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": values}]
    }


def opted_in_namespaces(selector: dict[str, Any]) -> dict[str, Any]:
    """`selector`, narrowed to namespaces labelled kohort.dev/managed=true."""
    expressions: list[dict[str, Any]] = list(selector.get("matchExpressions", []))
    for key, value in (selector.get("matchLabels") or {}).items():
        expressions.append({"key": key, "operator": "In", "values": [value]})
    return {
        "matchLabels": {names.NAMESPACE_OPT_IN_LABEL: "true"},
        "matchExpressions": expressions,
    }


def _match_conditions(conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"matchConditions": conditions} if conditions else {}


def _webhook(
    name: str, client: ClientConfig, path: str, *, failure_policy: str, timeout: int
) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": client(path),
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "timeoutSeconds": timeout,
    }


def mutating_configuration(
    name: str,
    client: ClientConfig,
    *,
    namespace_selector: dict[str, Any] | None = None,
    failure_policy: str = "Ignore",
    timeout: int = 5,
    mutate_updates: bool = False,
    controller_users: Iterable[str] = (),
    registry: Registry = REGISTRY,
) -> dict[str, Any]:
    """Mutation fails open by default: the validating webhook refuses unheld workloads.

    Failing open also lets a released Job's pods be created while no replica answers (they are
    routed here too, and the Job's template already carries what mutation would add).
    `mutate_updates` also routes UPDATEs of every workload kind (Jobs, StatefulSets,
    LeaderWorkerSets, JobSets, ...), so gang fields that a server-side apply drops are put back
    instead of the update being denied.
    `controller_users`: the user names of kohort's controller, whose requests are never sent
    (mutation only puts back what an update drops, and the controller's patches drop nothing).
    `registry`: the workload kinds routed.
    """
    operations = ["CREATE", "UPDATE"] if mutate_updates else ["CREATE"]
    routed = workload_resources(registry)
    selector = namespace_selector or default_namespace_selector()
    opted_in = opted_in_namespaces(selector)

    def mutating(webhook: str, path: str, namespaces: Any, queue_operator: str) -> Any:
        queue_label = {"key": names.QUEUE_LABEL, "operator": queue_operator}
        return (
            _webhook(webhook, client, path, failure_policy=failure_policy, timeout=timeout)
            | {
                "namespaceSelector": namespaces,
                "objectSelector": {"matchExpressions": [queue_label, _not_opted_out()]},
                # Gates can never be added to an existing pod: pods are mutated at CREATE only.
                "rules": _rules(operations, routed) + _rules(["CREATE"], PODS),
                "reinvocationPolicy": "IfNeeded",
            }
            | _match_conditions(not_from(controller_users))
        )

    labelled = mutating("workloads.mutate.kohort.dev", MUTATE_PATH, selector, "Exists")
    implied = mutating(
        "namespace-default.mutate.kohort.dev", MUTATE_DEFAULT_QUEUE_PATH, opted_in, "DoesNotExist"
    )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE}},
        "webhooks": [labelled, implied],
    }


def validating_configuration(
    name: str,
    client: ClientConfig,
    *,
    namespace_selector: dict[str, Any] | None = None,
    timeout: int = 5,
    validate_namespace_default: bool = True,
    controller_users: Iterable[str] = (),
    volcano_queue: str | None = names.VOLCANO_QUEUE,
    job_controllers: Iterable[str] = JOB_CONTROLLERS,
    registry: Registry = REGISTRY,
) -> dict[str, Any]:
    """Fails closed: a held gang must not be released while the webhook is down.

    PodGroups (Volcano's and coscheduling's) are sent only when they are, or are made,
    kohort's: in `volcano_queue` or labelled managed-by kohort; only the controller may make or
    change those.

    `validate_namespace_default` adds a webhook that refuses unheld new workloads without a
    queue label in opted-in namespaces too (where the mutation failed open); without it, such
    workloads run outside the queues while the webhook is down.
    The webhooks of workloads are not asked about what they allow anyway and what must go on
    during an outage: requests of `controller_users` (kohort's controller), and the creation of
    a released Job's pods. `registry`: the workload kinds routed.
    """
    routed = workload_resources(registry)
    conditions = _match_conditions(
        [*not_from(controller_users), not_a_job_pod_creation(job_controllers)]
    )
    selector = namespace_selector or default_namespace_selector()
    workloads = _webhook(
        "workloads.validate.kohort.dev",
        client,
        VALIDATE_PATH,
        failure_policy="Fail",
        timeout=timeout,
    )
    workloads |= {
        "namespaceSelector": selector,
        # For an UPDATE this matches when either the old or the new object has the label.
        "objectSelector": {"matchExpressions": [{"key": names.QUEUE_LABEL, "operator": "Exists"}]},
        "rules": _rules(["CREATE", "UPDATE"], [*routed, *PODS]),
    } | conditions
    quota = _webhook(
        "queues.validate.kohort.dev", client, VALIDATE_PATH, failure_policy="Fail", timeout=timeout
    )
    quota |= {
        "rules": [
            {
                "apiGroups": [names.GROUP],
                "apiVersions": [names.VERSION],
                "resources": QUOTA_RESOURCES,
                "operations": ["CREATE", "UPDATE"],
                "scope": "*",
            }
        ]
    }
    podgroups = _webhook(
        "podgroups.validate.kohort.dev",
        client,
        VALIDATE_PATH,
        failure_policy="Fail",
        timeout=timeout,
    )
    podgroups |= {
        "namespaceSelector": selector,
        "rules": _rules(["CREATE", "UPDATE"], PODGROUPS),
    } | _match_conditions([*not_from(controller_users), kohorts_podgroups(volcano_queue)])
    hooks = [workloads, quota, podgroups]
    if validate_namespace_default:
        implied = _webhook(
            "namespace-default.validate.kohort.dev",
            client,
            VALIDATE_DEFAULT_QUEUE_PATH,
            failure_policy="Fail",
            timeout=timeout,
        )
        implied |= {
            "namespaceSelector": opted_in_namespaces(selector),
            "objectSelector": {
                "matchExpressions": [
                    {"key": names.QUEUE_LABEL, "operator": "DoesNotExist"},
                    _not_opted_out(),
                ]
            },
            "rules": _rules(["CREATE"], [*routed, *PODS]),
        } | conditions
        hooks.append(implied)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE}},
        "webhooks": hooks,
    }
