"""Hierarchical cohorts in the decision core: quota flows through a tree of cohorts."""

from __future__ import annotations

from collections.abc import Sequence

from controller.quota import (
    AdmittedGang,
    CohortSpec,
    Config,
    Decisions,
    Engine,
    FlavorQuota,
    Gang,
    Node,
    PendingCause,
    QueueSpec,
    Quota,
    ResourceGroup,
    Snapshot,
    decide,
)
from controller.quota.outcomes import EvictionCause
from controller.quota.quota import add_usage, available, build_tree
from controller.quota.snapshot import DEFAULT_FLAVOR
from tests.unit.test_quota_builders import GPU, G, gang, node, queue, running


def cohort(
    name: str,
    parent: str | None = None,
    *,
    gpus: int = 0,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    weight: float = 1.0,
) -> CohortSpec:
    """A cohort with `gpus` of its own (4 CPUs per GPU) and limits towards its parent."""

    def scaled(v: int | None, per: int) -> int | None:
        return None if v is None else v * per

    quotas = {
        GPU: Quota(gpus * G, scaled(borrowing_limit, G), scaled(lending_limit, G)),
        "cpu": Quota(gpus * 4 * G, scaled(borrowing_limit, 4 * G), scaled(lending_limit, 4 * G)),
    }
    groups = (ResourceGroup((GPU, "cpu"), (FlavorQuota(DEFAULT_FLAVOR, quotas),)),)
    return CohortSpec(name, parent, groups, weight)


# org -> dept1 (team-a, team-b) and dept2 (team-c, team-d); 4 GPUs each, 16 in all.
ORG = [cohort("org"), cohort("dept1", "org"), cohort("dept2", "org")]
TEAMS = [
    queue("team-a", 4, cohort="dept1"),
    queue("team-b", 4, cohort="dept1"),
    queue("team-c", 4, cohort="dept2"),
    queue("team-d", 4, cohort="dept2"),
]
NODES = [node(f"n{i}", 4) for i in range(4)]


def run(
    pending: Sequence[Gang] = (),
    admitted: Sequence[AdmittedGang] = (),
    *,
    queues: Sequence[QueueSpec] = TEAMS,
    cohorts: Sequence[CohortSpec] = ORG,
    nodes: Sequence[Node] = NODES,
    config: Config | None = None,
) -> Decisions:
    snapshot = Snapshot(
        tuple(queues), tuple(nodes), tuple(pending), tuple(admitted), cohorts=tuple(cohorts)
    )
    return decide(snapshot, 100.0, config)


def test_a_team_borrows_from_its_sibling_before_its_department_borrows_across() -> None:
    engine = Engine(TEAMS, NODES, cohorts=ORG)
    for i in range(2):
        engine.add_pending(gang(f"a{i}", "team-a", 1, 4, created=i))
    assert [a.gang for a in engine.cycle(0.0).admissions] == ["a0", "a1"]
    dept1 = next(n for n in engine.cohort_nodes if n.name == "dept1")
    # 8 GPUs in team-a: 4 of its own and 4 of team-b's; the department is within its quota,
    # so nothing is taken from dept2.
    assert engine.queues["team-a"].state.above
    assert not dept1.above
    assert available(engine.queues["team-c"].state, (DEFAULT_FLAVOR, GPU)) == 8 * G
    engine.add_pending(gang("a2", "team-a", 1, 4, created=2))
    assert [a.gang for a in engine.cycle(1.0).admissions] == ["a2"]
    assert dept1.above  # now dept1 borrows from the org
    assert available(engine.queues["team-c"].state, (DEFAULT_FLAVOR, GPU)) == 4 * G


def test_the_sibling_gets_its_quota_back_by_reclaim() -> None:
    # team-a holds team-b's 4 GPUs; dept2 uses all of its own 8, so nothing is left to borrow.
    a = [gang(f"a{i}", "team-a", 1, 4) for i in range(2)]
    c = [gang(f"c{i}", "team-c", 1, 4) for i in range(2)]
    admitted = [running(g, f"n{i}") for i, g in enumerate([*a, *c])]
    d = run([gang("b", "team-b", 1, 4, created=1)], admitted)
    assert [a.gang for a in d.admissions] == ["b"]
    # team-c borrows from its sibling too, but dept2 is within its quota: not a victim.
    assert [(e.queue, e.cause) for e in d.evictions] == [("team-a", EvictionCause.RECLAIMED)]


