"""Start-time forecasts: how often they hold on Philly, and what refreshing them costs.

    PYTHONPATH=. .venv/bin/python bench/bench_forecast.py [--compressions 4,8]
        [--nodes homogeneous] [--every 10] [--start 2017-10-01] [--end 2017-12-01]
        [--skip 0] [--limit 0] [--pending 10000] [--passes 20] [--spread-passes 1000]
        [--budget-ms 0.5]
        [--no-replay] [--no-cpu]

Replay: the `kohort` policy (the controller's defaults) through the simulator's loop
(controller/simulate/loop.py), on Philly compressed 4x and 8x. At every --every-th submission
(1: every one), before the cycle of that instant, the submitted gang's start is forecast from
the live simulated state (controller/quota/forecast.py) knowing only what the controller could
know then, in two variants:
- learned: every gang's runtime from the runtimes of its queue's gangs that have finished so
  far (the last 500), or an hour while none has; Philly declares no runtime;
- declared: every gang declares the trace's runtime as its maximum (the best case of a
  declared upper bound: here it is exact).
A gang's actual start is the first time it starts in the replay. Printed per variant: the
share of the started gangs that started at or before their p90 forecast (goal >= 85 %), the
median absolute error of the median forecast, both over all forecast gangs and over those that
did not start at once (forecast or actual wait above zero); gangs with no forecast (not within
the forecast's horizon) and gangs that never started are counted apart. Also the CPU time of
one forecast (process time, mean and p99).

CPU: the controller at --pending held one-pod Jobs, in bench_reconcile.py's world (30
ClusterQueues in 5 cohorts, an in-memory API; see that file), settled, then passes each after
one Job completes, the process CPU of each: --passes with forecasts off, then for each of
--budgets (the admissions a forward run may make; 0: no bound) --refreshes passes that each
refresh every pending gang's forecast and write those that moved (the controller's
`--forecast-refresh`, here due at every pass; its queues' learned runtimes spread from 10 min
to 4 h), each refresh made whole in its pass (as with --forecast-budget 0). Printed: the
median pass off and on, and the added CPU per pass if every pass refreshed (the worst case)
and at one refresh per 30 s with one pass a second. Then --spread-passes passes off and as
many on, in turns, with a refresh always under way spread over the passes within --budget-ms
of CPU a pass (the controller's default --forecast-budget unless told): the mean pass off and
on, how far a refresh got, the forecasts written, and the CPU of the forecaster's own work in
each pass (the difference of the means is within the noise of a shared machine; that figure
is not).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.api.times import format_time
from controller.defaults import FORECAST_BUDGET_MS, FORECAST_WRITES
from controller.quota import Gang
from controller.quota.forecast import Bounds, Runtime, RuntimeHistory, forecast, learned_runtimes
from controller.quota.runtimes import size_class
from controller.simulate.loop import simulate
from controller.simulate.metrics import percentile
from controller.simulate.policies import EnginePolicy, Step, make_policy
from controller.simulate.traces import (
    DEFAULT_TRACES,
    GPU_UNIT,
    Job,
    load_philly,
    philly_nodes,
    philly_queues,
)
from controller.state.forecasts import MAX_ADMISSIONS, MAX_CYCLES

VARIANTS = ("learned", "declared")
# How often the controller refreshes forecasts at most, and the pass rate assumed for the
# amortised figure.
REFRESH_SECONDS = 30.0
PASSES_PER_SECOND = 1.0


@dataclass(slots=True)
class Made:
    """One forecast: when it was made and the estimated start at the median and p90."""

    at: float
    median: float | None
    p90: float | None


@dataclass(slots=True)
class ForecastingPolicy:
    """The `kohort` policy, forecasting the start of sampled submissions from its live engine
    before each cycle, with the runtimes it has seen finish."""

    inner: EnginePolicy
    every: int
    durations: dict[str, float]
    skip: int = 0  # submissions before the first sampled one
    arrivals: float = 0.0  # Bounds.arrivals: the window of past traffic assumed to come again
    name: str = "kohort"
    history: RuntimeHistory = field(default_factory=RuntimeHistory)
    made: dict[str, dict[str, Made]] = field(default_factory=lambda: {v: {} for v in VARIANTS})
    first_start: dict[str, float] = field(default_factory=dict)
    cpu: list[float] = field(default_factory=list)
    _started: dict[str, tuple[float, int]] = field(default_factory=dict)  # when, size class
    _seen: set[str] = field(default_factory=set)
    _due: list[str] = field(default_factory=list)

    def submit(self, job: Job, now: float) -> None:
        self.inner.submit(job, now)
        if job.name in self._seen:  # an evicted gang back in its queue
            return
        self._seen.add(job.name)
        seen = len(self._seen) - self.skip
        if seen > 0 and seen % self.every == 0:
            self._due.append(job.name)

    def finish(self, job: Job, now: float) -> None:
        started, size = self._started.pop(job.name)
        self.history.add(job.queue, now - started, size)
        self.inner.finish(job, now)

    def step(self, now: float) -> Step:
        if self._due:
            for variant in VARIANTS:
                tick = time.process_time()
                made = forecast(
                    self.inner.engine,
                    now,
                    self._runtimes(variant, now),
                    gangs=self._due,
                    bounds=Bounds(arrivals=self.arrivals),
                )
                self.cpu.append((time.process_time() - tick) / len(self._due))
                for name, f in made.items():
                    self.made[variant][name] = Made(now, f.median, f.p90)
            self._due = []
        step = self.inner.step(now)
        for name in step.evicted:
            self._started.pop(name, None)
        for name in step.started:
            self._started[name] = (now, size_class(self.inner.engine.running[name][1].info.gang))
            self.first_start.setdefault(name, now)
        return step

    def _runtimes(self, variant: str, now: float) -> Callable[[Gang], Runtime]:
        if variant == "declared":
            return lambda g: Runtime(declared=self.durations[g.name])
        return learned_runtimes(self.history, self.inner.engine, now)

    def partial_gpus(self) -> int:
        return 0

    def partial_jobs(self) -> int:
        return 0

    def wake_at(self) -> float | None:
        return self.inner.wake_at()

    def placed(self, job: Job) -> dict[str, int]:
        return self.inner.placed(job)


@dataclass(frozen=True, slots=True)
class Accuracy:
    forecast: int
    started: int
    no_forecast: int
    within_p90: float
    error_median_h: float
    waited: int
    waited_within_p90: float
    waited_error_median_h: float


def accuracy(made: dict[str, Made], first_start: dict[str, float]) -> Accuracy:
    hits: list[bool] = []
    errors: list[float] = []
    waited_hits: list[bool] = []
    waited_errors: list[float] = []
    no_forecast = 0
    for name, m in made.items():
        start = first_start.get(name)
        if start is None:
            continue
        if m.median is None or m.p90 is None:
            no_forecast += 1
            continue
        hit = start <= m.p90
        error = abs(start - m.median) / 3600
        hits.append(hit)
        errors.append(error)
        if start > m.at or m.median > m.at:
            waited_hits.append(hit)
            waited_errors.append(error)
    return Accuracy(
        forecast=len(made),
        started=sum(1 for name in made if name in first_start),
        no_forecast=no_forecast,
        within_p90=_share(hits),
        error_median_h=percentile(errors, 50),
        waited=len(waited_hits),
        waited_within_p90=_share(waited_hits),
        waited_error_median_h=percentile(waited_errors, 50),
    )


def _share(flags: Iterable[bool]) -> float:
    values = list(flags)
    return sum(values) / len(values) if values else float("nan")


def replay(args: argparse.Namespace, compression: float, nodes_kind: str) -> None:
    trace = load_philly(args.traces, start=args.start, end=args.end, compression=compression)
    jobs = trace.jobs[: args.limit] if args.limit else trace.jobs
    nodes = philly_nodes(args.traces, mixed=nodes_kind == "mixed")
    total_gpus = sum(n.allocatable.get("nvidia.com/gpu", 0) for n in nodes) // GPU_UNIT
    queues = philly_queues(trace.vc_nodes, total_gpus)
    weights = {q.name: q.quotas["nvidia.com/gpu"].nominal / GPU_UNIT for q in queues}
    inner = make_policy("kohort", queues, nodes)
    assert isinstance(inner, EnginePolicy)
    policy = ForecastingPolicy(
        inner, args.every, {j.name: j.duration for j in jobs}, args.skip, args.arrivals
    )
    started = time.perf_counter()
    result = simulate(
        jobs, policy, total_gpus=total_gpus, weights=weights, progress=None, label="forecast "
    )
    wall = time.perf_counter() - started
    print(
        f"\n== Philly {args.start}..{args.end}, {len(jobs):,} jobs, {compression:g}x,"
        f" {nodes_kind} nodes ({total_gpus} GPUs); kohort p95 wait"
        f" {result.wait_p95 / 3600:.2f} h; a forecast at every {args.every}th submission"
        f"{f' after the first {args.skip:,}' if args.skip else ''};"
        f" {wall:.0f} s =="
    )
    ms = [c * 1000 for c in policy.cpu]
    print(
        f"  CPU per forecast (both runs, one gang): mean {statistics.fmean(ms or [0.0]):.1f} ms,"
        f" p99 {percentile(ms, 99):.1f} ms, {len(ms)} forecasts"
    )
    print(
        f"  {'variant':<10}{'forecast':>9}{'started':>8}{'none':>6}{'<= p90':>8}"
        f"{'med |err| h':>12}{'waited':>8}{'<= p90':>8}{'med |err| h':>12}"
    )
    for variant in VARIANTS:
        a = accuracy(policy.made[variant], policy.first_start)
        print(
            f"  {variant:<10}{a.forecast:>9}{a.started:>8}{a.no_forecast:>6}"
            f"{100 * a.within_p90:>7.1f}%{a.error_median_h:>12.3f}"
            f"{a.waited:>8}{100 * a.waited_within_p90:>7.1f}%{a.waited_error_median_h:>12.3f}"
        )
    if args.dump:
        queue_of = {j.name: j.queue for j in jobs}
        rows = [
            {
                "variant": v,
                "gang": n,
                "queue": queue_of[n],
                "at": m.at,
                "median": m.median,
                "p90": m.p90,
                "start": policy.first_start.get(n),
            }
            for v in VARIANTS
            for n, m in policy.made[v].items()
        ]
        args.dump.write_text(json.dumps(rows))
    print(
        "  (<= p90: share of started gangs that started at or before their p90 forecast;"
        " med |err|: median |actual start - median forecast|; waited: the gangs whose actual"
        " or forecast wait was above zero; none: no forecast within the horizon)"
    )


# -- CPU per pass at 10,000 pending ------------------------------------------------------------


def spread_history(queues: Iterable[str]) -> RuntimeHistory:
    """Each queue's learned runtimes spread from 10 min to 4 h, the queues shifted apart."""
    history = RuntimeHistory()
    for i, queue in enumerate(sorted(queues)):
        for k in range(50):
            history.add(queue, 600.0 + (k * 37 + i * 11) % 50 * (4 * 3600 - 600) / 50)
    return history


