"""Which flavor each pod set of a gang gets: the options, in the order the queue prefers them.

Rule: pure functions of a gang, its queue's resource groups and the flavors; the engine judges
the options (quota, placement, preemption) under the queue's fungibility.

A pod set takes one flavor per resource group it asks resources of. The flavors a pod set may
take are those its own node selector and tolerations allow (a flavor whose labels contradict
the pod set's selector, or whose taints the pod set does not tolerate even with the flavor's
tolerations, is skipped). A whole-gang option picks one flavor per (pod set, group), never two
whose node labels contradict for one pod set. Options go in the groups' flavor order, the first
pod set's choice varying slowest, at most MAX_OPTIONS of them (every "all on the k-th flavor"
option always among them). A resource no group covers is charged to the default flavor, so
only a cohort that shares it can give it. `pods` is asked by every pod (one each) when a group
of the queue covers it, and not at all otherwise (as in Kueue): a queue that names no `pods`
quota admits gangs of any size.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from controller.quota.placement import NodeIndex, PodShape, tolerated
from controller.quota.snapshot import (
    DEFAULT_FLAVOR,
    FR,
    PODS,
    PROVISIONABLE_TOLERATION,
    FlavorSpec,
    Gang,
    PodSet,
    ResourceGroup,
)

# At most this many whole-gang options are judged per gang (groups x pod sets x flavors).
MAX_OPTIONS = 32

Shapes = list[tuple[int, PodShape, int]]


@dataclass(slots=True)
class FlavorOption:
    """One way to give flavors to a gang: per pod set, resource -> flavor; what it charges;
    and the pod shapes with the flavors' node labels and tolerations added."""

    flavors: tuple[Mapping[str, str], ...]
    charge: dict[FR, int]
    shapes: Shapes = field(default_factory=list)

    def by_pod_set(self, gang: Gang) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for pod_set, chosen in zip(gang.pod_sets, self.flavors, strict=True):
            named = {r: f for r, f in chosen.items() if f != DEFAULT_FLAVOR}
            if named:
                out[pod_set.name] = named
        return out


def counts_pods(groups: Sequence[ResourceGroup]) -> bool:
    """Whether a queue of these groups counts pods (one group covers `pods`)."""
    return any(PODS in group.resources for group in groups)


def charged_requests(pod_set: PodSet, pods: bool) -> Mapping[str, int]:
    """What one pod of the set is charged: its requests, and one pod when `pods` is counted."""
    if not pods:
        return pod_set.requests
    return {**pod_set.requests, PODS: 1000}


def _compatible(pod_set: PodSet, flavor: FlavorSpec | None) -> bool:
    if flavor is None:
        return True
    for key, value in flavor.node_labels.items():
        wanted = pod_set.node_selector.get(key)
        if wanted is not None and wanted != value:
            return False
    return tolerated(flavor.node_taints, (*pod_set.tolerations, *flavor.tolerations))


def _choices(allowed: Sequence[Sequence[str]]) -> list[tuple[str, ...]]:
    """At most MAX_OPTIONS combinations, one flavor per slot, in preference order (the first
    slot's choice varying slowest). Whatever the cap leaves out, the uniform ones stay: every
    slot on its k-th flavor, for every k (so "all on the last flavor" is always judged)."""
    if not allowed:
        return [()]
    uniform = {
        tuple(names[min(k, len(names) - 1)] for names in allowed)
        for k in range(max(len(names) for names in allowed))
    }
    room = max(0, MAX_OPTIONS - len(uniform))
    picked = uniform | set(itertools.islice(itertools.product(*allowed), room))
    rank = [{name: r for r, name in enumerate(names)} for names in allowed]
    return sorted(picked, key=lambda c: tuple(rank[i][f] for i, f in enumerate(c)))


def _contradict(chosen: Sequence[FlavorSpec | None]) -> bool:
    """Whether flavors chosen together for one pod set ask a node label for two values."""
    wanted: dict[str, str] = {}
    for flavor in chosen:
        for key, value in (flavor.node_labels if flavor else {}).items():
            if wanted.setdefault(key, value) != value:
                return True
    return False


def _unknown(flavor: str, flavors: Mapping[str, FlavorSpec]) -> bool:
    return flavor != DEFAULT_FLAVOR and flavor not in flavors


def missing(groups: Sequence[ResourceGroup], flavors: Mapping[str, FlavorSpec]) -> list[str]:
    """The flavors the groups name that have no FlavorSpec, in order."""
    return [f.flavor for g in groups for f in g.flavors if _unknown(f.flavor, flavors)]


def flavored(pod_set: PodSet, flavors: Sequence[FlavorSpec | None]) -> PodSet:
    """The pod set as its pods will be released: flavors' labels and tolerations added."""
    selector = dict(pod_set.node_selector)
    tolerations = list(pod_set.tolerations)
    for flavor in flavors:
        if flavor is None:
            continue
        selector.update(flavor.node_labels)
        tolerations.extend(t for t in flavor.tolerations if t not in tolerations)
    if selector == dict(pod_set.node_selector) and len(tolerations) == len(pod_set.tolerations):
        return pod_set
    return replace(pod_set, node_selector=selector, tolerations=tuple(tolerations))


