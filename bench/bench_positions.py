"""Queue positions at scale: what computing them costs per pass, and how many Workload writes
they cause per pass, at 1,000 queues and 10,000 pending gangs.

    .venv/bin/python bench/bench_positions.py [--queues 1000] [--pending 10000] [--passes 20]

On bench_core's seeded cluster (10 cohorts of queues, ~60% of GPUs held), one LocalQueue per
ClusterQueue. Prints the time of `positions()` (the engine's consideration order, numbered)
and of a whole position report (heads and writes planned), then, pass after pass with one
gang finishing and one cycle before each, the writes planned: those of the queues' heads
(exact) and those further back (bounded by `position_writes`).

Then the same under the default `--positions-budget` (CPU ms a pass): passes with one gang
finishing and one cycle before each, until two computations have ended; the CPU each pass
spends in the position report (mean, p99, max), how many passes a computation takes, and the
pass that ends one (its heads and writes planned).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_core import build
from controller import defaults
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

    settings = Settings(positions_budget=None)  # computed whole, as without a budget
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

    stepped(engine, now, rng)


def stepped(engine: Engine, now: float, rng: random.Random) -> None:
    """Passes under the default budget until two computations have ended."""
    settings = Settings(positions_period=0.0)
    reporter = PositionReporter(settings)
    cpu: list[float] = []
    collected: list[float] = []  # CPU of the garbage collector's runs in each pass
    started = [0.0]

    def collector(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        elif collected:
            collected[-1] += time.process_time() - started[0]

    gc.callbacks.append(collector)
    ended: list[tuple[int, float]] = []  # (passes taken, CPU of the pass that ended it)
    starts: list[float] = []  # CPU of the passes that started one
    while len(ended) < 2:
        local = {
            key_of(name): (("team", f"lq-{info.gang.queue}"), False)
            for name, (_, info) in engine.pending.items()
        }
        collected.append(0.0)
        t0 = time.process_time()
        reporter.report(engine, now, local, lambda key: None)
        cpu.append(time.process_time() - t0)
        collected[-1] = min(collected[-1], cpu[-1])
        if reporter.passes == 1:
            starts.append(cpu[-1])
        if reporter.under_way is None:
            ended.append((reporter.last_passes, cpu[-1]))
        now += 1.0
        engine.finish(rng.choice(sorted(engine.running)))
        engine.cycle(now)
    gc.callbacks.remove(collector)
    worst = max(range(len(cpu)), key=lambda i: cpu[i])
    ms = sorted(c * 1000 for c in cpu)
    without_gc = max(c - g for c, g in zip(cpu, collected, strict=True)) * 1000
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    print(
        f"stepped, --positions-budget {defaults.POSITIONS_BUDGET_MS:g} ms: {len(ms)} passes, CPU"
        f" of the position work per pass mean {statistics.mean(ms):.2f} ms, median"
        f" {statistics.median(ms):.2f} ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms; the pass"
        f" starting a computation (its fork) {starts[0] * 1000:.0f} ms,"
        f" {starts[1] * 1000:.0f} ms"
    )
    print(
        f"the garbage collector's runs took {collected[worst] * 1000:.1f} ms of the worst pass;"
        f" the most a pass spent outside them {without_gc:.1f} ms"
    )
    print(
        "a computation took "
        + ", ".join(f"{n} passes (the pass ending it {c * 1000:.0f} ms)" for n, c in ended)
    )


if __name__ == "__main__":
    main()
