"""What elastic jobs change on Philly: the kohort policy with and without a share of elastic jobs.

    .venv/bin/python bench/bench_sim_elastic.py [--compression 8] [--shares 0,0.5] [--pod-gpus 8]

Replays the Philly trace (homogeneous 8-GPU nodes) through the simulator's `kohort` policy (the
controller's measured configuration), once per share: that share of the jobs of two pods or
more (with 8-GPU pods, the jobs of 16, 24 and 32 GPUs; with `--pod-gpus 4`, the jobs of 8 GPUs
too, every job then made of pods of at most 4 GPUs; the same jobs in every run, see
`traces.with_elastic`) is elastic, down to half its pods. An elastic job that does not fit whole
starts with the most pods that fit, down to that half; one admitted smaller runs longer in
proportion (its work is conserved) and is counted at the GPUs it runs with. Share 0 is kohort as
it is. Prints per share: elastic jobs, those last started smaller, GPU allocation, p95, p95 by
GPU and mean wait (wait = completion - the run's length - submit: a longer run of fewer GPUs is
no wait, its JCT says it), the p95 wait of the jobs of 9 GPUs or more, mean JCT, the makespan
(GPU allocation is averaged over it: a long job run smaller can stretch it), evictions and the
GPU-hours they threw away, and the running elastic jobs shrunk in place (down to at most
their minimum) for a gang admitted instead of evicted: each runs on with fewer GPUs, its work
left taking longer in proportion. Figures come from one run of this script.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.simulate.loop import Result, simulate
from controller.simulate.policies import make_policy
from controller.simulate.traces import (
    DEFAULT_TRACES,
    GPU_UNIT,
    load_philly,
    philly_nodes,
    philly_queues,
    with_elastic,
)

HOUR = 3600.0


def run(traces: Path, compression: float, share: float, limit: int, pod_gpus: int) -> Result:
    trace = load_philly(traces, compression=compression, pod_gpus=pod_gpus)
    jobs = trace.jobs[:limit] if limit else trace.jobs
    jobs = tuple(with_elastic(jobs, share))
    nodes = philly_nodes(traces, mixed=False)
    total = sum(n.allocatable.get("nvidia.com/gpu", 0) for n in nodes) // GPU_UNIT
    queues = philly_queues(trace.vc_nodes, total)
    weights = {q.name: q.quotas["nvidia.com/gpu"].nominal / GPU_UNIT for q in queues}
    policy = make_policy("kohort", queues, nodes)
    return simulate(jobs, policy, total_gpus=total, weights=weights, progress=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--compression", type=float, default=8.0)
    parser.add_argument("--shares", default="0,0.5", help="comma list of elastic shares")
    parser.add_argument("--limit", type=int, default=0, help="only the first N jobs")
    parser.add_argument("--jobs", type=int, default=1, help="simulations run at once")
    parser.add_argument("--pod-gpus", type=int, default=8, help="GPUs per pod at most")
    args = parser.parse_args()
    shares = [float(s) for s in args.shares.split(",") if s]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            pool.submit(run, args.traces, args.compression, share, args.limit, args.pod_gpus)
            for share in shares
        ]
        results = [f.result() for f in futures]
    print(
        f"Philly {args.compression:g}x homogeneous, pods of at most {args.pod_gpus} GPUs,"
        " kohort policy,"
        f" {results[0].jobs if results else 0} jobs"
    )
    header = (
        f"{'share':>6}{'elastic':>9}{'smaller':>9}{'alloc%':>8}{'p95 h':>8}{'p95 GPU h':>11}"
        f"{'mean h':>8}{'p95 9+ h':>10}{'jct mean h':>12}{'makespan h':>12}{'evict':>7}"
        f"{'wasted GPU-h':>14}{'shrunk':>8}"
    )
    print(header)
    for share, r in zip(shares, results, strict=True):
        print(
            f"{share:>6g}{r.elastic_jobs:>9d}{r.partially_admitted:>9d}"
            f"{100 * r.gpu_allocation_mean:>8.1f}{r.wait_p95 / HOUR:>8.2f}"
            f"{r.wait_p95_by_gpu / HOUR:>11.2f}{r.wait_mean / HOUR:>8.2f}"
            f"{r.by_size['9+ GPUs'].wait_p95 / HOUR:>10.2f}{r.jct_mean / HOUR:>12.2f}"
            f"{r.makespan_h:>12.1f}{r.evictions:>7d}{r.wasted_gpu_hours:>14.0f}{r.shrinks:>8d}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
