"""The controller's flags reach the decision core it runs."""

from __future__ import annotations

import argparse

from controller.main import add_arguments, settings_from


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(flags))


def test_the_reclaim_limits_can_be_turned_off_by_flags() -> None:
    core = settings_from(parse("--waste-budget", "-1", "--starvation-after", "0")).core
    assert (core.waste_budget, core.starvation_after) == (None, None)
