"""Queue positions at scale: what computing them costs per pass, and how many Workload writes
they cause per pass, at 1,000 queues and 10,000 pending gangs.

    .venv/bin/python bench/bench_positions.py [--queues 1000] [--pending 10000] [--passes 20]

On bench_core's seeded cluster (10 cohorts of queues, ~60% of GPUs held), one LocalQueue per
ClusterQueue. Prints the time of `positions()` (the engine's consideration order, numbered)
and of a whole position report (heads and writes planned), then, pass after pass with one
gang finishing and one cycle before each, the writes planned: those of the queues' heads
(exact) and those further back (bounded by `position_writes`).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_core import build
from controller.quota import Config, Engine
from controller.quota.positions import positions
from controller.settings import Settings
from controller.state.gangs import key_of
from controller.state.positions import PositionReporter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    snapshot = build(args.queues, args.pending, args.nodes, args.seed)
    engine = Engine(snapshot.queues, snapshot.nodes, Config())
    for a in snapshot.admitted:
        engine.add_admitted(a)
    for g in snapshot.pending:  # named as the controller names gangs: namespace/name
        engine.add_pending(replace(g, name=f"team/{g.name}"))
    now = 3000.0
    engine.cycle(now)
    print(
        f"cluster: {args.queues} queues, {len(engine.pending):,} pending gangs after a first"
        f" cycle, {len(engine.running):,} admitted, {args.nodes} nodes"
    )
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        found = positions(engine, now)
        times.append(time.perf_counter() - t0)
    print(
        f"positions(): {min(times) * 1000:.0f} ms best of 5, median"
        f" {statistics.median(times) * 1000:.0f} ms, for {len(found):,} pending gangs"
    )

    settings = Settings()
    reporter = PositionReporter(settings)
    local = {
        key_of(name): (("team", f"lq-{info.gang.queue}"), False)
        for name, (_, info) in engine.pending.items()
    }
    rng = random.Random(args.seed + 1)
    report_times, head_writes, behind_writes = [], [], []
    for _ in range(args.passes):
        t0 = time.perf_counter()
        report = reporter.report(engine, now, local, lambda key: None)
        report_times.append(time.perf_counter() - t0)
        heads = sum(
            1
            for w in report.writes.values()
            if w.position is not None and (w.position.cluster_queue <= settings.positions_head)
        )
        head_writes.append(heads)
        behind_writes.append(len(report.writes) - heads)
        now += 1.0
        engine.finish(rng.choice(sorted(engine.running)))
        for admitted in engine.cycle(now).admissions:
            local.pop(key_of(admitted.gang), None)
    computed = [t for t, w in zip(report_times, head_writes, strict=True) if t > 0.001 or w]
    print(
        f"position report, on passes that computed positions (at most every"
        f" {settings.positions_period:.0f} s; a pass each second here): median"
        f" {statistics.median(computed or [0.0]) * 1000:.0f} ms,"
        f" max {max(report_times) * 1000:.0f} ms"
    )
    print(
        f"writes per pass (head {settings.positions_head}, at most {settings.position_writes}"
        f" further back): first pass {head_writes[0]} head + {behind_writes[0]} behind; later"
        f" passes head median {statistics.median(head_writes[1:]):.0f}, max {max(head_writes[1:])};"
        f" behind max {max(behind_writes[1:])}"
    )


if __name__ == "__main__":
    main()
