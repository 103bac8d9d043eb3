"""The admission webhook registered with a real API server: what `kubectl apply` stores.

The webhook runs in-process on 127.0.0.1 with a test CA and is registered by URL, with
namespaceSelectors that match only the test's namespace, so no other test sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from certs.authority import CertificateAuthority
from certs.reload import server_context
from controller.api import names
from controller.cluster.clients import Client
from hack.localcluster import LocalCluster
from tests.support import eventually
from webhook.registration import mutating_configuration, url_client, validating_configuration
from webhook.server import WebhookServer
from webhook.settings import ControllerIdentity, Settings

pytestmark = pytest.mark.cluster

CONTROLLER_USER = "kohort-controller-under-test"
NORMAL_USER = "alice"
QUEUE = "research"


@dataclass
class Webhook:
    server: WebhookServer
    ca: CertificateAuthority
    namespace: str
    mutating: str
    validating: str


def _job(name: str, *, queue: str | None = QUEUE) -> dict[str, Any]:
    labels = {names.QUEUE_LABEL: queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                }
            },
        },
    }


def _statefulset(name: str, policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": 2,
        "serviceName": name,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
        },
    }
    if policy:
        spec["podManagementPolicy"] = policy
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": {names.QUEUE_LABEL: QUEUE}},
        "spec": spec,
    }


def _pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def as_dict(api: client.ApiClient, obj: Any) -> dict[str, Any]:
    result: dict[str, Any] = api.sanitize_for_serialization(obj)
    return result


async def _grant_edit(api: client.ApiClient, namespace: str, user: str) -> None:
    await client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"edit-{user}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


@contextlib.asynccontextmanager
async def impersonating(cluster: LocalCluster, user: str) -> AsyncIterator[client.ApiClient]:
    """An API client that acts as `user` (the admin identity may impersonate anyone)."""
    from kubernetes_asyncio import config

    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(cluster.kubeconfig), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api:
        api.set_default_header("Impersonate-User", user)
        yield api


@pytest.fixture
async def webhook(api: client.ApiClient, namespace: str) -> AsyncIterator[Webhook]:
    ca = CertificateAuthority.create(common_name="kohort-webhook-test-ca")
    settings = Settings(controller=ControllerIdentity.of(users=[CONTROLLER_USER]))
    server = WebhookServer(settings, server_context(), host="127.0.0.1", port=0, metrics_port=None)
    pair = ca.issue_server(dns_names=["localhost"], ips=["127.0.0.1"])
    server.reloader().load_pem(pair.cert_pem, pair.key_pem)
    await server.start()
    only_here = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    to_us = url_client(f"https://127.0.0.1:{server.port}", ca.cert_pem)
    name = f"kohort-test-{namespace}"[:63]
    mutating = mutating_configuration(
        name, to_us, namespace_selector=only_here, failure_policy="Fail", mutate_updates=True
    )
    validating = validating_configuration(
        name, to_us, namespace_selector=only_here, validate_namespace_default=True
    )
    # Not the quota-object webhook: it is cluster-wide and would reach into other tests'
    # ClusterQueues.
    validating["webhooks"] = [
        w for w in validating["webhooks"] if not w["name"].startswith("queues.")
    ]
    admission = client.AdmissionregistrationV1Api(api)
    await admission.create_mutating_webhook_configuration(mutating)
    await admission.create_validating_webhook_configuration(validating)
    hook = Webhook(server, ca, namespace, name, name)
    try:
        await _await_registration(api, namespace)
        yield hook
    finally:
        with contextlib.suppress(ApiException):
            await admission.delete_mutating_webhook_configuration(name)
        with contextlib.suppress(ApiException):
            await admission.delete_validating_webhook_configuration(name)
        await server.stop()


async def _dry_run_job(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    probe = _job(f"probe-{uuid.uuid4().hex[:6]}")
    created = await client.BatchV1Api(api).create_namespaced_job(namespace, probe, dry_run="All")
    return as_dict(api, created)


async def _await_registration(api: client.ApiClient, namespace: str) -> None:
    """The API server learns about new webhook configurations asynchronously."""
    await eventually(
        lambda: _dry_run_job(api, namespace),
        lambda job: job["spec"].get("suspend") is True,
        within=30,
        what="the API server to call the webhook",
    )


async def test_a_job_in_a_queue_is_stored_suspended_with_its_gang_fields(
    api: client.ApiClient, webhook: Webhook
) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(webhook.namespace, _job("train"))
    stored = as_dict(api, await batch.read_namespaced_job("train", webhook.namespace))
    template = stored["spec"]["template"]
    assert stored["spec"]["suspend"] is True
    assert template["spec"]["schedulerName"] == names.VOLCANO_SCHEDULER
    assert template["metadata"]["annotations"][names.VOLCANO_GROUP_ANNOTATION] == "job-train"
    assert template["metadata"]["labels"][names.POD_GROUP_LABEL] == "job-train"
    assert template["metadata"]["labels"][names.QUEUE_LABEL] == QUEUE


async def test_a_job_without_a_queue_is_stored_untouched(
    api: client.ApiClient, webhook: Webhook
) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(webhook.namespace, _job("plain", queue=None))
    stored = as_dict(api, await batch.read_namespaced_job("plain", webhook.namespace))
    template = stored["spec"]["template"]
    assert stored["spec"]["suspend"] is False
    assert template["spec"]["schedulerName"] == "default-scheduler"
    assert not any(k.startswith("kohort.dev/") for k in template["metadata"].get("labels", {}))


async def test_in_an_opted_in_namespace_an_unlabelled_job_goes_to_the_default_queue(
    api: client.ApiClient, webhook: Webhook
) -> None:
    core = client.CoreV1Api(api)
    await core.patch_namespace(
        webhook.namespace, {"metadata": {"labels": {names.NAMESPACE_OPT_IN_LABEL: "true"}}}
    )
    batch = client.BatchV1Api(api)

    async def create() -> dict[str, Any]:
        job = _job(f"implied-{uuid.uuid4().hex[:6]}", queue=None)
        return as_dict(api, await batch.create_namespaced_job(webhook.namespace, job))

    # The API server sees the namespace's new label through its informer, a moment later.
    stored = await eventually(
        create,
        lambda job: job["spec"].get("suspend") is True,
        within=30,
        what="the namespace opt-in to take effect",
    )
    assert stored["metadata"]["labels"][names.QUEUE_LABEL] == names.DEFAULT_LOCAL_QUEUE
    opted_out = _job("opted-out", queue=None)
    opted_out["metadata"]["labels"] = {names.OPT_OUT_LABEL: "true"}
    kept = as_dict(api, await batch.create_namespaced_job(webhook.namespace, opted_out))
    assert kept["spec"]["suspend"] is False


async def test_a_statefulset_is_stored_with_parallel_pods_and_the_admission_gate(
    api: client.ApiClient, webhook: Webhook
) -> None:
    apps = client.AppsV1Api(api)
    await apps.create_namespaced_stateful_set(webhook.namespace, _statefulset("serve"))
    stored = as_dict(api, await apps.read_namespaced_stateful_set("serve", webhook.namespace))
    assert stored["spec"]["podManagementPolicy"] == "Parallel"
    gates = stored["spec"]["template"]["spec"]["schedulingGates"]
    assert {"name": names.ADMISSION_GATE} in gates


async def test_reapplying_a_statefulset_server_side_keeps_its_gang_fields(
    api: client.ApiClient, webhook: Webhook
) -> None:
    apps = client.AppsV1Api(api)

    async def apply(image: str) -> dict[str, Any]:
        manifest = _statefulset("applied")
        manifest["spec"]["template"]["spec"]["containers"][0]["image"] = image
        applied = await apps.patch_namespaced_stateful_set(
            "applied",
            webhook.namespace,
            manifest,
            field_manager="kubectl",
            _content_type="application/apply-patch+yaml",
        )
        return as_dict(api, applied)

    await apply("registry.k8s.io/pause:3.10")
    # The manifest never lists the gate or kohort's labels: the second apply would drop them
    # (and be refused for removing the gate) if the webhook did not put them back.
    again = await apply("registry.k8s.io/pause:3.9")
    template = again["spec"]["template"]
    assert template["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.9"
    assert {"name": names.ADMISSION_GATE} in template["spec"]["schedulingGates"]
    assert template["metadata"]["labels"][names.POD_GROUP_LABEL] == "sts-applied"


async def test_an_explicit_ordered_ready_statefulset_is_denied_with_the_reason(
    api: client.ApiClient, webhook: Webhook
) -> None:
    apps = client.AppsV1Api(api)
    with pytest.raises(ApiException) as denied:
        # Server-side apply, as `kubectl apply --server-side` sends it.
        await apps.patch_namespaced_stateful_set(
            "ordered",
            webhook.namespace,
            _statefulset("ordered", policy="OrderedReady"),
            field_manager="kubectl",
            _content_type="application/apply-patch+yaml",
        )
    message = json.loads(denied.value.body)["message"]
    assert "OrderedReady" in message and "gang" in message


async def test_a_normal_user_cannot_remove_the_admission_gate_but_the_controller_can(
    api: client.ApiClient, cluster: LocalCluster, webhook: Webhook
) -> None:
    core = client.CoreV1Api(api)
    namespace = webhook.namespace
    for user in (NORMAL_USER, CONTROLLER_USER):
        await _grant_edit(api, namespace, user)
    labels = {names.QUEUE_LABEL: QUEUE}
    await eventually(
        lambda: _create_pod(core, namespace, _pod("worker", labels)),
        lambda created: created is not None,
        within=30,
        what="the namespace's default service account",
    )
    stored = as_dict(api, await core.read_namespaced_pod("worker", namespace))
    assert {"name": names.ADMISSION_GATE} in stored["spec"]["schedulingGates"]
    ungate = [{"op": "remove", "path": "/spec/schedulingGates"}]

    async with impersonating(cluster, NORMAL_USER) as alice:
        with pytest.raises(ApiException) as denied:
            await client.CoreV1Api(alice).patch_namespaced_pod("worker", namespace, ungate)
    assert denied.value.status == 403
    assert names.ADMISSION_GATE in json.loads(denied.value.body)["message"]

    async with impersonating(cluster, CONTROLLER_USER) as controller:
        await client.CoreV1Api(controller).patch_namespaced_pod("worker", namespace, ungate)
    stored = as_dict(api, await core.read_namespaced_pod("worker", namespace))
    assert not stored["spec"].get("schedulingGates")


async def _create_pod(
    core: client.CoreV1Api, namespace: str, pod: dict[str, Any]
) -> dict[str, Any] | None:
    """The pod as the apiserver stored it; None while the namespace has no service account."""
    try:
        created = await core.create_namespaced_pod(namespace, pod)
    except ApiException as err:
        if "serviceaccount" in str(err.body).lower():
            return None
        raise
    return as_dict(core.api_client, created)


async def test_a_normal_user_cannot_unsuspend_a_held_job(
    api: client.ApiClient, cluster: LocalCluster, webhook: Webhook
) -> None:
    await _grant_edit(api, webhook.namespace, NORMAL_USER)
    await client.BatchV1Api(api).create_namespaced_job(webhook.namespace, _job("held"))
    async with impersonating(cluster, NORMAL_USER) as alice:
        with pytest.raises(ApiException) as denied:
            await client.BatchV1Api(alice).patch_namespaced_job(
                "held", webhook.namespace, {"spec": {"suspend": False}}
            )
    assert denied.value.status == 403
    assert "unsuspended only by kohort" in json.loads(denied.value.body)["message"]


LWS_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
    "spec": {
        "group": "leaderworkerset.x-k8s.io",
        "scope": "Namespaced",
        "names": {
            "plural": "leaderworkersets",
            "singular": "leaderworkerset",
            "kind": "LeaderWorkerSet",
            "shortNames": ["lws"],
        },
        # A stand-in for the real CRD: enough schema for the API server to store objects.
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


async def _ensure_lws_crd(api: client.ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(api)
    with contextlib.suppress(ApiException):
        await extensions.create_custom_resource_definition(copy.deepcopy(LWS_CRD))

    async def established() -> bool:
        crd = as_dict(
            api, await extensions.read_custom_resource_definition(LWS_CRD["metadata"]["name"])
        )
        conditions = crd.get("status", {}).get("conditions", [])
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, bool, within=30, what="the LeaderWorkerSet CRD")


async def test_a_leaderworkerset_gets_gated_templates_and_its_pods_their_groups_podgroup(
    api: client.ApiClient, webhook: Webhook
) -> None:
    await _ensure_lws_crd(api)
    template = {"spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "llm", "labels": {names.QUEUE_LABEL: QUEUE}},
        "spec": {
            # No group: when the real LWS controller runs on this control plane (it does once
            # test_e2e_lws has started it), it must not make pods named like the one below.
            "replicas": 0,
            "leaderWorkerTemplate": {
                "size": 4,
                "leaderTemplate": copy.deepcopy(template),
                "workerTemplate": copy.deepcopy(template),
            },
        },
    }
    custom = client.CustomObjectsApi(api)

    async def create() -> bool:
        try:
            await custom.create_namespaced_custom_object(
                "leaderworkerset.x-k8s.io", "v1", webhook.namespace, "leaderworkersets", lws
            )
        except ApiException as err:
            if err.status == 404:  # the new resource is not served yet
                return False
            raise
        return True

    await eventually(create, bool, within=30, what="LeaderWorkerSets to be served")
    stored = await custom.get_namespaced_custom_object(
        "leaderworkerset.x-k8s.io", "v1", webhook.namespace, "leaderworkersets", "llm"
    )
    for role in ("leaderTemplate", "workerTemplate"):
        spec = stored["spec"]["leaderWorkerTemplate"][role]["spec"]
        assert spec["schedulerName"] == names.VOLCANO_SCHEDULER
        assert {"name": names.ADMISSION_GATE} in spec["schedulingGates"]

    core = client.CoreV1Api(api)
    labels = {
        names.QUEUE_LABEL: QUEUE,
        names.LWS_NAME_LABEL: "llm",
        names.LWS_GROUP_INDEX_LABEL: "1",
        names.LWS_WORKER_INDEX_LABEL: "0",
    }
    leader = _pod("llm-1", labels)
    # As the LWS controller writes it on its pods (its pod webhook, when it runs, needs it).
    leader["metadata"].setdefault("annotations", {})["leaderworkerset.sigs.k8s.io/size"] = "4"
    # As the LWS controller's leader StatefulSet makes it (a bare pod with these labels is
    # refused: it would pose as the group's pod).
    leader["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": "llm",
            "uid": "00000000-0000-4000-8000-000000000001",
            "controller": True,
        }
    ]
    # Read from the create's answer: the owner named above does not exist, so the garbage
    # collector may delete the pod before a second read.
    pod = await eventually(
        lambda: _create_pod(core, webhook.namespace, leader),
        lambda created: created is not None,
        within=30,
        what="the namespace's default service account",
    )
    assert pod is not None
    assert pod["metadata"]["annotations"][names.VOLCANO_GROUP_ANNOTATION] == "lws-llm-1"


async def test_certificate_rotation_while_requests_flow_loses_none(
    api: client.ApiClient, admin: Client, webhook: Webhook
) -> None:
    """Three new serving certificates (the last from a new CA, trusted through caBundle first)
    while dry-run creates run back to back: every request still reaches the webhook."""
    results: list[bool] = []
    stop = asyncio.Event()

    async def traffic() -> None:
        while not stop.is_set():
            try:
                job = await _dry_run_job(api, webhook.namespace)
                results.append(job["spec"].get("suspend") is True)
            except ApiException:
                results.append(False)

    senders = [asyncio.create_task(traffic()) for _ in range(4)]
    reloader = webhook.server.reloader()
    for _ in range(2):
        await asyncio.sleep(1.0)
        pair = webhook.ca.issue_server(dns_names=["localhost"], ips=["127.0.0.1"])
        reloader.load_pem(pair.cert_pem, pair.key_pem)

    next_ca = CertificateAuthority.create(common_name="kohort-webhook-next-ca")
    await _trust(admin, webhook, webhook.ca.cert_pem + next_ca.cert_pem)
    await asyncio.sleep(3.0)  # the API server picks up configuration changes asynchronously
    pair = next_ca.issue_server(dns_names=["localhost"], ips=["127.0.0.1"])
    reloader.load_pem(pair.cert_pem, pair.key_pem)
    await asyncio.sleep(2.0)
    stop.set()
    await asyncio.gather(*senders)

    assert len(results) > 20
    assert all(results), f"{results.count(False)} of {len(results)} requests failed"
    print(f"{len(results)} requests through 3 certificate changes, none lost")


async def _trust(api: Client, webhook: Webhook, ca_bundle: bytes) -> None:
    from certs.rotator import WebhookConfigurationTarget

    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        await WebhookConfigurationTarget(api, kind, webhook.mutating).inject(ca_bundle)
