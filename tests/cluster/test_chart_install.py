"""`helm install`, `upgrade` and `uninstall` of charts/kohort on a real API server, and the
chart's ServiceAccounts doing their jobs with their own tokens.

kwok nodes run no containers, so the chart's Deployments never start here. Instead, as envtest
does, the chart is installed with `webhook.urlOverride` pointing at a webhook this test runs on
127.0.0.1, and the webhook and controller run as local processes with the exact arguments the
chart renders, authenticated as the chart's ServiceAccounts (TokenRequest tokens). What they
are allowed to do is therefore what the chart's RBAC grants, nothing more.

The module starts its own control plane: the release registers cluster-wide admission webhooks
(the validating one fails closed), which must not reach other tests' objects.
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.api import names
from hack import processes
from hack.localcluster import (
    WORKLOAD_CONTROLLER_USER,
    ClusterOptions,
    LocalCluster,
    NodePool,
    free_port,
)
from hack.rest import ApiError
from tests.chart_support import (
    CHART_DIR,
    FOREIGN_KINDS,
    NAMESPACE,
    RELEASE,
    REPO,
    VALUE_SETS,
    render,
    run_helm,
)
from tests.unit.test_chart_rbac import CONTROLLER_NEEDS, LEADER_ELECTION_NEEDS, ROTATOR_NEEDS

WEBHOOK_SA = f"{RELEASE}-webhook"
CONTROLLER_SA = f"{RELEASE}-controller"
SECRET = f"{RELEASE}-webhook-tls"
KEEP = "helm.sh/resource-policy"
RESTRICTED = "pod-security.kubernetes.io/enforce"

# Where each kind the chart renders lives in the API: (path prefix, plural, namespaced).
API_PATHS: dict[str, tuple[str, str, bool]] = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    "CustomResourceDefinition": (
        "/apis/apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        False,
    ),
}


def object_path(obj: dict[str, Any]) -> str:
    prefix, plural, namespaced = API_PATHS[obj["kind"]]
    meta = obj["metadata"]
    scope = f"/namespaces/{meta.get('namespace', NAMESPACE)}" if namespaced else ""
    return f"{prefix}{scope}/{plural}/{meta['name']}"


# ---- a client that authenticates with a bearer token ------------------------------------------


@dataclass
class TokenClient:
    server: str
    ca_file: Path
    token: str

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(self.server)
        conn = http.client.HTTPSConnection(
            url.hostname or "127.0.0.1",
            url.port,
            context=ssl.create_default_context(cafile=str(self.ca_file)),
            timeout=30,
        )
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = (
                "application/json-patch+json" if method == "PATCH" else "application/json"
            )
        try:
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            text = resp.read().decode()
        finally:
            conn.close()
        return resp.status, json.loads(text) if text.startswith("{") else text

    def can(
        self, verb: str, group: str, resource: str, name: str = "", namespace: str = NAMESPACE
    ) -> bool:
        """SelfSubjectAccessReview: may this identity `verb` `resource` (in `namespace`)?"""
        plural, _, subresource = resource.partition("/")
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": plural,
                    "subresource": subresource,
                    "name": name,
                    "namespace": namespace,
                }
            },
        }
        status, body = self.request(
            "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review
        )
        assert status == 201, body
        return bool(body["status"]["allowed"])

    def kubeconfig(self, path: Path, user: str) -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "local",
                            "cluster": {
                                "server": self.server,
                                "certificate-authority": str(self.ca_file),
                            },
                        }
                    ],
                    "users": [{"name": user, "user": {"token": self.token}}],
                    "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
                    "current-context": "local",
                }
            )
        )
        return path


def service_account_client(cluster: LocalCluster, name: str) -> TokenClient:
    """A token of the chart's ServiceAccount `name`, from the TokenRequest API."""
    review = cluster.rest.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    return TokenClient(cluster.server, cluster.pki_dir / "ca.crt", review["status"]["token"])


# ---- the release and the processes playing its pods ---------------------------------------------


