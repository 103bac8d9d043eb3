"""The controller's flags reach the decision core it runs."""

from __future__ import annotations

import argparse
import json

import pytest

from controller.api import kinds
from controller.cluster.clients import ApiError
from controller.main import GANG_RESOURCES, add_arguments, gang_backend_settings, settings_from
from controller.state.objects import PodGroupSettings
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
    """An apiserver that serves the scheduling.k8s.io versions in `served`, and nothing else."""

    def __init__(self, *served: str) -> None:
        self.served = set(served)

    async def fetch(self, method: str, path: str, **_: object) -> bytes:
        version = path.rsplit("/", 1)[-1]
        if version in self.served:
            resource = GANG_RESOURCES[version]
            return json.dumps({"resources": [{"name": resource}]}).encode()
        raise ApiError(404, method, path, "the server could not find the requested resource")


async def test_the_kubernetes_backend_picks_the_newest_gang_api_the_cluster_serves() -> None:
    native = PodGroupSettings(Backend.KUBERNETES)
    missing = await gang_backend_settings(_Discovery(), native)
    assert isinstance(missing, str)
    assert "--feature-gates=GenericWorkload=true,GangScheduling=true" in missing
    assert "--runtime-config=scheduling.k8s.io/v1beta1=true" in missing
    alpha = await gang_backend_settings(_Discovery("v1alpha1"), native)
    assert isinstance(alpha, PodGroupSettings) and alpha.kind == kinds.SCHEDULING_WORKLOADS
    both = await gang_backend_settings(_Discovery("v1alpha1", "v1beta1"), native)
    assert isinstance(both, PodGroupSettings) and both.kind == kinds.SCHEDULING_PODGROUPS
    volcano = PodGroupSettings(Backend.VOLCANO)
    assert await gang_backend_settings(_Discovery(), volcano) == volcano
