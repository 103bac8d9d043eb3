"""Resource flavors in the decision core: which flavor a gang gets, and what it is charged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controller.quota import (
    AdmittedGang,
    Config,
    Decisions,
    FlavorQuota,
    FlavorSpec,
    Fungibility,
    Gang,
    Node,
    PendingCause,
    PodSet,
    QueueSpec,
    Quota,
    ResourceGroup,
    Snapshot,
    Taint,
    Toleration,
    decide,
)
from controller.quota.outcomes import EvictionCause
from controller.quota.snapshot import ReclaimPolicy, WhenCanBorrow, WhenCanPreempt
from tests.unit.test_quota_builders import GPU, G, gang, node, running

TYPE = "kohort.dev/gpu-type"
A100 = FlavorSpec("a100", {TYPE: "a100"})
# H100 nodes are tainted: only pods given the flavor's toleration land there.
H100_TAINT = Taint("gpu-type", "h100")
H100 = FlavorSpec(
    "h100",
    {TYPE: "h100"},
    (H100_TAINT,),
    (Toleration("gpu-type", "Equal", "h100", "NoSchedule"),),
)
FLAVORS = (A100, H100)


def a100_node(name: str, gpus: int = 8, used: int = 0) -> Node:
    return node(name, gpus, labels={TYPE: "a100"}, used_gpus=used)


def h100_node(name: str, gpus: int = 8, used: int = 0) -> Node:
    return node(name, gpus, labels={TYPE: "h100"}, taints=[H100_TAINT], used_gpus=used)


def flavored_queue(
    name: str,
    gpus: Mapping[str, int],
    *,
    cohort: str | None = None,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    reclaim: ReclaimPolicy = "Any",
    within: bool = False,
    when_can_borrow: WhenCanBorrow = "MayStopSearch",
    when_can_preempt: WhenCanPreempt = "TryNextFlavor",
) -> QueueSpec:
    """A queue with GPU (and 4 CPUs per GPU) quota on each flavor of `gpus`, in that order."""

    def scaled(v: int | None, per: int) -> int | None:
        return None if v is None else v * per

    flavors = tuple(
        FlavorQuota(
            flavor,
            {
                GPU: Quota(n * G, scaled(borrowing_limit, G), scaled(lending_limit, G)),
                "cpu": Quota(
                    n * 4 * G, scaled(borrowing_limit, 4 * G), scaled(lending_limit, 4 * G)
                ),
            },
        )
        for flavor, n in gpus.items()
    )
    return QueueSpec(
        name,
        {},
        cohort=cohort,
        reclaim_within_cohort=reclaim,
        within_queue="LowerPriority" if within else "Never",
        groups=(ResourceGroup((GPU, "cpu"), flavors),),
        fungibility=Fungibility(when_can_borrow, when_can_preempt),
    )


def on(flavor: str, g: Gang, *nodes: str, at: float = 0.0) -> AdmittedGang:
    """`g` admitted on `flavor`, one pod on each of `nodes`."""
    admitted = running(g, *nodes, at=at)
    return AdmittedGang(g, at, admitted.placement, {"main": {GPU: flavor, "cpu": flavor}})


def run(
    queues: Sequence[QueueSpec],
    nodes: Sequence[Node],
    pending: Sequence[Gang] = (),
    admitted: Sequence[AdmittedGang] = (),
    config: Config | None = None,
    now: float = 100.0,
) -> Decisions:
    snapshot = Snapshot(
        tuple(queues), tuple(nodes), tuple(pending), tuple(admitted), flavors=FLAVORS
    )
    return decide(snapshot, now, config)


def flavor_of(d: Decisions, name: str) -> str:
    (admission,) = [a for a in d.admissions if a.gang == name]
    return admission.flavors["main"][GPU]


def nodes_of(d: Decisions, name: str) -> set[str]:
    (admission,) = [a for a in d.admissions if a.gang == name]
    return {p.node for p in admission.placement}


NODES = [a100_node("a1"), a100_node("a2"), h100_node("h1"), h100_node("h2")]


def test_a_gang_lands_whole_on_the_nodes_of_the_first_flavor_that_has_quota_and_room() -> None:
    d = run([flavored_queue("q", {"a100": 16, "h100": 16})], NODES, [gang("g", "q", 2, 8)])
    assert flavor_of(d, "g") == "a100"
    assert nodes_of(d, "g") == {"a1", "a2"}
    assert d.admissions[0].flavors == {"main": {GPU: "a100", "cpu": "a100"}}


def test_a_gang_moves_to_the_second_flavor_when_the_first_flavors_quota_is_used() -> None:
    first = gang("first", "q", 2, 8)
    d = run(
        [flavored_queue("q", {"a100": 16, "h100": 16})],
        NODES,
        [gang("second", "q", 2, 8, created=1)],
        [on("a100", first, "a1", "a2")],
    )
    assert flavor_of(d, "second") == "h100"
    # The flavor's toleration is what lets its pods onto the tainted H100 nodes.
    assert nodes_of(d, "second") == {"h1", "h2"}


def test_a_flavor_with_quota_but_full_nodes_is_passed_over_for_one_where_the_gang_packs() -> None:
    nodes = [a100_node("a1", used=8), a100_node("a2"), h100_node("h1"), h100_node("h2")]
    d = run([flavored_queue("q", {"a100": 16, "h100": 16})], nodes, [gang("g", "q", 2, 8)])
    assert flavor_of(d, "g") == "h100"
    assert nodes_of(d, "g") == {"h1", "h2"}


def test_quota_of_one_flavor_never_counts_for_another() -> None:
    # 8 + 8 GPUs of quota, but a gang of 12 fits neither flavor: inadmissible, not admitted.
    d = run([flavored_queue("q", {"a100": 8, "h100": 8})], NODES, [gang("g", "q", 3, 4)])
    assert d.admissions == ()
    why = d.pending["g"]
    assert why.cause is PendingCause.NEVER_FITS
    assert "of flavor a100" in why.describe()


def test_usage_on_one_flavor_leaves_the_other_flavors_quota_whole() -> None:
    used = gang("used", "q", 1, 8)
    d = run(
        [flavored_queue("q", {"a100": 8, "h100": 8})],
        NODES,
        [gang("g", "q", 1, 8, created=1)],
        [on("a100", used, "a1")],
    )
    assert flavor_of(d, "g") == "h100"


def test_a_pod_set_asking_for_h100_by_node_selector_skips_the_a100_flavor() -> None:
    g = gang(
        "g",
        "q",
        1,
        8,
        selector={TYPE: "h100"},
        tolerations=[Toleration("gpu-type", "Exists")],
    )
    d = run([flavored_queue("q", {"a100": 8, "h100": 8})], NODES, [g])
    assert flavor_of(d, "g") == "h100"


def test_a_pod_set_no_flavor_suits_is_inadmissible_with_a_reason() -> None:
    g = gang("g", "q", 1, 8, selector={TYPE: "v100"})
    d = run([flavored_queue("q", {"a100": 8, "h100": 8})], NODES, [g])
    assert d.pending["g"].cause is PendingCause.NO_FLAVOR
    assert "no flavor of ClusterQueue q suits" in d.pending["g"].describe()


def borrowing_world(when_can_borrow: WhenCanBorrow) -> Decisions:
    # q has no a100 quota of its own but may borrow the lender's; it owns 8 h100.
    queues = [
        flavored_queue("q", {"a100": 0, "h100": 8}, cohort="c", when_can_borrow=when_can_borrow),
        flavored_queue("lender", {"a100": 8, "h100": 0}, cohort="c"),
    ]
    return run(queues, NODES, [gang("g", "q", 1, 8)])


def test_by_default_a_gang_borrows_on_the_first_flavor_rather_than_trying_the_next() -> None:
    d = borrowing_world("MayStopSearch")
    assert flavor_of(d, "g") == "a100"
    assert d.admissions[0].borrowing


def test_try_next_flavor_prefers_a_later_flavor_within_nominal_quota_to_borrowing() -> None:
    d = borrowing_world("TryNextFlavor")
    assert flavor_of(d, "g") == "h100"
    assert not d.admissions[0].borrowing


def test_try_next_flavor_still_borrows_when_no_flavor_fits_within_nominal_quota() -> None:
    queues = [
        flavored_queue("q", {"a100": 0, "h100": 0}, cohort="c", when_can_borrow="TryNextFlavor"),
        flavored_queue("lender", {"a100": 0, "h100": 8}, cohort="c"),
    ]
    d = run(queues, NODES, [gang("g", "q", 1, 8)])
    assert flavor_of(d, "g") == "h100"
    assert d.admissions[0].borrowing


def preempting_world(when_can_preempt: WhenCanPreempt) -> Decisions:
    low = gang("low", "q", 1, 8, priority=0)
    queue = flavored_queue(
        "q", {"a100": 8, "h100": 8}, within=True, when_can_preempt=when_can_preempt
    )
    return run(
        [queue],
        NODES,
        [gang("high", "q", 1, 8, priority=5, created=1)],
        [on("a100", low, "a1")],
    )


def test_by_default_a_gang_takes_a_free_flavor_rather_than_evicting_on_the_first() -> None:
    d = preempting_world("TryNextFlavor")
    assert flavor_of(d, "high") == "h100"
    assert d.evictions == ()


def test_may_stop_search_evicts_on_the_first_flavor_where_eviction_makes_it_fit() -> None:
    d = preempting_world("MayStopSearch")
    assert flavor_of(d, "high") == "a100"
    assert [e.gang for e in d.evictions] == ["low"]


def test_an_admitted_gang_is_charged_to_the_flavor_of_its_record() -> None:
    # The record says h100: the a100 quota is still free for the next gang.
    held = gang("held", "q", 1, 8)
    d = run(
        [flavored_queue("q", {"a100": 8, "h100": 8})],
        NODES,
        [gang("g", "q", 1, 8, created=1)],
        [on("h100", held, "h1")],
    )
    assert flavor_of(d, "g") == "a100"


# Kueue issue 9406: borrowing on one flavor must not cost a queue its nominal quota on another.
def nominal_world() -> tuple[list[QueueSpec], list[AdmittedGang]]:
    # `heavy` borrows all of the lender's a100 (its share is high) and owns 8 h100 it does not
    # use; `light` owns nothing and borrows where it can.
    queues = [
        flavored_queue("heavy", {"a100": 0, "h100": 8}, cohort="c"),
        flavored_queue("light", {"a100": 0, "h100": 0}, cohort="c"),
        flavored_queue("lender", {"a100": 16, "h100": 0}, cohort="c"),
    ]
    borrowed = [gang(f"heavy-a{i}", "heavy", 1, 8) for i in range(2)]
    admitted = [on("a100", borrowed[0], "a1"), on("a100", borrowed[1], "a2")]
    return queues, admitted


def test_borrowing_on_one_flavor_never_delays_a_gang_owed_another_flavor() -> None:
    queues, admitted = nominal_world()
    owed = gang("heavy-h", "heavy", 1, 8, created=5)
    # Older, and from a queue with a lower share: under share order alone it would go first
    # and take heavy's idle h100 by borrowing.
    rival = gang("light-h", "light", 1, 8, created=1)
    d = run(queues, [*NODES[:2], h100_node("h1")], [owed, rival], admitted)
    assert [a.gang for a in d.admissions] == ["heavy-h"]
    assert flavor_of(d, "heavy-h") == "h100"
    assert d.pending["light-h"].cause is PendingCause.QUOTA


def test_a_queue_borrowing_one_flavor_still_reclaims_its_nominal_quota_on_another() -> None:
    queues, admitted = nominal_world()
    lent = gang("light-h", "light", 1, 8)
    owed = gang("heavy-h", "heavy", 1, 8, created=5)
    for config in (Config(), Config(fair_sharing_preemption=True)):
        d = run(
            queues,
            [*NODES[:2], h100_node("h1")],
            [owed],
            [*admitted, on("h100", lent, "h1")],
            config,
        )
        assert [a.gang for a in d.admissions] == ["heavy-h"]
        assert [(e.gang, e.cause) for e in d.evictions] == [("light-h", EvictionCause.RECLAIMED)]


def test_a_head_is_ordered_by_the_flavor_it_would_really_get() -> None:
    # q1 owns 8 h100 but its first flavor is a100, where it would borrow (MayStopSearch takes
    # that): it is ordered as a borrower, so q2's older gang, also borrowing a100, goes first.
    queues = [
        flavored_queue("lender", {"a100": 8}, cohort="c"),
        flavored_queue("q1", {"a100": 0, "h100": 8}, cohort="c"),
        flavored_queue("q2", {"a100": 0}, cohort="c"),
    ]
    pending = [gang("q2-old", "q2", 1, 8, created=0), gang("q1-new", "q1", 1, 8, created=50)]
    d = run(queues, [a100_node("a1"), h100_node("h1")], pending)
    assert flavor_of(d, "q2-old") == "a100"
    assert flavor_of(d, "q1-new") == "h100"  # and q1 then gets its own h100


def test_may_stop_search_tries_the_next_flavor_when_nobody_can_be_evicted_here() -> None:
    queue = flavored_queue(
        "q", {"a100": 8, "h100": 8}, reclaim="Never", when_can_preempt="MayStopSearch"
    )
    busy = on("a100", gang("busy", "q", 1, 8), "a1")
    d = run([queue], NODES, [gang("new", "q", 1, 8, created=10)], [busy])
    assert flavor_of(d, "new") == "h100"
    assert d.evictions == ()


def test_the_starvation_guard_holds_only_the_flavor_the_starving_gang_waits_for() -> None:
    queue = flavored_queue("q", {"a100": 16, "h100": 16})
    nodes = [a100_node("a1"), a100_node("a2", used=8), h100_node("h1")]
    starving = gang("starving", "q", 2, 8, created=0)  # a100 quota, but a100 nodes are busy
    newer = gang("newer", "q", 1, 8, created=50)
    d = run([queue], nodes, [starving, newer], config=Config(starvation_after=10.0))
    assert [a.gang for a in d.admissions] == ["newer"]
    assert flavor_of(d, "newer") == "h100"
    assert d.pending["starving"].held_nodes


def test_every_all_on_one_flavor_option_is_judged_however_many_combinations_there_are() -> None:
    names = [f"f{i}" for i in range(6)]
    flavors = tuple(FlavorSpec(n, {TYPE: n}) for n in names)
    queue = QueueSpec(
        "q",
        {},
        groups=(ResourceGroup((GPU,), tuple(FlavorQuota(n, {GPU: Quota(8 * G)}) for n in names)),),
    )
    leader_worker = Gang(
        "lws",
        "q",
        (PodSet(1, {GPU: G}, "leader"), PodSet(3, {GPU: G}, "worker")),
    )
    # 36 combinations; only f5's nodes exist.
    d = decide(
        Snapshot(
            (queue,), (node("n5", 8, labels={TYPE: "f5"}),), (leader_worker,), flavors=flavors
        ),
        0.0,
    )
    (admission,) = d.admissions
    assert admission.flavors == {"leader": {GPU: "f5"}, "worker": {GPU: "f5"}}


def test_flavors_whose_labels_contradict_are_never_given_to_one_pod_set_together() -> None:
    # GPUs come from a "zone-a" flavor, CPUs from a "zone-b" one first: a pod set needs both, so
    # it takes the CPUs' second flavor, in zone a, where its GPUs are.
    zone = "zone"
    flavors = (
        FlavorSpec("gpu-a", {zone: "a"}),
        FlavorSpec("cpu-b", {zone: "b"}),
        FlavorSpec("cpu-a", {zone: "a"}),
    )
    queue = QueueSpec(
        "q",
        {},
        groups=(
            ResourceGroup((GPU,), (FlavorQuota("gpu-a", {GPU: Quota(8 * G)}),)),
            ResourceGroup(
                ("cpu",),
                (
                    FlavorQuota("cpu-b", {"cpu": Quota(64 * G)}),
                    FlavorQuota("cpu-a", {"cpu": Quota(64 * G)}),
                ),
            ),
        ),
    )
    nodes = (node("a", 8, labels={zone: "a"}), node("b", 8, labels={zone: "b"}))
    d = decide(Snapshot((queue,), nodes, (gang("g", "q", 1, 4),), flavors=flavors), 0.0)
    (admission,) = d.admissions
    assert admission.flavors == {"main": {GPU: "gpu-a", "cpu": "cpu-a"}}
    assert {p.node for p in admission.placement} == {"a"}
