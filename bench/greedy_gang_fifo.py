"""An independent greedy gang-FIFO simulator: Volcano's allocate action without enqueue, on
identical nodes of a few GPUs, to check the project's `gang-fifo-no-enqueue` baseline against.

It imports nothing from the project: it reads the Philly CSVs itself and keeps its own nodes,
queue and clock, so a change to the decision core, the simulator's loop or its trace reader
cannot move both sides at once. Only GPUs are counted (Philly gives every GPU the same CPU and
memory, so they never bind first).

The rules, all of them:

1. Jobs: Philly jobs submitted in [start, end) of the virtual clusters listed in philly_vc.csv,
   ordered by submit second, jobs of the same second in the trace's row order; submit times
   are seconds after the first job's, divided by the compression; durations as recorded.
2. Pods (`split_gpus`): a job of n GPUs on nodes of g GPUs is floor(n/g) pods of g GPUs and,
   if n is not a multiple of g, one pod of the rest (12 GPUs on 8-GPU nodes: 8 + 4); a job of
   at most g GPUs is one pod of n (a GPU-less job one pod of none).
3. Time: events are arrivals and completions. At each instant the jobs ending then free their
   GPUs first, the jobs submitted then join the pending list, then one allocate pass runs.
4. Allocate pass (Volcano's allocate with the gang plugin and no enqueue stage): the pending
   jobs are taken oldest first (submit time, then trace order; every job has the same
   priority). A job is placed whole or not at all: its pods, largest first, each go to a
   node that holds the pod, chosen by the node order: `spread` (Volcano's built-in node
   order, the nodeorder plugin's least-requested score) takes the node with the most free
   GPUs; `binpack` (the binpack plugin weighted on GPUs, as kohort's installation docs set
   Volcano up) the node with the fewest free GPUs that still holds the pod. Among equally
   free nodes the highest-numbered one (`ties="last"`) or the lowest-numbered
   (`ties="first"`); Volcano picks at random among equal scores. If some pod finds no node,
   the pods already placed are taken back and the job stays pending: it does not block the
   jobs behind it, which are tried in turn in the same pass (Volcano's allocate discards a
   job's statement and pops the next job; no job holds anything before it is placed).
5. A started job runs for its duration and is never evicted; its wait is start - submit.
"""

from __future__ import annotations

import calendar
import csv
import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class TraceJob:
    index: int  # position in submit order (the project names it philly-<index:06d>)
    submit: float  # seconds after the first job, compressed
    duration: float
    gpus: int
    pods: tuple[int, ...]  # GPUs of each pod, largest first


def split_gpus(gpus: int, node_gpus: int) -> tuple[int, ...]:
    """Rule 2: whole nodes' worth of GPUs per pod, then one pod of the rest."""
    if gpus <= node_gpus:
        return (gpus,)
    whole, rest = divmod(gpus, node_gpus)
    return (node_gpus,) * whole + ((rest,) if rest else ())


