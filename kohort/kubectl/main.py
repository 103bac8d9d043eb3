"""`kubectl kohort`: kohort's queues, a queue's backlog, and why a job waits.

    kubectl kohort queues [--tree]           quota, usage, borrowing and share per flavor
    kubectl kohort pending [QUEUE] [-n NS]   the backlog in order (a ClusterQueue, or with -n
                                             a LocalQueue), with positions
    kubectl kohort why JOB [-n NS]           a Job's (JobSet's, ...) Workload: why it waits,
                                             what is ahead, what would admit it now

Reads through the kubeconfig (--kubeconfig, else $KUBECONFIG, else ~/.kube/config) the way
kohort's controller does; `-o json|yaml` prints the data the tables are made of.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import yaml

from controller.api import kinds, kube
from controller.api.queues import ClusterQueue, Cohort, LocalQueue, ResourceFlavor
from controller.api.workload import Workload
from controller.cluster.clients import ApiError, Client, connect, decoder
from controller.cluster.kubeconfig import ConfigError
from kohort.kubectl import text, views
from kohort.kubectl.world import Objects, World, world_of


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl kohort", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube)")
    parser.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    queues = sub.add_parser("queues", help="each ClusterQueue's quota, usage and share")
    queues.add_argument("--tree", action="store_true", help="the cohort trees")
    pending = sub.add_parser("pending", help="a queue's backlog in order, with positions")
    pending.add_argument("queue", nargs="?", help="a ClusterQueue; with -n, a LocalQueue")
    pending.add_argument("-n", "--namespace", help="QUEUE is a LocalQueue of this namespace")
    why = sub.add_parser("why", help="why a job waits and what would admit it now")
    why.add_argument("job", help="NAME or KIND/NAME of a Job, JobSet, ..., or a Workload")
    why.add_argument("-n", "--namespace", default="default")
    return parser


async def read(api: Client) -> Objects:
    """Everything `kubectl kohort` looks at, listed once."""
    lists = await asyncio.gather(
        api.read_all(decoder(ClusterQueue), kinds.CLUSTER_QUEUES),
        api.read_all(decoder(Cohort), kinds.COHORTS),
        api.read_all(decoder(LocalQueue), kinds.LOCAL_QUEUES),
        api.read_all(decoder(ResourceFlavor), kinds.RESOURCE_FLAVORS),
        api.read_all(decoder(Workload), kinds.WORKLOADS),
        api.read_all(decoder(kube.Node), kinds.NODES),
        api.read_all(decoder(kube.Pod), kinds.PODS),
    )
    cqs, cohorts, lqs, flavors, workloads, nodes, pods = (items for items, _ in lists)
    return Objects(cqs, cohorts, lqs, flavors, workloads, nodes, pods)  # type: ignore[arg-type]


def answer(args: argparse.Namespace, world: World) -> tuple[Any, str]:
    """The data asked for and its text rendering."""
    if args.command == "queues":
        if args.tree:
            forest = views.tree(world)
            return forest, text.tree(forest)
        rows = views.queues(world)
        return rows, text.queues(rows)
    if args.command == "pending":
        local = (args.namespace, args.queue) if args.namespace and args.queue else None
        cq = args.queue if local is None else None
        rows = views.pending(world, cq, local)
        return rows, text.pending(rows)
    wl = views.find(world, args.namespace, args.job)
    if wl is None:
        raise LookupError(f"no Workload of {args.job} in namespace {args.namespace}")
    data = views.why(world, wl)
    return data, text.why(data)


def render(data: Any, shown: str, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2)
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False)
    return shown


async def run(args: argparse.Namespace) -> int:
    try:
        api = await connect(args.kubeconfig, user_agent="kubectl-kohort")
    except ConfigError as err:
        print(f"kubectl kohort: {err}", file=sys.stderr)
        return 1
    try:
        objects = await read(api)
    except ApiError as err:
        print(f"kubectl kohort: {err.summary}", file=sys.stderr)
        return 1
    finally:
        await api.close()
    try:
        data, shown = answer(args, world_of(objects, time.time()))
    except LookupError as err:
        print(f"kubectl kohort: {err.args[0]}", file=sys.stderr)
        return 1
    print(render(data, shown, args.output))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
