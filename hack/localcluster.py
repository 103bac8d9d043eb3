"""A real local control plane: etcd, kube-apiserver, kube-controller-manager, kwok fake nodes,
and optionally kube-scheduler and Volcano, all on 127.0.0.1 with free ports.

    with LocalCluster(ClusterOptions(node_pools=[NodePool("gpu", 4, gpus=8)])) as cluster:
        cluster.kubeconfig  # admin kubeconfig for kubectl and kubernetes-asyncio

Every process is started in its own process group and stopped by PID on exit, also after a
failed start. `state.json` in the work directory records the PIDs so `kohort dev down` can stop
a cluster started by another process.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import yaml

from certs.authority import (
    CertificateAuthority,
    KeyPair,
    key_to_pem,
    new_private_key,
    public_key_to_pem,
)
from controller.api import kinds
from hack import dra, processes, provisioner, testenv, workload_controllers
from hack.processes import ManagedProcess
from hack.rest import ApiError, RestClient

Scheduler = Literal["volcano", "kube-scheduler", "both", "none"]

# Volcano allocates pods' ResourceClaims (DRA) only with its predicates plugin's DRA filter on
# (off by default in v1.14): kube-scheduler's DynamicResources plugin, run inside Volcano.
# Volcano packs pods onto the fullest node that fits, GPUs first, as kohort's placement check
# plans (its built-in default spreads, so a gang admitted onto a node kohort saw free could find
# that node taken by pods Volcano spread there). Volcano's own Helm chart also enables binpack.
VOLCANO_SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
    arguments:
      predicate.DynamicResourceAllocationEnable: true
  - name: proportion
  - name: nodeorder
    arguments:
      leastrequested.weight: 0
      balancedresource.weight: 0
  - name: binpack
    arguments:
      binpack.weight: 10
      binpack.resources: nvidia.com/gpu
      binpack.resources.nvidia.com/gpu: 10
"""

# kube-scheduler packs when it places kohort's gangs (the kubernetes gang backend), as kohort's
# placement check plans: NodeResourcesFit scores the fullest node that fits highest
# (MostAllocated), GPUs weighted most, and the scores that spread pods (balanced allocation, the
# system's default topology spreading) are off. Its defaults spread: a gang kohort planned on
# one node was bound 2 + 2 over two, and a later 8-GPU pod kohort admitted onto a whole free node
# found none (issue 33). docs/gang-backends.md gives users the same configuration.
PACKING_WEIGHTS = {"cpu": 1, "memory": 1, "nvidia.com/gpu": 10}


