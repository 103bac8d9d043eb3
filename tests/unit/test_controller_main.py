"""The controller's flags reach the decision core it runs."""

from __future__ import annotations

import argparse

import pytest

from controller.cluster.clients import ApiError
from controller.main import add_arguments, backend_problem, settings_from
from controller.workloads.base import Backend


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


class _Discovery:
    """An apiserver that serves the API group versions in `served`, and nothing else."""

    def __init__(self, *served: str) -> None:
        self.served = set(served)

    async def fetch(self, method: str, path: str, **_: object) -> bytes:
        if path in self.served:
            return b"{}"
        raise ApiError(404, method, path, "the server could not find the requested resource")


async def test_the_kubernetes_backend_needs_the_scheduling_workload_api_at_start() -> None:
    missing = await backend_problem(_Discovery(), Backend.KUBERNETES)
    assert missing is not None
    assert "--feature-gates=GenericWorkload=true,GangScheduling=true" in missing
    assert "--runtime-config=scheduling.k8s.io/v1alpha1=true" in missing
    served = _Discovery("/apis/scheduling.k8s.io/v1alpha1")
    assert await backend_problem(served, Backend.KUBERNETES) is None
    assert await backend_problem(_Discovery(), Backend.VOLCANO) is None
