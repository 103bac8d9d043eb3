"""A `pods` quota in the decision core: every pod of a gang is one pod, counted by the queues
that cover `pods` and by no other."""

from __future__ import annotations

from controller.quota import (
    AdmittedGang,
    Engine,
    FlavorQuota,
    FlavorSpec,
    Gang,
    Node,
    PendingCause,
    PodSet,
    QueueSpec,
    Quota,
    ResourceGroup,
    Snapshot,
    decide,
)
from tests.unit.test_quota_builders import GPU, G, node, queue

POD = 1000  # one pod in milli-units
FLAVOR = FlavorSpec("default")


def pods_queue(pods: int, *, cpu: int | None = None) -> QueueSpec:
    """A ClusterQueue covering `pods` (and `cpu` when given) on one named flavor."""
    quotas = {"pods": Quota(pods * POD)}
    if cpu is not None:
        quotas["cpu"] = Quota(cpu * 1000)
    group = ResourceGroup(tuple(sorted(quotas)), (FlavorQuota(FLAVOR.name, quotas),))
    return QueueSpec("cq", {}, groups=(group,))


def pod_gang(name: str, pods: int, *, cpu: int = 0, created: float = 0.0) -> Gang:
    requests = {"cpu": cpu * 1000} if cpu else {}
    return Gang(name, "cq", (PodSet(pods, requests),), created=created)


def plain_node(name: str = "n1", *, pods: int | None = 110) -> Node:
    allocatable = {"cpu": 64_000}
    if pods is not None:
        allocatable["pods"] = pods * POD
    return Node(name, allocatable)


def test_a_pods_quota_of_7_admits_one_5_pod_gang_and_holds_the_second_naming_pods() -> None:
    snapshot = Snapshot(
        (pods_queue(7),),
        (plain_node(),),
        pending=(pod_gang("first", 5, created=1), pod_gang("second", 5, created=2)),
        flavors=(FLAVOR,),
    )
    decisions = decide(snapshot, 10.0)
    assert [a.gang for a in decisions.admissions] == ["first"]
    assert decisions.admissions[0].flavors == {"main": {"pods": "default"}}
    why = decisions.pending["second"]
    assert why.cause is PendingCause.QUOTA
    assert why.describe() == (
        "Waiting for quota: needs 5 pods, queue can take 2 more (nominal 7, using 5)"
    )


def test_a_queue_counting_pods_charges_each_pod_set_its_pod_count() -> None:
    engine = Engine([pods_queue(20, cpu=64)], [plain_node()], flavors=[FLAVOR])
    two_sets = Gang("g", "cq", (PodSet(1, {"cpu": 1000}, "leader"), PodSet(4, {"cpu": 2000})))
    engine.add_pending(two_sets)
    decisions = engine.cycle(10.0)
    assert [a.gang for a in decisions.admissions] == ["g"]
    usage = engine.queues["cq"].state.usage
    assert usage[("default", "pods")] == 5 * POD
    assert usage[("default", "cpu")] == 9000
    engine.finish("g")
    assert engine.queues["cq"].state.usage.get(("default", "pods"), 0) == 0


def test_an_admitted_gang_counts_its_pods_against_a_pods_quota() -> None:
    admitted = AdmittedGang(pod_gang("running", 5), admitted_at=1.0)
    snapshot = Snapshot(
        (pods_queue(7),),
        (plain_node(),),
        pending=(pod_gang("next", 3),),
        admitted=(admitted,),
        flavors=(FLAVOR,),
    )
    decisions = decide(snapshot, 10.0)
    assert not decisions.admissions
    assert "needs 3 pods, queue can take 2 more" in decisions.pending["next"].describe()


def test_a_queue_that_covers_no_pods_admits_a_gang_of_any_pod_count() -> None:
    engine = Engine([queue("a", 8, cohort=None)], [node("n1", 8)])
    engine.add_pending(Gang("many", "a", (PodSet(40, {"cpu": 100}),)))
    decisions = engine.cycle(10.0)
    assert [a.gang for a in decisions.admissions] == ["many"]
    assert all(resource != "pods" for _, resource in engine.queues["a"].state.usage)


def test_counting_pods_in_quota_leaves_the_placement_check_to_the_nodes_resources() -> None:
    """The quota charge of pods does not reach the nodes: a node that lists no `pods`
    allocatable still hosts the gang, and nodes keep their own `pods` allocatable."""
    for pods in (None, 110):
        snapshot = Snapshot(
            (pods_queue(10, cpu=64),),
            (plain_node(pods=pods),),
            pending=(pod_gang("g", 4, cpu=2),),
            flavors=(FLAVOR,),
        )
        decisions = decide(snapshot, 10.0)
        assert [a.gang for a in decisions.admissions] == ["g"], pods
        assert [(p.node, p.count) for p in decisions.admissions[0].placement] == [("n1", 4)]


def test_a_gpu_gang_of_more_pods_than_its_queue_can_ever_hold_is_inadmissible_naming_pods() -> None:
    quotas = {GPU: Quota(16 * G), "pods": Quota(3 * POD)}
    group = ResourceGroup((GPU, "pods"), (FlavorQuota("default", quotas),))
    snapshot = Snapshot(
        (QueueSpec("cq", {}, groups=(group,)),),
        (node("n1", 8), node("n2", 8)),
        pending=(Gang("big", "cq", (PodSet(4, {GPU: 2 * G}),)),),
        flavors=(FLAVOR,),
    )
    decisions = decide(snapshot, 10.0)
    assert not decisions.admissions
    why = decisions.pending["big"]
    assert why.cause is PendingCause.NEVER_FITS
    assert "needs 4 pods, more than ClusterQueue cq can ever hold (3:" in why.describe()
