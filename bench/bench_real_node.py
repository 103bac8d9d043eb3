"""How long a real node takes to join the local control plane and run kohort's chart on it,
and how much memory each piece holds (hack/realnode.py; docs/installation.md).

    nice -n 10 .venv/bin/python bench/bench_real_node.py [--runs 3]

Each run starts a fresh control plane (2 kwok nodes) and a real node, and prints:
- node start to Ready: containerd started, the pause image built and imported, the kubelet
  started, until the node is Ready (and untainted by the controller-manager);
- the import of kohort's image (`make image`'s OCI layout in .kohort/image) into containerd;
- a hostNetwork pod of the image, created to Ready (exec readiness probe, every second);
- `helm install` of the chart with hack/realnode.py's values to both Deployments ready;
- the resident memory of each container, the kubelet and containerd, once both are ready.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hack import processes
from hack.localcluster import ClusterOptions, LocalCluster, NodePool
from hack.realnode import RealNode, process_rss, why_not

ROOT = Path(__file__).resolve().parent.parent
IMAGE_DIR = ROOT / ".kohort" / "image"
TAG = "0.1.0"
IMAGE = f"kohort.local/kohort:{TAG}"
MB = 1024 * 1024


def timed(what: Callable[[], object]) -> float:
    t0 = time.monotonic()
    what()
    return time.monotonic() - t0


def ready(obj: dict[str, object]) -> bool:
    status = obj.get("status")
    conditions = status.get("conditions", []) if isinstance(status, dict) else []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def one_run(work: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    cluster = LocalCluster(ClusterOptions(node_pools=(NodePool("cpu", 2),)), work / "cluster")
    cluster.start()
    node = RealNode(cluster, work / "node")
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

        t0 = time.monotonic()
        installed = node.helm_install(node.chart_values(IMAGE))
        assert installed.returncode == 0, installed.stderr

        def both_ready() -> bool:
            items = rest.get("/apis/apps/v1/namespaces/kohort-system/deployments")["items"]
            return len(items) == 2 and all(d["status"].get("readyReplicas") for d in items)

        processes.wait_until("both Deployments ready", both_ready, 180, interval=0.1)
        figures["helm install to both Deployments ready (s)"] = time.monotonic() - t0
        time.sleep(5)  # past the first informer syncs and leader election
        for name, rss in sorted(node.container_rss().items()):
            component = name.rsplit("/", 1)[1]
            figures[f"RSS {component} container (MB)"] = rss / MB
        for proc in node.procs:
            figures[f"RSS {proc.name} (MB)"] = process_rss(proc.pid) / MB
    finally:
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
        print(f"  {key:45s} {statistics.median(values):7.1f}  {spread}")


if __name__ == "__main__":
    main()