@dataclass
class Release:
    cluster: LocalCluster
    webhook_port: int
    webhook_metrics_port: int
    controller_port: int
    webhook: processes.ManagedProcess
    controller: processes.ManagedProcess | None
    webhook_client: TokenClient
    controller_client: TokenClient

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_helm(*args, "--kubeconfig", str(self.cluster.kubeconfig), check=check)

    def values_args(self) -> list[str]:
        return ["--set", f"webhook.urlOverride=https://127.0.0.1:{self.webhook_port}"]

    def manifest(self) -> list[dict[str, Any]]:
        out = self.helm("get", "manifest", RELEASE, "--namespace", NAMESPACE)
        return [d for d in yaml.safe_load_all(out.stdout) if d]


def chart_args(component: str) -> list[str]:
    """The container arguments the chart renders for `component` with the default values."""
    args: list[str] = render().container(component)["args"]
    return args


def start_component(
    cluster: LocalCluster, component: str, kubeconfig: Path, extra: list[str], name: str = ""
) -> processes.ManagedProcess:
    argv = [sys.executable, "-m", "kohort.cli", *chart_args(component), *extra]
    argv += [f"--kubeconfig={kubeconfig}"]
    return processes.start(
        name or f"chart-{component}",
        argv,
        cluster.log_dir,
        tie_to_parent=True,
        env={"PYTHONPATH": str(REPO)},
    )


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def configuration(cluster: LocalCluster, kind: str) -> dict[str, Any]:
    obj = {"kind": kind, "metadata": {"name": RELEASE}}
    found: dict[str, Any] = cluster.rest.get(object_path(obj))
    return found


def ca_bundles(cluster: LocalCluster) -> set[str]:
    return {
        w["clientConfig"].get("caBundle", "")
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for w in configuration(cluster, kind)["webhooks"]
    }


def secret_data(cluster: LocalCluster) -> dict[str, str]:
    data: dict[str, str] = cluster.rest.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}").get(
        "data", {}
    )
    return data


@pytest.fixture(scope="module")
def chart_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(
        ClusterOptions(node_pools=(), scheduler="volcano"), tmp_path_factory.mktemp("chart")
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def release(
    chart_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    cluster = chart_cluster
    work = tmp_path_factory.mktemp("release")
    webhook_port, metrics_port, controller_port = free_port(), free_port(), free_port()
    # The strictest Pod Security Standard: the chart's pods must be admitted under it.
    cluster.rest.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {RESTRICTED: "restricted"}},
        },
    )
    install = run_helm(
        "install",
        RELEASE,
        str(CHART_DIR),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--set",
        f"webhook.urlOverride=https://127.0.0.1:{webhook_port}",
        check=False,
    )
    assert install.returncode == 0, install.stderr
    webhook_client = service_account_client(cluster, WEBHOOK_SA)
    controller_client = service_account_client(cluster, CONTROLLER_SA)
    webhook = start_component(
        cluster,
        "webhook",
        webhook_client.kubeconfig(work / "webhook.kubeconfig", WEBHOOK_SA),
        [
            "--host=127.0.0.1",
            f"--port={webhook_port}",
            f"--metrics-port={metrics_port}",
            "--ip=127.0.0.1",
            # The local cluster's LWS, JobSet, KubeRay and training-operator controllers.
            f"--workload-controller-user={WORKLOAD_CONTROLLER_USER}",
        ],
    )
    started: list[processes.ManagedProcess] = [webhook]
    try:
        processes.wait_until(
            "the webhook's /readyz",
            lambda: http_ok(f"http://127.0.0.1:{metrics_port}/readyz"),
            60,
            [webhook],
        )
        controller = start_component(
            cluster,
            "controller",
            controller_client.kubeconfig(work / "controller.kubeconfig", CONTROLLER_SA),
            [
                "--health-host=127.0.0.1",
                f"--health-port={controller_port}",
                "--metrics-port=0",
                "--resync-period=1",
            ],
        )
        started.append(controller)
        if render().of_kind("CustomResourceDefinition"):
            # Without kohort's CRDs (not generated yet) its informers never sync.
            processes.wait_until(
                "the controller's /readyz",
                lambda: http_ok(f"http://127.0.0.1:{controller_port}/readyz"),
                60,
                [controller],
            )
        yield Release(
            cluster,
            webhook_port,
            metrics_port,
            controller_port,
            webhook,
            controller,
            webhook_client,
            controller_client,
        )
    finally:
        for proc in reversed(started):
            processes.stop(proc.pid)
        # Whatever the tests did, no webhook of this module may outlive it.
        run_helm(
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            str(cluster.kubeconfig),
            check=False,
        )


