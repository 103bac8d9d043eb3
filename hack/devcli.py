"""`kohort dev`: start, inspect and stop the local control plane.

kohort dev up --pool gpu:3:gpus=8,cpu=64,memory=512Gi    # detached; prints the kubeconfig
kohort dev up --autoscaler spot:4:gpus=8                 # + a node group grown on demand
kohort dev status
kohort dev down
kohort dev demo                                          # the README's first command
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from controller.workloads.base import Backend
from hack import demo, testenv
from hack.localcluster import (
    Autoscaler,
    ClusterOptions,
    LocalCluster,
    NodeGroup,
    NodePool,
    Taint,
    stop_from_state,
)
from hack.rest import RestClient
from hack.tables import format_table

DEFAULT_WORK_DIR = Path(".kohort/dev")
DEFAULT_POOLS = ("gpu:3:gpus=8,cpu=64,memory=512Gi",)


def parse_pool(text: str) -> NodePool:
    """NAME:COUNT[:key=value,...] with keys cpu, memory, gpus, dra_gpus (GPUs as DRA devices,
    hack/dra.py), pods, label.K, taint.K=V:EFFECT."""
    parts = text.split(":", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise argparse.ArgumentTypeError(f"node pool {text!r}: expected NAME:COUNT[:key=value,...]")
    name, count = parts[0], int(parts[1])
    shape: dict[str, Any] = {}
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    for item in filter(None, (parts[2] if len(parts) == 3 else "").split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"node pool {text!r}: {item!r} is not key=value")
        if key.startswith("label."):
            labels[key[6:]] = value
        elif key.startswith("taint."):
            taint_value, _, effect = value.partition(":")
            taints.append(Taint(key[6:], taint_value, effect or "NoSchedule"))
        elif key in ("cpu", "memory"):
            shape[key] = value
        elif key in ("gpus", "dra_gpus", "pods"):
            shape[key] = int(value)
        else:
            raise argparse.ArgumentTypeError(f"node pool {text!r}: unknown key {key!r}")
    return NodePool(name, count, labels=labels, taints=tuple(taints), **shape)


def parse_node_group(text: str) -> NodeGroup:
    """NAME:MAX[:key=value,...], the keys of a pool (but dra_gpus): an empty group of at most
    MAX nodes of that shape, grown by the stand-in autoscaler (hack/provisioner.py)."""
    pool = parse_pool(text)
    if pool.dra_gpus:
        raise argparse.ArgumentTypeError(f"node group {text!r}: dra_gpus is not supported")
    return NodeGroup(
        pool.name,
        max_count=pool.count,
        cpu=pool.cpu,
        memory=pool.memory,
        gpus=pool.gpus,
        pods=pool.pods,
        labels=pool.labels,
        taints=pool.taints,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="dev_command", required=True, metavar="ACTION")
    for action, help_text in (
        ("up", "start a local control plane in the background"),
        ("down", "stop the local control plane started by `up`"),
        ("status", "show the processes and nodes of the local control plane"),
        ("demo", "start a local control plane, run the demo story, print it, stop"),
    ):
        p = sub.add_parser(action, help=help_text, description=help_text)
        p.add_argument(
            "--work-dir",
            type=Path,
            default=DEFAULT_WORK_DIR,
            help="where certificates, kubeconfig, logs and etcd data live (default: %(default)s)",
        )
        if action in ("up", "demo"):
            p.add_argument(
                "--pool",
                action="append",
                type=parse_pool,
                help="node pool NAME:COUNT[:key=value,...], repeatable "
                f"(default {DEFAULT_POOLS[0]})",
            )
            p.add_argument(
                "--scheduler",
                choices=["volcano", "kube-scheduler", "both", "none"],
                default="both",
                help="which schedulers place pods (default: %(default)s)",
            )
            p.add_argument(
                "--autoscaler",
                action="append",
                type=parse_node_group,
                metavar="GROUP",
                help="start the stand-in autoscaler for ProvisioningRequests with node group"
                " NAME:MAX[:key=value,...] (keys as --pool), repeatable"
                " (docs/autoscaled-clusters.md)",
            )
            p.add_argument(
                "--gang-backend",
                choices=["volcano", "kubernetes"],
                default="volcano",
                help="who places admitted gangs: Volcano, or kube-scheduler's own gang"
                " scheduling (feature gates on, kube-scheduler only, no Volcano process)",
            )
            p.add_argument(
                "--gang-api",
                choices=["v1alpha1", "v1beta1"],
                default="v1alpha1",
                help="with --gang-backend kubernetes: scheduling.k8s.io/v1alpha1 Workloads"
                " (Kubernetes 1.35) or v1beta1 PodGroups (the K8S_GANG_VERSION control plane)",
            )
        if action == "demo":
            p.add_argument(
                "--keep", action="store_true", help="leave the cluster running after the demo"
            )


def run(args: argparse.Namespace) -> int:
    work_dir: Path = args.work_dir.resolve()
    if args.dev_command == "down":
        stopped = stop_from_state(work_dir)
        print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
        return 0
    if args.dev_command == "status":
        return _status(work_dir)
    pools = tuple(args.pool or [parse_pool(p) for p in DEFAULT_POOLS])
    if stop_from_state(work_dir):
        print(f"stopped a previous cluster in {work_dir}")
    keep = args.dev_command == "up" or args.keep
    native = args.gang_backend == "kubernetes"
    if not native and args.gang_api != "v1alpha1":
        print("--gang-api needs --gang-backend kubernetes", file=sys.stderr)
        return 2
    if native and args.scheduler not in ("both", "kube-scheduler"):
        print(
            "--gang-backend kubernetes runs kube-scheduler alone,"
            f" not --scheduler {args.scheduler}. For kube-scheduler's gang scheduling,"
            " drop --scheduler (or give"
            " --scheduler kube-scheduler); for Volcano, use --gang-backend volcano"
            " (the default) with --scheduler volcano or both.",
            file=sys.stderr,
        )
        return 2
    options = ClusterOptions(
        node_pools=pools,
        scheduler="kube-scheduler" if native else args.scheduler,
        gang_api=args.gang_api if native else None,
        tie_to_parent=not keep,
        autoscaler=Autoscaler(groups=tuple(args.autoscaler)) if args.autoscaler else None,
    )
    cluster = LocalCluster(options, work_dir)
    cluster.start()
    try:
        if args.dev_command == "demo":
            demo.run_story(cluster, Backend(args.gang_backend))
        if keep:
            _print_access(cluster)
    finally:
        if not keep:
            cluster.stop()
            print("cluster stopped (use --keep to leave it running)")
    return 0


def _print_access(cluster: LocalCluster) -> None:
    print()
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    print(f"kubectl:  {testenv.binary('kubectl')}")
    print(f"logs:     {cluster.log_dir}")


def _status(work_dir: Path) -> int:
    import json

    from hack import processes

    state_path = work_dir / "state.json"
    if not state_path.exists():
        print(f"no local cluster in {work_dir}", file=sys.stderr)
        return 1
    state = json.loads(state_path.read_text())
    rows = [
        [name, str(pid), "running" if processes.pid_alive(pid) else "exited"]
        for name, pid in state.get("pids", {}).items()
    ]
    print(format_table(["PROCESS", "PID", "STATE"], rows))
    if not rows:
        return 1
    pki = work_dir / "pki"
    rest = RestClient(state["server"], pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
    print()
    print(demo.nodes_table(rest))
    return 0
