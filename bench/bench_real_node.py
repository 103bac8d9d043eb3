"""How long a real node takes to join the local control plane and run kohort's chart on it,
and how much memory each piece holds (hack/realnode.py; docs/installation.md).

    nice -n 10 .venv/bin/python bench/bench_real_node.py [--runs 3]

Each run starts a fresh control plane (2 kwok nodes) and two real nodes (the second in a
network namespace of its own, for the second controller replica), and prints:
- node start to Ready (the first node): containerd started, the pause image built and
  imported, the kubelet started, until the node is Ready (and untainted by the
  controller-manager);
- the import of kohort's image (`make image`'s OCI layout in .kohort/image) into containerd;
- a hostNetwork pod of the image, created to Ready (exec readiness probe, every second);
- `helm install` of the chart with hack/realnode.py's values (two controller replicas, one
  webhook) to both Deployments ready;
- the resident memory of each container (the leading and the standby controller apart), and
  of the first node's kubelet and containerd, once both are ready;
- the leading controller pod deleted (its node cordoned first, as a drain does): until the
  standby holds the Lease; then, the node uncordoned, until the replacement is Ready;
- `helm upgrade` of one controller flag (`--wait-for-pods-ready` 300 -> 600, every listener at
  a new free port: on the host network a surge pod cannot share its predecessor's) until both
  Deployments have rolled out (every pod replaced, ready, and no old one left).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hack import processes
from hack.localcluster import ClusterOptions, LocalCluster, NodePool
from hack.realnode import RealNode, lease_holder, process_rss, rolled_out, why_not

ROOT = Path(__file__).resolve().parent.parent
IMAGE_DIR = ROOT / ".kohort" / "image"
TAG = "0.1.0"
IMAGE = f"kohort.local/kohort:{TAG}"
MB = 1024 * 1024
NAMESPACE = "kohort-system"
LEASE = "kohort-controller"


def timed(what: Callable[[], object]) -> float:
    t0 = time.monotonic()
    what()
    return time.monotonic() - t0


def ready(obj: dict[str, object]) -> bool:
    status = obj.get("status")
    conditions = status.get("conditions", []) if isinstance(status, dict) else []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def controllers(cluster: LocalCluster) -> list[dict[str, Any]]:
    """The controller pods not being deleted."""
    items: list[dict[str, Any]] = cluster.rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    return [
        p
        for p in items
        if p["metadata"]["name"].startswith("kohort-controller-")
        and not p["metadata"].get("deletionTimestamp")
    ]


def leader(cluster: LocalCluster, nodes: list[RealNode]) -> str:
    """The controller pod whose log says it took the Lease its holder holds, or ""."""
    holder = lease_holder(cluster, NAMESPACE, LEASE)
    on = {node.name: node for node in nodes}
    for pod in controllers(cluster):
        name, node = pod["metadata"]["name"], on.get(pod["spec"].get("nodeName") or "")
        took = f"{holder} took leadership of {LEASE}"
        if holder and node and took in node.container_log(NAMESPACE, name, "controller"):
            return str(name)
    return ""


def one_run(work: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    cluster = LocalCluster(ClusterOptions(node_pools=(NodePool("cpu", 2),)), work / "cluster")
    cluster.start()
    node = RealNode(cluster, work / "node")
    second = RealNode(cluster, work / "second", own_netns=True)
    try:
        node.start()
        figures["node start to Ready (s)"] = node.ready_after
        figures["image import (s)"] = timed(
            lambda: node.import_oci_layout(IMAGE_DIR / "oci", TAG, IMAGE)
        )
        rest = cluster.rest
        pod = node.host_network_pod("bench", IMAGE, ["sleep", "600"])
        path = "/api/v1/namespaces/default/pods/bench"
        t0 = time.monotonic()
        rest.create("/api/v1/namespaces/default/pods", pod)
        processes.wait_until("the pod Ready", lambda: ready(rest.get(path)), 120, interval=0.05)
        figures["pod create to Ready (s)"] = time.monotonic() - t0
        rest.delete(f"{path}?gracePeriodSeconds=0")
        # The second controller replica's node: a network namespace of its own (same ports).
        second.start()
        second.import_oci_layout(IMAGE_DIR / "oci", TAG, IMAGE)
        nodes = [node, second]

        t0 = time.monotonic()
        installed = node.helm_install(node.chart_values(IMAGE, controller_replicas=2))
        assert installed.returncode == 0, installed.stderr
        processes.wait_until(
            "both Deployments ready", lambda: rolled_out(cluster, NAMESPACE), 180, interval=0.1
        )
        figures["helm install to both Deployments ready (s)"] = time.monotonic() - t0
        time.sleep(5)  # past the first informer syncs and leader election
        leading = leader(cluster, nodes)
        assert leading, "no controller pod says it took the Lease"
        for real in nodes:
            for name, rss in sorted(real.container_rss().items()):
                pod_name, component = name.rsplit("/", 1)
                if component == "controller":
                    component += ", leader" if pod_name == leading else ", standby"
                figures[f"RSS {component} container (MB)"] = rss / MB
        for proc in node.procs:
            figures[f"RSS {proc.name} (MB)"] = process_rss(proc.pid) / MB

        # The leader's node cordoned first, as a drain does, so that its replacement cannot
        # take the Lease before the standby (tests/cluster/test_real_node.py).
        held_by = lease_holder(cluster, NAMESPACE, LEASE)
        (leader_node,) = [
            p["spec"]["nodeName"] for p in controllers(cluster) if p["metadata"]["name"] == leading
        ]
        cordoned = {n.name: n for n in nodes}[leader_node]
        cordoned.cordon()
        t0 = time.monotonic()
        rest.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{leading}")
        processes.wait_until(
            "the standby holding the Lease",
            lambda: lease_holder(cluster, NAMESPACE, LEASE) not in ("", held_by),
            60,
            interval=0.05,
        )
        figures["leader pod deleted to the standby holding the Lease (s)"] = time.monotonic() - t0
        cordoned.cordon(False)
        t0 = time.monotonic()

        def replaced() -> bool:
            pods = controllers(cluster)
            names = {p["metadata"]["name"] for p in pods}
            return len(pods) == 2 and leading not in names and all(ready(p) for p in pods)

        processes.wait_until("the replacement Ready", replaced, 120, interval=0.1)
        figures["node uncordoned to the replacement Ready (s)"] = time.monotonic() - t0

        values = node.chart_values(IMAGE, controller_replicas=2)
        values["controller"]["waitForPodsReadySeconds"] = 600
        t0 = time.monotonic()
        upgraded = node.helm_upgrade(values)
        assert upgraded.returncode == 0, upgraded.stderr
        processes.wait_until(
            "both Deployments rolled out", lambda: rolled_out(cluster, NAMESPACE), 180, interval=0.1
        )
        figures["helm upgrade to both Deployments rolled out (s)"] = time.monotonic() - t0
    finally:
        second.stop()
        node.stop()
        cluster.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    reason = why_not()
    if reason:
        raise SystemExit(f"a real node cannot run here: {reason}")
    if not (IMAGE_DIR / "oci" / "index.json").exists():
        raise SystemExit("no image in .kohort/image: `make image` builds it")
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="kohort-bench-realnode-") as tmp:
            runs.append(one_run(Path(tmp)))
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()))
    print(f"\nmedian of {len(runs)} runs:")
    for key in runs[0]:
        values = [run[key] for run in runs if key in run]
        spread = f"(min {min(values):.1f}, max {max(values):.1f})"
        print(f"  {key:52s} {statistics.median(values):7.1f}  {spread}")


if __name__ == "__main__":
    main()
