"""Properties of the decision core over random small clusters."""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.quota import AdmittedGang, Config, Decisions, Gang, Snapshot, decide
from controller.quota.outcomes import EvictionCause
from controller.quota.quota import lendable
from controller.quota.snapshot import QueueSpec, Quota
from tests.unit.test_quota_builders import GPU, gang, node, queue

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


CONFIGS = [
    Config(starvation_after=100.0),
    Config(fair_sharing_preemption=True, waste_budget=1.0, starvation_after=20.0),
    Config(victims="naive"),
]


@dataclass(frozen=True)
class Scenario:
    snapshot: Snapshot
    now: float
    config: Config


@st.composite
def queues_st(draw: st.DrawFn) -> list[QueueSpec]:
    out = []
    for i in range(draw(st.integers(2, 4))):
        nominal = draw(st.integers(0, 16))
        in_cohort = draw(st.booleans()) or i < 2
        out.append(
            queue(
                f"q{i}",
                nominal,
                cohort="all" if in_cohort else None,
                borrowing_limit=draw(st.none() | st.integers(0, 8)) if in_cohort else None,
                lending_limit=draw(st.none() | st.integers(0, nominal)),
                reclaim=draw(st.sampled_from(["Never", "LowerPriority", "Any"])),
                within=draw(st.sampled_from(["Never", "LowerPriority"])),
                min_runtime=draw(st.sampled_from([0.0, 100.0])),
                evict_after=draw(st.sampled_from([0.0, 50.0])),
            )
        )
    return out


@st.composite
def gangs_st(draw: st.DrawFn, queues: list[QueueSpec], prefix: str, t0: float) -> list[Gang]:
    out = []
    for i in range(draw(st.integers(0, 8))):
        out.append(
            gang(
                f"{prefix}{i}",
                draw(st.sampled_from([q.name for q in queues])),
                pods=draw(st.integers(1, 3)),
                gpus=draw(st.sampled_from([1, 2, 4, 8])),
                priority=draw(st.integers(0, 2)),
                created=t0 + draw(st.integers(0, 50)),
            )
        )
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """A cluster whose admitted gangs were admitted by the core itself, plus new arrivals."""
    queues = draw(queues_st())
    nodes = [
        node(f"n{i}", draw(st.sampled_from([2, 4, 8]))) for i in range(draw(st.integers(1, 5)))
    ]
    first = draw(gangs_st(queues, "old", 0.0))
    d = decide(Snapshot(tuple(queues), tuple(nodes), tuple(first)), 0.0)
    by_name = {g.name: g for g in first}
    admitted = tuple(
        AdmittedGang(by_name[a.gang], float(draw(st.integers(0, 250))), a.placement)
        for a in d.admissions
    )
    later = draw(gangs_st(queues, "new", 100.0))
    config = draw(st.sampled_from(CONFIGS))
    return Scenario(Snapshot(tuple(queues), tuple(nodes), tuple(later), admitted), 300.0, config)


def final_admitted(s: Scenario, d: Decisions) -> list[AdmittedGang]:
    evicted = {e.gang for e in d.evictions}
    pending = {g.name: g for g in s.snapshot.pending}
    out = [a for a in s.snapshot.admitted if a.gang.name not in evicted]
    out += [AdmittedGang(pending[a.gang], s.now, a.placement) for a in d.admissions]
    return out


def usage_by_queue(admitted: list[AdmittedGang]) -> dict[str, dict[str, int]]:
    usage: dict[str, dict[str, int]] = {}
    for a in admitted:
        per = usage.setdefault(a.gang.queue, {})
        for ps in a.gang.pod_sets:
            for r, v in ps.requests.items():
                per[r] = per.get(r, 0) + v * ps.count
    return usage


@SETTINGS
@given(scenarios())
def test_no_queue_exceeds_nominal_plus_borrowing_limit(s: Scenario) -> None:
    d = decide(s.snapshot, s.now, s.config)
    usage = usage_by_queue(final_admitted(s, d))
    for q in s.snapshot.queues:
        for r, quota in q.quotas.items():
            used = usage.get(q.name, {}).get(r, 0)
            if q.cohort is None:
                assert used <= quota.nominal
            elif quota.borrowing_limit is not None:
                assert used <= quota.nominal + quota.borrowing_limit


def guaranteed(quota: Quota) -> int:
    """The part of a queue's nominal quota it never lends."""
    return 0 if quota.lending_limit is None else quota.nominal - quota.lending_limit


@SETTINGS
@given(scenarios())
def test_no_lender_loses_what_its_lending_limit_protects(s: Scenario) -> None:
    d = decide(s.snapshot, s.now, s.config)
    usage = usage_by_queue(final_admitted(s, d))
    members = [q for q in s.snapshot.queues if q.cohort == "all"]
    for r in (GPU, "cpu"):
        drawn = sum(
            max(0, usage.get(q.name, {}).get(r, 0) - guaranteed(q.quotas[r])) for q in members
        )
        assert drawn <= sum(lendable(q.quotas[r]) for q in members)


@SETTINGS
@given(scenarios())
def test_admitted_gangs_always_fit_the_nodes(s: Scenario) -> None:
    d = decide(s.snapshot, s.now, s.config)
    used: dict[str, int] = {}
    for a in final_admitted(s, d):
        per_pod = a.gang.pod_sets[0].requests[GPU]
        placed = 0
        for p in a.placement:
            used[p.node] = used.get(p.node, 0) + per_pod * p.count
            placed += p.count
        assert placed == a.gang.pod_sets[0].count
    for n in s.snapshot.nodes:
        assert used.get(n.name, 0) <= n.allocatable[GPU]