def flavored_shape(
    index: NodeIndex,
    pod_set: PodSet,
    specs: Sequence[FlavorSpec | None],
    to_be_made: bool = False,
) -> PodShape:
    """A pod of `pod_set` on the flavors of `specs`, in the levels of their topology;
    `to_be_made`: it may go to nodes a pool has still to add."""
    levels = next((s.topology for s in specs if s is not None and s.topology), ())
    released = flavored(pod_set, specs)
    if to_be_made:
        released = replace(released, tolerations=(*released.tolerations, PROVISIONABLE_TOLERATION))
    return index.shape(released, levels)


def options(
    gang: Gang,
    groups: Sequence[ResourceGroup],
    flavors: Mapping[str, FlavorSpec],
    index: NodeIndex,
    *,
    known_only: bool = False,
    provisioned: frozenset[str] = frozenset(),
) -> list[FlavorOption]:
    """The gang's flavor options in preference order (empty: some pod set can take no flavor
    of a group it needs). `known_only`: a named flavor with no FlavorSpec is never taken (its
    nodes are unknown). `provisioned`: flavors whose nodes still to be made the gang may go
    to."""
    # Per (pod set, group): the flavors it may take, in the group's order.
    slots: list[tuple[int, ResourceGroup, list[str]]] = []
    pods = counts_pods(groups)
    requests = [charged_requests(pod_set, pods) for pod_set in gang.pod_sets]
    for i, pod_set in enumerate(gang.pod_sets):
        asked = {r for r, v in requests[i].items() if v > 0}
        for group in groups:
            if not asked & set(group.resources):
                continue
            allowed = [
                f.flavor
                for f in group.flavors
                if _compatible(pod_set, flavors.get(f.flavor))
                and not (known_only and _unknown(f.flavor, flavors))
            ]
            if not allowed:
                return []
            slots.append((i, group, allowed))
    out: list[FlavorOption] = []
    shape_cache: dict[tuple[int, tuple[str, ...]], PodShape] = {}
    for choice in _choices([allowed for _, _, allowed in slots]):
        per_set: list[dict[str, str]] = [{} for _ in gang.pod_sets]
        chosen_flavors: list[list[str]] = [[] for _ in gang.pod_sets]
        for (i, group, _), flavor in zip(slots, choice, strict=True):
            chosen_flavors[i].append(flavor)
            for resource in group.resources:
                if requests[i].get(resource, 0) > 0:
                    per_set[i][resource] = flavor
        if any(_contradict([flavors.get(f) for f in names]) for names in chosen_flavors):
            continue
        charge: dict[FR, int] = {}
        shapes: Shapes = []
        for i, pod_set in enumerate(gang.pod_sets):
            for resource, amount in requests[i].items():
                if amount <= 0:
                    continue
                fr = (per_set[i].get(resource, DEFAULT_FLAVOR), resource)
                charge[fr] = charge.get(fr, 0) + amount * pod_set.count
            key = (i, tuple(chosen_flavors[i]))
            shape = shape_cache.get(key)
            if shape is None:
                specs = [flavors.get(name) for name in chosen_flavors[i]]
                to_be_made = gang.provision and bool(provisioned.intersection(chosen_flavors[i]))
                shape = shape_cache[key] = flavored_shape(index, pod_set, specs, to_be_made)
            shapes.append((i, shape, pod_set.count))
        out.append(FlavorOption(tuple(per_set), charge, shapes))
    return out


def recorded(
    gang: Gang,
    groups: Sequence[ResourceGroup],
    given: Mapping[str, Mapping[str, str]],
) -> dict[FR, int]:
    """What an admitted gang charges, from the flavors recorded at its admission; a resource
    with no record is charged to the first flavor of the group covering it."""
    first: dict[str, str] = {}
    for group in groups:
        for resource in group.resources:
            if group.flavors:
                first.setdefault(resource, group.flavors[0].flavor)
    charge: dict[FR, int] = {}
    pods = counts_pods(groups)
    for pod_set in gang.pod_sets:
        mine = given.get(pod_set.name, {})
        for resource, amount in charged_requests(pod_set, pods).items():
            if amount <= 0:
                continue
            flavor = mine.get(resource) or first.get(resource, DEFAULT_FLAVOR)
            fr = (flavor, resource)
            charge[fr] = charge.get(fr, 0) + amount * pod_set.count
    return charge


def recorded_flavors(
    gang: Gang, groups: Sequence[ResourceGroup], given: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """The flavors an admitted gang holds, per pod set and resource (see `recorded`)."""
    out: dict[str, dict[str, str]] = {}
    covered = {r: g for g in groups for r in g.resources}
    pods = counts_pods(groups)
    for pod_set in gang.pod_sets:
        mine = given.get(pod_set.name, {})
        chosen: dict[str, str] = {}
        for resource, amount in charged_requests(pod_set, pods).items():
            group = covered.get(resource)
            if amount <= 0 or group is None or not group.flavors:
                continue
            chosen[resource] = mine.get(resource) or group.flavors[0].flavor
        if chosen:
            out[pod_set.name] = chosen
    return out
