"""One measured configuration: the controller, the Helm chart, a new ClusterQueue and the
simulator's `kohort` policy all run controller/defaults.py unless told otherwise."""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from typing import Any

from controller import defaults, quota
from controller.api.queues import ClusterQueue
from controller.main import add_arguments, settings_from
from controller.settings import Settings
from controller.simulate.loop import simulate
from controller.simulate.main import add_arguments as simulate_arguments
from controller.simulate.main import policy_options
from controller.simulate.policies import EnginePolicy, Policy, make_policy
from controller.simulate.traces import Job, gpu_node, philly_queues
from controller.state.cohorts import queue_spec
from tests.chart_support import render

HOUR = 3600.0


def controller_core(*flags: str) -> quota.Config:
    return controller_settings(*flags).core


def controller_settings(*flags: str) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return settings_from(parser.parse_args(list(flags)))


def chart_controller_args(values: dict[str, Any] | None = None) -> list[str]:
    for obj in render(values or {}):
        if obj["kind"] == "Deployment" and obj["metadata"]["name"].endswith("controller"):
            container = obj["spec"]["template"]["spec"]["containers"][0]
            return [a for a in container["args"] if a.startswith("--")]
    raise AssertionError("the chart renders no controller Deployment")


def test_the_controller_runs_the_measured_configuration_by_default() -> None:
    core = controller_core()
    assert core == quota.Config.measured() == Settings().core
    assert core.waste_budget == defaults.WASTE_BUDGET
    assert core.starvation_after == (defaults.STARVATION_AFTER_SECONDS or None)
    assert (core.packing, core.victims, core.placement) == ("best-fit", "placement-aware", True)


def test_the_controller_computes_positions_under_the_measured_cpu_budget_by_default() -> None:
    assert controller_settings().positions_budget == defaults.POSITIONS_BUDGET_MS
    assert Settings().positions_budget == defaults.POSITIONS_BUDGET_MS
    assert controller_settings("--positions-budget", "0.5").positions_budget == 0.5


def test_the_chart_passes_the_measured_configuration_to_the_controller() -> None:
    assert controller_core(*chart_controller_args()) == quota.Config.measured()


def test_chart_values_reach_the_controller_and_turn_the_limits_off() -> None:
    args = chart_controller_args({"controller": {"wasteBudget": -1, "starvationAfterSeconds": 0}})
    core = controller_core(*args)
    assert (core.waste_budget, core.starvation_after) == (None, None)


def test_the_chart_turns_backfill_reservations_on_and_off() -> None:
    on = controller_core(*chart_controller_args({"controller": {"starvationBackfill": True}}))
    off = controller_core(*chart_controller_args({"controller": {"starvationBackfill": False}}))
    assert (on.backfill, off.backfill) == (True, False)
    assert controller_core().backfill == defaults.STARVATION_BACKFILL


def test_a_cluster_queue_without_preemption_settings_gets_the_measured_timers() -> None:
    cq = ClusterQueue.model_validate({"metadata": {"name": "team-a"}, "spec": {}})
    spec = queue_spec(cq)
    assert spec.min_runtime == defaults.MINIMUM_RUNTIME_SECONDS
    assert spec.evict_after == defaults.EVICT_AFTER_SECONDS


def test_a_cluster_queue_may_set_its_own_timers() -> None:
    cq = ClusterQueue.model_validate(
        {
            "metadata": {"name": "team-a"},
            "spec": {"preemption": {"minimumRuntimeSeconds": 0, "evictAfterSeconds": 60}},
        }
    )
    assert (queue_spec(cq).min_runtime, queue_spec(cq).evict_after) == (0.0, 60.0)


def test_kohort_simulate_runs_the_measured_configuration_by_default() -> None:
    parser = argparse.ArgumentParser()
    simulate_arguments(parser)
    args = parser.parse_args(["philly"])
    queues, nodes = philly_queues({"a": 1}, 8), [gpu_node("n0", 8)]
    policy = make_policy("kohort", queues, nodes, **policy_options(args))
    assert isinstance(policy, EnginePolicy)
    assert policy.engine.config == quota.Config.measured()
    spec = policy.engine.queues["a"].state.spec
    assert (spec.min_runtime, spec.evict_after) == (
        defaults.MINIMUM_RUNTIME_SECONDS,
        defaults.EVICT_AFTER_SECONDS,
    )


