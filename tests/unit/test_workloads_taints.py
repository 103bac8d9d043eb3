"""Taints and tolerations reach the decision core from the CRDs and from pods and nodes alike."""

from __future__ import annotations

from controller import quota
from controller.api import common, kube
from controller.workloads.taints import (
    core_toleration,
    pod_toleration,
    repelling_taints,
    view_toleration,
    workload_toleration,
)


def test_only_taints_that_keep_pods_away_reach_the_core_from_nodes_and_flavors() -> None:
    node = [
        kube.Taint(key="a", value="1", effect="NoSchedule"),
        kube.Taint(key="b", effect="PreferNoSchedule"),
    ]
    flavor = [
        common.Taint(key="a", value="1", effect="NoSchedule"),
        common.Taint(key="c", effect="NoExecute"),
    ]
    assert repelling_taints(node) == (quota.Taint("a", "1", "NoSchedule"),)
    assert repelling_taints(flavor) == (
        quota.Taint("a", "1", "NoSchedule"),
        quota.Taint("c", "", "NoExecute"),
    )


def test_a_pods_toleration_reaches_the_core_with_an_unset_operator_as_equal_and_no_seconds() -> (
    None
):
    toleration = kube.Toleration(key="gpu", value="a100", effect="NoExecute", toleration_seconds=60)
    assert pod_toleration(toleration) == quota.Toleration("gpu", "Equal", "a100", "NoExecute")


def test_a_flavors_toleration_keeps_its_seconds_onto_the_pods_it_is_given() -> None:
    flavor = common.Toleration(
        key="reclaim", operator="Exists", effect="NoExecute", toleration_seconds=300
    )
    core = core_toleration(flavor)
    assert core == quota.Toleration("reclaim", "Exists", "", "NoExecute", seconds=300)
    assert view_toleration(core) == kube.Toleration(
        key="reclaim", operator="Exists", effect="NoExecute", toleration_seconds=300
    )


def test_a_workload_pod_sets_toleration_is_recorded_as_the_core_reads_it_back() -> None:
    core = quota.Toleration("gpu", "Exists", "", "NoSchedule")
    recorded = workload_toleration(core)
    assert recorded.model_dump(by_alias=True, exclude_none=True) == {
        "key": "gpu",
        "operator": "Exists",
        "value": "",
        "effect": "NoSchedule",
    }
    assert core_toleration(recorded) == core