def shuffled(snap: Snapshot, rnd: random.Random) -> Snapshot:
    """The same snapshot with every list in another order."""

    def mixed(items: tuple[object, ...]) -> tuple[object, ...]:
        copy = list(items)
        rnd.shuffle(copy)
        return tuple(copy)

    return Snapshot(
        mixed(snap.queues),  # type: ignore[arg-type]
        mixed(snap.nodes),  # type: ignore[arg-type]
        mixed(snap.pending),  # type: ignore[arg-type]
        mixed(snap.admitted),  # type: ignore[arg-type]
        flavors=mixed(snap.flavors),  # type: ignore[arg-type]
        cohorts=mixed(snap.cohorts),  # type: ignore[arg-type]
    )


@SETTINGS
@given(scenarios(), st.randoms(use_true_random=False))
def test_decisions_do_not_depend_on_input_order(s: Scenario, rnd: random.Random) -> None:
    snap = s.snapshot
    other = shuffled(snap, rnd)
    assert decide(other, s.now, s.config) == decide(snap, s.now, s.config)
    assert decide(snap, s.now, s.config) == decide(snap, s.now, s.config)


@SETTINGS
@given(scenarios())
def test_every_eviction_admits_its_preemptor_and_spares_protected_gangs(s: Scenario) -> None:
    d = decide(s.snapshot, s.now, s.config)
    admitted = {a.gang for a in d.admissions}
    specs = {q.name: q for q in s.snapshot.queues}
    # A queue may borrow by admitting a gang in the same decision that reclaims from it.
    before = usage_by_queue(list(s.snapshot.admitted) + admitted_now(s, d))
    pending_queue = {g.name: g.queue for g in s.snapshot.pending}
    by_name = {a.gang.name: a for a in s.snapshot.admitted}
    for e in d.evictions:
        assert e.preemptor in admitted
        victim = by_name[e.gang]
        assert s.now - victim.admitted_at >= specs[e.queue].min_runtime
        if e.queue != pending_queue[e.preemptor]:
            quotas = specs[e.queue].quotas
            assert any(before[e.queue].get(r, 0) > q.nominal for r, q in quotas.items())
    for name in d.pending:
        assert name not in admitted


def admitted_now(s: Scenario, d: Decisions) -> list[AdmittedGang]:
    pending = {g.name: g for g in s.snapshot.pending}
    return [AdmittedGang(pending[a.gang], s.now, a.placement) for a in d.admissions]


@st.composite
def reclaim_scenarios(draw: st.DrawFn) -> Scenario:
    """One queue borrows with many small gangs packed onto few nodes; the other queue, under
    its nominal quota, asks for whole nodes: reclaim has several victim sets to choose from."""
    nominal = draw(st.sampled_from([4, 8, 12]))
    queues = [queue("lender", nominal), queue("owner", draw(st.sampled_from([8, 16])))]
    nodes = [node(f"n{i}", 8) for i in range(draw(st.integers(2, 4)))]
    first = [
        gang(f"old{i}", "lender", gpus=draw(st.sampled_from([2, 4])), created=float(i))
        for i in range(draw(st.integers(2, 8)))
    ]
    d = decide(Snapshot(tuple(queues), tuple(nodes), tuple(first)), 0.0)
    by_name = {g.name: g for g in first}
    admitted = tuple(
        AdmittedGang(by_name[a.gang], float(draw(st.integers(0, 250))), a.placement)
        for a in d.admissions
    )
    later = [
        gang(f"new{i}", "owner", pods=draw(st.integers(1, 2)), gpus=8, created=100.0 + i)
        for i in range(draw(st.integers(1, 2)))
    ]
    config = draw(st.sampled_from(CONFIGS))
    return Scenario(Snapshot(tuple(queues), tuple(nodes), tuple(later), admitted), 300.0, config)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios() | reclaim_scenarios())
def test_reclaim_never_takes_a_lender_below_its_nominal_quota(s: Scenario) -> None:
    """All the reclaim victims of one decision together, not each one alone, leave every queue
    that loses gangs to reclaim at or above its nominal quota on what it was borrowing. (A
    queue's own higher-priority gang may still evict its lower-priority gangs in the same
    decision: that is the queue's business, not a reclaim.)"""
    if s.config.victims != "placement-aware":
        return  # the baselines (naive, classic) make no such promise
    d = decide(s.snapshot, s.now, s.config)
    before_gangs = list(s.snapshot.admitted) + admitted_now(s, d)
    before = usage_by_queue(before_gangs)
    taken = {e.gang for e in d.evictions if e.cause is EvictionCause.RECLAIMED}
    after = usage_by_queue([a for a in before_gangs if a.gang.name not in taken])
    specs = {q.name: q for q in s.snapshot.queues}
    reclaimed = {e.queue for e in d.evictions if e.cause is EvictionCause.RECLAIMED}
    for name in reclaimed:
        for r, quota in specs[name].quotas.items():
            if before.get(name, {}).get(r, 0) > quota.nominal:
                assert after.get(name, {}).get(r, 0) >= quota.nominal, (name, r)
