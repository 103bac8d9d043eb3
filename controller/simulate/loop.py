"""The discrete-event loop: arrivals and completions in time order, one policy step per instant.

Rule: the loop owns simulated time and every job's state; a policy only sees submit, finish and
step. An evicted job goes back to its queue with its original submit time and restarts from
scratch, so the work it had done is lost.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from controller.simulate.metrics import jain, max_min_fair, mean, percentile, weighted_percentile
from controller.simulate.policies import Policy
from controller.simulate.topology import LARGE_GANG_GPUS, TopologyFigures, TopologyMeter
from controller.simulate.traces import Job

_FINISH, _ARRIVAL, _WAKE = 0, 1, 2


@dataclass(slots=True)
class _JobState:
    job: Job
    start: float | None = None
    version: int = 0
    done: float | None = None
    evictions: int = 0
    # The GPUs it runs with since `start` (an elastic job's may be fewer than it asks for), and
    # how long that run takes: its work is conserved, so fewer GPUs run longer in proportion.
    gpus: int = 0
    runs_for: float = 0.0
    # Whether it last started with fewer GPUs than it asks for.
    partial: bool = False


@dataclass(slots=True)
class QueueFigures:
    jobs: int
    finished: int
    wait_mean: float
    wait_p95: float
    wait_p99: float
    jct_mean: float
    jct_p95: float
    fair_ratio_mean: float


@dataclass(slots=True)
class SizeFigures:
    """Wait of the jobs of one gang size (GPUs per job)."""

    jobs: int
    wait_mean: float
    wait_p95: float
    # Share of this class's jobs among all jobs that waited longer than the overall p95.
    share_of_tail: float


# Gang sizes the report groups jobs by: (label, fewest GPUs, most GPUs); GPU-less jobs count
# with the 1-GPU ones.
SIZE_CLASSES = (("1 GPU", 0, 1), ("2-8 GPUs", 2, 8), ("9+ GPUs", 9, 10**9))


@dataclass(slots=True)
class QueueShares:
    """Each queue's GPUs against its weighted max-min fair share of the demand, per sample.

    One entry per sample in every list; `allocated` counts the GPUs of the queue's running
    jobs, `fair` its share of the cluster's GPUs by `max_min_fair` over what the queues hold
    and wait for at that moment (0 for a queue with nothing running or waiting).
    """

    hours: list[float] = field(default_factory=list)  # since the first submit
    allocated: dict[str, list[int]] = field(default_factory=dict)
    fair: dict[str, list[float]] = field(default_factory=dict)


@dataclass(slots=True)
class Result:
    policy: str
    jobs: int
    finished: int
    never_started: int
    # Jobs that had not finished when the run ended (never started, or still running): their
    # waits are censored at the end of the run and kept out of the wait figures below, which
    # `wait_p95_with_censored` counts them in.
    censored: int
    wait_p95_with_censored: float
    makespan_h: float
    gpu_allocation_mean: float
    gpu_allocation_series: list[tuple[float, float]]
    wait_mean: float
    wait_p50: float
    wait_p95: float
    wait_p99: float
    # The wait that 95% of the requested GPUs waited at most (each job weighs its GPUs).
    wait_p95_by_gpu: float
    jct_mean: float
    jain_mean: float
    fair_ratio_worst: float
    fair_ratio_p5: float
    fair_ratio_mean: float
    partial_jobs: int
    partial_gpu_hours: float
    # GPU-hours free while a 1-GPU job waited (it would have fitted on any free GPU).
    idle_gpu_hours_while_1gpu_waits: float
    evictions: int
    reclaims: int
    evictions_per_reclaim: float
    wasted_gpu_hours: float
    demand_gpu_hours: float
    decision_ms_p50: float
    decision_ms_p99: float
    wall_s: float
    queues: dict[str, QueueFigures] = field(default_factory=dict)
    by_size: dict[str, SizeFigures] = field(default_factory=dict)
    # For the report's plots: the wait of every finished job (seconds, trace order), the wait
    # until the end of the run of every unfinished one, and the queues' shares over time.
    waits: list[float] = field(default_factory=list)
    censored_waits: list[float] = field(default_factory=list)
    queue_shares: QueueShares = field(default_factory=QueueShares)
    # With a topology layout: what the choice of domains did (topology.py).
    topology: TopologyFigures | None = None
    # The p95 wait of the finished gangs of LARGE_GANG_GPUS GPUs or more (NaN: none finished).
    wait_p95_large: float = math.nan
    # Elastic jobs: how many there are, and how many of them last started with fewer GPUs
    # than they ask for (partial admission; their runs take longer in proportion).
    elastic_jobs: int = 0
    partially_admitted: int = 0
    # Running elastic jobs shrunk in place for another gang instead of evicted.
    shrinks: int = 0


@dataclass(slots=True)
class _Sampler:
    """Per-queue demand and allocation, sampled at fixed simulated intervals."""

    weights: dict[str, float]
    total_gpus: int
    running: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    jain: list[float] = field(default_factory=list)
    worst_ratio: list[float] = field(default_factory=list)
    ratios: dict[str, list[float]] = field(default_factory=dict)
    shares: QueueShares = field(default_factory=QueueShares)

    def sample(self, hours: float = math.nan) -> None:
        """Take one sample; `hours`: its time since the first submit (NaN: not known)."""
        active = [q for q in self.weights if self.running.get(q, 0) + self.waiting.get(q, 0) > 0]
        demand = {q: float(self.running.get(q, 0) + self.waiting.get(q, 0)) for q in active}
        fair = max_min_fair(float(self.total_gpus), demand, self.weights)
        self.shares.hours.append(hours)
        for q in self.weights:
            self.shares.allocated.setdefault(q, []).append(self.running.get(q, 0))
            self.shares.fair.setdefault(q, []).append(fair.get(q, 0.0))
        if not active:
            return
        # Weighted: each queue's share of the GPUs over its weight, so a split in the ratio of
        # the weights scores 1.
        self.jain.append(
            jain(
                [
                    self.running.get(q, 0) / self.total_gpus / max(self.weights[q], 1e-9)
                    for q in active
                ]
            )
        )
        worst = math.inf
        for q in active:
            if self.waiting.get(q, 0) > 0 and fair[q] > 0:
                ratio = min(1.0, self.running.get(q, 0) / fair[q])
                self.ratios.setdefault(q, []).append(ratio)
                worst = min(worst, ratio)
        if worst < math.inf:
            self.worst_ratio.append(worst)


def simulate(
    jobs: Sequence[Job],
    policy: Policy,
    *,
    total_gpus: int,
    weights: dict[str, float],
    sample_every: float = 900.0,
    progress: TextIO | None = sys.stderr,
    label: str = "",
    meter: TopologyMeter | None = None,
) -> Result:
    """Replay `jobs` through `policy` and measure it (and, with `meter`, the nodes its gangs
    hold: topology.py)."""
    states = {j.name: _JobState(j) for j in jobs}
    events: list[tuple[float, int, int, str, int]] = []
    for seq, job in enumerate(jobs):
        events.append((job.submit, _ARRIVAL, seq, job.name, 0))
    heapq.heapify(events)
    seq = len(jobs)
    sampler = _Sampler(weights, total_gpus)
    running_gpus = 0
    alloc_area = 0.0
    partial_area = 0.0
    idle_area = 0.0
    waiting_1gpu = 0
    last_t = jobs[0].submit if jobs else 0.0
    first_t = last_t
    next_sample = first_t
    series: list[tuple[float, float]] = []
    latencies: list[float] = []
    evictions = 0
    shrinks = 0
    reclaims: list[int] = []
    wasted = 0.0
    started_wall = time.perf_counter()
    done_count = 0
    report_at = 0.0
    # Arrivals and completions still to come; wakes alone never keep the loop going.
    real_events = len(events)
    next_wake = math.inf
    while real_events:  # a wake left after the last arrival or completion changes nothing
        now = events[0][0]
        held = policy.partial_gpus()
        alloc_area += (running_gpus + held) * (now - last_t)
        partial_area += held * (now - last_t)
        if waiting_1gpu:
            idle_area += (total_gpus - running_gpus - held) * (now - last_t)
        if meter is not None:
            meter.advance(now)
        while next_sample <= now:
            sampler.sample((next_sample - first_t) / 3600.0)
            series.append(((next_sample - first_t) / 3600.0, (running_gpus + held) / total_gpus))
            next_sample += sample_every
        last_t = now
        while events and events[0][0] == now:
            _, kind, _, name, version = heapq.heappop(events)
            if kind == _WAKE:
                next_wake = math.inf if next_wake <= now else next_wake
                continue
            real_events -= 1
            state = states[name]
            job = state.job
            if kind == _FINISH:
                if version != state.version or state.done is not None:
                    continue
                state.done = now
                done_count += 1
                running_gpus -= state.gpus
                sampler.running[job.queue] -= state.gpus
                policy.finish(job, now)
                if meter is not None:
                    meter.stop(name)
            else:
                sampler.waiting[job.queue] = sampler.waiting.get(job.queue, 0) + job.gpus
                waiting_1gpu += job.gpus == 1
                policy.submit(job, now)
        tick = time.perf_counter()
        step = policy.step(now)
        latencies.append(time.perf_counter() - tick)
        for name in step.evicted:
            state = states[name]
            job = state.job
            if state.start is not None:
                wasted += (now - state.start) * state.gpus
                running_gpus -= state.gpus
                sampler.running[job.queue] -= state.gpus
                sampler.waiting[job.queue] = sampler.waiting.get(job.queue, 0) + job.gpus
                waiting_1gpu += job.gpus == 1
                if meter is not None:
                    meter.stop(name)
            state.start = None
            state.version += 1
            state.evictions += 1
            evictions += 1
            policy.submit(job, now)
        for name, gpus in step.shrunk.items():
            # Shrunk in place: it runs on with fewer GPUs, its work left taking longer in
            # proportion (as for a job started smaller).
            state = states[name]
            job = state.job
            assert state.start is not None
            left = (state.start + state.runs_for - now) * state.gpus / gpus
            running_gpus -= state.gpus - gpus
            sampler.running[job.queue] -= state.gpus - gpus
            state.gpus, state.runs_for = gpus, now - state.start + left
            state.version += 1
            shrinks += 1
            if meter is not None:
                meter.stop(name)
                meter.start(job, policy.placed(job))
            seq += 1
            heapq.heappush(events, (now + left, _FINISH, seq, name, state.version))
            real_events += 1
        reclaims.extend(step.reclaims)
        for name in step.started:
            state = states[name]
            job = state.job
            state.start = now
            state.gpus = step.gpus.get(name, job.gpus)
            state.partial = state.gpus < job.gpus
            state.runs_for = job.duration * (job.gpus / state.gpus if state.partial else 1.0)
            running_gpus += state.gpus
            sampler.running[job.queue] = sampler.running.get(job.queue, 0) + state.gpus
            sampler.waiting[job.queue] -= job.gpus
            waiting_1gpu -= job.gpus == 1
            if meter is not None:
                meter.start(job, policy.placed(job))
            seq += 1
            heapq.heappush(events, (now + state.runs_for, _FINISH, seq, name, state.version))
            real_events += 1
        wake = policy.wake_at()
        if wake is not None and now < wake < next_wake and real_events:
            # The policy's timers (evict after, minimum runtime, starvation) fire on time, not
            # only when a job arrives or finishes.
            seq += 1
            heapq.heappush(events, (wake, _WAKE, seq, "", 0))
            next_wake = wake
        if progress is not None and time.perf_counter() - started_wall >= report_at:
            report_at += 10.0
            progress.write(
                f"  {label}{policy.name}: {done_count}/{len(jobs)} jobs done,"
                f" t={(now - first_t) / 3600:.0f}h, {time.perf_counter() - started_wall:.0f}s\n"
            )
            progress.flush()
    end_t = last_t
    return _summarise(
        policy,
        states,
        sampler,
        total_gpus=total_gpus,
        span=(first_t, end_t),
        areas=(alloc_area, partial_area, idle_area),
        series=series,
        latencies=latencies,
        evictions=evictions,
        shrinks=shrinks,
        reclaims=reclaims,
        wasted=wasted,
        wall=time.perf_counter() - started_wall,
        meter=meter,
    )


def _summarise(
    policy: Policy,
    states: dict[str, _JobState],
    sampler: _Sampler,
    *,
    total_gpus: int,
    span: tuple[float, float],
    areas: tuple[float, float, float],
    series: list[tuple[float, float]],
    latencies: list[float],
    evictions: int,
    shrinks: int,
    reclaims: list[int],
    wasted: float,
    wall: float,
    meter: TopologyMeter | None = None,
) -> Result:
    first_t, end_t = span
    waits: dict[str, list[float]] = {}
    waits_by_size: dict[str, list[float]] = {label: [] for label, _, _ in SIZE_CLASSES}
    all_waits: list[float] = []
    large_waits: list[float] = []
    gpus: list[float] = []
    jcts: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    never = 0
    censored: list[float] = []
    for state in states.values():
        job = state.job
        counts[job.queue] = counts.get(job.queue, 0) + 1
        if state.done is None:
            never += state.start is None
            censored.append((end_t if state.start is None else state.start) - job.submit)
            continue
        wait = state.done - state.runs_for - job.submit
        waits.setdefault(job.queue, []).append(wait)
        size = next(label for label, low, high in SIZE_CLASSES if low <= job.gpus <= high)
        waits_by_size[size].append(wait)
        all_waits.append(wait)
        if job.gpus >= LARGE_GANG_GPUS:
            large_waits.append(wait)
        gpus.append(max(job.gpus, 1))
        jcts.setdefault(job.queue, []).append(state.done - job.submit)
    by_size = _by_size(waits_by_size, percentile(all_waits, 95))
    all_jcts = [j for js in jcts.values() for j in js]
    length = max(end_t - first_t, 1e-9)
    ms = [x * 1000 for x in latencies]
    queues = {
        q: QueueFigures(
            counts[q],
            len(waits.get(q, [])),
            mean(waits.get(q, [])),
            percentile(waits.get(q, []), 95),
            percentile(waits.get(q, []), 99),
            mean(jcts.get(q, [])),
            percentile(jcts.get(q, []), 95),
            mean(sampler.ratios.get(q, [])),
        )
        for q in sorted(counts)
    }
    if len(series) > 400:
        stride = math.ceil(len(series) / 400)
        series = series[::stride]
    return Result(
        policy=policy.name,
        jobs=len(states),
        finished=len(states) - len(censored),
        never_started=never,
        censored=len(censored),
        wait_p95_with_censored=percentile(all_waits + censored, 95),
        makespan_h=length / 3600,
        gpu_allocation_mean=areas[0] / (length * total_gpus),
        gpu_allocation_series=series,
        wait_mean=mean(all_waits),
        wait_p50=percentile(all_waits, 50),
        wait_p95=percentile(all_waits, 95),
        wait_p99=percentile(all_waits, 99),
        wait_p95_by_gpu=weighted_percentile(all_waits, gpus, 95),
        jct_mean=mean(all_jcts),
        jain_mean=mean(sampler.jain),
        fair_ratio_worst=min(sampler.worst_ratio, default=math.nan),
        fair_ratio_p5=percentile(sampler.worst_ratio, 5),
        fair_ratio_mean=mean(sampler.worst_ratio),
        partial_jobs=policy.partial_jobs(),
        partial_gpu_hours=areas[1] / 3600,
        idle_gpu_hours_while_1gpu_waits=areas[2] / 3600,
        evictions=evictions,
        reclaims=len(reclaims),
        evictions_per_reclaim=(sum(reclaims) / len(reclaims)) if reclaims else 0.0,
        wasted_gpu_hours=wasted / 3600,
        demand_gpu_hours=sum(s.job.gpus * s.job.duration for s in states.values()) / 3600,
        decision_ms_p50=percentile(ms, 50),
        decision_ms_p99=percentile(ms, 99),
        wall_s=wall,
        queues=queues,
        by_size=by_size,
        waits=all_waits,
        censored_waits=censored,
        queue_shares=sampler.shares,
        topology=None if meter is None else meter.figures(large_waits),
        wait_p95_large=percentile(large_waits, 95),
        elastic_jobs=sum(s.job.min_pods is not None for s in states.values()),
        partially_admitted=sum(s.partial for s in states.values()),
        shrinks=shrinks,
    )


def _by_size(waits: dict[str, list[float]], tail_from: float) -> dict[str, SizeFigures]:
    """Wait per gang size, and how the jobs waiting beyond the overall p95 split by size."""
    tail = {label: sum(1 for w in ws if w > tail_from) for label, ws in waits.items()}
    in_tail = max(1, sum(tail.values()))
    return {
        label: SizeFigures(len(ws), mean(ws), percentile(ws, 95), tail[label] / in_tail)
        for label, ws in waits.items()
    }