def test_the_other_department_gets_its_quota_back_by_reclaim() -> None:
    # team-a holds 12: its own 4, team-b's 4 and 4 of dept2's; team-d uses its own 4.
    a = [gang(f"a{i}", "team-a", 1, 4) for i in range(3)]
    d4 = gang("d", "team-d", 1, 4)
    admitted = [running(g, f"n{i}") for i, g in enumerate([*a, d4])]
    d = run([gang("c", "team-c", 1, 4, created=1)], admitted)
    assert [a.gang for a in d.admissions] == ["c"]
    assert [(e.queue, e.cause) for e in d.evictions] == [("team-a", EvictionCause.RECLAIMED)]


def test_a_reclaim_never_takes_a_department_below_its_own_quota() -> None:
    # team-a borrows team-b's idle quota (dept1 stays within its 8); team-c borrowed team-d's.
    # team-d's reclaim must take from its sibling team-c, never from dept1.
    a = [gang(f"a{i}", "team-a", 1, 4, created=0) for i in range(2)]
    c = [gang(f"c{i}", "team-c", 1, 4, created=0) for i in range(2)]
    # team-a's gangs started last: the cheapest victims, were they allowed.
    admitted = [
        running(a[0], "n0", at=90.0),
        running(a[1], "n1", at=90.0),
        running(c[0], "n2", at=0.0),
        running(c[1], "n3", at=0.0),
    ]
    d = run([gang("d", "team-d", 1, 4, created=1)], admitted)
    assert [a.gang for a in d.admissions] == ["d"]
    assert [e.queue for e in d.evictions] == ["team-c"]


def test_a_department_lending_limit_keeps_its_idle_quota_from_the_other_department() -> None:
    cohorts = [cohort("org"), cohort("dept1", "org", lending_limit=0), cohort("dept2", "org")]
    d = run([gang(f"c{i}", "team-c", 1, 4, created=i) for i in range(4)], cohorts=cohorts)
    # dept2's own 8 GPUs and nothing of dept1's.
    assert [a.gang for a in d.admissions] == ["c0", "c1"]
    assert d.pending["c2"].cause is PendingCause.QUOTA


def test_a_department_borrowing_limit_caps_what_it_takes_from_the_org() -> None:
    cohorts = [cohort("org"), cohort("dept1", "org"), cohort("dept2", "org", borrowing_limit=4)]
    d = run([gang(f"c{i}", "team-c", 1, 4, created=i) for i in range(4)], cohorts=cohorts)
    assert [a.gang for a in d.admissions] == ["c0", "c1", "c2"]
    assert d.pending["c3"].cause is PendingCause.QUOTA


def test_a_cohorts_own_quota_is_shared_by_everything_below_it() -> None:
    cohorts = [cohort("org", gpus=4), cohort("dept1", "org"), cohort("dept2", "org")]
    queues = [queue("team-a", 0, cohort="dept1"), queue("team-c", 0, cohort="dept2")]
    d = run(
        [gang("a", "team-a", 1, 4), gang("c", "team-c", 1, 4, created=1)],
        queues=queues,
        cohorts=cohorts,
    )
    assert [a.gang for a in d.admissions] == ["a"]
    assert d.pending["c"].cause is PendingCause.QUOTA


def test_fair_share_is_compared_between_departments_before_between_teams() -> None:
    # The org owns 8 GPUs; dept1 already borrows 4 of them through team-a. team-b's gang would
    # leave team-b less borrowing than team-c's would leave team-c, but dept1 borrows more
    # than dept2: the org gives its last 4 GPUs to dept2.
    cohorts = [cohort("org", gpus=8), cohort("dept1", "org"), cohort("dept2", "org")]
    queues = [
        queue("team-a", 0, cohort="dept1"),
        queue("team-b", 0, cohort="dept1"),
        queue("team-c", 0, cohort="dept2"),
    ]
    held = gang("a", "team-a", 1, 4)
    d = run(
        [gang("b", "team-b", 1, 2, created=0), gang("c", "team-c", 1, 4, created=1)],
        [running(held, "n0")],
        queues=queues,
        cohorts=cohorts,
    )
    assert d.admissions[0].gang == "c"