def packing_scheduler_config(kubeconfig: Path) -> dict[str, Any]:
    """A KubeSchedulerConfiguration whose default profile packs (see PACKING_WEIGHTS)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "enableProfiling": False,
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [
                                    {"name": name, "weight": weight}
                                    for name, weight in PACKING_WEIGHTS.items()
                                ],
                            }
                        },
                    },
                    {
                        "name": "PodTopologySpread",
                        "args": {"defaultingType": "List", "defaultConstraints": []},
                    },
                ],
            }
        ],
    }


GangApi = Literal["v1alpha1", "v1beta1"]
GANG_FEATURE_GATES: dict[str, str] = {
    "v1alpha1": "GenericWorkload=true,GangScheduling=true",
    "v1beta1": "GenericWorkload=true",
}
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.16.0.0/16"
STATE_FILE = "state.json"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
START_TIMEOUT = 120.0
# The user the workload controllers (LWS, JobSet, KubeRay, training operator) act as: webhooks
# of kohort's test stacks trust it to make what those workloads control.
WORKLOAD_CONTROLLER_USER = "kohort-dev:workload-controllers"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def to_api(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}


@dataclass(frozen=True)
class NodePool:
    """`count` identical kwok nodes named `<name>-0`, `<name>-1`, ..."""

    name: str
    count: int = 1
    cpu: str = "32"
    memory: str = "256Gi"
    gpus: int = 0
    # GPUs published as DRA devices of DeviceClass gpu.kohort.dev (hack/dra.py), in a
    # ResourceSlice per node; not in the node's capacity.
    dra_gpus: int = 0
    pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]

    def node_objects(self) -> list[dict[str, Any]]:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        if self.gpus:
            capacity["nvidia.com/gpu"] = str(self.gpus)
        return [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {
                        KWOK_NODE_ANNOTATION: "fake",
                        "node.alpha.kubernetes.io/ttl": "0",
                    },
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                        "kohort.dev/node-pool": self.name,
                        **self.labels,
                    },
                },
                "spec": {"taints": [t.to_api() for t in self.taints]},
                "status": {
                    "capacity": capacity,
                    "allocatable": capacity,
                    "phase": "Running",
                    "nodeInfo": {
                        "architecture": "amd64",
                        "operatingSystem": "linux",
                        "kubeletVersion": "fake",
                    },
                },
            }
            for name in self.node_names()
        ]


@dataclass(frozen=True)
class NodeGroup:
    """A node group of the stand-in autoscaler (hack/provisioner.py): no nodes at first, then
    nodes of this shape made on demand, up to `max_count`, named `<name>-<5 characters>`.

    Written as a Node template to the ConfigMap the kwok cloud provider reads (see
    LocalCluster.set_node_groups), so cluster-autoscaler could read the same groups."""

    name: str
    max_count: int = 200
    min_count: int = 0
    cpu: str = "32"
    memory: str = "256Gi"
    gpus: int = 0
    pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()

    def template(self) -> dict[str, Any]:
        shape = NodePool(
            self.name,
            1,
            self.cpu,
            self.memory,
            self.gpus,
            pods=self.pods,
            labels={provisioner.DEFAULT_GROUP_LABEL: self.name, **self.labels},
            taints=self.taints,
        )
        [node] = shape.node_objects()
        node["metadata"]["name"] = f"{self.name}-template"
        del node["metadata"]["labels"]["kubernetes.io/hostname"]
        node["metadata"]["annotations"] = {
            provisioner.MIN_ANNOTATION: str(self.min_count),
            provisioner.MAX_ANNOTATION: str(self.max_count),
            "node.alpha.kubernetes.io/ttl": "0",
        }
        return node


@dataclass(frozen=True)
class Autoscaler:
    """The stand-in autoscaler's node groups and flags (python -m hack.provisioner --help)."""

    groups: Sequence[NodeGroup] = ()
    scan_interval: float = 0.5
    booking_time: float = 600.0
    scale_down_unneeded_time: float = 600.0
    # The provisioner taints new nodes kwok-provider=true:NoSchedule by default, as the kwok
    # provider does; here it does not, so that ordinary pods (kohort's gangs) run on them.
    skip_taint: bool = True

    def flags(self) -> list[str]:
        flags = [
            f"--scan-interval={self.scan_interval}",
            f"--booking-time={self.booking_time}",
            f"--scale-down-unneeded-time={self.scale_down_unneeded_time}",
        ]
        return [*flags, "--skip-taint"] if self.skip_taint else flags


