"""The story `kohort dev demo` tells on a fresh local control plane, printed as tables.

`KohortStack` runs kohort's webhook and controller in this process's event loop against a local
cluster (installs the CRDs, registers the webhook by URL with its own CA); the e2e tests use it
too.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certs.authority import CertificateAuthority
from certs.reload import server_context
from controller import main as controller_main
from controller.api import names
from controller.cluster import clients
from controller.cluster.writers import PodGroupSettings
from controller.reconciler import Settings as ControllerSettings
from hack import processes
from hack.localcluster import LocalCluster, NodePool
from hack.rest import ApiError, RestClient
from hack.tables import format_table
from webhook import registration
from webhook.server import WebhookServer
from webhook.settings import ControllerIdentity
from webhook.settings import Settings as WebhookSettings

CONTROLLER_USER = "kohort-controller"
STACK_LABEL = "kohort.dev/stack"


def crd_documents() -> list[dict[str, Any]]:
    """The kohort.dev CRDs, generated from the API models by controller.api.crds."""
    crds = importlib.import_module("controller.api.crds")
    docs: list[dict[str, Any]] = list(crds.all_crds())
    return docs


def install_crds(rest: RestClient, cluster: LocalCluster) -> None:
    for crd in crd_documents():
        name = crd["metadata"]["name"]
        rest.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", crd)
    for crd in crd_documents():
        cluster.wait_crd_established(crd["metadata"]["name"])


@dataclass
class KohortStack:
    """kohort's webhook and controller, in-process, against `cluster`.

    The webhook acts only in namespaces labelled `kohort.dev/stack=<id>` (see `enroll`), so
    stacks of different tests or a leftover registration never touch each other's objects.
    """

    cluster: LocalCluster
    settings: ControllerSettings = field(default_factory=ControllerSettings)
    podgroups: PodGroupSettings = field(default_factory=PodGroupSettings)
    run_controller: bool = True
    ident: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    webhook: WebhookServer | None = None
    controller: controller_main.Controller | None = None

    @property
    def webhook_name(self) -> str:
        return f"kohort-{self.ident}"

    @property
    def controller_kubeconfig(self) -> Path:
        return self.cluster.work_dir / f"kohort-controller-{self.ident}.kubeconfig"

    async def start(self) -> KohortStack:
        install_crds(self.cluster.rest, self.cluster)
        await self._start_webhook()
        pair = self.cluster.issue_user(CONTROLLER_USER, ["system:masters"])
        self.cluster.write_kubeconfig(self.controller_kubeconfig, CONTROLLER_USER, pair)
        if self.run_controller:
            await self.start_controller()
        return self

    async def start_controller(self) -> controller_main.Controller:
        api = await clients.connect(str(self.controller_kubeconfig))
        self.controller = await controller_main.start(
            api,
            self.settings,
            self.podgroups,
            identity=f"in-process-{self.ident}",
            namespace_selector=f"{STACK_LABEL}={self.ident}",
        )
        await asyncio.wait_for(self.controller.cache.wait_synced(), 60)
        return self.controller

    async def stop_controller(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
            self.controller = None

    async def _start_webhook(self) -> None:
        ca = CertificateAuthority.create(f"kohort-webhook-{self.ident}")
        serving = ca.issue_server(["localhost"], ["127.0.0.1"])
        settings = WebhookSettings(controller=ControllerIdentity.of(users=[CONTROLLER_USER]))
        server = WebhookServer(
            settings, server_context(), host="127.0.0.1", port=0, metrics_port=None
        )
        server.reloader().load_pem(serving.cert_pem, serving.key_pem)
        await server.start()
        self.webhook = server
        client = registration.url_client(f"https://127.0.0.1:{server.port}", ca.cert_pem)
        selector = {"matchLabels": {STACK_LABEL: self.ident}}
        rest = self.cluster.rest
        mutating = registration.mutating_configuration(
            self.webhook_name, client, namespace_selector=selector, failure_policy="Fail"
        )
        validating = registration.validating_configuration(
            self.webhook_name, client, namespace_selector=selector
        )
        # Quota objects are cluster-wide: leave their validation to whoever owns the cluster.
        validating["webhooks"] = [
            w for w in validating["webhooks"] if w.get("namespaceSelector") == selector
        ]
        base = "/apis/admissionregistration.k8s.io/v1"
        rest.apply(f"{base}/mutatingwebhookconfigurations/{self.webhook_name}", mutating)
        rest.apply(f"{base}/validatingwebhookconfigurations/{self.webhook_name}", validating)

    def enroll(self, namespace: str) -> None:
        """Let this stack's webhook act in `namespace`."""
        self.cluster.rest.patch(
            f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {STACK_LABEL: self.ident}}}
        )

    async def stop(self) -> None:
        await self.stop_controller()
        base = "/apis/admissionregistration.k8s.io/v1"
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            with contextlib.suppress(ApiError):
                self.cluster.rest.delete(f"{base}/{kind}/{self.webhook_name}")
        if self.webhook is not None:
            await self.webhook.stop()
            self.webhook = None