# ---- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_the_api_server_accepts_every_rendered_object(
    chart_cluster: LocalCluster, value_set: str
) -> None:
    """Server-side dry run (apply) of each object, in a namespace of its own."""
    namespace = f"dry-run-{value_set}"
    chart_cluster.rest.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        exist_ok=True,
    )
    refused = []
    for obj in render(VALUE_SETS[value_set], release="dry", namespace=namespace):
        if obj["kind"] in FOREIGN_KINDS:
            continue  # cert-manager and Prometheus Operator are not installed here
        try:
            chart_cluster.rest.request(
                "PATCH",
                object_path(obj),
                obj,
                content_type="application/apply-patch+yaml",
                query={"fieldManager": "chart-test", "force": "true", "dryRun": "All"},
            )
        except ApiError as err:
            refused.append(f"{obj['kind']}/{obj['metadata']['name']}: {err}")
    assert not refused, "\n".join(refused)


def test_install_creates_every_object_and_establishes_the_crds(release: Release) -> None:
    manifest = release.manifest()
    assert {o["kind"] for o in manifest} >= {"Deployment", "MutatingWebhookConfiguration"}
    for obj in manifest:
        release.cluster.rest.get(object_path(obj))
    for crd in (o for o in manifest if o["kind"] == "CustomResourceDefinition"):
        assert crd["metadata"]["annotations"][KEEP] == "keep"
        release.cluster.wait_crd_established(crd["metadata"]["name"])


def test_the_pods_pass_the_restricted_pod_security_standard(release: Release) -> None:
    """kube-controller-manager creates the Deployments' pods; Pod Security admission
    (enforce: restricted on the release namespace) would refuse any that breaks the standard."""
    rest = release.cluster.rest
    namespace = rest.get(f"/api/v1/namespaces/{NAMESPACE}")
    assert namespace["metadata"]["labels"][RESTRICTED] == "restricted"
    want = {o["metadata"]["name"]: o["spec"]["replicas"] for o in render().of_kind("Deployment")}

    def created() -> dict[str, int]:
        pods = rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        counts = dict.fromkeys(want, 0)
        for pod in pods:
            owner = pod["metadata"]["name"].rsplit("-", 2)[0]
            if owner in counts:
                counts[owner] += 1
        return counts

    processes.wait_until("the chart's pods created", lambda: created() == want, 60)


def test_the_release_notes_walk_through_a_first_queue_and_job(release: Release) -> None:
    notes = release.helm("get", "notes", RELEASE, "--namespace", NAMESPACE).stdout
    for step in ("kind: ClusterQueue", "kind: LocalQueue", "kohort.dev/queue-name", "urlOverride"):
        assert step in notes


def test_the_webhook_rotator_fills_the_charts_secret_and_ca_bundles(release: Release) -> None:
    data = secret_data(release.cluster)
    assert {"ca.crt", "tls.crt", "tls.key"} <= data.keys()
    assert ca_bundles(release.cluster) == {data["ca.crt"]}


def labelled_job(name: str, pods: int, requests: dict[str, str] | None = None) -> dict[str, Any]:
    """A Job of `pods` pause pods in the LocalQueue "default"."""
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if requests:
        container["resources"] = {"requests": requests, "limits": requests}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kohort.dev/queue-name": "default"}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def test_a_labelled_job_is_held_through_the_charts_webhook_configuration(
    release: Release,
) -> None:
    rest = release.cluster.rest
    namespace = "chart-held-job"
    rest.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        exist_ok=True,
    )
    created = rest.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", labelled_job("held", 2))
    assert created["spec"]["suspend"] is True
    # Only the controller may release it: the admin is refused by the validating webhook.
    with pytest.raises(ApiError) as refused:
        rest.patch(f"/apis/batch/v1/namespaces/{namespace}/jobs/held", {"spec": {"suspend": False}})
    assert refused.value.status in (400, 403)


# Rules limited to one object by resourceNames: the object each permission is asked about.
NAMED: dict[tuple[str, str], str] = {
    ("coordination.k8s.io", "leases"): CONTROLLER_SA,
    ("scheduling.volcano.sh", "queues"): names.VOLCANO_QUEUE,
    ("", "secrets"): SECRET,
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): RELEASE,
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): RELEASE,
}


