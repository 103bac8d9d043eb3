"""The classes of a gang's flavor options (`Engine.classify`): what each option is, in order,
before the engine decides what to do with the gang."""

from __future__ import annotations

from collections.abc import Sequence

from controller.quota import CohortSpec, Config, Engine, Gang, PendingCause, QueueSpec, Quota
from controller.quota.engine import (
    OptionBorrows,
    OptionClass,
    OptionFits,
    OptionHeld,
    OptionNeverFits,
    OptionPreemptable,
)
from controller.quota.snapshot import AdmittedGang, Node, WhenCanBorrow
from tests.unit.test_quota_builders import GPU, G, gang, node, queue, running
from tests.unit.test_quota_flavors import (
    FLAVORS,
    NODES,
    a100_node,
    flavored_queue,
    h100_node,
    on,
)


def engine_with(
    queues: Sequence[QueueSpec],
    nodes: Sequence[Node],
    pending: Sequence[Gang] = (),
    admitted: Sequence[AdmittedGang] = (),
    *,
    config: Config | None = None,
    cohorts: Sequence[CohortSpec] = (),
) -> Engine:
    engine = Engine(queues, nodes, config, flavors=FLAVORS, cohorts=cohorts)
    for g in admitted:
        engine.add_admitted(g)
    for g in pending:
        engine.add_pending(g)
    return engine


def classes(engine: Engine, name: str) -> list[OptionClass]:
    queue, info = engine.pending[name]
    assert queue is not None
    return list(engine.classify(queue, info))


def flavor(found: OptionFits | OptionBorrows | OptionPreemptable) -> str:
    return found.option.flavors[0][GPU]


def test_option_classes_come_one_per_option_in_the_queues_flavor_order() -> None:
    engine = engine_with(
        [flavored_queue("q", {"a100": 8, "h100": 8})],
        NODES,
        [gang("g", "q", 1, 8)],
        [on("a100", gang("a", "q", 1, 8), "a1")],
    )
    first, second = classes(engine, "g")
    assert isinstance(first, OptionPreemptable) and flavor(first) == "a100"
    assert isinstance(second, OptionFits) and flavor(second) == "h100"


def test_option_fits_within_nominal_quota_with_its_pods_placed_on_taken_capacity() -> None:
    engine = engine_with([flavored_queue("q", {"a100": 8})], NODES, [gang("g", "q", 1, 8)])
    free_before = list(engine.index.free)
    (found,) = classes(engine, "g")
    assert isinstance(found, OptionFits)
    ((_, on_node, count),) = found.plan
    assert count == 1 and engine.index.names[on_node] in {"a1", "a2"}
    assert engine.index.free != free_before


def borrowing_engine(when_can_borrow: WhenCanBorrow) -> Engine:
    # q owns no a100 quota but may borrow the lender's.
    queues = [
        flavored_queue("q", {"a100": 0}, cohort="c", when_can_borrow=when_can_borrow),
        flavored_queue("lender", {"a100": 8}, cohort="c"),
    ]
    return engine_with(queues, NODES, [gang("g", "q", 1, 8)])


def test_option_that_borrows_fits_when_borrowing_may_stop_the_search() -> None:
    (found,) = classes(borrowing_engine("MayStopSearch"), "g")
    assert isinstance(found, OptionFits)


def test_option_that_borrows_when_the_search_looks_on_leaves_its_nodes_free() -> None:
    engine = borrowing_engine("TryNextFlavor")
    free_before = list(engine.index.free)
    (found,) = classes(engine, "g")
    assert isinstance(found, OptionBorrows) and flavor(found) == "a100"
    assert engine.index.free == free_before


def test_option_borrowing_height_counts_the_cohort_levels_the_borrowing_reaches() -> None:
    # q borrows h100 from its sibling (its own cohort has it) and a100 from its cousin (only the
    # root cohort has it).
    cohorts = [CohortSpec("root"), CohortSpec("left", "root"), CohortSpec("right", "root")]
    queues = [
        flavored_queue("q", {"a100": 0, "h100": 0}, cohort="left", when_can_borrow="TryNextFlavor"),
        flavored_queue("sibling", {"a100": 0, "h100": 8}, cohort="left"),
        flavored_queue("cousin", {"a100": 8, "h100": 0}, cohort="right"),
    ]
    engine = engine_with(queues, NODES, [gang("g", "q", 1, 8)], cohorts=cohorts)
    a100, h100 = classes(engine, "g")
    assert isinstance(a100, OptionBorrows) and isinstance(h100, OptionBorrows)
    assert (flavor(a100), flavor(h100)) == ("a100", "h100")
    assert h100.height < a100.height