def test_the_simulators_kohort_policy_is_the_controllers_configuration() -> None:
    nodes = [gpu_node("n0", 8)]
    queues = philly_queues({"a": 1, "b": 1}, 8)
    policy = make_policy("kohort", queues, nodes)
    assert isinstance(policy, EnginePolicy)
    assert policy.engine.config == quota.Config.measured()
    cq = ClusterQueue.model_validate({"metadata": {"name": "a"}, "spec": {}})
    for runtime in policy.engine.queues.values():
        spec = runtime.state.spec
        assert (spec.min_runtime, spec.evict_after) == (
            queue_spec(cq).min_runtime,
            queue_spec(cq).evict_after,
        )


def _two_queue_trace(seed: int) -> list[Job]:
    """Queue a floods the cohort with small and middle gangs for six hours, borrowing b's idle
    GPUs; b's 4- and 8-GPU gangs arrive from the first hour and want their quota back."""
    rng = random.Random(seed)
    jobs = [
        Job(f"a/j{i}", "a", rng.uniform(0, 6 * HOUR), rng.uniform(HOUR / 2, 4 * HOUR), 1, gpus)
        for i, gpus in enumerate(rng.choice([1, 2, 4]) for _ in range(60))
    ]
    jobs += [
        Job(f"b/j{i}", "b", HOUR + rng.uniform(0, 6 * HOUR), rng.uniform(HOUR / 2, 3 * HOUR), 1, g)
        for i, g in enumerate(rng.choice([4, 8]) for _ in range(12))
    ]
    return sorted(jobs, key=lambda j: (j.submit, j.name))


def _wasted_gpu_hours(policy_of: Callable[[], Policy]) -> float:
    weights = {"a": 8.0, "b": 8.0}
    return sum(
        simulate(
            _two_queue_trace(seed), policy_of(), total_gpus=16, weights=weights, progress=None
        ).wasted_gpu_hours
        for seed in range(1, 11)
    )


def test_where_one_queue_borrows_from_the_other_the_defaults_waste_less_than_naive_reclaim() -> (
    None
):
    """The controller's former defaults (evict at once, no waste budget, nodes held for a gang
    waiting an hour, no minimum runtime) threw away more work than naive reclaim on this trace;
    the measured defaults throw away less. The starvation guard, which they leave off, would
    throw away more again."""
    nodes = [gpu_node(f"n{i}", 8) for i in range(2)]
    queues = philly_queues({"a": 1, "b": 1}, 16)
    naive = _wasted_gpu_hours(lambda: make_policy("naive-reclaim", queues, nodes))
    former = _wasted_gpu_hours(
        lambda: EnginePolicy("former", queues, nodes, quota.Config(starvation_after=HOUR))
    )
    measured = _wasted_gpu_hours(lambda: make_policy("kohort", queues, nodes))
    guarded = _wasted_gpu_hours(
        lambda: make_policy("kohort", queues, nodes, starvation_after=6 * HOUR)
    )
    assert former > naive
    assert measured < naive / 2
    assert guarded > 2 * measured


def test_the_controller_and_the_chart_forecast_start_times_by_default() -> None:
    assert controller_settings().forecast_refresh == defaults.FORECAST_REFRESH_SECONDS
    assert Settings().forecast_refresh == defaults.FORECAST_REFRESH_SECONDS
    chart = controller_settings(*chart_controller_args())
    assert chart.forecast_refresh == defaults.FORECAST_REFRESH_SECONDS
    assert chart.forecast_arrivals == defaults.FORECAST_ARRIVALS_SECONDS
    off = chart_controller_args({"controller": {"forecastRefreshSeconds": 0}})
    assert controller_settings(*off).forecast_refresh is None
