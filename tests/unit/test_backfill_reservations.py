"""The starvation guard's backfill reservations: a gang that waited past the limit gets the nodes
that free up first, and newer gangs use them only if they will be done before it starts."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.quota import Config, Engine, Gang, Node, PodSet, QueueSpec, Quota
from controller.quota.snapshot import AdmittedGang, PodPlacement

GPU = "nvidia.com/gpu"
BACKFILL = Config(starvation_after=60.0, backfill=True)


def gpu_node(name: str, gpus: int) -> Node:
    return Node(name, {GPU: gpus})


def job(name: str, pods: int, gpus: int, created: float, runtime: float | None) -> Gang:
    return Gang(name, "team", (PodSet(pods, {GPU: gpus}, "main"),), 0, created, runtime)


def team(gpus: int) -> QueueSpec:
    return QueueSpec("team", {GPU: Quota(gpus)})


def running(gang: Gang, node: str, since: float = 0.0) -> AdmittedGang:
    return AdmittedGang(gang, since, (PodPlacement("main", node, gang.pod_sets[0].count),))


def big_gang_waiting(
    config: Config = BACKFILL, *, late_runtime: float | None = 7200, quota: int = 16
) -> Engine:
    """Two 8-GPU nodes: n1 busy until `late_runtime` (or unknown), n2 half busy until 1800;
    an 8-GPU gang waiting since 0, past the guard's limit by 100."""
    engine = Engine([team(quota)], [gpu_node("n1", 8), gpu_node("n2", 8)], config)
    engine.add_admitted(running(job("ends-late", 1, 8, 0, late_runtime), "n1"))
    engine.add_admitted(running(job("ends-soon", 1, 4, 0, 1800), "n2"))
    engine.add_pending(job("big", 1, 8, 0, 3600))
    return engine


def test_a_starving_gang_reserves_the_nodes_that_free_up_first() -> None:
    engine = big_gang_waiting()

    decisions = engine.cycle(100)

    assert decisions.admissions == ()
    assert engine.reservation is not None
    assert (engine.reservation.gang, engine.reservation.start) == ("big", 1800)
    assert engine.reservation.nodes == ("n2",)
    assert decisions.reservations == {"big": ("n2",)}


def test_a_newer_gang_done_before_the_reservation_starts_uses_the_reserved_node() -> None:
    engine = big_gang_waiting()
    engine.cycle(100)
    engine.add_pending(job("short", 1, 2, 150, 600))  # done at 800, before 1800
    engine.add_pending(job("long", 1, 2, 160, 7200))  # would still run at 1800

    decisions = engine.cycle(200)

    assert [a.gang for a in decisions.admissions] == ["short"]
    assert decisions.admissions[0].placement == (PodPlacement("main", "n2", 1),)
    assert "starvation guard" in engine.reason("long").describe()


def test_without_backfill_the_held_quota_stays_idle_for_the_starving_gang() -> None:
    engine = big_gang_waiting(Config(starvation_after=60.0))
    engine.cycle(100)
    engine.add_pending(job("short", 1, 2, 150, 600))

    assert engine.cycle(200).admissions == ()
    assert engine.reservation is None


def test_a_gang_of_unknown_runtime_never_uses_a_reservation() -> None:
    engine = big_gang_waiting()
    engine.cycle(100)
    engine.add_pending(job("unknown", 1, 2, 150, None))  # its queue has no history yet

    assert engine.cycle(200).admissions == ()


def test_runtimes_learned_from_the_queue_let_a_gang_backfill() -> None:
    engine = big_gang_waiting()
    engine.add_admitted(running(job("earlier", 1, 0, 0, None), "n1", since=0))
    engine.finish("earlier", at=300)  # the queue's gangs run 300 s
    engine.cycle(400)
    engine.add_pending(job("learned", 1, 2, 450, None))

    assert [a.gang for a in engine.cycle(500).admissions] == ["learned"]


def test_with_a_running_gang_of_unknown_runtime_the_guard_holds_nodes_as_before() -> None:
    engine = big_gang_waiting(late_runtime=None, quota=32)  # quota to spare: nodes keep it out

    decisions = engine.cycle(100)

    assert engine.reservation is None
    assert decisions.reservations == {"big": ("n2",)}  # the current hold: n2 kept idle


