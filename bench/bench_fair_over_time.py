"""Fairness over time: a team that ran the whole cluster yesterday, one that ran nothing.

    .venv/bin/python bench/bench_fair_over_time.py [--half-lives 0,1,6,24]

64 GPUs (eight 8-GPU nodes) shared by three queues of one cohort: teams `a` and `b` own 8
GPUs each, `pool` owns the other 48 and runs nothing, so whatever a team takes beyond 8 it
borrows. Yesterday (from 0 h) team `a` runs eight 8-GPU jobs for 22 h: the whole cluster;
team `b` runs nothing. Today (24 h) both submit sixteen 8-GPU jobs of 2 h at the same
instant; ties in fair order go by name, to `a`.

For each usage half-life (`kohort simulate philly --usage-half-life`, the controller's
`--usage-half-life`), through the simulator's `kohort` policy, it prints: how many of the
eight jobs that start first today are `b`'s, each team's GPU share over today's first 4 hours,
and each team's mean wait today. With half-life 0 fair order sees only the share now, equal for
both teams, so they split today evenly; with a half-life, `b` goes first while `a`'s borrowing
of yesterday is remembered.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.simulate.loop import simulate
from controller.simulate.policies import make_policy
from controller.simulate.traces import GPU_UNIT, Job, gpu_node, philly_queues

HOUR = 3600.0
TODAY = 24 * HOUR
JOBS_TODAY = 16


def jobs() -> list[Job]:
    yesterday = [Job(f"a/yesterday-{i}", "a", 0.0, 22 * HOUR, 1, 8) for i in range(8)]
    today = [
        Job(f"{team}/today-{i:02d}", team, TODAY, 2 * HOUR, 1, 8)
        for team in ("a", "b")
        for i in range(JOBS_TODAY)
    ]
    return sorted(yesterday + today, key=lambda j: (j.submit, j.name))


def run(half_life_h: float) -> dict[str, float]:
    owned = {"a": 1, "b": 1, "pool": 6}  # nodes' worth of nominal quota
    total = 8 * sum(owned.values())
    queues = philly_queues(owned, total)
    nodes = [gpu_node(f"n{i}", 8) for i in range(total // 8)]
    weights = {q.name: q.quotas["nvidia.com/gpu"].nominal / GPU_UNIT for q in queues}
    trace = jobs()
    policy = make_policy("kohort", queues, nodes, usage_half_life=half_life_h * HOUR)
    result = simulate(trace, policy, total_gpus=total, weights=weights, progress=None)
    assert result.censored == 0 and result.evictions == 0
    # Every job finished, none was evicted: each started its wait after its submission.
    started = {j.name: j.submit + wait for j, wait in zip(trace, result.waits, strict=True)}
    today = [j for j in trace if j.submit >= TODAY]
    first = sorted(today, key=lambda j: (started[j.name], j.name))[:8]
    row = {"b of first 8": float(sum(j.queue == "b" for j in first))}
    window = (TODAY, TODAY + 4 * HOUR)
    for team in ("a", "b"):
        mine = [j for j in today if j.queue == team]
        gpu_s = sum(
            j.gpus * max(0.0, min(started[j.name] + j.duration, window[1]) - started[j.name])
            for j in mine
        )
        row[f"{team} GPU % 0-4h"] = 100 * gpu_s / (total * (window[1] - window[0]))
        row[f"{team} wait h"] = sum(started[j.name] - j.submit for j in mine) / len(mine) / HOUR
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half-lives", default="0,1,6,24", help="hours, comma list")
    args = parser.parse_args()
    half_lives = [float(h) for h in args.half_lives.split(",") if h]
    rows = [run(h) for h in half_lives]
    columns = list(rows[0])
    print("a ran all 64 GPUs yesterday for 22 h, b nothing; today both submit 16 x 8-GPU jobs")
    print(f"{'half-life':>10}" + "".join(f"{c:>16}" for c in columns))
    for h, row in zip(half_lives, rows, strict=True):
        print(f"{h:>8g} h" + "".join(f"{row[c]:>16.2f}" for c in columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