def read_philly(
    folder: Path,
    *,
    start: str = "2017-10-01",
    end: str = "2017-11-01",
    compression: float = 8.0,
    node_gpus: int = 8,
) -> list[TraceJob]:
    """Rule 1, straight from philly.csv and philly_vc.csv."""
    with (folder / "philly_vc.csv").open() as f:
        clusters = {row["vc"] for row in csv.DictReader(f)}
    rows: list[tuple[int, float, int]] = []
    with (folder / "philly.csv").open() as f:
        for row in csv.DictReader(f):
            stamp = row["timestamp"]
            if start <= stamp < end and row["cluster"] in clusters:
                second = calendar.timegm(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
                rows.append((second, float(row["duration"]), int(row["num_gpus"])))
    rows.sort(key=lambda r: r[0])  # stable: same-second jobs keep the row order
    first = rows[0][0] if rows else 0
    return [
        TraceJob(k, (second - first) / compression, duration, gpus, split_gpus(gpus, node_gpus))
        for k, (second, duration, gpus) in enumerate(rows)
    ]


class _Nodes:
    """Free GPUs per node, with the nodes bucketed by how many GPUs they have free."""

    def __init__(self, count: int, gpus: int, order: str, ties: str) -> None:
        if order not in ("spread", "binpack") or ties not in ("last", "first"):
            raise ValueError(f"unknown node order {order!r} or ties {ties!r}")
        self.free = [gpus] * count
        self.buckets: list[set[int]] = [set() for _ in range(gpus + 1)]
        self.buckets[gpus].update(range(count))
        self.spread = order == "spread"
        self.last = ties == "last"

    def _move(self, node: int, delta: int) -> None:
        self.buckets[self.free[node]].discard(node)
        self.free[node] += delta
        self.buckets[self.free[node]].add(node)

    def choose(self, need: int) -> int | None:
        """The node a pod of `need` GPUs goes to (rule 4), or None if none holds it."""
        top = len(self.buckets) - 1
        frees = range(top, need - 1, -1) if self.spread else range(need, top + 1)
        for free in frees:
            bucket = self.buckets[free]
            if bucket:
                return max(bucket) if self.last else min(bucket)
        return None

    def take(self, node: int, gpus: int) -> None:
        self._move(node, -gpus)

    def give(self, node: int, gpus: int) -> None:
        self._move(node, gpus)

    def place(self, pods: Sequence[int]) -> list[tuple[int, int]] | None:
        """Rule 4 for one job: [(node, GPUs)] with the GPUs taken, or None with nothing taken."""
        placed: list[tuple[int, int]] = []
        for gpus in pods:
            node = self.choose(gpus)
            if node is None:
                for back, taken in placed:
                    self.give(back, taken)
                return None
            self.take(node, gpus)
            placed.append((node, gpus))
        return placed


def simulate(
    jobs: Sequence[TraceJob],
    *,
    nodes: int,
    node_gpus: int = 8,
    order: str = "spread",
    ties: str = "last",
) -> list[float | None]:
    """Rules 3-5: each job's start time (None if it never fits a node set of the cluster)."""
    cluster = _Nodes(nodes, node_gpus, order, ties)
    starts: list[float | None] = [None] * len(jobs)
    ends: list[tuple[float, int, list[tuple[int, int]]]] = []  # (end, job, its pods' nodes)
    pending: list[TraceJob] = []
    arrivals = sorted(jobs, key=lambda j: (j.submit, j.index))
    next_arrival = 0
    while next_arrival < len(arrivals) or ends:
        now = min(
            arrivals[next_arrival].submit if next_arrival < len(arrivals) else float("inf"),
            ends[0][0] if ends else float("inf"),
        )
        while ends and ends[0][0] == now:
            _, _, held = heapq.heappop(ends)
            for node, gpus in held:
                cluster.give(node, gpus)
        while next_arrival < len(arrivals) and arrivals[next_arrival].submit == now:
            pending.append(arrivals[next_arrival])
            next_arrival += 1
        pending = _allocate(cluster, pending, now, starts, ends)
    return starts


def _allocate(
    cluster: _Nodes,
    pending: list[TraceJob],
    now: float,
    starts: list[float | None],
    ends: list[tuple[float, int, list[tuple[int, int]]]],
) -> list[TraceJob]:
    """One allocate pass (rule 4) over `pending`, oldest first; returns those still pending.

    Capacity only shrinks during a pass, so once a pod list has failed, the same list fails
    again for every later job in the pass: it is not tried twice (a shortcut, not a rule)."""
    still: list[TraceJob] = []
    failed: set[tuple[int, ...]] = set()
    for job in pending:  # kept oldest first: arrivals are appended in order
        if job.pods in failed:
            still.append(job)
            continue
        placed = cluster.place(job.pods)
        if placed is None:
            failed.add(job.pods)
            still.append(job)
            continue
        starts[job.index] = now
        heapq.heappush(ends, (now + job.duration, job.index, placed))
    return still
