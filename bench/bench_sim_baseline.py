"""Are `gang-fifo-no-enqueue` and `gang-fifo-no-enqueue-binpack` still Volcano's allocate
without enqueue? Job by job against an independent simulator (bench/greedy_gang_fifo.py, which
imports nothing from the project), in the same node order (spread / binpack).

    .venv/bin/python bench/bench_sim_baseline.py [--start 2017-10-01] [--end 2017-11-01]
        [--compression 8] [--ties last|first] [--traces DIR]

Philly, homogeneous 8-GPU nodes (352). Both replay the same jobs (each reads the trace itself;
the job counts and every job's GPUs are checked to agree first, and how many jobs the two
split into pods differently is printed), then, per node order, the bench prints how many jobs
start at the same time under both, the mean and p95 wait (nearest rank) of each, the same of
jobs of 9 GPUs or more, and the first jobs where they part.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import greedy_gang_fifo as greedy

from controller.simulate.loop import simulate
from controller.simulate.policies import Policy, Step, make_policy
from controller.simulate.traces import (
    DEFAULT_TRACES,
    GPU_UNIT,
    Job,
    load_philly,
    philly_nodes,
    philly_queues,
)

# The project's policy of each node order of the independent simulator.
POLICIES = {"spread": "gang-fifo-no-enqueue", "binpack": "gang-fifo-no-enqueue-binpack"}


class _Recorder:
    """A policy that records when each job started (the loop keeps no start times)."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.starts: dict[str, float] = {}

    def submit(self, job: Job, now: float) -> None:
        self.inner.submit(job, now)

    def finish(self, job: Job, now: float) -> None:
        self.inner.finish(job, now)

    def step(self, now: float) -> Step:
        step = self.inner.step(now)
        if step.evicted:
            raise AssertionError(f"{self.name} evicted {step.evicted[:3]}: it never should")
        for name in step.started:
            self.starts[name] = now
        return step

    def partial_gpus(self) -> int:
        return self.inner.partial_gpus()

    def partial_jobs(self) -> int:
        return self.inner.partial_jobs()

    def wake_at(self) -> float | None:
        return self.inner.wake_at()

    def placed(self, job: Job) -> dict[str, int]:
        return self.inner.placed(job)


def project_starts(
    policy: str, traces: Path, *, start: str, end: str, compression: float
) -> tuple[list[Job], list[float | None]]:
    """`policy` through the project's simulator: its jobs and their starts."""
    trace = load_philly(traces, start=start, end=end, compression=compression)
    nodes = philly_nodes(traces, mixed=False)
    total = sum(n.allocatable["nvidia.com/gpu"] for n in nodes) // GPU_UNIT
    queues = philly_queues(trace.vc_nodes, total)
    weights = {q.name: q.quotas["nvidia.com/gpu"].nominal / GPU_UNIT for q in queues}
    recorder = _Recorder(make_policy(policy, queues, nodes))
    simulate(trace.jobs, recorder, total_gpus=total, weights=weights, progress=None)
    return list(trace.jobs), [recorder.starts.get(j.name) for j in trace.jobs]


def _p95(values: Sequence[float]) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)] if ordered else math.nan


def _same(a: float | None, b: float | None) -> bool:
    """Both never started, or both started within a microsecond."""
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) < 1e-6)


@dataclass(frozen=True, slots=True)
class Comparison:
    jobs: int
    agree: int
    # (mean, p95) wait in hours of the started jobs, independent then project; all, then 9+ GPUs.
    waits: tuple[tuple[float, float], tuple[float, float]]
    large_waits: tuple[tuple[float, float], tuple[float, float]]
    first_differences: list[tuple[int, int, float, float | None, float | None]]


def compare(
    jobs: Sequence[greedy.TraceJob],
    theirs: Sequence[float | None],
    ours: Sequence[float | None],
) -> Comparison:
    """Job by job: starts equal (to the microsecond), and the wait figures of each side."""
    agree = sum(1 for a, b in zip(theirs, ours, strict=True) if _same(a, b))

    def figures(starts: Sequence[float | None], large: bool) -> tuple[float, float]:
        waits = [
            (s - j.submit) / 3600
            for j, s in zip(jobs, starts, strict=True)
            if s is not None and (not large or j.gpus >= 9)
        ]
        return (sum(waits) / len(waits) if waits else math.nan, _p95(waits))

    diffs = [
        (j.index, j.gpus, j.submit, a, b)
        for j, a, b in zip(jobs, theirs, ours, strict=True)
        if not _same(a, b)
    ][:5]
    return Comparison(
        len(jobs),
        agree,
        (figures(theirs, False), figures(ours, False)),
        (figures(theirs, True), figures(ours, True)),
        diffs,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default="2017-10-01")
    parser.add_argument("--end", default="2017-11-01")
    parser.add_argument("--compression", type=float, default=8.0)
    parser.add_argument("--ties", choices=("last", "first"), default="last")
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    args = parser.parse_args(argv)
    window = {"start": args.start, "end": args.end, "compression": args.compression}
    jobs = greedy.read_philly(args.traces / "philly", **window)
    nodes = len(philly_nodes(args.traces, mixed=False))
    print(
        f"Philly {args.start}..{args.end} (exclusive), {args.compression:g}x, {nodes} homogeneous"
        f" 8-GPU nodes, independent ties: {args.ties}"
    )
    for order, policy in POLICIES.items():
        began = time.perf_counter()
        theirs = greedy.simulate(jobs, nodes=nodes, order=order, ties=args.ties)
        took_theirs = time.perf_counter() - began
        began = time.perf_counter()
        project_jobs, ours = project_starts(policy, args.traces, **window)
        took_ours = time.perf_counter() - began
        if [j.gpus for j in jobs] != [j.gpus for j in project_jobs]:
            print("the two trace readers disagree on the jobs; no comparison", file=sys.stderr)
            return 1
        shapes = sum(
            1
            for j, p in zip(jobs, project_jobs, strict=True)
            if sorted(j.pods) != sorted(g for n, g in p.groups for _ in range(n))
        )
        c = compare(jobs, theirs, ours)
        print(f"\n{order}: {policy}")
        print(f"jobs: {c.jobs}; split into pods differently by the two: {shapes}")
        print(f"same start time: {c.agree} of {c.jobs}")
        (tm, tp), (om, op) = c.waits
        (ltm, ltp), (lom, lop) = c.large_waits
        header = f"{'mean wait h':>12} {'p95 wait h':>11} {'9+ GPU mean h':>14} {'9+ p95 h':>9}"
        print(f"{'':30} {header}")
        print(f"{'independent greedy gang-FIFO':30} {tm:12.2f} {tp:11.2f} {ltm:14.2f} {ltp:9.2f}")
        print(f"{policy:30} {om:12.2f} {op:11.2f} {lom:14.2f} {lop:9.2f}")
        for index, gpus, submit, a, b in c.first_differences:
            print(f"  differs: job {index} ({gpus} GPUs, submit {submit:.0f} s): {a} vs {b}")
        print(f"wall: independent {took_theirs:.1f} s, project {took_ours:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
