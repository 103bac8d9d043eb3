"""Properties of flavors and cohort trees over random small clusters.

The tree's arithmetic is recomputed here from the specs alone (subtree quota, guaranteed part,
usage seen by each cohort), so the engine's bookkeeping is checked against a second account.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.quota import (
    AdmittedGang,
    CohortSpec,
    Config,
    Decisions,
    FlavorQuota,
    FlavorSpec,
    Fungibility,
    Gang,
    QueueSpec,
    Quota,
    ResourceGroup,
    Snapshot,
    decide,
)
from controller.quota.outcomes import EvictionCause
from controller.quota.snapshot import FR
from tests.unit.test_quota_builders import GPU, G, gang, node
from tests.unit.test_quota_properties import shuffled

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TYPE = "gpu-type"
FLAVORS = ("f0", "f1")
CONFIGS = [
    Config(),
    Config(fair_sharing_preemption=True, waste_budget=1.0, starvation_after=20.0),
    Config(victims="classic"),
]


@dataclass(frozen=True)
class Scenario:
    snapshot: Snapshot
    now: float
    config: Config


def gpu_quota(draw: st.DrawFn, nominal: int, limits: bool) -> dict[str, Quota]:
    borrowing = draw(st.none() | st.integers(0, 8)) if limits else None
    lending = draw(st.none() | st.integers(0, nominal)) if limits else None
    return {
        GPU: Quota(
            nominal * G,
            None if borrowing is None else borrowing * G,
            None if lending is None else lending * G,
        )
    }


def groups(draw: st.DrawFn, limits: bool, most: int) -> tuple[ResourceGroup, ...]:
    flavors = tuple(
        FlavorQuota(f, gpu_quota(draw, draw(st.integers(0, most)), limits)) for f in FLAVORS
    )
    return (ResourceGroup((GPU,), flavors),)


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[CohortSpec], list[QueueSpec]]:
    """org -> 1-3 departments (some with a sub-team cohort) -> 2-5 queues."""
    cohorts = [CohortSpec("org", None, groups(draw, False, 4))]
    parents = ["org"]
    for d in range(draw(st.integers(1, 3))):
        name = f"dept{d}"
        cohorts.append(
            CohortSpec(
                name,
                "org",
                groups(draw, True, 2),
                draw(st.sampled_from([0.5, 1.0, 2.0])),
            )
        )
        parents.append(name)
        if draw(st.booleans()):
            cohorts.append(CohortSpec(f"{name}-sub", name, groups(draw, True, 2)))
            parents.append(f"{name}-sub")
    queues = []
    for i in range(draw(st.integers(2, 5))):
        queues.append(
            QueueSpec(
                f"q{i}",
                {},
                cohort=draw(st.sampled_from(parents)),
                weight=draw(st.sampled_from([0.5, 1.0, 2.0])),
                reclaim_within_cohort=draw(st.sampled_from(["Never", "LowerPriority", "Any"])),
                within_queue=draw(st.sampled_from(["Never", "LowerPriority"])),
                groups=groups(draw, True, 8),
                fungibility=Fungibility(
                    draw(st.sampled_from(["MayStopSearch", "TryNextFlavor"])),
                    draw(st.sampled_from(["TryNextFlavor", "MayStopSearch"])),
                ),
            )
        )
    return cohorts, queues


def gpu_gang(draw: st.DrawFn, name: str, queues: list[QueueSpec], created: float) -> Gang:
    g = gang(
        name,
        draw(st.sampled_from([q.name for q in queues])),
        pods=draw(st.integers(1, 3)),
        gpus=draw(st.sampled_from([1, 2, 4])),
        priority=draw(st.integers(0, 2)),
        created=created,
        selector=draw(st.sampled_from([{}, {}, {TYPE: "f0"}, {TYPE: "f1"}])),
    )
    # GPUs only: the queues cover nothing else.
    (pod_set,) = g.pod_sets
    only_gpus = type(pod_set)(
        pod_set.count, {GPU: pod_set.requests[GPU]}, "main", pod_set.node_selector
    )
    return Gang(g.name, g.queue, (only_gpus,), g.priority, g.created)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    cohorts, queues = draw(trees())
    flavors = tuple(FlavorSpec(f, {TYPE: f}) for f in FLAVORS)
    nodes = tuple(
        node(
            f"n{i}", draw(st.sampled_from([2, 4, 8])), labels={TYPE: draw(st.sampled_from(FLAVORS))}
        )
        for i in range(draw(st.integers(1, 5)))
    )
    first = [gpu_gang(draw, f"old{i}", queues, float(i)) for i in range(draw(st.integers(0, 8)))]
    base = Snapshot(tuple(queues), nodes, tuple(first), flavors=flavors, cohorts=tuple(cohorts))
    d = decide(base, 0.0)
    by_name = {g.name: g for g in first}
    admitted = tuple(
        AdmittedGang(by_name[a.gang], float(draw(st.integers(0, 250))), a.placement, a.flavors)
        for a in d.admissions
    )
    later = [gpu_gang(draw, f"new{i}", queues, 100.0 + i) for i in range(draw(st.integers(1, 8)))]
    snapshot = Snapshot(
        tuple(queues), nodes, tuple(later), admitted, flavors=flavors, cohorts=tuple(cohorts)
    )
    return Scenario(snapshot, 300.0, draw(st.sampled_from(CONFIGS)))


# -- the second account -------------------------------------------------------------------------


@dataclass
class Tree:
    quotas: dict[str, dict[FR, Quota]]
    parent: dict[str, str | None]
    children: dict[str, list[str]]

    @classmethod
    def of(cls, snapshot: Snapshot) -> Tree:
        quotas: dict[str, dict[FR, Quota]] = {}
        parent: dict[str, str | None] = {}
        for c in snapshot.cohorts:
            quotas[c.name] = flat(c.groups)
            parent[c.name] = c.parent
        for q in snapshot.queues:
            quotas[q.name] = flat(q.groups)
            parent[q.name] = q.cohort
        children: dict[str, list[str]] = defaultdict(list)
        for name, p in parent.items():
            if p is not None:
                children[p].append(name)
        return cls(quotas, parent, children)

    def subtree(self, name: str, fr: FR) -> int:
        own = self.quotas[name].get(fr)
        total = own.nominal if own else 0
        return total + sum(
            self.subtree(c, fr) - self.guaranteed(c, fr) for c in self.children.get(name, [])
        )

    def guaranteed(self, name: str, fr: FR) -> int:
        own = self.quotas[name].get(fr)
        if own is None or own.lending_limit is None:
            return 0
        return max(0, self.subtree(name, fr) - own.lending_limit)

    def usage(self, name: str, fr: FR, leaves: Mapping[str, Mapping[FR, int]]) -> int:
        if name in leaves or not self.children.get(name):
            return leaves.get(name, {}).get(fr, 0)
        return sum(
            max(0, self.usage(c, fr, leaves) - self.guaranteed(c, fr)) for c in self.children[name]
        )

    def path(self, name: str) -> list[str]:
        out = [name]
        while (p := self.parent[out[-1]]) is not None:
            out.append(p)
        return out


def flat(gs: Iterable[ResourceGroup]) -> dict[FR, Quota]:
    return {(f.flavor, r): q for g in gs for f in g.flavors for r, q in f.quotas.items()}


def charged(admitted: Iterable[AdmittedGang]) -> dict[str, dict[FR, int]]:
    out: dict[str, dict[FR, int]] = defaultdict(lambda: defaultdict(int))
    for a in admitted:
        for ps in a.gang.pod_sets:
            for r, amount in ps.requests.items():
                out[a.gang.queue][(a.flavors[ps.name][r], r)] += amount * ps.count
    return out


def admitted_now(s: Scenario, d: Decisions) -> list[AdmittedGang]:
    pending = {g.name: g for g in s.snapshot.pending}
    return [AdmittedGang(pending[a.gang], s.now, a.placement, a.flavors) for a in d.admissions]


def final_admitted(s: Scenario, d: Decisions) -> list[AdmittedGang]:
    evicted = {e.gang for e in d.evictions}
    return [a for a in s.snapshot.admitted if a.gang.name not in evicted] + admitted_now(s, d)


ALL_FRS = [(f, GPU) for f in FLAVORS]


# -- properties ---------------------------------------------------------------------------------


@SETTINGS
@given(scenarios())
def test_no_level_of_the_tree_ever_holds_more_than_its_quota_allows(s: Scenario) -> None:
    """Every queue and cohort: usage within its subtree quota plus its borrowing limit; the
    root within its subtree quota. So what a lending limit keeps back is never lent, at any
    level."""
    d = decide(s.snapshot, s.now, s.config)
    tree = Tree.of(s.snapshot)
    leaves = charged(final_admitted(s, d))
    for name in tree.quotas:
        for fr in ALL_FRS:
            used = tree.usage(name, fr, leaves)
            most = tree.subtree(name, fr)
            quota = tree.quotas[name].get(fr)
            if tree.parent[name] is None:
                assert used <= most, (name, fr)
            elif quota is not None and quota.borrowing_limit is not None:
                assert used <= most + quota.borrowing_limit, (name, fr)


@SETTINGS
@given(scenarios())
def test_every_pod_runs_on_a_node_of_its_flavor(s: Scenario) -> None:
    d = decide(s.snapshot, s.now, s.config)
    labels = {n.name: n.labels[TYPE] for n in s.snapshot.nodes}
    for a in d.admissions:
        flavor = a.flavors["main"][GPU]
        assert {labels[p.node] for p in a.placement} == {flavor}


@SETTINGS
@given(scenarios(), st.randoms(use_true_random=False))
def test_decisions_do_not_depend_on_input_order(s: Scenario, rnd: random.Random) -> None:
    snap = s.snapshot
    other = shuffled(snap, rnd)
    assert decide(other, s.now, s.config) == decide(snap, s.now, s.config)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_reclaim_never_takes_a_subtree_below_its_quota(s: Scenario) -> None:
    """Every queue and cohort between a reclaimed gang's queue and the cohort it shares with its
    preemptor was borrowing, and, all victims of the decision gone, still holds at least its
    subtree quota of what it was borrowing."""
    if s.config.victims != "placement-aware":
        return  # the baselines make no such promise
    d = decide(s.snapshot, s.now, s.config)
    tree = Tree.of(s.snapshot)
    before = charged([*s.snapshot.admitted, *admitted_now(s, d)])
    evicted = {e.gang for e in d.evictions}
    after = charged(
        [*(a for a in s.snapshot.admitted if a.gang.name not in evicted), *admitted_now(s, d)]
    )
    pending_queue = {g.name: g.queue for g in s.snapshot.pending}
    for e in d.evictions:
        if e.cause is not EvictionCause.RECLAIMED:
            continue
        shared = set(tree.path(pending_queue[e.preemptor]))
        for name in tree.path(e.queue):
            if name in shared:
                break
            borrowed = [
                fr for fr in ALL_FRS if tree.usage(name, fr, before) > tree.subtree(name, fr)
            ]
            assert borrowed, (e, name)
            for fr in borrowed:
                assert tree.usage(name, fr, after) >= tree.subtree(name, fr), (e, name, fr)
