"""Choosing victims: which admitted gangs to evict so that a pending gang fits.

Rule: a strategy evicts nothing itself. It removes candidates on a Trial, asks whether the
preemptor fits, and hands back the whole set it needs, or None; either way it leaves the Trial
as it found it. The engine evicts only a returned set, in the same decision that admits the
preemptor (no speculative evictions).

Strategies:
- `placement_aware` (kohort): frees the nodes the preemptor will land on. While the preemptor
  cannot be placed, it picks the node that is cheapest to clear for its next pod (lost work of
  the gangs to evict there, then their number); while quota is short, the cheapest gang that
  holds the missing resource. Then it drops every victim, most expensive first, that is not
  needed. Victim queues never fall below their nominal quota, and the set is refused if it
  would throw away more work than the trial's budget. Gangs admitted moments ago or evicted
  recently (`Candidate.recent`) are taken only when no other set will do.
- `naive` (baseline of issue 7): most recently admitted first, from borrowing queues, until the
  preemptor fits; no add-back, no placement awareness.
- `classic` (Kueue-like): other queues before the own one, lower priority, most recently admitted;
  remove until it fits, then add back in reverse while it still fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from controller.quota.constrained import fit_count
from controller.quota.placement import PodShape, Vector
from controller.quota.snapshot import FR
from controller.quota.state import GangInfo, RunningGang


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why the preemptor does not fit right now: quota (which flavors and resources) or
    placement."""

    quota: tuple[FR, ...] = ()
    shape: PodShape | None = None
    # What the preemptor's pods placed before `shape` failed take, by node (see PlaceFailure).
    held: tuple[tuple[int, Vector], ...] = ()


@dataclass(frozen=True, slots=True)
class Candidate:
    victim: RunningGang
    queue: str
    other_queue: bool
    # Work lost if evicted: runtime times the gang's dominant share of the cluster.
    lost_work: float
    nodes: tuple[int, ...]
    # Taken by fair-sharing preemption (the preemptor's queue borrows), not by reclaim.
    fair: bool = False
    # Admitted moments ago, or evicted recently: a victim only when no other will do.
    recent: bool = False


class Trial(Protocol):
    # The most lost work a placement-aware victim set may cost (math.inf: no limit).
    budget: float

    def remove(self, victim: RunningGang) -> None: ...
    def restore(self, victim: RunningGang) -> None: ...
    def shortfall(self, info: GangInfo) -> Shortfall | None: ...
    def quota_fits(self, info: GangInfo) -> bool: ...
    def may_take(self, candidate: Candidate) -> bool: ...
    def freed_on(self, victim: RunningGang, node: int) -> tuple[int, ...]: ...
    def free_on(self, node: int) -> tuple[int, ...]: ...
    def may_host(self, shape: PodShape, node: int) -> bool: ...


# How many of the cheapest node-clearing options are checked for also settling the quota.
_QUOTA_LOOKAHEAD = 8

Strategy = Callable[[Trial, GangInfo, Sequence[Candidate]], list[RunningGang] | None]


def cost_key(c: Candidate) -> tuple[bool, float, int, int, float, str]:
    """Cheapest victim first: not admitted moments ago nor evicted recently, least work lost,
    fewest nodes, lowest priority, admitted longest ago, name."""
    v = c.victim
    return (c.recent, c.lost_work, len(c.nodes), v.info.gang.priority, v.admitted_at, v.name)


def _release(trial: Trial, chosen: Sequence[Candidate]) -> None:
    for c in reversed(chosen):
        trial.restore(c.victim)


def _pick_on_node(
    trial: Trial,
    short: Shortfall,
    node: int,
    on_node: Sequence[Candidate],
    allow: Callable[[Candidate], bool],
    budget: float = math.inf,
) -> list[Candidate] | None:
    """The first of `on_node` that `allow` lets go, in order, whose removal lets one more pod
    of the failing shape onto `node` than it takes now beside the preemptor's pods already
    placed there, costing at most `budget` (None if they do not); the trial is left as it was.
    `allow` judges each with those picked before it removed."""
    shape = short.shape
    assert shape is not None
    request = shape.request
    free = list(trial.free_on(node))
    held = dict(short.held)
    if node in held:
        free = [f - h for f, h in zip(free, held[node], strict=True)]
    wanted = fit_count(tuple(free), request) + 1
    picked: list[Candidate] = []
    cost = 0.0
    for c in on_node:
        if fit_count(tuple(free), request) >= wanted:
            break
        if not allow(c):
            continue
        freed = trial.freed_on(c.victim, node)
        free = [f + g for f, g in zip(free, freed, strict=True)]
        trial.remove(c.victim)
        picked.append(c)
        cost += c.lost_work
        if cost > budget:
            break
    _release(trial, picked)
    if cost > budget or not picked or fit_count(tuple(free), request) < wanted:
        return None
    return picked