# -- the property -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    at: float
    pods: int
    gpus: int
    runtime: float


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[int], int, list[Arrival]]:
    """A small cluster, its one queue's quota, and gangs arriving with exact runtimes; each
    gang fits the empty cluster and the quota."""
    sizes = draw(st.lists(st.sampled_from([4, 8]), min_size=2, max_size=4))
    quota = draw(st.integers(max(sizes), sum(sizes)))
    arrivals = []
    at = 0.0
    for _ in range(draw(st.integers(3, 25))):
        at += draw(st.sampled_from([0.0, 30.0, 60.0, 300.0]))
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        fitting = sum(size // gpus for size in sizes)
        pods = draw(st.integers(1, max(1, min(3, fitting, quota // gpus))))
        if pods * gpus > quota or fitting < pods:
            continue
        runtime = draw(st.sampled_from([60.0, 300.0, 900.0, 1800.0, 3600.0]))
        arrivals.append(Arrival(at, pods, gpus, runtime))
    return sizes, quota, arrivals


def run(
    sizes: list[int], quota: int, arrivals: list[Arrival]
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Every gang through one engine with the backfill guard, in event time: when each was
    admitted, and each reservation's start as each cycle left it."""
    engine = Engine([team(quota)], [gpu_node(f"n{i}", s) for i, s in enumerate(sizes)], BACKFILL)
    events: list[tuple[float, int, str]] = []  # (time, 0 end / 1 arrival / 2 timer, gang)
    gangs: dict[str, Gang] = {}
    for i, a in enumerate(arrivals):
        gangs[f"g{i:02d}"] = job(f"g{i:02d}", a.pods, a.gpus, a.at, a.runtime)
        heapq.heappush(events, (a.at, 1, f"g{i:02d}"))
    admitted: dict[str, float] = {}
    starts: dict[str, list[float]] = {}
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, name = heapq.heappop(events)
            if kind == 0:
                engine.finish(name, at=now)
            elif kind == 1:
                engine.add_pending(gangs[name])
        decisions = engine.cycle(now)
        assert decisions.evictions == ()
        for admission in decisions.admissions:
            admitted[admission.gang] = now
            runtime = gangs[admission.gang].max_runtime
            assert runtime is not None
            heapq.heappush(events, (now + runtime, 0, admission.gang))
        if engine.reservation is not None:
            starts.setdefault(engine.reservation.gang, []).append(engine.reservation.start)
        wake = engine.recheck_at
        if wake is not None and not any(t == wake for t, _, _ in events):
            heapq.heappush(events, (wake, 2, ""))
    return admitted, starts


def test_a_gang_that_must_borrow_reserves_nothing_against_the_lenders_own_quota() -> None:
    # Teams a and b own 8 GPUs each; a's 16-GPU gang starves while b's gang runs on b's quota.
    # Once b's gang ends, b's next gang, within b's own quota, starts at once: nodes are
    # reserved only for a gang its own quota takes, or that only nodes keep out.
    def queued(name: str, queue: str, gpus: int, created: float, runtime: float) -> Gang:
        return Gang(name, queue, (PodSet(gpus // 8, {GPU: 8}, "main"),), 0, created, runtime)

    queues = [QueueSpec(q, {GPU: Quota(8)}, cohort="org") for q in ("a", "b")]
    engine = Engine(queues, [gpu_node("n1", 8), gpu_node("n2", 8)], BACKFILL)
    engine.add_admitted(running(queued("a-run", "a", 8, 0, 3600), "n1"))
    engine.add_admitted(running(queued("b-run", "b", 8, 0, 1000), "n2"))
    engine.add_pending(queued("big", "a", 16, 0, 3600))
    engine.cycle(100)
    assert engine.reservation is None
    engine.finish("b-run", at=1000)
    engine.cycle(1000)

    engine.add_pending(queued("b-long", "b", 8, 1100, 7200))
    decisions = engine.cycle(1100)

    assert [a.gang for a in decisions.admissions] == ["b-long"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_a_reservation_is_never_delayed_by_a_gang_admitted_after_it(
    world: tuple[list[int], int, list[Arrival]],
) -> None:
    """With runtimes exact, a starving gang starts no later than its first reservation said,
    and its reservation never moves later, whatever newer gangs were admitted meanwhile."""
    admitted, starts = run(*world)
    assert len(admitted) == len(world[2])  # every gang ran
    for gang, planned in starts.items():
        assert planned == sorted(planned, reverse=True), f"{gang}'s reservation moved later"
        assert admitted[gang] <= planned[0], f"{gang} started after its reservation"
