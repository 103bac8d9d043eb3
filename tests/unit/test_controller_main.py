"""The controller's flags reach the decision core it runs."""

from __future__ import annotations

import argparse

from controller.main import add_arguments, settings_from


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(flags))


def test_by_default_gangs_reclaim_at_once_with_no_budget_and_the_guard_waits_an_hour() -> None:
    core = settings_from(parse()).core
    assert (core.evict_after, core.waste_budget, core.starvation_after) == (0.0, None, 3600.0)
    assert (core.packing, core.victims, core.placement) == ("best-fit", "placement-aware", True)


def test_the_reclaim_settings_measured_in_the_simulator_can_be_chosen_by_flags() -> None:
    core = settings_from(
        parse("--evict-after", "1800", "--waste-budget", "0.1", "--starvation-after", "0")
    ).core
    assert (core.evict_after, core.waste_budget, core.starvation_after) == (1800.0, 0.1, None)
