"""The stand-in provisioner's fit rules: which nodes a pod may use, how many new nodes of a
group a request needs, and which group grows (hack/provisioning.py)."""

from __future__ import annotations

from hack.provisioning import (
    NodeGroup,
    NoScaleUp,
    PodShape,
    Requirement,
    Room,
    ScaleUp,
    Taint,
    Toleration,
    choose_scale_up,
    missing_message,
    nodes_needed,
    place_all,
    sized,
)

GPU = "nvidia.com/gpu"


def gpu_pod(
    gpus: int,
    *,
    node_selector: dict[str, str] | None = None,
    affinity_terms: tuple[tuple[Requirement, ...], ...] = (),
    tolerations: tuple[Toleration, ...] = (),
) -> PodShape:
    requests = {GPU: gpus * 1000, "cpu": 1000}
    return PodShape(requests, node_selector or {}, affinity_terms, tolerations, "trainer")


def group(
    name: str = "gpu", *, gpus: int = 8, max_count: int = 4, taints: tuple[Taint, ...] = ()
) -> NodeGroup:
    allocatable = {GPU: gpus * 1000, "cpu": 64_000, "pods": 110_000}
    return NodeGroup(name, {"kwok-nodegroup": name}, taints, allocatable, max_count=max_count)


def test_a_pod_asking_for_a_label_the_node_lacks_does_not_suit_it() -> None:
    pod = gpu_pod(1, node_selector={"zone": "a"})
    assert pod.suits({"zone": "a"}, ())
    assert not pod.suits({"zone": "b"}, ())
    assert not pod.suits({}, ())


def test_required_node_affinity_needs_one_term_matched_in_full() -> None:
    terms = (
        (Requirement("zone", "In", ("a", "b")), Requirement("spot", "DoesNotExist")),
        (Requirement("pool", "Exists"),),
    )
    pod = gpu_pod(1, affinity_terms=terms)
    assert pod.suits({"zone": "b"}, ())
    assert not pod.suits({"zone": "b", "spot": "true"}, ())
    assert pod.suits({"pool": "x", "spot": "true"}, ())
    assert not pod.suits({"zone": "c"}, ())
    assert gpu_pod(1, affinity_terms=((Requirement("zone", "NotIn", ("a",)),),)).suits({}, ())


def test_a_node_tainted_no_schedule_takes_only_pods_that_tolerate_it() -> None:
    taint = Taint("kwok-provider", "true", "NoSchedule")
    assert not gpu_pod(1).suits({}, (taint,))
    assert gpu_pod(1, tolerations=(Toleration("kwok-provider", "Equal", "true"),)).suits(
        {}, (taint,)
    )
    assert gpu_pod(1, tolerations=(Toleration("kwok-provider", "Exists"),)).suits({}, (taint,))
    assert gpu_pod(1, tolerations=(Toleration(operator="Exists"),)).suits({}, (taint,))
    assert not gpu_pod(1, tolerations=(Toleration("kwok-provider", "Equal", "no"),)).suits(
        {}, (taint,)
    )
    # A soft taint does not keep pods off.
    assert gpu_pod(1).suits({}, (Taint("busy", "", "PreferNoSchedule"),))


def test_pods_fill_free_room_and_the_ones_left_over_are_named() -> None:
    rooms = [Room("n1", {}, (), {GPU: 8000, "cpu": 64_000, "pods": 110_000})]
    pods = [gpu_pod(4), gpu_pod(4), gpu_pod(4)]
    left = place_all(pods, rooms)
    assert len(left) == 1
    assert rooms[0].free[GPU] == 0
    assert rooms[0].free["pods"] == 108_000
    assert missing_message(pods, left) == (
        "2 of 3 pod(s) fit on the Ready nodes' free capacity; no room for 1 more, "
        "e.g. a pod of trainer (cpu=1, nvidia.com/gpu=4)"
    )


def test_a_node_full_of_pods_by_count_takes_no_more_even_with_free_gpus() -> None:
    room = Room("n1", {}, (), {GPU: 8000, "cpu": 64_000, "pods": 1000})
    assert place_all([gpu_pod(1), gpu_pod(1)], [room]) == [gpu_pod(1)]


def test_two_pods_of_eight_gpus_need_two_nodes_of_eight_gpus() -> None:
    assert nodes_needed([gpu_pod(8), gpu_pod(8)], group()) == 2


def test_small_pods_are_packed_largest_first_onto_as_few_new_nodes_as_fit() -> None:
    pods = [gpu_pod(2), gpu_pod(6), gpu_pod(2), gpu_pod(6)]
    assert [p.requests[GPU] for p in sized(pods)] == [6000, 6000, 2000, 2000]
    assert nodes_needed(pods, group()) == 2


def test_a_pod_bigger_than_the_template_needs_no_number_of_its_nodes() -> None:
    assert nodes_needed([gpu_pod(16)], group()) is None


def test_a_pod_that_does_not_tolerate_the_template_taint_cannot_use_the_group() -> None:
    tainted = group(taints=(Taint("dedicated", "ml"),))
    assert nodes_needed([gpu_pod(8)], tainted) is None


def test_the_group_needing_fewest_nodes_within_its_max_grows() -> None:
    small, big = group("small", gpus=4), group("big", gpus=8)
    assert choose_scale_up([gpu_pod(4), gpu_pod(4)], [small, big], {}) == ScaleUp("big", 1)


def test_a_group_at_its_max_is_passed_over_for_one_with_room() -> None:
    small, big = group("small", gpus=4, max_count=4), group("big", gpus=8, max_count=1)
    choice = choose_scale_up([gpu_pod(4), gpu_pod(4)], [small, big], {"big": 1})
    assert choice == ScaleUp("small", 2)


def test_five_pods_of_eight_gpus_fail_on_a_group_of_at_most_four_naming_its_max() -> None:
    choice = choose_scale_up([gpu_pod(8)] * 5, [group(max_count=4)], {"gpu": 0})
    assert isinstance(choice, NoScaleUp)
    assert choice.reason == "NodeGroupMaxSizeReached"
    assert choice.message == (
        "node group gpu would need 5 new node(s), but its max-count is 4 and it has 0 node(s)"
    )


def test_the_current_size_counts_against_the_max() -> None:
    choice = choose_scale_up([gpu_pod(8)] * 3, [group(max_count=4)], {"gpu": 2})
    assert isinstance(choice, NoScaleUp)
    assert "would need 3 new node(s)" in choice.message
    assert "it has 2 node(s)" in choice.message


def test_pods_no_group_suits_fail_naming_the_groups() -> None:
    choice = choose_scale_up([gpu_pod(1, node_selector={"zone": "x"})], [group()], {})
    assert choice == NoScaleUp(
        "NoSuitableNodeGroup", "no node group's template fits the pods (groups: gpu)"
    )
    assert choose_scale_up([gpu_pod(1)], [], {}) == NoScaleUp(
        "NoSuitableNodeGroup", "no node groups are declared"
    )


def test_nothing_left_to_place_needs_no_new_node() -> None:
    assert choose_scale_up([], [group()], {}) == ScaleUp("", 0)
