"""Fault runs on a fresh local control plane: kohort's webhook and controller replicas as
processes, bursts of gangs of every kind, one fault per run at a random moment, invariants
sampled all the time. Prints one line per run and a table; exits 1 on any violation.

    .venv/bin/python bench/chaos.py                      # 50 leader kills + 5 of every other fault
    .venv/bin/python bench/chaos.py --fault etcd-restart --runs 3 --kill-runs 0 --seed 7

docs/reliability.md reports the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hack.chaos.runner import Fault, RunResult, run_many, summary_table
from hack.chaos.stack import ProcessStack
from hack.demo import CONTROLLER_USER
from hack.localcluster import ClusterOptions, LocalCluster


def schedule(args: argparse.Namespace) -> list[tuple[int, Fault]]:
    """Runs of every fault interleaved, so that a time limit cuts all kinds evenly."""
    counts = {
        f: args.runs for f in (args.fault or [f for f in Fault if f is not Fault.LEADER_KILL])
    }
    if not args.fault or Fault.LEADER_KILL in args.fault:
        counts[Fault.LEADER_KILL] = args.kill_runs if not args.fault else args.runs
    order: list[Fault] = []
    while any(counts.values()):
        for fault in Fault:
            if counts.get(fault):
                order.append(fault)
                counts[fault] -= 1
    return [(args.seed + i, fault) for i, fault in enumerate(order)]


def line(result: RunResult) -> str:
    recovery = f"{result.recovered_after:.1f}s" if result.recovered_after is not None else "-"
    verdict = "ok" if result.ok else f"{len(result.violations)} VIOLATION(S)"
    text = (
        f"seed {result.seed:>4} {result.fault.value:<18} {result.finished}/{result.gangs} gangs"
        f" finished in {result.seconds:5.1f}s, fault at {result.fault_at or 0:4.1f}s,"
        f" recovered after {recovery}: {verdict}"
    )
    return "\n".join([text, *(f"    {v}" for v in result.violations)])


async def main_async(args: argparse.Namespace) -> int:
    options = ClusterOptions(
        node_pools=(),
        scheduler="volcano",
        audit_users=(CONTROLLER_USER,),
        workload_controllers=("lws-manager",),
    )
    work = Path(tempfile.mkdtemp(prefix="kohort-chaos-"))
    started = time.monotonic()
    with LocalCluster(options, work / "cluster") as cluster:
        stack = ProcessStack(cluster, work / "stack").start()
        try:
            results = await run_many(
                cluster,
                stack,
                schedule(args),
                gangs=args.gangs,
                on_result=lambda r: print(line(r), flush=True),
                time_limit=args.time_limit,
            )
        finally:
            stack.stop()
    print()
    print(summary_table(results))
    violations = sum(len(r.violations) for r in results)
    print(
        f"\n{len(results)} runs, {violations} violations, {time.monotonic() - started:.0f}s"
        f" (logs in {work})"
    )
    return 1 if violations else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the first run")
    parser.add_argument("--kill-runs", type=int, default=50, help="leader SIGKILL runs")
    parser.add_argument("--runs", type=int, default=5, help="runs of every other fault")
    parser.add_argument(
        "--fault", type=Fault, action="append", choices=list(Fault), help="only these faults"
    )
    parser.add_argument("--gangs", type=int, default=24, help="gangs per burst")
    parser.add_argument(
        "--time-limit", type=float, default=3300.0, help="start no run after this many seconds"
    )
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