@dataclass(frozen=True)
class ClusterOptions:
    node_pools: Sequence[NodePool] = (NodePool("cpu", 2),)
    scheduler: Scheduler = "both"
    controller_manager: bool = True
    # kube-scheduler's own gang scheduling (KEP-4671), at one of its API versions: "v1alpha1"
    # (Kubernetes 1.35, the pinned K8S_VERSION: Workloads, gates GenericWorkload and
    # GangScheduling) or "v1beta1" (K8S_GANG_VERSION: PodGroups, gate GenericWorkload); None:
    # off. With v1beta1 the control plane runs K8S_GANG_VERSION's apiserver, controller-manager
    # and scheduler.
    gang_api: GangApi | None = None
    # True: children get SIGTERM if this process dies (tests). False: they outlive it (dev up).
    tie_to_parent: bool = True
    # Workload controllers started with the cluster (hack/workload_controllers.py names them:
    # "lws-manager", "jobset-manager", "kuberay-operator", "training-operator").
    workload_controllers: tuple[str, ...] = ()
    # kube-apiserver writes an audit log (logs/audit.log) of every write these users make, with
    # its user agent: the fault runner reads it to prove that a replica which lost its Lease
    # wrote nothing. Empty: no audit log.
    audit_users: tuple[str, ...] = ()
    # More kube-controller-manager flags (bench_scale: a node monitor grace period that kwok's
    # lease heartbeats keep up with on a loaded machine).
    controller_manager_flags: tuple[str, ...] = ()
    # The stand-in cluster-autoscaler for ProvisioningRequests (hack/provisioner.py), with its
    # node groups; None: no autoscaler and no ProvisioningRequest CRD.
    autoscaler: Autoscaler | None = None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LocalCluster:
    def __init__(self, options: ClusterOptions | None = None, work_dir: Path | None = None):
        self.options = options or ClusterOptions()
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="kohort-cluster-"))
        self.pki_dir = self.work_dir / "pki"
        self.log_dir = self.work_dir / "logs"
        self.kubeconfig = self.work_dir / "kubeconfig"
        self.procs: list[ManagedProcess] = []
        self.server = ""
        self.ca = CertificateAuthority.create("kohort-local-cluster-ca")
        self.ca_pem = self.ca.cert_pem
        self._rest: RestClient | None = None
        # Nodes with a ResourceSlice of hack/dra.py's driver.
        self._dra_nodes: set[str] = set()

    # ---- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        t0 = time.monotonic()
        try:
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            if self.options.controller_manager:
                self._start_controller_manager()
            if self.options.scheduler in ("kube-scheduler", "both"):
                self._start_kube_scheduler()
            self._start_kwok()
            if self.options.scheduler in ("volcano", "both"):
                self._start_volcano()
            for name in self.options.workload_controllers:
                self.start_workload_controller(name)
            self.add_nodes(*self.options.node_pools)
            if self.options.autoscaler is not None:
                self.start_autoscaler(self.options.autoscaler)
        except BaseException:
            self.stop()
            raise
        self._log(f"cluster ready in {time.monotonic() - t0:.1f}s at {self.server}")

    def process(self, name: str) -> ManagedProcess:
        """The running component called `name` ("etcd", "kube-apiserver", "vc-scheduler", ...)."""
        for proc in self.procs:
            if proc.name == name:
                return proc
        raise KeyError(f"no component {name!r}; running: {[p.name for p in self.procs]}")

    def restart(self, name: str, *, downtime: float = 0.0) -> None:
        """Stop a component, keep it down `downtime` seconds, start it again with the same flags
        (etcd keeps its data), and wait until it serves again."""
        old = self.process(name)
        new = processes.restart(old, self.log_dir, downtime=downtime)
        self.procs[self.procs.index(old)] = new
        self._write_state()
        ready = {
            "etcd": lambda: _http_ok(f"{self.etcd_url}/readyz"),
            "kube-apiserver": self._apiserver_ready,
        }.get(name, new.alive)
        processes.wait_until(f"{name} serving again", ready, START_TIMEOUT, [new])

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (through etcd's JSON gateway): a
        watch that resumes from an older resourceVersion then gets 410 Gone. The revision."""
        key = base64.b64encode(b"/registry/namespaces/default").decode()
        header = _post_json(f"{self.etcd_url}/v3/kv/range", {"key": key})["header"]
        revision = int(header["revision"])
        _post_json(f"{self.etcd_url}/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def stop(self) -> None:
        for proc in reversed(self.procs):
            processes.stop(proc.pid)
        self.procs.clear()
        self._write_state()

    # ---- access ----------------------------------------------------------------------------

    @property
    def rest(self) -> RestClient:
        if self._rest is None:
            self._rest = RestClient(
                self.server,
                self.pki_dir / "ca.crt",
                self.pki_dir / "admin.crt",
                self.pki_dir / "admin.key",
            )
        return self._rest

    def issue_user(self, name: str, groups: Sequence[str] = ()) -> KeyPair:
        """A client certificate the apiserver accepts as user `name` in `groups`."""
        return self.ca.issue_client(name, groups)

    def write_kubeconfig(self, path: Path, user: str, pair: KeyPair) -> Path:
        cert, key = path.with_suffix(".crt"), path.with_suffix(".key")
        pair.write(cert, key)
        path.write_text(yaml.safe_dump(self._kubeconfig_dict(user, cert, key)))
        return path

    def _kubeconfig_dict(self, user: str, cert: Path, key: Path) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kohort-local",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.pki_dir / "ca.crt"),
                    },
                }
            ],
            "users": [
                {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
            ],
            "contexts": [
                {"name": "kohort-local", "context": {"cluster": "kohort-local", "user": user}}
            ],
            "current-context": "kohort-local",
        }

    # ---- nodes -----------------------------------------------------------------------------

    def add_nodes(self, *pools: NodePool, wait_ready: bool = True) -> list[str]:
        names: list[str] = []
        for pool in pools:
            if pool.dra_gpus:
                self.rest.create(dra.DEVICE_CLASSES_PATH, dra.device_class(), exist_ok=True)
            for node in pool.node_objects():
                created = self.rest.create("/api/v1/nodes", node)
                names.append(node["metadata"]["name"])
                if pool.dra_gpus:
                    slice_ = dra.resource_slice(created, pool.dra_gpus)
                    self.rest.create(dra.RESOURCE_SLICES_PATH, slice_)
                    self._dra_nodes.add(node["metadata"]["name"])
        if wait_ready and names:
            self.wait_nodes_ready(names)
        return names

    def remove_nodes(self, names: Sequence[str]) -> None:
        for name in names:
            self.rest.delete(f"/api/v1/nodes/{name}")
            if name in self._dra_nodes:
                # The garbage collector would take it too, but later.
                self._dra_nodes.discard(name)
                self.rest.delete(f"{dra.RESOURCE_SLICES_PATH}/{dra.slice_name(name)}")

    def node_ready(self, name: str) -> bool:
        node = self.rest.get(f"/api/v1/nodes/{name}")
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in node.get("status", {}).get("conditions", [])
        )
        # kube-controller-manager lifts the not-ready taint the apiserver adds on creation.
        tainted = self.options.controller_manager and any(
            t.get("key") == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints", [])
        )
        return ready and not tainted

    def wait_nodes_ready(self, names: Sequence[str], timeout: float = 60.0) -> None:
        processes.wait_until(
            f"nodes {', '.join(names)} to become Ready",
            lambda: all(self.node_ready(n) for n in names),
            timeout,
            self.procs,
        )

    # ---- components ------------------------------------------------------------------------

    def _log(self, msg: str) -> None:
        stamp = dt.datetime.now().strftime("%H:%M:%S")
        print(f"[kohort-dev {stamp}] {msg}", flush=True)

    def _spawn(
        self, name: str, argv: Sequence[str], env: dict[str, str] | None = None
    ) -> ManagedProcess:
        proc = processes.start(
            name, argv, self.log_dir, tie_to_parent=self.options.tie_to_parent, env=env
        )
        self.procs.append(proc)
        self._write_state()
        return proc

    def _write_state(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "pids": {p.name: p.pid for p in self.procs},
        }
        (self.work_dir / STATE_FILE).write_text(json.dumps(state, indent=2))

    def _write_pki(self) -> None:
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        (self.pki_dir / "ca.crt").write_bytes(self.ca_pem)
        ca_key = self.pki_dir / "ca.key"
        ca_key.touch(mode=0o600)
        ca_key.write_bytes(self.ca.pair.key_pem)
        serving = self.ca.issue_server(["localhost"], ["127.0.0.1"])
        serving.write(self.pki_dir / "apiserver.crt", self.pki_dir / "apiserver.key")
        self.ca.issue_client("kohort-admin", ["system:masters"]).write(
            self.pki_dir / "admin.crt", self.pki_dir / "admin.key"
        )
        signing_key = new_private_key()
        sa_key = self.pki_dir / "sa.key"
        sa_key.touch(mode=0o600)
        sa_key.write_bytes(key_to_pem(signing_key))
        (self.pki_dir / "sa.pub").write_bytes(public_key_to_pem(signing_key))

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        # Every start is a new cluster (new CA, new nodes): data of an earlier run is stale.
        shutil.rmtree(self.work_dir / "etcd", ignore_errors=True)
        proc = self._spawn(
            "etcd",
            [
                str(testenv.binary("etcd")),
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        processes.wait_until(
            "etcd /readyz", lambda: _http_ok(f"{self.etcd_url}/readyz"), START_TIMEOUT, [proc]
        )

    def _start_apiserver(self) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        pki = self.pki_dir
        proc = self._spawn(
            "kube-apiserver",
            [
                self._k8s_binary("kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--cert-dir={self.work_dir / 'apiserver'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={self.server}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
                *self._gang_api_flags(runtime_config=True),
                *self._audit_flags(),
            ],
        )
        (self.work_dir / "kubeconfig").write_text(
            yaml.safe_dump(
                self._kubeconfig_dict("kohort-admin", pki / "admin.crt", pki / "admin.key")
            )
        )
        self._write_state()
        processes.wait_until("kube-apiserver /readyz", self._apiserver_ready, START_TIMEOUT, [proc])

    def _audit_flags(self) -> list[str]:
        if not self.options.audit_users:
            return []
        policy = self.work_dir / "audit-policy.yaml"
        rules = [
            {
                "level": "Metadata",
                "users": list(self.options.audit_users),
                "verbs": list(WRITE_VERBS),
            },
            {"level": "None"},
        ]
        policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": rules,
                }
            )
        )
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log_path}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
        ]

    @property
    def audit_log_path(self) -> Path:
        return self.log_dir / "audit.log"

    def _gang_api_flags(self, *, runtime_config: bool = False) -> list[str]:
        api = self.options.gang_api
        if api is None:
            return []
        flags = [f"--feature-gates={GANG_FEATURE_GATES[api]}"]
        if runtime_config:
            flags.append(f"--runtime-config=scheduling.k8s.io/{api}=true")
        return flags

    def _k8s_binary(self, name: str) -> str:
        """kube-apiserver, -controller-manager or -scheduler of this cluster's version."""
        if self.options.gang_api == "v1beta1":
            return str(testenv.binary(f"{name}-{testenv.versions()['K8S_GANG_VERSION']}"))
        return str(testenv.binary(name))

    def _apiserver_ready(self) -> bool:
        return bool(self.rest.request("GET", "/readyz") == "ok")

    def _start_controller_manager(self) -> None:
        proc = self._spawn(
            "kube-controller-manager",
            [
                self._k8s_binary("kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--root-ca-file={self.pki_dir / 'ca.crt'}",
                f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
                # Each controller acts as its own ServiceAccount (kube-system:job-controller,
                # ...), as on real clusters: the webhook tells the Job controller's requests
                # apart by it.
                "--use-service-account-credentials=true",
                f"--cluster-cidr={POD_CIDR}",
                "--profiling=false",
                "--v=1",
                *self._gang_api_flags(),
                *self.options.controller_manager_flags,
            ],
        )
        # The default ServiceAccount appears once the controllers run.
        processes.wait_until(
            "kube-controller-manager (default ServiceAccount)",
            lambda: _exists(self.rest, "/api/v1/namespaces/default/serviceaccounts/default"),
            START_TIMEOUT,
            [proc],
        )

    def _start_kube_scheduler(self) -> None:
        """kube-scheduler; set to pack (packing_scheduler_config) when it places gangs."""
        if self.options.gang_api is not None:
            config = self.work_dir / "kube-scheduler.yaml"
            config.write_text(yaml.safe_dump(packing_scheduler_config(self.kubeconfig)))
            setup = [f"--config={config}"]
        else:
            setup = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false", "--profiling=false"]
        self._spawn(
            "kube-scheduler",
            [
                self._k8s_binary("kube-scheduler"),
                *setup,
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=1",
                *self._gang_api_flags(),
            ],
        )

    def _start_kwok(self) -> None:
        home = self.work_dir / "kwok-home"  # keeps a user's ~/.kwok/kwok.yaml out of the merge
        home.mkdir(exist_ok=True)
        argv = [
            str(testenv.binary("kwok")),
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            f"--cidr={POD_CIDR}",
            "--node-ip=10.15.0.1",
        ]
        for stage in testenv.kwok_stage_files():
            argv += ["-c", str(stage)]
        self._spawn("kwok", argv, env={"HOME": str(home)})

    def _start_volcano(self) -> None:
        self.apply_crds(testenv.volcano_crd_files())
        conf = self.work_dir / "volcano-scheduler.conf"
        conf.write_text(VOLCANO_SCHEDULER_CONF)
        scheduler = self._spawn(
            "vc-scheduler",
            [
                str(testenv.binary("vc-scheduler")),
                f"--kubeconfig={self.kubeconfig}",
                f"--scheduler-conf={conf}",
                "--leader-elect=false",
                "--enable-healthz=false",
                "--enable-metrics=false",
                "--v=2",
            ],
        )
        controllers = self._spawn(
            "vc-controller-manager",
            [
                str(testenv.binary("vc-controller-manager")),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--enable-healthz=false",
                "--v=2",
            ],
        )
        # The scheduler creates the `default` queue once its caches have synced.
        processes.wait_until(
            "Volcano's default queue",
            lambda: _exists(self.rest, "/apis/scheduling.volcano.sh/v1beta1/queues/default"),
            START_TIMEOUT,
            [scheduler, controllers],
        )

    def start_workload_controller(self, name: str) -> ManagedProcess:
        """Install a workload controller's CRDs, start it, and register its webhooks once it
        serves; a controller already running is left as it is."""
        for proc in self.procs:
            if proc.name == name:
                return proc
        (controller,) = workload_controllers.named([name])
        self.apply_crds(controller.crd_files())
        for collection, obj in controller.objects:
            self.rest.create(collection, obj, exist_ok=True)
        work = self.work_dir / name
        cert_dir = work / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        self.ca.issue_server(["localhost"], ["127.0.0.1"]).write(
            cert_dir / "tls.crt", cert_dir / "tls.key"
        )
        kubeconfig = self.write_kubeconfig(
            work / "kubeconfig",
            WORKLOAD_CONTROLLER_USER,
            self.issue_user(WORKLOAD_CONTROLLER_USER, ["system:masters"]),
        )
        ports = workload_controllers.Ports(
            webhook=free_port(),
            health=free_port(),
            cert_dir=cert_dir,
            work_dir=work,
            kubeconfig=kubeconfig,
        )
        env = {"KUBECONFIG": str(kubeconfig), **dict(controller.env)}
        proc = self._spawn(name, controller.argv(controller, ports), env=env)
        if controller.mounted_secret is not None:
            self._mount_secret(proc, *controller.mounted_secret)
        processes.wait_until(
            f"{name} ready",
            lambda: _http_ok(f"http://127.0.0.1:{ports.health}/readyz"),
            START_TIMEOUT,
            [proc],
        )
        ca_bundle = base64.b64encode(self.ca_pem).decode()
        url = f"https://127.0.0.1:{ports.webhook}"
        for config in controller.webhook_configurations(url, ca_bundle):
            # Ready (readyz) is not yet serving every webhook path: wait until each answers
            # something other than 404, or the API server's first calls fail closed.
            for webhook in config.get("webhooks") or []:
                hook: str = webhook["clientConfig"]["url"]
                serves = functools.partial(self._serves, hook)
                processes.wait_until(f"{name} serving {hook}", serves, START_TIMEOUT, [proc])
            plural = workload_controllers.WEBHOOK_KINDS[config["kind"]]
            path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{config['metadata']['name']}"
            self.rest.apply(path, config)
        return proc

    def start_autoscaler(self, autoscaler: Autoscaler) -> ManagedProcess:
        """Install the ProvisioningRequest CRD, write the node groups and start the stand-in
        autoscaler (hack/provisioner.py) against this control plane."""
        self.apply_crds(testenv.provisioning_request_crd_files())
        self.set_node_groups(autoscaler.groups)
        argv = [
            sys.executable,
            "-m",
            "hack.provisioner",
            f"--kubeconfig={self.kubeconfig}",
            *autoscaler.flags(),
        ]
        repo = Path(__file__).resolve().parent.parent
        proc = self._spawn("provisioner", argv, env={"PYTHONPATH": str(repo)})
        processes.wait_until(
            "the provisioner's first scan",
            lambda: "watching" in proc.log_tail(),
            START_TIMEOUT,
            [proc],
        )
        return proc

    def set_node_groups(self, groups: Sequence[NodeGroup]) -> None:
        """Write the node groups as the kwok provider's templates ConfigMap; the running
        autoscaler reads it again on its next scan."""
        listing = {"apiVersion": "v1", "kind": "List", "items": [g.template() for g in groups]}
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": provisioner.TEMPLATES_CONFIGMAP, "namespace": "kube-system"},
            "data": {"templates": yaml.safe_dump(listing)},
        }
        self.rest.apply(
            f"/api/v1/namespaces/kube-system/configmaps/{provisioner.TEMPLATES_CONFIGMAP}",
            configmap,
        )

    def _serves(self, url: str) -> bool:
        """Whether a webhook URL has a handler (an empty review gets anything but 404)."""
        import ssl
        import urllib.error
        import urllib.request

        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        request = urllib.request.Request(
            url, b"{}", headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=2, context=context):
                return True
        except urllib.error.HTTPError as err:
            return err.code != 404
        except OSError:
            return False

    def _mount_secret(self, proc: ManagedProcess, namespace: str, name: str, where: str) -> None:
        """Write a Secret's data as files into `where` once it has some, as a pod's volume
        would hold them."""
        path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        processes.wait_until(
            f"Secret {namespace}/{name} filled",
            lambda: bool(self.rest.get(path).get("data")),
            START_TIMEOUT,
            [proc],
        )
        directory = Path(where)
        directory.mkdir(parents=True, exist_ok=True)
        for key, value in self.rest.get(path)["data"].items():
            (directory / key).write_bytes(base64.b64decode(value))

    def apply_crds(self, files: Sequence[Path]) -> None:
        """Server-side apply each CRD file, then wait until all are Established."""
        names = []
        for path in files:
            crd = yaml.safe_load(path.read_text())
            names.append(crd["metadata"]["name"])
            self.rest.apply(kinds.CRDS.path(name=names[-1]), crd)
        for name in names:
            self.wait_crd_established(name)

    def wait_crd_established(self, name: str, timeout: float = 60.0) -> None:
        def established() -> bool:
            crd = self.rest.get(kinds.CRDS.path(name=name))
            return any(
                c["type"] == "Established" and c["status"] == "True"
                for c in crd.get("status", {}).get("conditions", [])
            )

        processes.wait_until(f"CRD {name} Established", established, timeout, self.procs)


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


def _post_json(url: str, body: Mapping[str, Any]) -> dict[str, Any]:
    import urllib.request

    request = urllib.request.Request(
        url, json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


def _exists(rest: RestClient, path: str) -> bool:
    try:
        rest.get(path)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


def stop_from_state(work_dir: Path) -> list[str]:
    """Stops the processes recorded in a work directory's state file; returns their names."""
    state_path = work_dir / STATE_FILE
    if not state_path.exists():
        return []
    state = json.loads(state_path.read_text())
    stopped = []
    for name, pid in reversed(list(state.get("pids", {}).items())):
        if processes.pid_alive(pid):
            processes.stop(pid)
            stopped.append(name)
    state["pids"] = {}
    state_path.write_text(json.dumps(state, indent=2))
    return stopped
