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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from certs.authority import CertificateAuthority
from certs.reload import server_context
from controller import main as controller_main
from controller.api import kinds, names
from controller.api.quantity import parse_quantity
from controller.cluster import clients
from controller.quota import Config as CoreConfig
from controller.settings import Settings as ControllerSettings
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Backend, Placement
from hack.localcluster import WORKLOAD_CONTROLLER_USER, LocalCluster
from hack.objects import cluster_queue, gang_job, local_queue, resource_flavor
from hack.rest import ApiError, RestClient
from hack.tables import format_table
from webhook import registration
from webhook.server import WebhookServer
from webhook.settings import WORKLOAD_CONTROLLERS, ControllerIdentity
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
        rest.apply(kinds.CRDS.path(name=name), crd)
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

    async def start_controller(self, *, discover: bool = True) -> controller_main.Controller:
        """The controller, in-process; `discover` False skips its start-up check that the
        cluster serves the gang backend's API (as if the backend went away after it)."""
        api = await clients.connect(str(self.controller_kubeconfig))
        if discover:
            picked = await controller_main.gang_backend_settings(api, self.podgroups)
            if isinstance(picked, str):
                await api.close()
                raise RuntimeError(picked)
            self.podgroups = picked
        self.controller = await controller_main.start(
            api,
            self.settings,
            self.podgroups,
            identity=f"in-process-{self.ident}",
            namespace_selector=f"{STACK_LABEL}={self.ident}",
        )
        async with asyncio.timeout(60):
            await self.controller.cache.wait_synced()
        return self.controller

    async def stop_controller(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
            self.controller = None

    async def _start_webhook(self) -> None:
        ca = CertificateAuthority.create(f"kohort-webhook-{self.ident}")
        serving = ca.issue_server(["localhost"], ["127.0.0.1"])
        settings = WebhookSettings(
            placement=Placement.for_backend(self.podgroups.backend),
            controller=ControllerIdentity.of(users=[CONTROLLER_USER]),
            workload_controllers=WORKLOAD_CONTROLLERS | {WORKLOAD_CONTROLLER_USER},
        )
        server = WebhookServer(
            settings, server_context(), host="127.0.0.1", port=0, metrics_port=None
        )
        server.reloader().load_pem(serving.cert_pem, serving.key_pem)
        await server.start()
        self.webhook = server
        register_webhook(
            self.cluster.rest,
            self.webhook_name,
            f"https://127.0.0.1:{server.port}",
            ca.cert_pem,
            self.ident,
        )

    def enroll(self, namespace: str) -> None:
        """Let this stack's webhook act in `namespace`."""
        self.cluster.rest.patch(
            f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {STACK_LABEL: self.ident}}}
        )

    async def stop(self) -> None:
        await self.stop_controller()
        unregister_webhook(self.cluster.rest, self.webhook_name)
        if self.webhook is not None:
            await self.webhook.stop()
            self.webhook = None


def register_webhook(rest: RestClient, name: str, url: str, ca_pem: bytes, ident: str) -> None:
    """Register a webhook served at `url` for the namespaces enrolled in stack `ident`, as the
    chart registers it: mutation fails open, validation closed, and the controller's own
    requests skip the workload webhooks (docs/operations.md)."""
    client = registration.url_client(url, ca_pem)
    selector = {"matchLabels": {STACK_LABEL: ident}}
    mutating = registration.mutating_configuration(
        name, client, namespace_selector=selector, controller_users=[CONTROLLER_USER]
    )
    validating = registration.validating_configuration(
        name, client, namespace_selector=selector, controller_users=[CONTROLLER_USER]
    )
    # Quota objects are cluster-wide: leave their validation to whoever owns the cluster.
    validating["webhooks"] = [
        w for w in validating["webhooks"] if w.get("namespaceSelector") == selector
    ]
    base = "/apis/admissionregistration.k8s.io/v1"
    rest.apply(f"{base}/mutatingwebhookconfigurations/{name}", mutating)
    rest.apply(f"{base}/validatingwebhookconfigurations/{name}", validating)


def unregister_webhook(rest: RestClient, name: str) -> None:
    base = "/apis/admissionregistration.k8s.io/v1"
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        with contextlib.suppress(ApiError):
            rest.delete(f"{base}/{kind}/{name}")