def allowed(client: TokenClient, permission: tuple[str, str, str]) -> bool:
    group, resource, verb = permission
    name = "" if verb in ("create", "list", "watch") else NAMED.get((group, resource), "")
    return client.can(verb, group, resource, name)


def test_each_service_account_is_granted_what_its_code_does(release: Release) -> None:
    controller, webhook = release.controller_client, release.webhook_client
    for permission in sorted(CONTROLLER_NEEDS | LEADER_ELECTION_NEEDS):
        assert allowed(controller, permission), permission
        assert not allowed(webhook, permission), permission
    for permission in sorted(ROTATOR_NEEDS):
        assert allowed(webhook, permission), permission
        assert not allowed(controller, permission), permission


def lease_holder(release: Release) -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{CONTROLLER_SA}"
    try:
        return str(release.cluster.rest.get(path)["spec"].get("holderIdentity") or "")
    except ApiError as err:
        if err.status == 404:
            return ""
        raise


def test_the_controller_holds_its_lease_as_its_service_account(release: Release) -> None:
    watched = [p for p in (release.controller,) if p is not None]
    processes.wait_until("the controller's Lease", lambda: bool(lease_holder(release)), 30, watched)


def test_a_second_replica_is_ready_but_leaves_the_lease_to_the_first(
    release: Release, tmp_path: Path
) -> None:
    """The HA value set: two controllers, one leader; the standby is ready (caches synced)."""
    processes.wait_until("a leader", lambda: bool(lease_holder(release)), 30)
    leader = lease_holder(release)
    port = free_port()
    standby = start_component(
        release.cluster,
        "controller",
        release.controller_client.kubeconfig(tmp_path / "standby.kubeconfig", CONTROLLER_SA),
        ["--health-host=127.0.0.1", f"--health-port={port}", "--metrics-port=0"],
        name="chart-controller-standby",
    )
    try:
        processes.wait_until(
            "the standby's /readyz",
            lambda: http_ok(f"http://127.0.0.1:{port}/readyz"),
            60,
            [standby],
        )
        assert lease_holder(release) == leader
    finally:
        processes.stop(standby.pid)
    assert "forbidden" not in standby.log_path.read_text().lower()


FORBIDDEN: dict[str, tuple[str, str, str, Any]] = {
    "delete a node": ("controller", "DELETE", "/api/v1/nodes/any", None),
    "read a Secret of another namespace": (
        "controller",
        "GET",
        "/api/v1/namespaces/kube-system/secrets/any",
        None,
    ),
    "list Secrets of its own namespace": (
        "controller",
        "GET",
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        None,
    ),
    "grant itself a role": (
        "controller",
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "escalate"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER_SA, "namespace": NAMESPACE}],
        },
    ),
    "webhook: read another Secret": (
        "webhook",
        "GET",
        f"/api/v1/namespaces/{NAMESPACE}/secrets/other",
        None,
    ),
    "webhook: list pods": ("webhook", "GET", "/api/v1/pods", None),
    "webhook: patch someone else's webhook configuration": (
        "webhook",
        "PATCH",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/other",
        [{"op": "add", "path": "/metadata/labels", "value": {}}],
    ),
    "webhook: delete its own Secret": (
        "webhook",
        "DELETE",
        f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}",
        None,
    ),
}


@pytest.mark.parametrize(("who", "method", "path", "body"), FORBIDDEN.values(), ids=FORBIDDEN)
def test_actions_outside_the_roles_are_forbidden(
    release: Release, who: str, method: str, path: str, body: Any
) -> None:
    client = release.controller_client if who == "controller" else release.webhook_client
    status, answer = client.request(method, path, body)
    assert status == 403, answer


def kohort(plural: str, name: str = "", namespace: str | None = None) -> str:
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/kohort.dev/v1alpha1{scope}/{plural}" + (f"/{name}" if name else "")