def _minimise(
    trial: Trial, info: GangInfo, chosen: list[Candidate], order: Sequence[Candidate] | None = None
) -> list[Candidate]:
    """Drop victims the preemptor does not need, in `order` (default: most expensive first)."""
    for c in sorted(chosen, key=cost_key, reverse=True) if order is None else order:
        trial.restore(c.victim)
        if trial.shortfall(info) is None:
            chosen.remove(c)
        else:
            trial.remove(c.victim)
    return chosen


def placement_aware(
    trial: Trial, info: GangInfo, candidates: Sequence[Candidate]
) -> list[RunningGang] | None:
    ordered = sorted(candidates, key=cost_key)
    by_node: dict[int, list[Candidate]] = {}
    for c in ordered:
        for node in c.nodes:
            by_node.setdefault(node, []).append(c)
    chosen: list[Candidate] = []
    taken: set[str] = set()
    for _ in range(len(ordered) + 1):
        short = trial.shortfall(info)
        if short is None:
            chosen = _minimise(trial, info, chosen)
            _release(trial, chosen)
            if sum(c.lost_work for c in chosen) > trial.budget:
                return None
            return [c.victim for c in chosen]
        left = trial.budget - sum(c.lost_work for c in chosen)
        if short.shape is not None:
            step = _clear_one_node(trial, info, short, by_node, taken, left)
        else:
            step = next(
                (
                    [c]
                    for c in ordered
                    if c.victim.name not in taken
                    and c.lost_work <= left
                    and any(c.victim.charge.get(fr, 0) > 0 for fr in short.quota)
                    and trial.may_take(c)
                ),
                None,
            )
        if not step:
            break
        for c in step:
            trial.remove(c.victim)
            chosen.append(c)
            taken.add(c.victim.name)
    _release(trial, chosen)
    return None


def _clear_one_node(
    trial: Trial,
    info: GangInfo,
    short: Shortfall,
    by_node: dict[int, list[Candidate]],
    taken: set[str],
    budget: float,
) -> list[Candidate] | None:
    """The cheapest set of gangs, costing at most `budget`, whose eviction lets one more pod of
    the failing shape onto a node (fewest gangs admitted moments ago or evicted recently, then
    least work lost, then fewest gangs); among the few cheapest, one that also settles the
    quota wins.

    One more than the node takes now beside the preemptor's pods already placed there: a node
    with room for one of its pods may be the one to clear for a second (a gang that must share
    a node, or the only node there is)."""
    shape = short.shape
    assert shape is not None
    options: list[tuple[int, float, int, int, list[Candidate]]] = []

    def allow(c: Candidate) -> bool:
        # Judged with the victims already picked here removed: together, not each alone, they
        # must leave their queues at their nominal quota.
        return c.victim.name not in taken and trial.may_take(c)

    for node, on_node in by_node.items():
        if not trial.may_host(shape, node):
            continue
        picked = _pick_on_node(trial, short, node, on_node, allow, budget)
        if picked is None:
            continue
        cost = sum(c.lost_work for c in picked)
        recent = sum(c.recent for c in picked)
        options.append((recent, cost, len(picked), node, picked))
    options.sort(key=lambda o: o[:4])
    for *_, picked in options[:_QUOTA_LOOKAHEAD]:
        for c in picked:
            trial.remove(c.victim)
        settles = trial.quota_fits(info)
        for c in reversed(picked):
            trial.restore(c.victim)
        if settles:
            return picked
    return options[0][4] if options else None


def _greedy(trial: Trial, info: GangInfo, ordered: Sequence[Candidate]) -> list[Candidate] | None:
    """Remove allowed candidates in order until the preemptor fits; None (all restored) if never."""
    chosen: list[Candidate] = []
    for c in ordered:
        if trial.shortfall(info) is None:
            break
        if not trial.may_take(c):
            continue
        trial.remove(c.victim)
        chosen.append(c)
    if trial.shortfall(info) is not None:
        _release(trial, chosen)
        return None
    return chosen


def naive(
    trial: Trial, info: GangInfo, candidates: Sequence[Candidate]
) -> list[RunningGang] | None:
    ordered = sorted(candidates, key=lambda c: (-c.victim.admitted_at, c.victim.name))
    chosen = _greedy(trial, info, ordered)
    if chosen is None:
        return None
    _release(trial, chosen)
    return [c.victim for c in chosen]