async def cpu_per_pass(
    pending: int,
    passes: int,
    budgets: list[int | None],
    refreshes: int,
    spread_passes: int,
    budget_ms: float,
) -> None:
    import bench_reconcile as br

    from controller import quota
    from controller.settings import Settings

    api = br.TimedApi(0.0)
    br.fill(api, pending)
    settings = Settings(pods_ready_timeout=None, core=quota.Config(), forecast_refresh=None)
    state, cache, reconciler = await br.wire(api, settings)
    engine, forecaster = state.engine, state.forecasts

    async def timed(count: int) -> list[float]:
        """The process CPU of `count` passes, each after one Job completes."""
        cpu: list[float] = []
        for _ in range(count):
            if not await br.finish_one(api):
                break
            tick = time.process_time()
            await reconciler.reconcile_once()
            cpu.append(time.process_time() - tick)
        return cpu

    try:
        await reconciler.reconcile_once()  # cold: Workloads for the first Jobs
        known = -1
        for _ in range(500):  # until every Job is a gang of the engine and nothing is admitted
            stats = await reconciler.reconcile_once()
            gangs = len(engine.pending) + len(engine.running)
            if not stats.admitted and not stats.evicted and gangs == known:
                break
            known = gangs
        waiting = len(engine.pending)
        forecaster.history = spread_history(engine.queues)
        print(
            f"\n== controller CPU per pass at {waiting:,} pending (bench_reconcile's world),"
            f" each pass after one Job completes =="
        )
        if spread_passes:  # first: no Workload shows a forecast yet, all are written
            await spread(api, state, reconciler, spread_passes, budget_ms)
            forecaster.forget()
            waiting = len(engine.pending)
        off = await timed(passes)
        pass_cpu = statistics.median(off)
        print(
            f"  each refresh made whole in its pass ({waiting:,} pending now); forecasts off:"
            f" median {1000 * pass_cpu:.1f} ms of {len(off)} passes"
        )
        for budget in budgets:
            forecaster.refresh_every = 0.0  # every pass refreshes
            forecaster.budget_ms = None  # each refresh made whole in its pass (as before)
            forecaster.bounds = Bounds(max_admissions=budget)
            on = await timed(refreshes)
            forecaster.refresh_every = None
            made = forecast(engine, time.time(), lambda g: forecaster.history.runtime(g.queue))
            refresh = statistics.median(on) - pass_cpu
            per_pass = refresh / (REFRESH_SECONDS * PASSES_PER_SECOND)
            shown = sum(
                1
                for gang in state.index
                if gang.workload and gang.workload.status and gang.workload.status.start_forecast
            )
            print(
                f"  forecasts on, at most {budget or 'any number of'} admissions a forward run:"
                f" refreshed every pass, median {1000 * statistics.median(on):.0f} ms"
                f" (max {1000 * max(on):.0f}) of {len(on)} passes,"
                f" +{100 * refresh / pass_cpu:.0f} %;"
                f" refreshed once per {REFRESH_SECONDS:g} s at {PASSES_PER_SECOND:g} pass/s"
                f" +{100 * per_pass / pass_cpu:.1f} %; {shown:,} Workloads show a forecast"
            )
        print(
            f"  (unbounded, {sum(1 for f in made.values() if f.p90 is not None):,} of"
            f" {len(made):,} pending gangs get a forecast within the horizon)"
        )
    finally:
        await cache.stop()
        await api.close()


