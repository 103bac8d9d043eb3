"""The stand-in provisioner's decisions, pure: nodes, pods and requests in, decisions out.

hack/provisioner.py reads the cluster, turns its objects into these dataclasses, asks these
functions what to do and writes the answers back. Nothing here talks to the API server, so the
rules (does a pod fit a node, how many nodes a group must add, which group, what stays booked,
which node goes) are unit-tested without one.

Quantities are integers of milli-units (controller.api.quantity); a pod also takes 1000 of the
`pods` resource, so a node's pod limit counts like any other resource.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Resources = Mapping[str, int]
ONE_POD = 1000  # milli-units of the `pods` resource one pod takes


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""  # empty with operator Exists: tolerates every taint
    operator: str = "Equal"
    value: str = ""
    effect: str = ""  # empty: every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True)
class Requirement:
    """One matchExpression of a required node-affinity term."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist (Gt and Lt are not modelled: never match)
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        return False


@dataclass(frozen=True)
class PodShape:
    """What one pod asks of a node."""

    requests: Resources
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Required node affinity: the node must match every requirement of at least one term.
    affinity_terms: tuple[tuple[Requirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    pod_set: str = ""  # the PodTemplate it came from, for messages

    def suits(self, labels: Mapping[str, str], taints: Iterable[Taint]) -> bool:
        """Whether a node with these labels and taints may run the pod (resources aside)."""
        if any(labels.get(k) != v for k, v in self.node_selector.items()):
            return False
        if self.affinity_terms and not any(
            all(r.matches(labels) for r in term) for term in self.affinity_terms
        ):
            return False
        return all(
            any(t.tolerates(taint) for t in self.tolerations)
            for taint in taints
            if taint.effect in ("NoSchedule", "NoExecute")
        )

    def demand(self) -> dict[str, int]:
        return {**self.requests, "pods": self.requests.get("pods", 0) + ONE_POD}


@dataclass
class Room:
    """A node's free capacity, taken from as pods are placed on it."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    free: dict[str, int]

    def takes(self, pod: PodShape) -> bool:
        if not pod.suits(self.labels, self.taints):
            return False
        return all(self.free.get(k, 0) >= v for k, v in pod.demand().items() if v > 0)

    def place(self, pod: PodShape) -> None:
        for key, value in pod.demand().items():
            self.free[key] = self.free.get(key, 0) - value


@dataclass(frozen=True)
class NodeGroup:
    """A node group as the kwok provider declares it: a Node template and its size bounds."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Resources
    min_count: int = 0
    max_count: int = 200

    def empty_node(self, name: str) -> Room:
        return Room(name, self.labels, self.taints, dict(self.allocatable))


def sized(pods: Iterable[PodShape]) -> list[PodShape]:
    """Largest first (by their biggest request, then the sum), as first-fit-decreasing packs."""
    return sorted(
        pods,
        key=lambda p: (max(p.requests.values(), default=0), sum(p.requests.values())),
        reverse=True,
    )


def place_all(pods: Sequence[PodShape], rooms: Sequence[Room]) -> list[PodShape]:
    """Place pods first-fit onto `rooms` (changing them); the pods that found no room."""
    left = []
    for pod in pods:
        room = next((r for r in rooms if r.takes(pod)), None)
        if room is None:
            left.append(pod)
        else:
            room.place(pod)
    return left


def nodes_needed(pods: Sequence[PodShape], group: NodeGroup) -> int | None:
    """How many new nodes of the group's template hold all the pods (first-fit decreasing);
    None when one of them does not fit even an empty node of it."""
    new: list[Room] = []
    for pod in sized(pods):
        if place_all([pod], new):
            node = group.empty_node(f"new-{len(new)}")
            if not node.takes(pod):
                return None
            node.place(pod)
            new.append(node)
    return len(new)


@dataclass(frozen=True)
class ScaleUp:
    group: str
    count: int


@dataclass(frozen=True)
class NoScaleUp:
    reason: str
    message: str


def choose_scale_up(
    pods: Sequence[PodShape], groups: Sequence[NodeGroup], sizes: Mapping[str, int]
) -> ScaleUp | NoScaleUp:
    """The group to grow for `pods`, all on new nodes of one template: among the groups whose
    template suits every pod and that may still add the nodes needed, the one needing fewest
    nodes (then the first by name). `sizes` is each group's current node count."""
    if not pods:
        return ScaleUp("", 0)
    needs = {g.name: nodes_needed(pods, g) for g in groups}
    suitable = sorted((n, name) for name, n in needs.items() if n is not None)
    if not suitable:
        return NoScaleUp(
            "NoSuitableNodeGroup",
            f"no node group's template fits the pods (groups: {', '.join(sorted(needs))})"
            if needs
            else "no node groups are declared",
        )
    by_name = {g.name: g for g in groups}
    for count, name in suitable:
        if sizes.get(name, 0) + count <= by_name[name].max_count:
            return ScaleUp(name, count)
    count, name = suitable[0]
    return NoScaleUp(
        "NodeGroupMaxSizeReached",
        f"node group {name} would need {count} new node(s), but its max-count is "
        f"{by_name[name].max_count} and it has {sizes.get(name, 0)} node(s)",
    )


def describe(pod: PodShape) -> str:
    asks = ", ".join(f"{k}={_show(v)}" for k, v in sorted(pod.requests.items()))
    return f"a pod of {pod.pod_set or 'the request'} ({asks or 'no requests'})"


def _show(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def missing_message(pods: Sequence[PodShape], left: Sequence[PodShape]) -> str:
    """What a check-capacity answer says when some pods found no room."""
    return (
        f"{len(pods) - len(left)} of {len(pods)} pod(s) fit on the Ready nodes' free capacity; "
        f"no room for {len(left)} more, e.g. {describe(left[0])}"
    )


# ---- booking ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Booking:
    """The capacity a Provisioned request holds for its pods that have not arrived."""

    request: str  # namespace/name
    pods: tuple[PodShape, ...]
    nodes: tuple[str, ...] = ()  # nodes made for it: its pods are booked there first


def booking_holds(provisioned_at: dt.datetime, now: dt.datetime, booking: dt.timedelta) -> bool:
    return now - provisioned_at < booking


def not_arrived(pods: Sequence[PodShape], arrived: int) -> tuple[PodShape, ...]:
    """The pods of a request still to come once `arrived` of its consumers are bound."""
    return tuple(pods[max(arrived, 0) :])


def book(rooms: Sequence[Room], bookings: Iterable[Booking]) -> set[str]:
    """Take each booking's pods out of `rooms` (its own nodes first, then any); the nodes that
    hold booked pods, which must stay."""
    by_name = {r.name: r for r in rooms}
    held: set[str] = set()
    for booking in bookings:
        own = [by_name[n] for n in booking.nodes if n in by_name]
        rest = [r for r in rooms if r.name not in booking.nodes]
        for pod in sized(booking.pods):
            room = next((r for r in [*own, *rest] if r.takes(pod)), None)
            if room is not None:
                room.place(pod)
                held.add(room.name)
    return held


# ---- scale down -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupNode:
    name: str
    group: str
    busy: bool  # runs a pod that is not terminated (DaemonSet and mirror pods aside)


def scale_down(
    nodes: Sequence[GroupNode],
    empty_since: Mapping[str, dt.datetime],
    now: dt.datetime,
    unneeded: dt.timedelta,
    held: set[str],
    groups: Sequence[NodeGroup],
) -> list[str]:
    """The group nodes to delete: empty for at least `unneeded`, holding no booked pod, and
    only as many per group as keep it at or above its min-count. A group missing from the
    templates keeps its nodes (its bounds are unknown)."""
    size: dict[str, int] = {}
    for node in nodes:
        size[node.group] = size.get(node.group, 0) + 1
    minimum = {g.name: g.min_count for g in groups}
    chosen = []
    for node in sorted(nodes, key=lambda n: n.name):
        since = empty_since.get(node.name)
        if node.busy or node.name in held or since is None or now - since < unneeded:
            continue
        if node.group not in minimum or size[node.group] <= minimum[node.group]:
            continue
        size[node.group] -= 1
        chosen.append(node.name)
    return chosen