def test_option_short_of_quota_it_could_get_back_is_preemptable_for_quota() -> None:
    engine = engine_with(
        [flavored_queue("q", {"a100": 8})],
        NODES,
        [gang("g", "q", 1, 8)],
        [on("a100", gang("a", "q", 1, 8), "a1")],
    )
    (found,) = classes(engine, "g")
    assert isinstance(found, OptionPreemptable)
    assert found.reason.cause is PendingCause.QUOTA


def test_option_within_quota_on_full_nodes_is_preemptable_for_nodes() -> None:
    nodes = [a100_node("a1", used=8), a100_node("a2", used=8), h100_node("h1")]
    engine = engine_with([flavored_queue("q", {"a100": 8})], nodes, [gang("g", "q", 1, 8)])
    (found,) = classes(engine, "g")
    assert isinstance(found, OptionPreemptable)
    assert found.reason.cause is PendingCause.NO_NODE_FITS


def test_option_beyond_what_its_queue_can_ever_hold_never_fits() -> None:
    engine = engine_with(
        [flavored_queue("q", {"a100": 8, "h100": 8})], NODES, [gang("g", "q", 3, 4)]
    )
    found = classes(engine, "g")
    assert [type(f) for f in found] == [OptionNeverFits, OptionNeverFits]
    assert all(
        isinstance(f, OptionNeverFits) and f.reason.cause is PendingCause.NEVER_FITS for f in found
    )


def test_option_with_pods_no_empty_node_could_host_never_fits() -> None:
    engine = engine_with([flavored_queue("q", {"a100": 16})], NODES, [gang("g", "q", 1, 16)])
    (found,) = classes(engine, "g")
    assert isinstance(found, OptionNeverFits)
    assert found.reason.cause is PendingCause.NEVER_FITS
    assert found.reason.placement is not None


def test_option_asking_for_a_resource_its_queue_does_not_cover_is_not_covered() -> None:
    only_gpus = QueueSpec("q", {GPU: Quota(8 * G)})
    engine = engine_with([only_gpus], [node("n1")], [gang("g", "q", 1, 8)])
    (found,) = classes(engine, "g")
    assert isinstance(found, OptionNeverFits)
    assert found.reason.cause is PendingCause.NOT_COVERED


def test_option_classes_are_found_lazily_against_the_state_when_asked_for() -> None:
    engine = engine_with(
        [flavored_queue("q", {"a100": 8, "h100": 8})],
        NODES,
        [gang("g", "q", 1, 8)],
        [on("a100", gang("a", "q", 1, 8), "a1"), on("h100", gang("h", "q", 1, 8), "h1")],
    )
    queue, info = engine.pending["g"]
    assert queue is not None
    found = engine.classify(queue, info)
    assert isinstance(next(found), OptionPreemptable)
    engine.finish("h")
    second = next(found)
    assert isinstance(second, OptionFits) and flavor(second) == "h100"


def test_option_is_held_back_when_it_takes_quota_held_for_a_starving_gang() -> None:
    # The starving gang needs the queue's whole nominal quota, half of it in use: it waits,
    # and the newer gang may not take what it is owed.
    starving = gang("starving", "q", 2, 8, created=0.0)
    newer = gang("newer", "q", 1, 8, created=500.0)
    engine = engine_with(
        [queue("q", 16, cohort=None)],
        [node("n1"), node("n2"), node("n3")],
        [starving, newer],
        [running(gang("r", "q", 1, 8), "n1")],
        config=Config(starvation_after=100.0),
    )
    engine.cycle(1000.0)
    (found,) = classes(engine, "newer")
    assert isinstance(found, OptionHeld)
    assert found.reason.cause is PendingCause.HELD_FOR_STARVING
    assert found.reason.behind == "starving"
