"""Devices claimed through DRA count against quota, and on nodes only as the devices of their
DeviceClass (node resource `devices.kohort.dev/<class>`, from the ResourceSlices), never as the
quota resource they are charged as; a class nodes do not carry is not looked for."""

from __future__ import annotations

from controller.quota import PendingCause, decide
from controller.quota.snapshot import Gang, Node, PodSet
from tests.unit.test_quota_builders import GPU, G, admitted_names, queue, world

DEVICES = "devices.kohort.dev/gpu.example.com"


def cpu_node(name: str, cpus: int = 16) -> Node:
    """A node with CPUs and no nvidia.com/gpu in its allocatable (its GPUs are DRA devices of a
    class the placement check does not evaluate)."""
    return Node(name, {"cpu": cpus * G})


def dra_node(name: str, devices: int, used: int = 0) -> Node:
    """A node with 16 CPUs and `devices` GPUs of the evaluated class, `used` of them taken."""
    return Node(name, {"cpu": 16 * G, DEVICES: devices * G}, used={DEVICES: used * G})


def claiming(name: str, pods: int, gpus: int) -> Gang:
    """A gang whose `pods` pods each claim `gpus` GPUs through a template, and ask 1 CPU."""
    pod_set = PodSet(
        pods,
        {"cpu": G, GPU: gpus * G},
        devices={GPU: gpus * G},
        claimed={DEVICES: gpus * G},
        claim_templates=("t",),
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


def test_a_gang_of_4_pods_claiming_2_gpus_each_is_placed_where_8_devices_are_free() -> None:
    nodes = [dra_node("n1", 4), dra_node("n2", 4)]
    d = decide(world([queue("a", 8)], nodes, [claiming("dra", 4, 2)]), 0)
    [admission] = d.admissions
    assert sorted((p.node, p.count) for p in admission.placement) == [("n1", 2), ("n2", 2)]


def test_with_devices_taken_by_others_a_gang_the_quota_allows_waits_for_free_devices() -> None:
    nodes = [dra_node("n1", 4, used=2), dra_node("n2", 4)]
    d = decide(world([queue("a", 16)], nodes, [claiming("dra", 4, 2)]), 0)
    assert admitted_names(d) == []
    why = d.pending["dra"]
    assert why.cause is PendingCause.NO_NODE_FITS
    assert DEVICES in why.describe()


def test_a_gang_claiming_more_devices_than_any_node_has_is_told_it_never_fits() -> None:
    nodes = [dra_node("n1", 4), dra_node("n2", 0)]
    d = decide(world([queue("a", 16)], nodes, [claiming("big", 1, 8)]), 0)
    why = d.pending["big"]
    assert why.cause is PendingCause.NEVER_FITS
    assert DEVICES in why.describe()
