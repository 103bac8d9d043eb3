"""What a Provisioned request keeps booked, and which empty group nodes the stand-in
provisioner removes (hack/provisioning.py)."""

from __future__ import annotations

import datetime as dt

from hack.provisioning import (
    Booking,
    GroupNode,
    NodeGroup,
    PodShape,
    Room,
    book,
    booking_holds,
    not_arrived,
    place_all,
    scale_down,
)

GPU = "nvidia.com/gpu"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TEN_MINUTES = dt.timedelta(minutes=10)
EIGHT_GPUS = PodShape({GPU: 8000})


def gpu_room(name: str, gpus: int = 8) -> Room:
    return Room(name, {}, (), {GPU: gpus * 1000, "pods": 110_000})


def gpu_group(min_count: int = 0) -> NodeGroup:
    return NodeGroup("gpu", {}, (), {GPU: 8000}, min_count=min_count, max_count=4)


def test_a_booking_holds_for_its_time_and_then_expires() -> None:
    assert booking_holds(T0, T0 + dt.timedelta(minutes=9, seconds=59), TEN_MINUTES)
    assert not booking_holds(T0, T0 + TEN_MINUTES, TEN_MINUTES)


def test_a_booking_holds_only_the_pods_that_have_not_arrived() -> None:
    pods = [EIGHT_GPUS, EIGHT_GPUS, EIGHT_GPUS]
    assert not_arrived(pods, 0) == tuple(pods)
    assert not_arrived(pods, 2) == (EIGHT_GPUS,)
    assert not_arrived(pods, 3) == ()


def test_capacity_booked_by_one_request_is_not_offered_to_the_next() -> None:
    rooms = [gpu_room("a"), gpu_room("b")]
    held = book(rooms, [Booking("ns/first", (EIGHT_GPUS,))])
    assert held == {"a"}
    assert place_all([EIGHT_GPUS, EIGHT_GPUS], rooms) == [EIGHT_GPUS]


def test_a_request_books_the_nodes_made_for_it_before_any_other_room() -> None:
    rooms = [gpu_room("old"), gpu_room("made-for-it")]
    held = book(rooms, [Booking("ns/r", (EIGHT_GPUS,), nodes=("made-for-it",))])
    assert held == {"made-for-it"}
    assert rooms[0].free[GPU] == 8000


def test_an_empty_group_node_goes_once_it_has_been_unneeded_long_enough() -> None:
    nodes = [GroupNode("gpu-aaaaa", "gpu", busy=False)]
    since = {"gpu-aaaaa": T0}
    wait = dt.timedelta(seconds=5)
    assert scale_down(nodes, since, T0 + dt.timedelta(seconds=4), wait, set(), [gpu_group()]) == []
    assert scale_down(nodes, since, T0 + wait, wait, set(), [gpu_group()]) == ["gpu-aaaaa"]


def test_a_node_running_a_pod_is_kept() -> None:
    nodes = [GroupNode("gpu-aaaaa", "gpu", busy=True)]
    later = T0 + dt.timedelta(hours=1)
    assert scale_down(nodes, {"gpu-aaaaa": T0}, later, TEN_MINUTES, set(), [gpu_group()]) == []


def test_a_node_booked_for_pods_still_to_come_is_kept() -> None:
    nodes = [GroupNode("gpu-aaaaa", "gpu", busy=False)]
    later = T0 + dt.timedelta(hours=1)
    held = {"gpu-aaaaa"}
    assert scale_down(nodes, {"gpu-aaaaa": T0}, later, TEN_MINUTES, held, [gpu_group()]) == []


def test_a_group_never_shrinks_below_its_min_count() -> None:
    nodes = [GroupNode(f"gpu-{c * 5}", "gpu", busy=False) for c in "abc"]
    since = {n.name: T0 for n in nodes}
    later = T0 + dt.timedelta(hours=1)
    removed = scale_down(nodes, since, later, TEN_MINUTES, set(), [gpu_group(min_count=2)])
    assert removed == ["gpu-aaaaa"]


def test_nodes_of_a_group_no_longer_declared_are_kept() -> None:
    nodes = [GroupNode("old-aaaaa", "old", busy=False)]
    later = T0 + dt.timedelta(hours=1)
    assert scale_down(nodes, {"old-aaaaa": T0}, later, TEN_MINUTES, set(), [gpu_group()]) == []
