"""Devices claimed through DRA count against quota but are not looked for in nodes' allocatable:
a node's devices live in its ResourceSlices, which the placement check does not read."""

from __future__ import annotations

from controller.quota import PendingCause, decide
from controller.quota.snapshot import Gang, Node, PodSet
from tests.unit.test_quota_builders import GPU, G, admitted_names, queue, world


def cpu_node(name: str, cpus: int = 16) -> Node:
    """A node with CPUs and no nvidia.com/gpu in its allocatable (its GPUs are DRA devices)."""
    return Node(name, {"cpu": cpus * G})


def claiming(name: str, pods: int, gpus: int) -> Gang:
    """A gang whose `pods` pods each claim `gpus` GPUs through a template, and ask 1 CPU."""
    pod_set = PodSet(
        pods, {"cpu": G, GPU: gpus * G}, devices={GPU: gpus * G}, claim_templates=("t",)
    )
    return Gang(name, "a", (pod_set,))


def test_a_gang_of_4_pods_claiming_2_gpus_each_is_admitted_on_nodes_without_gpu_capacity() -> None:
    d = decide(world([queue("a", 8)], [cpu_node("n1"), cpu_node("n2")], [claiming("dra", 4, 2)]), 0)
    assert admitted_names(d) == ["dra"]


def test_claimed_gpus_still_count_against_the_queues_quota() -> None:
    d = decide(world([queue("a", 7)], [cpu_node("n1"), cpu_node("n2")], [claiming("dra", 4, 2)]), 0)
    assert admitted_names(d) == []
    why = d.pending["dra"]
    assert why.cause is PendingCause.NEVER_FITS
    assert "needs 8 nvidia.com/gpu, more than ClusterQueue a can ever hold (7" in why.describe()


def test_the_rest_of_a_claiming_pods_requests_must_still_fit_on_a_node() -> None:
    d = decide(world([queue("a", 8)], [cpu_node("n1", cpus=2)], [claiming("dra", 4, 2)]), 0)
    assert admitted_names(d) == []
    why = d.pending["dra"]
    assert why.cause is PendingCause.NEVER_FITS
    assert why.describe() == (
        "Inadmissible: needs 4 pods x 1 cpu; all nodes that may host them together hold only 2"
    )