async def finish_oldest(api: Any, state: Any) -> bool:
    """Complete the Job of the gang admitted first (as finish_one in bench_reconcile.py, found
    from the engine rather than by reading every Job back)."""
    from controller.api import kinds

    running = state.engine.running
    for gang_id in sorted(running, key=lambda g: running[g][1].admitted_at):
        gang = state.gang(gang_id)
        if gang is None:
            continue
        job = api.read_back(kinds.JOBS, gang.name.removeprefix("job-"), gang.namespace)
        if job is None or job["spec"].get("suspend") is not False:
            continue
        stamp = format_time(time.time())
        complete = {"type": "Complete", "status": "True", "lastTransitionTime": stamp}
        job["status"] = {"conditions": [complete], "succeeded": 1, "completionTime": stamp}
        api.put(kinds.JOBS, job)
        await api.settle()
        return True
    return False


async def spread(api: Any, state: Any, reconciler: Any, count: int, budget_ms: float) -> None:
    """`count` passes with forecasts off and as many with a refresh always under way, spread
    over the passes within `budget_ms` of CPU a pass (the controller's --forecast-budget; a
    refresh starts as soon as the last one is done), taken in turns (off, on, off, ...) so
    that both see the same backlog as it shrinks (each pass after one Job completes): the mean
    pass of each, the forecast writes included."""
    forecaster = state.forecasts
    forecaster.bounds = Bounds(max_cycles=MAX_CYCLES, max_admissions=MAX_ADMISSIONS)
    forecaster.budget_ms = budget_ms
    forecaster.writes = FORECAST_WRITES
    forecaster.last_passes = 0
    written = forecaster.written
    waiting = len(state.engine.pending)
    refresh, own = forecaster.refresh, []  # the CPU of the forecaster's own work in each pass

    def timed_refresh(*args: Any) -> Any:
        tick = time.process_time()
        try:
            return refresh(*args)
        finally:
            own.append(time.process_time() - tick)

    forecaster.refresh = timed_refresh
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for i in range(2 * count):
        on = i % 2 == 1
        forecaster.refresh_every = 0.0 if on else None  # off: the refresh under way waits
        if not await finish_oldest(api, state):
            break
        tick = time.process_time()
        await reconciler.reconcile_once()
        cpu[on].append(time.process_time() - tick)
    forecaster.refresh_every = None
    del forecaster.refresh
    off_ms, on_ms = (1000 * statistics.fmean(cpu[k] or [0.0]) for k in (False, True))
    run = forecaster.under_way
    if forecaster.last_passes:
        took = f"a whole refresh took {forecaster.last_passes:,} passes"
    elif run is not None:
        left = len(run.median.waiting) + len(run.p90.waiting)
        settled = 1 - left / max(2 * len(run.targets), 1)
        took = (
            f"no refresh finished: {100 * settled:.0f} % of the gangs' quantiles settled"
            f" in {forecaster.passes:,} passes"
        )
    else:
        took = "no refresh started"
    print(
        f"  spread over passes, at most {budget_ms:g} ms of CPU a pass, a refresh always under"
        f" way ({waiting:,} pending at the start; passes off and on in turns): mean"
        f" {on_ms:.2f} ms of {len(cpu[True])} passes on against {off_ms:.2f} ms of"
        f" {len(cpu[False])} off, +{100 * (on_ms - off_ms) / off_ms:.1f} %; {took};"
        f" {forecaster.written - written:,} forecasts written (at most {FORECAST_WRITES} a pass)"
    )
    own_ms = sorted(1000 * t for t in own) or [0.0]
    print(
        f"  the refresh's own CPU in those passes (writes aside): mean"
        f" {statistics.fmean(own_ms):.3f} ms, p99 {percentile(own_ms, 99):.2f} ms, max"
        f" {own_ms[-1]:.2f} ms; {100 * statistics.fmean(own_ms) / off_ms:.1f} % of a pass off"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--compressions", default="4,8")
    parser.add_argument("--nodes", default="homogeneous", help="comma list: homogeneous, mixed")
    parser.add_argument("--start", default="2017-10-01")
    parser.add_argument("--end", default="2017-12-01")
    parser.add_argument("--limit", type=int, default=0, help="only the first N jobs")
    parser.add_argument("--every", type=int, default=10, help="forecast every Nth submission")
    parser.add_argument(
        "--skip",
        type=int,
        default=0,
        help="forecast none of the first N submissions (they are replayed: a backlog forms)",
    )
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--refreshes", type=int, default=3, help="forecast refreshes timed")
    parser.add_argument(
        "--budgets",
        default="0,1000",
        help="comma list of admissions a forward run may make (0: no bound)",
    )
    parser.add_argument(
        "--spread-passes",
        type=int,
        default=1000,
        help="passes timed off, then as many with a refresh spread over them (0: none)",
    )
    parser.add_argument(
        "--budget-ms",
        type=float,
        default=FORECAST_BUDGET_MS,
        help="the CPU a pass spends at most on the refresh spread over passes",
    )
    parser.add_argument("--no-replay", action="store_true")
    parser.add_argument("--no-cpu", action="store_true")
    parser.add_argument("--dump", type=Path, default=None)
    parser.add_argument("--arrivals", type=float, default=0.0)
    args = parser.parse_args()
    if not args.no_replay:
        for compression in (float(c) for c in args.compressions.split(",") if c):
            for nodes_kind in (n for n in args.nodes.split(",") if n):
                replay(args, compression, nodes_kind)
    if not args.no_cpu:
        budgets = [int(b) or None for b in args.budgets.split(",") if b]
        asyncio.run(
            cpu_per_pass(
                args.pending,
                args.passes,
                budgets,
                args.refreshes,
                args.spread_passes,
                args.budget_ms,
            )
        )


if __name__ == "__main__":
    main()
