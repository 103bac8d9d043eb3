"""What the starvation guard buys a large gang, and what it costs the small jobs around it.

    .venv/bin/python bench/bench_starvation.py [--hours 48] [--seeds 1-10]

Two scenarios, each with steady streams of 1-GPU jobs (Poisson arrivals, exponential run
times of one hour on average) and one 16-GPU gang (two 8-GPU pods, four hours) submitted after
an hour; the streams stop after `--hours`:

- own queue: one queue of 16 GPUs whose small jobs keep 95% of it busy on average: whenever a
  GPU frees, a newer small job takes it, and the big gang hardly ever sees 16 free GPUs;
- cohort: the big gang's queue (16 GPUs, small jobs keeping 4 busy) lends its idle GPUs to a
  second queue (8 GPUs) whose small jobs keep 11 busy, so it always borrows some; the big gang
  needs its queue's whole quota, so it waits for its own small jobs and the borrowers alike.

Each runs through the simulator's `kohort` policy (the controller's measured configuration)
as it is by default, then with the starvation guard off and at several thresholds, holding
nodes idle (`hold`) or with backfill reservations (`backfill`: the nodes that free up first by
the runtimes learned from finished jobs, usable meanwhile by jobs done before then), and
prints the big gang's wait, the
small jobs' mean and p95 wait, the GPU allocation and the work thrown away by evictions, each
the mean over the seeds (evictions and wasted GPU-hours: the total). Figures come from one run
of this script; compare rows with each other.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.simulate.loop import simulate
from controller.simulate.policies import make_policy
from controller.simulate.traces import GPU_UNIT, Job, gpu_node, philly_queues

HOUR = 3600.0
THRESHOLDS = (1 * HOUR, 3 * HOUR, 6 * HOUR)
# (label, make_policy's options): kohort as it is by default, then the guard off, then each
# threshold holding nodes idle and with backfill reservations.
GUARDS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    ("off", {"starvation_after": None}),
    *(
        (f"{kind} {after / HOUR:g} h", {"starvation_after": after, "backfill": kind == "backfill"})
        for kind in ("hold", "backfill")
        for after in THRESHOLDS
    ),
)


@dataclass(frozen=True)
class Scenario:
    name: str
    # Queue -> nodes of 8 GPUs it owns (its nominal quota).
    queues: dict[str, int]
    # Queue -> GPUs its small jobs may keep busy on average (offered load).
    small_load: dict[str, float]


SCENARIOS = (
    Scenario("own queue", {"team": 2}, {"team": 16 * 0.95}),
    Scenario("cohort", {"team": 2, "other": 1}, {"team": 4.0, "other": 11.0}),
)


def jobs_of(scenario: Scenario, hours: float, seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs: list[Job] = []
    for queue, load in scenario.small_load.items():
        t, i = 0.0, 0
        while t < hours * HOUR:
            t += rng.expovariate(load / HOUR)  # load GPUs busy at one-hour mean run time
            duration = max(60.0, rng.expovariate(1 / HOUR))
            jobs.append(Job(f"{queue}/small-{i:05d}", queue, t, duration, 1, 1))
            i += 1
    jobs.append(Job("team/big", "team", HOUR, 4 * HOUR, 2, 8))
    return sorted(jobs, key=lambda j: (j.submit, j.name))


def run(scenario: Scenario, hours: float, seed: int) -> list[dict[str, float]]:
    nodes = [
        gpu_node(f"{queue}-{n}", 8)
        for queue, count in scenario.queues.items()
        for n in range(count)
    ]
    total = sum(scenario.queues.values()) * 8
    queues = philly_queues(scenario.queues, total)
    weights = {q.name: q.quotas["nvidia.com/gpu"].nominal / GPU_UNIT for q in queues}
    jobs = jobs_of(scenario, hours, seed)
    rows: list[dict[str, float]] = []
    for _, options in GUARDS:
        policy = make_policy("kohort", queues, nodes, **options)
        result = simulate(jobs, policy, total_gpus=total, weights=weights, progress=None)
        big, small = result.by_size["9+ GPUs"], result.by_size["1 GPU"]
        assert big.jobs == 1 and result.censored == 0, "every job finishes once the stream stops"
        rows.append(
            {
                "big wait h": big.wait_mean / HOUR,
                "small mean h": small.wait_mean / HOUR,
                "small p95 h": small.wait_p95 / HOUR,
                "alloc %": 100 * result.gpu_allocation_mean,
                "evictions": float(result.evictions),
                "wasted GPU-h": result.wasted_gpu_hours,
            }
        )
    return rows


def _seeds(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=48.0, help="hours of small-job arrivals")
    parser.add_argument("--seeds", default="1-10", help="seed range A-B")
    args = parser.parse_args()
    seeds = _seeds(args.seeds)
    totals = {"evictions", "wasted GPU-h"}
    for scenario in SCENARIOS:
        runs = [run(scenario, args.hours, seed) for seed in seeds]
        print(f"\n{scenario.name}: {args.hours:g} h of arrivals, seeds {args.seeds}")
        columns = list(runs[0][0])
        print(f"{'guard':>14}" + "".join(f"{c:>14}" for c in columns))
        for i, (label, _) in enumerate(GUARDS):
            cells = []
            for c in columns:
                values = [r[i][c] for r in runs]
                value = sum(values) if c in totals else sum(values) / len(values)
                cells.append(f"{value:>14.2f}")
            print(f"{label:>14}" + "".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
