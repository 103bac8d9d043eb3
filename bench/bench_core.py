"""Decision-core speed: gang decisions/s at 1,000 queues, 10,000 pending gangs, 1,000 nodes.

    .venv/bin/python bench/bench_core.py [--queues 1000] [--pending 10000] [--nodes 1000]

Prints, for a seeded random cluster (10 cohorts of queues, 8-GPU nodes in 4 zones with one
tainted zone, ~60% of GPUs held by admitted gangs, pending gangs of 1-4 pods x 1-8 GPUs with
varied CPU requests, priorities and node selectors):
- `decide(snapshot)` from scratch: the whole snapshot built into state and one full cycle;
- the incremental engine: one gang finishes, one cycle runs (what the controller does per
  event), over many events;
and the headline ratio against the target of 2,000 gang decisions/s. A "gang decision" is one
pending gang getting an outcome: admitted, or left pending with its reason.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from controller.quota import (
    AdmittedGang,
    Config,
    Engine,
    Gang,
    Node,
    PodPlacement,
    PodSet,
    QueueSpec,
    Quota,
    Snapshot,
    Taint,
    Toleration,
    decide,
)

GPU = "nvidia.com/gpu"
TARGET = 2000.0


def build(queues: int, pending: int, nodes: int, seed: int) -> Snapshot:
    rng = random.Random(seed)
    node_list = []
    for i in range(nodes):
        zone = f"z{i % 4}"
        taints = (Taint("dedicated", "batch"),) if zone == "z3" else ()
        node_list.append(
            Node(
                f"node-{i:05d}",
                {GPU: 8000, "cpu": 64000, "memory": 512 * 2**30 * 1000},
                {"zone": zone},
                taints,
            )
        )
    total_gpus = 8 * nodes
    specs = []
    for q in range(queues):
        nominal = max(1, total_gpus // queues) * 1000
        specs.append(
            QueueSpec(
                f"queue-{q:04d}",
                {
                    GPU: Quota(nominal),
                    "cpu": Quota(nominal * 8),
                    "memory": Quota(nominal * 64 * 2**30),
                },
                cohort=f"cohort-{q % 10}",
                reclaim_within_cohort="Any" if q % 2 else "LowerPriority",
                within_queue="LowerPriority",
            )
        )

    def make_gang(name: str, queue: str, created: float) -> Gang:
        pods = rng.choice([1, 1, 2, 4])
        gpus = rng.choice([1, 2, 4, 8])
        selector = {"zone": rng.choice(["z0", "z1", "z2"])} if rng.random() < 0.3 else {}
        tolerations = (Toleration("dedicated", "Exists"),) if rng.random() < 0.2 else ()
        requests = {
            GPU: gpus * 1000,
            "cpu": gpus * rng.choice([4000, 6000, 8000]),
            "memory": gpus * 32 * 2**30 * 1000,
        }
        return Gang(
            name,
            queue,
            (PodSet(pods, requests, "workers", selector, tolerations),),
            rng.randrange(4),
            created,
        )

    # Admitted gangs fill about 60% of the GPUs, each whole on one node.
    admitted = []
    free = {n.name: 8 for n in node_list if n.labels["zone"] != "z3"}
    names = sorted(free)
    target = int(0.6 * total_gpus)
    held = 0
    k = 0
    while held < target:
        node = rng.choice(names)
        gpus = rng.choice([1, 2, 4, 8])
        if free[node] < gpus:
            continue
        free[node] -= gpus
        held += gpus
        g = Gang(
            f"run-{k:06d}",
            f"queue-{rng.randrange(queues):04d}",
            (PodSet(1, {GPU: gpus * 1000, "cpu": gpus * 4000}, "workers"),),
            rng.randrange(4),
            float(rng.randrange(1000)),
        )
        admitted.append(
            AdmittedGang(g, float(rng.randrange(1000, 2000)), (PodPlacement("workers", node, 1),))
        )
        k += 1
    gangs = [
        make_gang(f"pend-{i:06d}", f"queue-{rng.randrange(queues):04d}", float(rng.randrange(3000)))
        for i in range(pending)
    ]
    return Snapshot(tuple(specs), tuple(node_list), tuple(gangs), tuple(admitted))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    snapshot = build(args.queues, args.pending, args.nodes, args.seed)
    print(
        f"cluster: {args.queues} queues, {len(snapshot.pending)} pending gangs,"
        f" {len(snapshot.admitted)} admitted gangs, {args.nodes} nodes"
    )

    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        d = decide(snapshot, 3000.0)
        runs.append(time.perf_counter() - t0)
    best = min(runs)
    decided = len(d.admissions) + len(d.pending)
    print(
        f"decide() from scratch: {best * 1000:.0f} ms (best of 3) for {decided} gangs ->"
        f" {decided / best:,.0f} gang decisions/s; {len(d.admissions)} admitted,"
        f" {len(d.evictions)} evicted, {len(d.pending)} pending with a reason"
    )
    sample = sorted(d.pending.items())[:3]
    for name, why in sample:
        print(f"  e.g. {name}: {why}")

    engine = Engine(snapshot.queues, snapshot.nodes, Config())
    for a in snapshot.admitted:
        engine.add_admitted(a)
    for g in snapshot.pending:
        engine.add_pending(g)
    t0 = time.perf_counter()
    engine.cycle(3000.0)
    first = time.perf_counter() - t0
    rng = random.Random(args.seed + 1)
    times = []
    admitted = 0
    now = 3000.0
    for _ in range(args.events):
        now += 1.0
        engine.finish(rng.choice(sorted(engine.running)))
        t0 = time.perf_counter()
        d = engine.cycle(now)
        times.append(time.perf_counter() - t0)
        admitted += len(d.admissions)
    pending_now = len(engine.pending)
    mean = statistics.fmean(times)
    print(
        f"incremental engine: first cycle {first * 1000:.0f} ms; then per event (one gang"
        f" finishes, one cycle over {pending_now:,} pending): mean {mean * 1000:.1f} ms,"
        f" p99 {sorted(times)[int(0.99 * len(times)) - 1] * 1000:.1f} ms,"
        f" {admitted} admissions over {args.events} events"
    )
    print(
        f"  -> {pending_now / mean:,.0f} gang decisions/s per cycle"
        f" (every pending gang re-judged each cycle)"
    )
    print(
        f"headline: from-scratch {decided / best / TARGET:.1f}x the 2,000/s target;"
        f" incremental {pending_now / mean / TARGET:.1f}x"
    )


if __name__ == "__main__":
    main()