def test_a_heavier_department_weight_gets_the_contested_quota() -> None:
    def first(weights: tuple[float, float]) -> str:
        # The org owns 12 GPUs; each department borrows 4 already; 4 are left for one gang.
        cohorts = [
            cohort("org", gpus=12),
            cohort("dept1", "org", weight=weights[0]),
            cohort("dept2", "org", weight=weights[1]),
        ]
        queues = [queue("team-a", 0, cohort="dept1"), queue("team-c", 0, cohort="dept2")]
        held = [gang("a-old", "team-a", 1, 4), gang("c-old", "team-c", 1, 4)]
        d = run(
            [gang("a", "team-a", 1, 4, created=1), gang("c", "team-c", 1, 4, created=0)],
            [running(held[0], "n0"), running(held[1], "n1")],
            queues=queues,
            cohorts=cohorts,
            nodes=[node(f"n{i}", 8) for i in range(2)],
        )
        assert len(d.admissions) == 1
        return d.admissions[0].gang

    assert first((1.0, 1.0)) == "c"  # equal shares: the older gang
    assert first((3.0, 1.0)) == "a"  # dept1's share counts a third


def test_a_cycle_of_parents_admits_nothing_in_that_tree_and_says_why() -> None:
    cohorts = [cohort("x", "y"), cohort("y", "x")]
    queues = [queue("q", 8, cohort="x"), queue("free", 8, cohort=None)]
    d = run([gang("g", "q", 1, 4), gang("other", "free", 1, 4)], queues=queues, cohorts=cohorts)
    assert [a.gang for a in d.admissions] == ["other"]
    why = d.pending["g"]
    assert why.cause is PendingCause.BROKEN_COHORT
    assert "cycle of parents" in why.describe() and "x -> y -> x" in why.describe()


def test_nothing_admitted_is_lost_when_the_tree_changes() -> None:
    engine = Engine(TEAMS, NODES, cohorts=ORG)
    for i in range(3):
        engine.add_pending(gang(f"a{i}", "team-a", 1, 4, created=i))
    assert len(engine.cycle(0.0).admissions) == 3
    # A cycle appears, then goes away: the admitted gangs stay, nothing new is admitted
    # meanwhile, and the quota they hold is counted again afterwards.
    engine.set_queues(TEAMS, [cohort("org", "dept1"), cohort("dept1", "org"), ORG[2]])
    engine.add_pending(gang("b", "team-b", 1, 4, created=5))
    d = engine.cycle(1.0)
    assert d.admissions == () and d.evictions == ()
    assert set(engine.running) == {"a0", "a1", "a2"}
    engine.set_queues(TEAMS, ORG)
    d = engine.cycle(2.0)
    assert [a.gang for a in d.admissions] == ["b"]  # 12 of the org's 16 used, 4 free
    assert set(engine.running) == {"a0", "a1", "a2", "b"}


def test_a_parent_that_does_not_exist_is_a_cohort_with_no_quota_of_its_own() -> None:
    tree = build_tree(
        [queue("q", 4, cohort="dept"), queue("r", 4, cohort="dept")],
        [cohort("dept", "missing")],
    )
    dept = tree["q"].parent
    assert dept is not None and dept.parent is not None
    assert dept.parent.name == "missing"
    assert dept.parent.subtree[(DEFAULT_FLAVOR, GPU)] == 8 * G


def test_teams_of_one_department_are_compared_on_their_own_shares() -> None:
    # team-a runs its own 4; team-b runs 8 (4 borrowed). One node of 4 is free: team-a's 4-GPU
    # head (its share after it: 250) goes before team-b's 1-GPU head (312.5), whatever the
    # department's share would be after each.
    a0, b0, b1 = gang("a0", "team-a", 1, 4), gang("b0", "team-b", 1, 4), gang("b1", "team-b", 1, 4)
    d = run(
        [gang("a-head", "team-a", 1, 4, created=5), gang("b-head", "team-b", 1, 1, created=5)],
        [running(a0, "n0"), running(b0, "n1"), running(b1, "n2")],
    )
    assert [a.gang for a in d.admissions] == ["a-head"]


def test_a_queues_guaranteed_quota_survives_a_cohort_left_over_committed() -> None:
    # a lends nothing; b's quota was cut from 4 to 2 while b runs 4: the cohort is over
    # committed, but a's own 4 are still a's.
    gpu = (DEFAULT_FLAVOR, GPU)
    tree = build_tree(
        [
            QueueSpec("a", {GPU: Quota(4 * G, lending_limit=0)}, cohort="c"),
            QueueSpec("b", {GPU: Quota(2 * G)}, cohort="c"),
        ]
    )
    add_usage(tree["b"], {gpu: 4 * G}, +1)
    assert available(tree["a"], gpu) == 4 * G
    assert available(tree["b"], gpu) == -2 * G
