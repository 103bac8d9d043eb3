"""The controller's flags reach the decision core it runs."""

from __future__ import annotations

import argparse

import pytest

from controller.main import add_arguments, settings_from


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(flags))


def test_the_reclaim_limits_can_be_turned_off_by_flags() -> None:
    core = settings_from(parse("--waste-budget", "-1", "--starvation-after", "0")).core
    assert (core.waste_budget, core.starvation_after) == (None, None)


def test_the_former_evict_after_flag_says_where_the_setting_went(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse("--evict-after", "0")
    assert "set spec.preemption.evictAfterSeconds on each ClusterQueue" in capsys.readouterr().err