def apply_queues(rest: RestClient, objects: Iterable[dict[str, Any]]) -> None:
    """Create or update ClusterQueues and LocalQueues (server-side apply). A ResourceFlavor a
    ClusterQueue names is created first when it does not exist, standing for every node (the
    controller releases no gang on a flavor it has no ResourceFlavor for)."""
    for obj in objects:
        for group in obj["spec"].get("resourceGroups", []) if obj["kind"] == "ClusterQueue" else []:
            for flavor in group.get("flavors", []):
                rest.create(
                    f"/apis/{names.API_VERSION}/resourceflavors",
                    resource_flavor(flavor["name"]),
                    exist_ok=True,
                )
        plural = {"ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}[obj["kind"]]
        meta = obj["metadata"]
        where = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
        rest.apply(f"/apis/{names.API_VERSION}{where}/{plural}/{meta['name']}", obj)


GPU = "nvidia.com/gpu"
TEAMS = ("team-a", "team-b")
COHORT = "research"


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


def _gpus(amounts: dict[str, Any] | None) -> int:
    return int(parse_quantity(str((amounts or {}).get(GPU, "0"))) // 1000)


async def queues_table(api: clients.Client) -> str:
    rows = []
    for team in TEAMS:
        cq = await api.get(kinds.CLUSTER_QUEUES, team)
        spec, status = cq["spec"], cq.get("status") or {}
        nominal = sum(
            _gpus({GPU: r["nominalQuota"]})
            for g in spec["resourceGroups"]
            for f in g["flavors"]
            for r in f["resources"]
            if r["name"] == GPU
        )
        usage = [
            r for f in status.get("flavorsUsage", []) for r in f["resources"] if r["name"] == GPU
        ]
        used = _gpus({GPU: usage[0]["total"]}) if usage else 0
        borrowed = _gpus({GPU: usage[0]["borrowed"]}) if usage else 0
        rows.append(
            [
                team,
                spec.get("cohort", "-"),
                str(nominal),
                str(used),
                str(borrowed),
                str(status.get("pendingWorkloads", 0)),
                str(status.get("admittedWorkloads", 0)),
                str(status.get("weightedShare", 0)),
            ]
        )
    headers = ["CLUSTERQUEUE", "COHORT", "GPU QUOTA", "GPU USED", "BORROWED", "PENDING"]
    return format_table([*headers, "ADMITTED", "SHARE"], rows)


def _state(wl: dict[str, Any]) -> tuple[str, str]:
    conditions = {c["type"]: c for c in (wl.get("status") or {}).get("conditions", [])}

    def true(kind: str) -> bool:
        return bool(conditions.get(kind, {}).get("status") == "True")

    if true("Finished"):
        return "Finished", ""
    if true("QuotaReserved"):
        borrowing = "borrowing" in conditions["QuotaReserved"].get("message", "")
        return "Admitted", "borrowing from the cohort" if borrowing else "within its quota"
    reason = (wl.get("status") or {}).get("pendingReason", "")
    if true("Evicted"):
        return "Requeued", reason
    return "Pending", reason


async def workloads_table(api: clients.Client) -> str:
    rows = []
    for team in TEAMS:
        items, _ = await api.list(kinds.WORKLOADS, team)
        for wl in sorted(items, key=lambda w: w["metadata"]["creationTimestamp"]):
            gpus = sum(_gpus(ps.get("requests")) * ps["count"] for ps in wl["spec"]["podSets"])
            pods, _ = await api.list(
                kinds.PODS,
                team,
                label_selector=f"{names.POD_GROUP_LABEL}={wl['metadata']['name']}",
            )
            running = sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")
            state, why = _state(wl)
            rows.append(
                [
                    team,
                    wl["metadata"]["name"],
                    str(sum(ps["count"] for ps in wl["spec"]["podSets"])),
                    str(gpus),
                    str(running),
                    state,
                    why[:78],
                ]
            )
    return format_table(["NAMESPACE", "WORKLOAD", "PODS", "GPUS", "RUNNING", "STATE", "WHY"], rows)


async def pods_table(api: clients.Client) -> str:
    rows = []
    for team in TEAMS:
        items, _ = await api.list(kinds.PODS, team)
        for pod in sorted(items, key=lambda p: p["metadata"]["name"]):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            rows.append(
                [
                    team,
                    pod["metadata"]["name"],
                    pod.get("status", {}).get("phase", "-"),
                    pod["spec"].get("nodeName", "<none>"),
                    str(_gpus(pod["spec"]["containers"][0]["resources"].get("requests"))),
                ]
            )
    return format_table(["NAMESPACE", "POD", "PHASE", "NODE", "GPUS"], rows)


async def _events_table(api: clients.Client, namespace: str, kind: str, name: str) -> str:
    items, _ = await api.list(kinds.EVENTS, namespace)
    rows = [
        [
            e.get("type", ""),
            e.get("reason", ""),
            e.get("source", {}).get("component", ""),
            str(e.get("message", ""))[:90],
        ]
        for e in sorted(items, key=lambda e: str(e.get("lastTimestamp") or ""))
        if e.get("involvedObject", {}).get("kind") == kind
        and e.get("involvedObject", {}).get("name") == name
    ]
    return format_table(["TYPE", "REASON", "FROM", "MESSAGE"], rows)


async def _show(api: clients.Client, title: str) -> None:
    print(f"\n== {title}\n")
    print(await queues_table(api))
    print()
    print(await workloads_table(api))
    print()
    print(await pods_table(api))


def _job(name: str, team: str, pods: int, gpus_per_pod: int) -> dict[str, Any]:
    return gang_job(name, queue=team, pods=pods, requests={GPU: str(gpus_per_pod), "cpu": "4"})


async def _until(what: str, probe: Any, within: float = 120.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await probe():
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError(f"demo: gave up after {within:.0f}s waiting for {what}")
        await asyncio.sleep(0.5)


async def _running(api: clients.Client, team: str, gang: str, count: int) -> bool:
    pods, _ = await api.list(kinds.PODS, team, label_selector=f"{names.POD_GROUP_LABEL}={gang}")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return (
        sum(1 for p in live if p.get("status", {}).get("phase") == "Running") == count == len(live)
    )


async def _reason(api: clients.Client, team: str, gang: str, prefix: str) -> bool:
    try:
        wl = await api.get(kinds.WORKLOADS, gang, team)
    except clients.ApiError:
        return False
    return str((wl.get("status") or {}).get("pendingReason") or "").startswith(prefix)


GPU_QUOTA = {"team-a": "8", "team-b": "16"}


async def _story(cluster: LocalCluster, backend: Backend) -> None:
    # A short requeue backoff keeps the story brisk; the default is 10s.
    # The story reclaims within seconds: its queues evict at once (cluster_queue's timers) and
    # the controller has no waste budget; the measured defaults wait half an hour.
    settings = ControllerSettings(
        requeue_base=3.0, core=replace(CoreConfig.measured(), waste_budget=None)
    )
    stack = await KohortStack(
        cluster, settings=settings, podgroups=PodGroupSettings(backend)
    ).start()
    print(f"\n== gang backend: {BACKEND_STORY[backend]}")
    api = await clients.connect(str(cluster.kubeconfig))
    try:
        rest = cluster.rest
        queues: list[dict[str, Any]] = []
        for team in TEAMS:
            rest.create(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}},
                exist_ok=True,
            )
            stack.enroll(team)
            quota = {GPU: GPU_QUOTA[team], "cpu": "96"}
            queues.append(cluster_queue(team, quota, cohort=COHORT, reclaim="Any"))
            queues.append(local_queue(team, team, team))
        apply_queues(rest, queues)
        print(
            "\n== two teams share the cohort research: team-a owns 8 GPUs, team-b 16; each"
            " lends what it does not use (evictAfterSeconds: 0 and no waste budget, so that"
            " reclaim happens at once here; by default a gang waits 30 minutes before it evicts)"
        )

        await api.create(kinds.JOBS, _job("warmup", "team-b", 1, 8), "team-b")
        await api.create(kinds.JOBS, _job("pretrain", "team-a", 2, 4), "team-a")
        await _until("pretrain running", lambda: _running(api, "team-a", "job-pretrain", 2))
        await api.create(kinds.JOBS, _job("sweep", "team-a", 2, 4), "team-a")
        await _until("sweep running", lambda: _running(api, "team-a", "job-sweep", 2))
        await _until("warmup running", lambda: _running(api, "team-b", "job-warmup", 1))
        await _show(
            api,
            "1. team-a runs two 8-GPU gangs: one on its own quota, one on team-b's idle GPUs",
        )

        await api.create(kinds.JOBS, _job("eval", "team-a", 1, 4), "team-a")
        await _until("eval waiting", lambda: _reason(api, "team-a", "job-eval", "Waiting"))
        await _show(api, "2. the cluster is full: team-a's next gang waits, holding no GPU")
        print("\n$ kubectl describe job eval -n team-a   # Events")
        print(await _events_table(api, "team-a", "Job", "eval"))

        await api.create(kinds.JOBS, _job("finetune", "team-b", 2, 4), "team-b")
        await _until("finetune running", lambda: _running(api, "team-b", "job-finetune", 2))
        await _show(
            api,
            "3. team-b needs its GPUs: team-a's borrowing gang is evicted whole (both pods)"
            " and requeued; team-b's gang starts",
        )

        await api.delete(kinds.JOBS, "warmup", "team-b")
        await api.delete(kinds.JOBS, "finetune", "team-b")
        await _until("sweep running again", lambda: _running(api, "team-a", "job-sweep", 2))
        await _until("eval running", lambda: _running(api, "team-a", "job-eval", 1))
        await _show(
            api,
            "4. team-b's jobs are done: the evicted gang is readmitted and starts whole, and"
            " team-a's waiting gang starts too, both borrowing team-b's idle GPUs",
        )
    except RuntimeError:
        await _show(api, "where the demo got stuck")
        raise
    finally:
        await api.close()
        await stack.stop()


BACKEND_STORY = {
    Backend.VOLCANO: "Volcano places each admitted gang's PodGroup all or nothing",
    Backend.KUBERNETES: (
        "kube-scheduler places each admitted gang all or nothing (its scheduling.k8s.io"
        " Workload or PodGroup; no Volcano runs)"
    ),
}


def run_story(cluster: LocalCluster, backend: Backend = Backend.VOLCANO) -> None:
    print("\n== nodes")
    print(nodes_table(cluster.rest))
    asyncio.run(_story(cluster, backend))
