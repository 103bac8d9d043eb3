"""Queue positions: the order the engine will really consider pending gangs in, numbered.

The property: on random clusters of several queues (priorities, ages, fair-sharing weights,
cohorts or none, recent usage weighed with a half-life or not) where everything fits, one
cycle admits every pending gang, and it admits them exactly in the order of their positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.quota import (
    DEFAULT_FLAVOR,
    CohortSpec,
    Config,
    Engine,
    FlavorQuota,
    Gang,
    QueueSpec,
    Quota,
    ResourceGroup,
)
from controller.quota.positions import Position, PositionRun, positions
from controller.quota.recent import Recent
from tests.unit.test_quota_builders import GPU, G, gang, node

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 100.0


def gpus(n: int) -> dict[str, Quota]:
    return {GPU: Quota(n * G), "cpu": Quota(n * 4 * G)}


def lender(name: str, gpu_count: int) -> CohortSpec:
    """A cohort whose own quota lends `gpu_count` GPUs to its queues."""
    flavor = FlavorQuota(DEFAULT_FLAVOR, gpus(gpu_count))
    return CohortSpec(name, None, (ResourceGroup((GPU, "cpu"), (flavor,)),))


@dataclass(frozen=True)
class Scenario:
    queues: list[QueueSpec]
    cohorts: list[CohortSpec]
    gangs: list[Gang]
    config: Config
    # Recent shares (unweighted) each queue and cohort borrowed, as of clock 0.
    history: dict[tuple[str, str], Recent]

    def engine(self) -> Engine:
        nodes = [node(f"n{i}") for i in range(4 * len(self.gangs) + 1)]
        engine = Engine(self.queues, nodes, self.config, cohorts=self.cohorts)
        engine.restore_recent_usage(self.history)
        for g in sorted(self.gangs, key=lambda g: g.name):
            engine.add_pending(g)
        return engine


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """Two cohorts (whose own quota lends enough for every gang) and a queue in none, queues
    with small nominal quota so that they borrow and fair sharing orders them."""
    queues: list[QueueSpec] = []
    for i in range(draw(st.integers(2, 5))):
        cohort = draw(st.sampled_from(["a", "b", None]))
        nominal = draw(st.integers(0, 6)) if cohort else 1000
        weight = draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
        queues.append(QueueSpec(f"q{i}", gpus(nominal), cohort=cohort, weight=weight))
    gangs = [
        gang(
            f"g{k}",
            f"q{draw(st.integers(0, len(queues) - 1))}",
            pods=draw(st.integers(1, 2)),
            gpus=draw(st.sampled_from([1, 2, 4, 8])),
            priority=draw(st.integers(0, 2)),
            created=float(draw(st.integers(0, 60))),
        )
        for k in range(draw(st.integers(1, 24)))
    ]
    config = Config(
        oldest_first_after=draw(st.sampled_from([None, 70.0])),
        usage_half_life=draw(st.sampled_from([0.0, 50.0, 3600.0])),
    )
    shares = st.sampled_from([0.0, 0.0, 50.0, 200.0, 900.0])
    history = {("queue", q.name): Recent(draw(shares), 0.0) for q in queues}
    history.update({("cohort", c): Recent(draw(shares), 0.0) for c in ("a", "b")})
    return Scenario(queues, [lender("a", 1000), lender("b", 1000)], gangs, config, history)


@SETTINGS
@given(scenarios())
def test_a_cycle_admits_pending_gangs_in_the_order_of_their_positions(s: Scenario) -> None:
    engine = s.engine()
    found = positions(engine, NOW)
    by_tree: dict[str, list[str]] = {}
    for name in found:
        cohort = next(q.cohort for q in s.queues if q.name == s_queue(s, name))
        by_tree.setdefault(cohort or s_queue(s, name), []).append(name)
    admitted = [a.gang for a in engine.cycle(NOW).admissions]
    assert sorted(admitted) == sorted(g.name for g in s.gangs)
    for tree, names in by_tree.items():
        expected = [n for n in admitted if n in names]
        assert sorted(names, key=lambda n: found[n].cohort) == expected, tree
    for q in s.queues:
        line = [n for n in admitted if s_queue(s, n) == q.name]
        assert sorted(line, key=lambda n: found[n].cluster_queue) == line
        assert sorted(found[n].cluster_queue for n in line) == list(range(1, len(line) + 1))


def s_queue(s: Scenario, name: str) -> str:
    return next(g.queue for g in s.gangs if g.name == name)


@SETTINGS
@given(scenarios())
def test_asking_for_positions_changes_nothing_the_engine_decides(s: Scenario) -> None:
    asked, untouched = s.engine(), s.engine()
    first = positions(asked, NOW)
    assert positions(asked, NOW) == first
    assert asked.cycle(NOW) == untouched.cycle(NOW)


def test_a_higher_priority_gang_submitted_later_is_first_in_its_queue() -> None:
    queues = [QueueSpec("team", gpus(8))]
    engine = Engine(queues, [node("n0")])
    engine.add_pending(gang("old", "team", created=1.0))
    engine.add_pending(gang("urgent", "team", created=5.0, priority=10))
    found = positions(engine, NOW)
    assert found["urgent"] == Position(1, None, 1)
    assert found["old"] == Position(2, None, 2)


def test_the_lighter_queue_of_a_cohort_goes_first_and_local_queues_count_their_own() -> None:
    """`heavy` already borrows 8 GPUs; `light` borrows none, so its gang comes first in the
    cohort, though it was submitted last; each LocalQueue numbers its own gangs."""
    queues = [QueueSpec("heavy", gpus(0), cohort="a"), QueueSpec("light", gpus(0), cohort="a")]
    engine = Engine(queues, [node(f"n{i}") for i in range(4)], cohorts=[lender("a", 64)])
    engine.add_pending(gang("busy", "heavy", created=0.0))
    engine.cycle(1.0)
    engine.add_pending(gang("h1", "heavy", created=2.0))
    engine.add_pending(gang("h2", "heavy", created=3.0))
    engine.add_pending(gang("l1", "light", created=4.0))
    local = {"h1": "ns1/research", "h2": "ns2/dev", "l1": "ns3/ml"}
    found = positions(engine, NOW, local)
    assert found["l1"] == Position(1, 1, 1)
    assert found["h1"] == Position(1, 1, 2)
    assert found["h2"] == Position(2, 1, 3)


def test_a_gang_of_an_unknown_queue_has_no_position() -> None:
    engine = Engine([QueueSpec("team", gpus(8))], [node("n0")])
    engine.add_pending(gang("lost", "nowhere"))
    assert positions(engine, NOW) == {}


def stepped(engine: Engine, now: float, local: dict[str, str] | None = None) -> PositionRun:
    """A position run of `engine` advanced one step at a time until done."""
    run = PositionRun(engine, now, local)
    while not run.done:
        run.advance()
    return run


@SETTINGS
@given(scenarios(), st.integers(0, 3))
def test_positions_made_a_step_at_a_time_are_the_positions_made_whole(
    s: Scenario, admitted: int
) -> None:
    """Also when the engine admits gangs before the run starts (its queues charged), and when
    the run goes on while the engine changes (it gives the positions as of its start)."""
    engine = s.engine()
    if admitted:
        engine.cycle(NOW - 1, max_admissions=admitted)
    local = {g.name: f"ns/lq{int(g.name[1:]) % 2}" for g in s.gangs}
    whole = positions(engine, NOW, local)
    run = PositionRun(engine, NOW, local)
    engine.cycle(NOW)
    while not run.done:
        run.advance()
    assert run.positions() == whole
    assert positions(engine, NOW, local) == positions(engine, NOW, local)


def test_a_run_numbers_only_the_gangs_still_wanted_as_if_the_others_had_left() -> None:
    engine = Engine([QueueSpec("team", gpus(8))], [node("n0")])
    for i, name in enumerate(["first", "second", "third"]):
        engine.add_pending(gang(name, "team", created=float(i)))
    run = stepped(engine, NOW)
    assert run.positions({"second", "third"}) == {
        "second": Position(1, None, 1),
        "third": Position(2, None, 2),
    }


def test_a_run_over_many_queues_is_made_in_many_small_steps_and_gives_the_same_positions() -> None:
    queues = [QueueSpec(f"q{i:03}", gpus(2), cohort="a") for i in range(120)]
    engine = Engine(queues, [node("n0")], cohorts=[lender("a", 64)])
    for i in range(360):
        engine.add_pending(gang(f"g{i:03}", f"q{i % 120:03}", created=float(i % 7)))
    run = stepped(engine, NOW)
    assert run.positions() == positions(engine, NOW)
    # 360 gangs taken in 2 steps, 2 steps of setting up 50 queues each, 360 gangs walked 16 a
    # step (the third slice of queues set up in the first of those).
    assert run.steps >= 2 + 2 + 360 // 16
