"""The controller's flags reach the decision core it runs."""

from __future__ import annotations

import argparse
import json

import pytest

from controller.api import kinds
from controller.cluster.clients import ApiError
from controller.main import (
    GANG_RESOURCES,
    StartError,
    add_arguments,
    gang_backend_settings,
    settings_from,
    start,
)
from controller.settings import Settings
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Backend
from tests.fakes.memory_api import MemoryApi


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
    """An apiserver that serves the scheduling.k8s.io versions in `served` and the API group
    versions of `groups` (group/version -> resources), and nothing else."""

    def __init__(self, *served: str, groups: dict[str, list[str]] | None = None) -> None:
        self.served = set(served)
        self.groups = groups or {}

    async def fetch(self, method: str, path: str, **_: object) -> bytes:
        group_version = path.removeprefix("/apis/")
        version = group_version.rsplit("/", 1)[-1]
        if group_version.startswith("scheduling.k8s.io/") and version in self.served:
            resource = GANG_RESOURCES[version]
            return json.dumps({"resources": [{"name": resource}]}).encode()
        if group_version in self.groups:
            resources = [{"name": name} for name in self.groups[group_version]]
            return json.dumps({"resources": resources}).encode()
        raise ApiError(404, method, path, "the server could not find the requested resource")


VOLCANO_API = {"scheduling.volcano.sh/v1beta1": ["podgroups", "queues", "jobs"]}


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
    assert await gang_backend_settings(_Discovery(groups=VOLCANO_API), volcano) == volcano


async def test_the_volcano_backend_refuses_to_start_without_volcano_and_says_what_to_do() -> None:
    volcano = PodGroupSettings(Backend.VOLCANO)
    missing = await gang_backend_settings(_Discovery("v1beta1"), volcano)
    assert isinstance(missing, str)
    assert missing.startswith("--backend volcano (the default) needs Volcano")
    assert "Install Volcano" in missing
    assert "--backend kubernetes" in missing and "--backend none" in missing
    assert "gangScheduler.backend" in missing
    assert missing.endswith(
        "(this cluster does not serve podgroups.scheduling.volcano.sh/v1beta1,"
        " queues.scheduling.volcano.sh/v1beta1)"
    )
    # Volcano's PodGroups without its queues is no Volcano kohort can use either.
    partial = _Discovery(groups={"scheduling.volcano.sh/v1beta1": ["podgroups"]})
    refused = await gang_backend_settings(partial, volcano)
    assert isinstance(refused, str)
    assert refused.endswith("(this cluster does not serve queues.scheduling.volcano.sh/v1beta1)")


async def test_the_coscheduling_backend_refuses_to_start_without_its_podgroups() -> None:
    coscheduling = PodGroupSettings(Backend.COSCHEDULING)
    missing = await gang_backend_settings(_Discovery(groups=VOLCANO_API), coscheduling)
    assert isinstance(missing, str)
    assert "needs the coscheduling plugin of scheduler-plugins" in missing
    assert "podgroups.scheduling.x-k8s.io/v1alpha1" in missing
    served = _Discovery(groups={"scheduling.x-k8s.io/v1alpha1": ["podgroups", "elasticquotas"]})
    assert await gang_backend_settings(served, coscheduling) == coscheduling


async def test_no_gang_backend_needs_no_api() -> None:
    none = PodGroupSettings(Backend.NONE)
    assert await gang_backend_settings(_Discovery(), none) == none


class _NoVolcanoQueues(MemoryApi):
    """An API server in memory that refuses every Volcano queue request as `status`."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.failing[("get", "queues")] = status
        self.failing[("create", "queues")] = status


async def test_a_volcano_queue_that_cannot_be_made_stops_the_start_with_what_to_do() -> None:
    with pytest.raises(StartError) as refused:
        await start(_NoVolcanoQueues(403), Settings(), PodGroupSettings(Backend.VOLCANO))
    message = str(refused.value)
    assert message.startswith("cannot create kohort's Volcano queue 'kohort'")
    assert "HTTP 403" in message
    assert "get and create on Volcano queues" in message


async def test_the_volcano_queue_is_made_at_start_when_missing() -> None:
    api = MemoryApi()
    controller = await start(api, Settings(), PodGroupSettings(Backend.VOLCANO))
    try:
        queue = api.read_back(kinds.VOLCANO_QUEUES, "kohort")
        assert queue is not None and queue["spec"]["reclaimable"] is False
    finally:
        await controller.stop()