def apply_queues(rest: RestClient, objects: Iterable[dict[str, Any]]) -> None:
    """Create or update ClusterQueues and LocalQueues (server-side apply)."""
    for obj in objects:
        plural = {"ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}[obj["kind"]]
        meta = obj["metadata"]
        where = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
        rest.apply(f"/apis/{names.API_VERSION}{where}/{plural}/{meta['name']}", obj)


NAMESPACE = "demo"
GANG = 4
GPUS_PER_POD = 8


def nodes_table(rest: RestClient) -> str:
    rows = []
    for node in rest.get("/api/v1/nodes")["items"]:
        status = node.get("status", {})
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
        )
        alloc = status.get("allocatable", {})
        taints = ",".join(t["key"] for t in node["spec"].get("taints", [])) or "-"
        rows.append(
            [
                node["metadata"]["name"],
                "Ready" if ready else "NotReady",
                alloc.get("cpu", "-"),
                alloc.get("memory", "-"),
                alloc.get("nvidia.com/gpu", "0"),
                taints,
            ]
        )
    return format_table(["NODE", "STATUS", "CPU", "MEMORY", "GPU", "TAINTS"], rows)


def pods_table(rest: RestClient, namespace: str) -> str:
    rows = [
        [
            p["metadata"]["name"],
            p["status"].get("phase", "-"),
            p["spec"].get("nodeName", "<none>"),
            p["spec"].get("schedulerName", "-"),
        ]
        for p in rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    ]
    return format_table(["POD", "PHASE", "NODE", "SCHEDULER"], rows)


def podgroups_table(rest: RestClient, namespace: str) -> str:
    rows = []
    for pg in rest.get(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups")[
        "items"
    ]:
        status = pg.get("status", {})
        reasons = [
            c.get("message", "")[:70]
            for c in status.get("conditions", [])
            if c.get("type") == "Unschedulable" and c.get("status") == "True"
        ]
        rows.append(
            [
                pg["metadata"]["name"],
                status.get("phase", "-"),
                str(pg["spec"].get("minMember", "-")),
                str(status.get("running", 0)),
                reasons[0] if reasons else "",
            ]
        )
    return format_table(["PODGROUP", "PHASE", "MINMEMBER", "RUNNING", "WHY"], rows)


def _gang_pod(i: int) -> dict[str, Any]:
    role = "leader" if i == 0 else f"worker-{i}"
    gpus = str(GPUS_PER_POD)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"trainer-{role}",
            "annotations": {"scheduling.k8s.io/group-name": "trainer"},
        },
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"nvidia.com/gpu": gpus},
                        "limits": {"nvidia.com/gpu": gpus},
                    },
                }
            ],
        },
    }


def _bound(rest: RestClient) -> int:
    pods = rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    return sum(1 for p in pods if p["spec"].get("nodeName"))


def _show(rest: RestClient, title: str) -> None:
    print(f"\n== {title}")
    print(podgroups_table(rest, NAMESPACE))
    print()
    print(pods_table(rest, NAMESPACE))


def run_story(cluster: LocalCluster) -> None:
    rest = cluster.rest
    print("\n== nodes")
    print(nodes_table(rest))
    gpus = sum(
        int(n["status"].get("allocatable", {}).get("nvidia.com/gpu", "0"))
        for n in rest.get("/api/v1/nodes")["items"]
    )
    rest.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        exist_ok=True,
    )
    rest.create(
        f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NAMESPACE}/podgroups",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "trainer"},
            "spec": {"minMember": GANG},
        },
    )
    for i in range(GANG):
        rest.create(f"/api/v1/namespaces/{NAMESPACE}/pods", _gang_pod(i))
    need = GANG * GPUS_PER_POD
    if gpus < need:
        processes.wait_until(
            "Volcano to mark the gang Unschedulable",
            lambda: (
                "Unschedulable" in podgroups_table(rest, NAMESPACE)
                or "Inqueue" in podgroups_table(rest, NAMESPACE)
            ),
            60,
            cluster.procs,
        )
        _show(
            rest,
            f"a gang of {GANG} pods x {GPUS_PER_POD} GPUs on {gpus} GPUs: "
            f"{_bound(rest)} pods bound, no GPU held",
        )
        missing = -(-(need - gpus) // GPUS_PER_POD)
        print(f"\n== adding {missing} node(s) of {GPUS_PER_POD} GPUs")
        cluster.add_nodes(
            NodePool("gpu-extra", missing, cpu="64", memory="512Gi", gpus=GPUS_PER_POD)
        )
    processes.wait_until(
        "the whole gang to be bound", lambda: _bound(rest) == GANG, 60, cluster.procs
    )
    _show(rest, f"all {GANG} pods of the gang bound together")