def classic(
    trial: Trial, info: GangInfo, candidates: Sequence[Candidate]
) -> list[RunningGang] | None:
    ordered = sorted(
        candidates,
        key=lambda c: (
            not c.other_queue,
            c.victim.info.gang.priority,
            -c.victim.admitted_at,
            c.victim.name,
        ),
    )
    chosen = _greedy(trial, info, ordered)
    if chosen is None:
        return None
    for c in reversed(list(chosen)):
        trial.restore(c.victim)
        if trial.shortfall(info) is None:
            chosen.remove(c)
        else:
            trial.remove(c.victim)
    _release(trial, chosen)
    return [c.victim for c in chosen]


STRATEGIES: dict[str, Strategy] = {
    "placement-aware": placement_aware,
    "naive": naive,
    "classic": classic,
}


# -- shrinking elastic gangs instead of evicting them --------------------------------------------


@dataclass(frozen=True, slots=True)
class Surplus:
    """The pods an admitted elastic gang runs beyond its minimum, each a Candidate of its own
    (its victim: that one pod, on its node, with its charge), in the order they may go."""

    gang: Candidate
    pods: tuple[Candidate, ...]
    # At most this many of them go (the gang keeps its minimum).
    most: int


def shrink(trial: Trial, info: GangInfo, surplus: Sequence[Surplus]) -> list[Candidate] | None:
    """The surplus pods to remove (their gangs shrunk, never below their minimum) that let the
    preemptor in, or None if removing surplus pods alone does not. A shrink loses no work, so
    it is tried before any eviction. While the preemptor cannot be placed, the pods go from the
    node that needs the fewest of them for its next pod; while quota is short, from the
    cheapest gang that holds the missing resource. Pods not needed are then given back."""
    ordered = sorted(surplus, key=lambda s: cost_key(s.gang))
    left = {id(s): list(s.pods) for s in ordered}
    chosen: list[Candidate] = []
    total = sum(len(s.pods) for s in ordered)
    for _ in range(total + 1):
        short = trial.shortfall(info)
        if short is None:
            # (pods not needed stay, the last taken first)
            chosen = _minimise(trial, info, chosen, list(reversed(chosen)))
            _release(trial, chosen)
            return chosen
        if short.shape is not None:
            step = _free_one_pod(trial, short, ordered, left)
        else:
            step = _quota_pod(trial, short, ordered, left)
        if not step:
            break
        for pod in step:
            trial.remove(pod.victim)
            chosen.append(pod)
        for s in ordered:
            if sum(pod.victim.name == s.gang.victim.name for pod in chosen) >= s.most:
                left[id(s)] = []
    _release(trial, chosen)
    return None


def _quota_pod(
    trial: Trial, short: Shortfall, ordered: Sequence[Surplus], left: dict[int, list[Candidate]]
) -> list[Candidate] | None:
    for s in ordered:
        pods = left[id(s)]
        for pod in pods:
            if any(pod.victim.charge.get(fr, 0) > 0 for fr in short.quota) and trial.may_take(pod):
                pods.remove(pod)
                return [pod]
    return None


def _free_one_pod(
    trial: Trial, short: Shortfall, ordered: Sequence[Surplus], left: dict[int, list[Candidate]]
) -> list[Candidate] | None:
    """The fewest surplus pods on one node whose removal lets one more pod of the failing
    shape onto it (beside the preemptor's pods already placed there); the pods are taken out
    of `left`."""
    shape = short.shape
    assert shape is not None
    by_node: dict[int, list[Candidate]] = {}
    room: dict[str, int] = {}
    for s in ordered:
        for pod in left[id(s)]:
            by_node.setdefault(pod.nodes[0], []).append(pod)
        taken = len(s.pods) - len(left[id(s)])
        room[s.gang.victim.name] = s.most - taken
    best: list[Candidate] | None = None
    for node, pods in sorted(by_node.items()):
        if not trial.may_host(shape, node):
            continue
        mine = dict(room)

        def allow(pod: Candidate, mine: dict[str, int] = mine) -> bool:
            if mine[pod.victim.name] <= 0 or not trial.may_take(pod):
                return False
            mine[pod.victim.name] -= 1
            return True

        picked = _pick_on_node(trial, short, node, pods, allow)
        if picked is not None and (best is None or len(picked) < len(best)):
            best = picked
    if best is None:
        return None
    for pod in best:
        for pods in left.values():
            if pod in pods:
                pods.remove(pod)
                break
    return best