def test_a_gang_is_admitted_and_placed_by_the_components_running_as_the_chart(
    release: Release,
) -> None:
    """The whole path: held by the webhook, admitted by the controller (as its ServiceAccount),
    PodGroup created, released, and placed all-or-nothing by Volcano on kwok nodes."""
    cluster, rest = release.cluster, release.cluster.rest
    if not any(o["kind"] == "CustomResourceDefinition" for o in release.manifest()):
        pytest.skip("the chart has no CRDs yet (controller/api/crds.py missing)")
    nodes = cluster.add_nodes(NodePool("chart-e2e", 2, cpu="8", memory="32Gi"))
    namespace = "chart-e2e"
    try:
        rest.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            exist_ok=True,
        )
        rest.create(
            kohort("resourceflavors"),
            {
                "apiVersion": "kohort.dev/v1alpha1",
                "kind": "ResourceFlavor",
                "metadata": {"name": "chart-e2e"},
            },
        )
        rest.create(
            kohort("clusterqueues"),
            {
                "apiVersion": "kohort.dev/v1alpha1",
                "kind": "ClusterQueue",
                "metadata": {"name": "chart-e2e"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            "flavors": [
                                {
                                    "name": "chart-e2e",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "16"},
                                        {"name": "memory", "nominalQuota": "64Gi"},
                                    ],
                                }
                            ],
                        }
                    ]
                },
            },
        )
        rest.create(
            kohort("localqueues", namespace=namespace),
            {
                "apiVersion": "kohort.dev/v1alpha1",
                "kind": "LocalQueue",
                "metadata": {"name": "default"},
                "spec": {"clusterQueue": "chart-e2e"},
            },
        )
        rest.create(
            f"/apis/batch/v1/namespaces/{namespace}/jobs",
            labelled_job("gang", 4, {"cpu": "3", "memory": "1Gi"}),
        )

        def placed() -> bool:
            pods = rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
            return len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)

        watched = [p for p in (release.webhook, release.controller) if p is not None]
        processes.wait_until("all 4 pods of the gang placed", placed, 90, watched)
        pods = rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        assert {p["spec"]["schedulerName"] for p in pods} == {"volcano"}
        groups = rest.get(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups")
        assert [g["spec"]["minMember"] for g in groups["items"]] == [4]
    finally:
        rest.delete(f"/api/v1/namespaces/{namespace}")
        rest.delete(kohort("clusterqueues", "chart-e2e"))
        rest.delete(kohort("resourceflavors", "chart-e2e"))
        cluster.remove_nodes(nodes)


def test_neither_component_was_ever_refused_by_rbac(release: Release) -> None:
    for proc in (release.webhook, release.controller):
        assert proc is not None and proc.alive(), proc and proc.log_tail()
        log = proc.log_path.read_text()
        assert "forbidden" not in log.lower(), proc.log_tail(60)


def test_upgrade_and_rollback_keep_the_certificates_and_uninstall_keeps_the_crds(
    release: Release,
) -> None:
    cluster = release.cluster
    before_secret, before_bundles = secret_data(cluster), ca_bundles(cluster)

    upgrade = release.helm(
        "upgrade",
        RELEASE,
        str(CHART_DIR),
        "--namespace",
        NAMESPACE,
        *release.values_args(),
        "--set",
        "webhook.timeoutSeconds=3",
        check=False,
    )
    assert upgrade.returncode == 0, upgrade.stderr
    validating = configuration(cluster, "ValidatingWebhookConfiguration")
    assert {w["timeoutSeconds"] for w in validating["webhooks"]} == {3}
    assert ca_bundles(cluster) == before_bundles, "helm upgrade dropped the rotator's caBundle"
    assert secret_data(cluster) == before_secret, "helm upgrade reset the certificate Secret"

    rollback = release.helm("rollback", RELEASE, "1", "--namespace", NAMESPACE, check=False)
    assert rollback.returncode == 0, rollback.stderr
    validating = configuration(cluster, "ValidatingWebhookConfiguration")
    assert {w["timeoutSeconds"] for w in validating["webhooks"]} == {5}
    assert ca_bundles(cluster) == before_bundles, "helm rollback dropped the rotator's caBundle"
    assert secret_data(cluster) == before_secret, "helm rollback reset the certificate Secret"

    crds = [o for o in release.manifest() if o["kind"] == "CustomResourceDefinition"]
    uninstall = release.helm("uninstall", RELEASE, "--namespace", NAMESPACE, check=False)
    assert uninstall.returncode == 0, uninstall.stderr
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        with pytest.raises(ApiError) as gone:
            configuration(cluster, kind)
        assert gone.value.status == 404
    for crd in crds:
        kept = cluster.rest.get(object_path(crd))
        assert kept["metadata"]["annotations"][KEEP] == "keep"
