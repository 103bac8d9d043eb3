"""A real node beside the kwok nodes: the pinned Kubernetes' kubelet with containerd and runc
from Debian's packages, joined to a LocalCluster, with nothing pulled from a registry.

    node = RealNode(cluster, work_dir)   # cluster: a started LocalCluster
    node.start()                         # Ready, or stopped again and raising
    node.import_oci_layout(IMAGE_DIR / "oci", "0.1.0", "kohort.local/kohort:0.1.0")
    ...                                  # hostNetwork pods tolerating REAL_NODE_TAINT
    node.stop()

Everything it starts (containerd, the kubelet, the shims of its containers), mounts and
creates (cgroups under its own cgroup root) lives under `work_dir` or is named after it, and
`stop()` takes it all away again, also after a failed start.

How this node keeps to loopback: the kubelet serves on 127.0.0.1, the node's address is
127.0.0.1, containerd's sandbox image is a pause image built here and imported (no registry is
ever asked: containerd pulls only images it does not have), and its only CNI network is
`loopback`, which is enough for containerd to call the network ready and is never used by the
hostNetwork pods this node is for (a pod with its own network namespace would get only `lo`).
The kubelet refuses 127.0.0.1 as its node IP ("nodeIP can't be loopback address"), so it leaves
the node's addresses alone and `start()` writes them into the node's status. With `own_netns`
the node runs in a network namespace made for it, whose loopback reaches the API server through
hack/netns_relay.py: pods of two nodes can then listen on the same ports.

`why_not()` says why such a node cannot run on this machine, or returns None.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from hack import processes, testenv
from hack.localcluster import START_TIMEOUT, LocalCluster, free_port
from hack.processes import ManagedProcess
from hack.rest import ApiError

PAUSE_IMAGE = "kohort.local/pause:1"
REAL_NODE_LABEL = "kohort.dev/real-node"
# Only pods that tolerate it land on the real node: workloads meant for kwok nodes never do.
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
REPO = Path(__file__).resolve().parent.parent
CGROUP_ROOT = Path("/sys/fs/cgroup")
CNI_BIN_DIR = Path("/usr/lib/cni")
TOOLS = ("containerd", "ctr", "runc", "ip", "nsenter")
# Paths the kubelet and containerd 1.6 use whatever they are told: the device plugins' socket
# dir, the shims' socket dir, the legacy container log symlinks. `stop()` removes the ones that
# `start()` found missing, and its symlinks.
FIXED_PATHS = (Path("/var/lib/kubelet"), Path("/run/containerd"), Path("/var/log/containers"))

PAUSE_SOURCE = """\
package main

import (
\t"os"
\t"os/signal"
\t"syscall"
)

