"""Kueue's own scheduler baseline, run through kohort and through Kueue on the same local control
plane build, in one run:

    .venv/bin/python bench/bench_scale.py [--fraction 0.1] [--setup jobs harness]
        [--system kohort Kueue] [--cohorts N] [--time-limit 1800] [--kohort-arg=--flag=value]

The scenario is read from Kueue's module (sigs.k8s.io/kueue at KUEUE_VERSION, its
test/performance/scheduler/configs/baseline/generator.yaml): 5 cohorts of 6 ClusterQueues
(nominal 20 CPU, borrowing limit 100), per queue 350 small, 100 medium and 50 large workloads
(shapes, runtimes, priorities and creation intervals from that file). `--fraction` keeps that
share of every workload set (0.1: 1,500 workloads; 1.0: 15,000); `--cohorts` keeps the first N
cohorts.

Setups (hack/scale.py tells the details):
- jobs: one-pod batch/v1 Jobs on kwok nodes, created at the generator's pace; Kueue's real
  manager (its Job integration and webhooks) releasing to kube-scheduler, then kohort's webhook
  and controller processes releasing to Volcano; a fresh control plane for each.
- harness: Kueue's own runner and minimalkueue (envtest on this control plane's etcd and
  kube-apiserver), then kohort's controller alone with no pods on what that runner makes:
  Workloads, submitted by this process at the scenario's pace and marked Finished by it after
  their runtime.
- harness-jobs (kohort only): the same with Jobs in place of the Workloads, so kohort also
  makes each Workload and releases its Job; this process finishes the Jobs.

Prints, per run: admitted and finished counts, wall time (first create to last finish),
admissions per second (admitted / wall), evictions, the controller's CPU seconds and peak RSS
(its process tree, from /proc; for minimalkueue its runner's own figures), kohort's webhook
too; per class the mean, p50 and p95 time to admission; and the ratios kohort / Kueue.
Kueue is built on demand (`hack/build-testenv.sh kueue`). docs/performance.md reports figures.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hack import scale, testenv

RUNNERS: dict[tuple[str, str], scale.Runner] = {
    ("Kueue", "jobs"): scale.run_kueue_jobs,
    ("kohort", "jobs"): scale.run_kohort_jobs,
    ("Kueue", "harness"): scale.run_kueue_harness,
    ("kohort", "harness"): scale.run_kohort_workloads,
    ("kohort", "harness-jobs"): scale.run_kohort_without_pods,
}


def log(msg: str) -> None:
    print(f"[bench-scale {dt.datetime.now():%H:%M:%S}] {msg}", flush=True)


def build_kueue() -> None:
    log("building Kueue if needed (hack/build-testenv.sh kueue)")
    subprocess.run(
        ["bash", str(testenv.BUILD_SCRIPT), "kueue"], check=True, stdout=subprocess.DEVNULL
    )


async def main_async(args: argparse.Namespace) -> int:
    scenario = scale.baseline()
    if args.cohorts:
        scenario = scenario.limited(args.cohorts)
    scenario = scenario.scaled(args.fraction)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="kohort-bench-scale-"))
    log(
        f"Kueue {testenv.versions()['KUEUE_VERSION']} baseline at fraction {args.fraction:g}:"
        f" {len(scenario.queues())} ClusterQueues, {scenario.total} workloads,"
        f" {scenario.node_count()} kwok nodes of {scale.NODE_CPU} CPU for the jobs setup;"
        f" {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()};"
        f" work dir {work}"
    )
    if "Kueue" in args.system:
        build_kueue()
    results: list[scale.RunResult] = []
    for setup in args.setup:
        for system in ("Kueue", "kohort"):
            if system not in args.system or (system, setup) not in RUNNERS:
                continue
            log(f"{system}, {setup}: starting")
            options = scale.RunOptions(
                work,
                time_limit=args.time_limit,
                progress=log,
                kohort_args=tuple(args.kohort_arg),
                count_writes=args.count_writes,
            )
            t0 = time.monotonic()
            result = await RUNNERS[(system, setup)](scenario, options)
            log(
                f"{system}, {setup}: done in {time.monotonic() - t0:.0f}s with the control plane;"
                f" {result.admitted}/{result.workloads} admitted, {result.finished} finished"
                + "".join(f"; {n}" for n in [*result.errors, *result.notes])
            )
            results.append(result)
    print()
    print(scale.results_table(results))
    print()
    print(scale.classes_table(results))
    for r in results:
        webhook = r.processes.get("webhook")
        if webhook is not None:
            print(
                f"\n{r.system} {r.setup}: webhook CPU {webhook.cpu_seconds:.1f}s,"
                f" peak RSS {webhook.peak_rss_mib:.0f} MiB"
            )
    for setup in args.setup:
        pair = {r.system: r for r in results if r.setup == setup}
        if "kohort" in pair and "Kueue" in pair:
            print()
            print(scale.ratios_table(pair["kohort"], pair["Kueue"]))
    print(f"\nlogs in {work}")
    return 0 if all(r.complete for r in results) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fraction", type=float, default=0.1, help="share of every workload set")
    parser.add_argument("--cohorts", type=int, default=0, help="only the first N cohorts")
    parser.add_argument(
        "--setup",
        nargs="+",
        choices=("jobs", "harness", "harness-jobs"),
        default=["jobs", "harness"],
    )
    parser.add_argument(
        "--system", nargs="+", choices=("kohort", "Kueue"), default=["Kueue", "kohort"]
    )
    parser.add_argument(
        "--time-limit", type=float, default=1800.0, help="seconds each run may take at most"
    )
    parser.add_argument("--work-dir", help="where logs go (default: a new temporary dir)")
    parser.add_argument(
        "--count-writes",
        action="store_true",
        help="count the controllers' API writes from an audit log (slows the API server)",
    )
    parser.add_argument(
        "--kohort-arg",
        action="append",
        default=[],
        help="one more `kohort controller` flag, e.g. --kohort-arg=--requeue-base=0 (repeatable)",
    )
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