// The sandbox's process: holds the pod's namespaces until the runtime stops it.
func main() {
\tstop := make(chan os.Signal, 1)
\tsignal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
\t<-stop
}
"""


def why_not() -> str | None:
    """Why a real node cannot run here (missing tools, not root, no kubelet built), or None."""
    if os.geteuid() != 0:
        return "a kubelet and containerd need root"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"no {', '.join(missing)}: apt-get install -y containerd runc iproute2 util-linux"
    if not (CNI_BIN_DIR / "loopback").exists():
        return f"no CNI loopback plugin in {CNI_BIN_DIR} (Debian: containernetworking-plugins)"
    if shutil.which("go") is None:
        return "no go toolchain to build the pause image"
    try:
        testenv.binary("kubelet")
    except testenv.TestenvMissing as err:
        return f"{err} (bash hack/build-testenv.sh kubelet)"
    return None


class RealNode:
    def __init__(
        self,
        cluster: LocalCluster,
        work_dir: Path | None = None,
        name: str = "",
        *,
        own_netns: bool = False,
    ):
        """`own_netns`: the node (containerd, the kubelet, its host-network pods) runs in a
        network namespace made for it, whose loopback reaches only the API server (through
        hack/netns_relay.py); two such nodes can run pods listening on the same ports."""
        self.cluster = cluster
        self.dir = Path(work_dir or tempfile.mkdtemp(prefix="kohort-realnode-"))
        # Named apart from any other real node: its cgroup root and namespace carry the name.
        self.name = name or f"real-{secrets.token_hex(3)}"
        self.socket = self.dir / "containerd.sock"
        self.cgroup_parent = f"/kohort-{self.name}"
        self.log_dir = self.dir / "logs"
        self.procs: list[ManagedProcess] = []
        self.started_at = 0.0
        self.ready_after = 0.0
        self._made_paths: list[Path] = []
        self.netns = f"kohort-{self.name}" if own_netns else ""

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self.started_at = time.monotonic()
        self._made_paths = [path for path in FIXED_PATHS if not path.exists()]
        try:
            if self.netns:
                self._make_netns()
            self._start_containerd()
            self.import_archive(self._pause_archive(), PAUSE_IMAGE)
            self._authorize()
            kubelet = self._start_kubelet()
            processes.wait_until(
                f"node {self.name} registered",
                lambda: _exists(self.cluster, f"/api/v1/nodes/{self.name}"),
                START_TIMEOUT,
                [kubelet, *self.procs],
            )
            self._set_addresses()
            processes.wait_until(
                f"node {self.name} Ready",
                lambda: self.cluster.node_ready(self.name),
                START_TIMEOUT,
                self.procs,
            )
            self.ready_after = time.monotonic() - self.started_at
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops the kubelet, every container and shim of this node's containerd, containerd
        (and the relay), and removes its mounts, cgroups, network namespace and the fixed paths
        it made. Safe to call twice."""
        for proc in [p for p in self.procs if p.name == "kubelet"]:
            processes.stop(proc.pid)
        if self.socket.exists():
            self._kill_tasks()
        for proc in [p for p in self.procs if p.name != "kubelet"]:
            processes.stop(proc.pid)
        self.procs.clear()
        for pid in self._shims():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._unmount()
        self._remove_cgroups()
        self._remove_fixed_paths()
        if self.netns and Path("/run/netns", self.netns).exists():
            subprocess.run(["ip", "netns", "delete", self.netns], capture_output=True, check=False)

    # ---- images ----------------------------------------------------------------------------

    def ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def import_archive(self, archive: Path, name: str) -> None:
        done = self.ctr("images", "import", "--snapshotter", "overlayfs", str(archive))
        if done.returncode != 0:
            raise RuntimeError(f"ctr images import {archive}: {done.stderr.strip()}")
        listed = self.ctr("images", "list", "--quiet")
        if name not in listed.stdout.split():
            raise RuntimeError(f"{name} not among the imported images: {listed.stdout!r}")

    def import_oci_layout(self, layout: Path, tag: str, name: str) -> None:
        """Imports the image tagged `tag` in the OCI image layout `layout` as `name`."""
        archive = self.dir / f"{hashlib.sha256(name.encode()).hexdigest()[:12]}.tar"
        index = json.loads((layout / "index.json").read_text())
        manifests = [
            m
            for m in index["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag
        ]
        if not manifests:
            raise RuntimeError(f"no manifest tagged {tag} in {layout}")
        named = [_named(m, name) for m in manifests]
        with tarfile.open(archive, "w") as tar:
            tar.add(layout / "oci-layout", "oci-layout")
            tar.add(layout / "blobs", "blobs")
            _add_bytes(tar, "index.json", json.dumps({**index, "manifests": named}).encode())
        self.import_archive(archive, name)
        archive.unlink()

    def _pause_archive(self) -> Path:
        """An OCI archive of a one-file image: a static Go binary that waits for SIGTERM."""
        build = self.dir / "pause-build"
        build.mkdir(parents=True, exist_ok=True)
        (build / "main.go").write_text(PAUSE_SOURCE)
        (build / "go.mod").write_text("module kohort.local/pause\n\ngo 1.22\n")
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "", "GOTOOLCHAIN": "local"}
        subprocess.run(
            ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", "pause", "."],
            cwd=build,
            env=env,
            check=True,
            capture_output=True,
        )
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w") as tar:
            info = tar.gettarinfo(build / "pause", "pause")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with (build / "pause").open("rb") as binary:
                tar.addfile(info, binary)
        layer_bytes = layer.getvalue()
        layer_digest = _digest(layer_bytes)
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
                "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            }
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
                "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar", layer_bytes)],
            }
        ).encode()
        index = {
            "schemaVersion": 2,
            "manifests": [
                _named(
                    _descriptor("application/vnd.oci.image.manifest.v1+json", manifest),
                    PAUSE_IMAGE,
                )
            ],
        }
        archive = self.dir / "pause.tar"
        with tarfile.open(archive, "w") as tar:
            _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
            _add_bytes(tar, "index.json", json.dumps(index).encode())
            for blob in (layer_bytes, config, manifest):
                _add_bytes(tar, f"blobs/sha256/{_digest(blob).removeprefix('sha256:')}", blob)
        return archive

    # ---- containerd ------------------------------------------------------------------------

    def _start_containerd(self) -> None:
        cni = self.dir / "cni"
        cni.mkdir(parents=True, exist_ok=True)
        (cni / "10-loopback.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "kohort-loopback",
                    "plugins": [{"type": "loopback"}],
                }
            )
        )
        cri = "io.containerd.grpc.v1.cri"
        config = self.dir / "containerd.toml"
        config.write_text(
            f"""\
version = 2
root = "{self.dir / "containerd" / "root"}"
state = "{self.dir / "containerd" / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{self.dir / "containerd" / "opt"}"

[plugins."{cri}"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # No CAP_SYS_RESOURCE here: runc cannot lower a container's oom_score_adj below ours (the
  # pause container's -998 fails as "can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  [plugins."{cri}".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."{cri}".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."{cri}".containerd.runtimes.runc.options]
        BinaryName = "{shutil.which("runc")}"
        Root = "{self.dir / "runc"}"
        SystemdCgroup = false
  [plugins."{cri}".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni}"
"""
        )
        proc = self._spawn("containerd", ["containerd", "--config", str(config)])
        processes.wait_until(
            "containerd serving", lambda: self.ctr("version").returncode == 0, 60, [proc]
        )

    def _make_netns(self) -> None:
        for command in (
            ["netns", "add", self.netns],
            ["-n", self.netns, "link", "set", "lo", "up"],
        ):
            subprocess.run(["ip", *command], capture_output=True, text=True, check=True)
        api = self.cluster.server.removeprefix("https://")
        relay = [sys.executable, "-m", "hack.netns_relay", f"/run/netns/{self.netns}", api]
        proc = processes.start("relay", relay, self.log_dir, tie_to_parent=True, env=_on_path())
        self.procs.append(proc)
        processes.wait_until(
            "the API server relay", lambda: "relaying" in proc.log_path.read_text(), 30, [proc]
        )

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        if self.netns:
            argv = ["nsenter", f"--net=/run/netns/{self.netns}", *argv]
        proc = processes.start(name, argv, self.log_dir, tie_to_parent=True)
        self.procs.append(proc)
        return proc

    def _kill_tasks(self) -> None:
        listed = self.ctr("tasks", "list", "--quiet", timeout=30)
        for task in listed.stdout.split():
            self.ctr("tasks", "kill", "--signal", "SIGKILL", task, timeout=30)
        for task in listed.stdout.split():
            for _ in range(20):
                if self.ctr("tasks", "delete", task, timeout=30).returncode == 0:
                    break
                time.sleep(0.25)

    def _shims(self) -> list[int]:
        """Container shims started by this node's containerd (they outlive it)."""
        found = []
        needle = str(self.socket).encode()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and needle in argv:
                found.append(int(entry.name))
        return found

    def _unmount(self) -> None:
        """Unmounts everything mounted under the node's directory, deepest first."""
        prefix = str(self.dir.resolve()) + "/"
        for _ in range(3):
            mounts = []
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].replace("\\040", " ")
                if point.startswith(prefix):
                    mounts.append(point)
            if not mounts:
                return
            for point in sorted(mounts, key=len, reverse=True):
                if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                    subprocess.run(["umount", "--lazy", point], capture_output=True)

    def _remove_fixed_paths(self) -> None:
        links = Path("/var/log/containers")
        if links.is_dir():
            for link in links.iterdir():
                if link.is_symlink() and os.readlink(link).startswith(str(self.dir)):
                    link.unlink()
        for path in self._made_paths:
            shutil.rmtree(path, ignore_errors=True)
        self._made_paths = []

    def _remove_cgroups(self) -> None:
        for hierarchy in CGROUP_ROOT.iterdir():
            top = hierarchy / self.cgroup_parent.lstrip("/")
            if not top.is_dir():
                continue
            for path in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if path.is_dir():
                    with contextlib.suppress(OSError):
                        path.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    # ---- kubelet ---------------------------------------------------------------------------

    def _authorize(self) -> None:
        """The node's identity, issued as LocalCluster issues users, bound to system:node."""
        user = f"system:node:{self.name}"
        self.kubeconfig = self.cluster.write_kubeconfig(
            self.dir / "kubelet.kubeconfig",
            user,
            self.cluster.issue_user(user, ["system:nodes"]),
        )
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"kohort-real-node-{self.name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
        self.cluster.rest.create(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding, exist_ok=True
        )

    def _make_cgroups(self) -> None:
        """The kubelet's cgroup root, in every v1 hierarchy (the kubelet wants it to exist)."""
        for hierarchy in CGROUP_ROOT.iterdir():
            if hierarchy.name == "unified" or not (hierarchy / "cgroup.procs").exists():
                continue
            top = hierarchy / self.cgroup_parent.lstrip("/")
            top.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):  # empty in a new cpuset cgroup
                if (top / knob).exists() and not (top / knob).read_text().strip():
                    (top / knob).write_text((hierarchy / knob).read_text())

    def _start_kubelet(self) -> ManagedProcess:
        self._make_cgroups()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine mounts cgroup v1 hierarchies; the kubelet refuses them by default.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_parent,
            "address": "127.0.0.1",
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.cluster.pki_dir / "ca.crt")},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "registerWithTaints": [REAL_NODE_TAINT],
            "failSwapOn": False,
            "podLogsDir": str(self.dir / "pods"),
            "resolvConf": "",
            # A shared machine's disk: never evict or collect images because of others' files.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
        }
        path = self.dir / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        return self._spawn(
            "kubelet",
            [
                str(testenv.binary("kubelet")),
                f"--config={path}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.dir / 'kubelet'}",
                f"--cert-dir={self.dir / 'kubelet-pki'}",
                f"--hostname-override={self.name}",
                "--node-ip=127.0.0.1",
                f"--node-labels={REAL_NODE_LABEL}=true",
                "--v=2",
            ],
        )

    def cordon(self, unschedulable: bool = True) -> None:
        """Marks the node unschedulable (as `kubectl cordon` does), or schedulable again."""
        self.cluster.rest.patch(
            f"/api/v1/nodes/{self.name}", {"spec": {"unschedulable": unschedulable}}
        )

    def _set_addresses(self) -> None:
        patch = {
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": self.name},
                ]
            }
        }
        self.cluster.rest.patch(f"/api/v1/nodes/{self.name}/status", patch)

    def host_network_pod(self, name: str, image: str, command: list[str]) -> dict[str, Any]:
        """A pod of one container "main" running `command` of a locally imported `image` on
        this node and its network namespace, Ready once it runs (an exec probe every second)."""
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "hostNetwork": True,
                "nodeSelector": {"kubernetes.io/hostname": self.name},
                "tolerations": [{**REAL_NODE_TAINT, "operator": "Equal"}],
                "containers": [
                    {
                        "name": "main",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": command,
                        "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                    }
                ],
            },
        }

    # ---- the chart -------------------------------------------------------------------------

    def chart_values(self, image: str, *, controller_replicas: int = 1) -> dict[str, Any]:
        """Values that run charts/kohort's Deployments on the real nodes: the image (never
        pulled), on the host network at free ports, listening on 127.0.0.1, the in-cluster API
        address pointed at the API server on 127.0.0.1, and the webhook on this node (which
        must share the API server's network namespace), reached at its URL there. The
        controller's replicas need a real node each: on one network namespace their ports
        would clash (kube-scheduler places one per node)."""
        repository, tag = image.rsplit(":", 1)
        api_port = self.cluster.server.rsplit(":", 1)[1]

        def on_real_nodes(**selector: str) -> dict[str, Any]:
            return {
                "nodeSelector": {REAL_NODE_LABEL: "true", **selector},
                "tolerations": [{**REAL_NODE_TAINT, "operator": "Equal"}],
                "env": [
                    {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                    {"name": "KUBERNETES_SERVICE_PORT", "value": api_port},
                ],
            }

        webhook_port = free_port()
        return {
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "controller": {
                "replicas": controller_replicas,
                "healthPort": free_port(),
                "metricsPort": free_port(),
                "extraArgs": ["--health-host=127.0.0.1"],
                **on_real_nodes(),
            },
            "webhook": {
                "replicas": 1,
                "port": webhook_port,
                "metricsPort": free_port(),
                "urlOverride": f"https://127.0.0.1:{webhook_port}",
                "extraArgs": ["--host=127.0.0.1", "--ip=127.0.0.1"],
                # The API server reaches a webhook on its own loopback only: on this node.
                **on_real_nodes(**{"kubernetes.io/hostname": self.name}),
            },
        }

    def helm_install(
        self, values: dict[str, Any], release: str = "kohort", namespace: str = "kohort-system"
    ) -> subprocess.CompletedProcess[str]:
        """`helm install` of charts/kohort with `values`, its pods on the host network."""
        return self._helm("install", values, release, namespace, "--create-namespace")

    def helm_upgrade(
        self, values: dict[str, Any], release: str = "kohort", namespace: str = "kohort-system"
    ) -> subprocess.CompletedProcess[str]:
        """`helm upgrade` of the release to charts/kohort with `values` (all of them, as
        `helm_install` took them), its pods on the host network."""
        return self._helm("upgrade", values, release, namespace)

    def _helm(
        self, verb: str, values: dict[str, Any], release: str, namespace: str, *flags: str
    ) -> subprocess.CompletedProcess[str]:
        renderer = self.dir / "host-network"
        renderer.write_text(f"#!/bin/sh\ncd {REPO} && exec {sys.executable} -m hack.host_network\n")
        renderer.chmod(0o755)
        values_file = self.dir / f"values-{release}-{verb}.yaml"
        values_file.write_text(yaml.safe_dump(values))
        home = self.dir / "helm"
        env = {**os.environ} | {
            f"HELM_{d}_HOME": str(home / d) for d in ("CACHE", "CONFIG", "DATA")
        }
        return subprocess.run(
            [
                str(testenv.binary("helm")),
                verb,
                release,
                str(REPO / "charts" / "kohort"),
                "--namespace",
                namespace,
                *flags,
                "--kubeconfig",
                str(self.cluster.kubeconfig),
                "--values",
                str(values_file),
                "--post-renderer",
                str(renderer),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        """What the container printed, from the kubelet's log files (the API server's
        `pods/log` would ask the kubelet, which serves only its own CA's clients here)."""
        found = sorted((self.dir / "pods").glob(f"{namespace}_{pod}_*/{container}/*.log"))
        return "".join(path.read_text(errors="replace") for path in found)

    # ---- measurements ----------------------------------------------------------------------

    def container_rss(self) -> dict[str, int]:
        """Resident memory in bytes of each running container's processes, by container name
        (from containerd's labels), read from /proc."""
        sizes: dict[str, int] = {}
        listed = self.ctr("tasks", "list")
        for line in listed.stdout.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 3 or fields[2] != "RUNNING":
                continue
            info = self.ctr("containers", "info", fields[0])
            labels = json.loads(info.stdout).get("Labels", {}) if info.returncode == 0 else {}
            name = labels.get("io.kubernetes.container.name")
            if not name or name == "POD":
                continue
            pod = labels.get("io.kubernetes.pod.name", "")
            sizes[f"{pod}/{name}"] = process_rss(int(fields[1]))
        return sizes


def lease_holder(cluster: LocalCluster, namespace: str, name: str) -> str:
    """Who holds the Lease, or "" (none yet, or given up)."""
    try:
        lease = cluster.rest.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        )
    except ApiError as err:
        if err.status == 404:
            return ""
        raise
    return str(lease["spec"].get("holderIdentity") or "")


def rolled_out(cluster: LocalCluster, namespace: str) -> bool:
    """Every Deployment in `namespace` at its latest template: all its replicas updated, ready
    and available, and no pod of an older ReplicaSet left there, not even terminating."""
    deployments = cluster.rest.get(f"/apis/apps/v1/namespaces/{namespace}/deployments")["items"]
    counts = ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")
    for d in deployments:
        status, want = d["status"], d["spec"]["replicas"]
        if status.get("observedGeneration") != d["metadata"]["generation"]:
            return False
        if any(status.get(count, 0) != want for count in counts):
            return False
    pods = cluster.rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    wanted: int = sum(d["spec"]["replicas"] for d in deployments)
    return len(pods) == wanted


def process_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _on_path() -> dict[str, str]:
    """The environment of a `python -m hack...` child: this checkout's packages first."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": f"{REPO}:{path}" if path else str(REPO)}


def _exists(cluster: LocalCluster, path: str) -> bool:
    try:
        cluster.rest.get(path)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


def _digest(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def _descriptor(media_type: str, blob: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": _digest(blob), "size": len(blob)}


def _named(descriptor: dict[str, Any], name: str) -> dict[str, Any]:
    annotations = {**descriptor.get("annotations", {}), "io.containerd.image.name": name}
    return {**descriptor, "annotations": annotations}


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
