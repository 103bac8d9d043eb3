"""Flavors and cohort trees as the controller reads and reports them.

A ClusterQueue's flavors keep their own quota and pin its gangs to their nodes; Cohort objects
shape the trees queues borrow in; a Cohort's status says what its tree uses and what is wrong
with its parents (a cycle admits nothing; a parent that is no Cohort is an implicit one).
"""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import CollectorRegistry

from controller import quota
from controller.api import kinds, names
from controller.cluster.cache import models
from controller.cluster.clients import decoder
from controller.metrics import ControllerMetrics
from controller.settings import Settings
from controller.state.cluster import ClusterState
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Mutation
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.registry import REGISTRY
from hack.objects import cluster_queue, local_queue, resource_flavor
from tests.fakes.workloads import make_job
from tests.unit.controller_world import NOW, World, held_job, start

JSON = dict[str, Any]
TYPES = models(REGISTRY, kinds.VOLCANO_PODGROUPS)


def cpu_flavor(name: str, cpu: str) -> JSON:
    return {"name": name, "resources": [{"name": "cpu", "nominalQuota": cpu}]}


def flavored_queue(name: str, *flavors: JSON, cohort: str | None = None) -> JSON:
    """A ClusterQueue of cpu alone, its flavors tried in the order given."""
    cq = cluster_queue(name, {"cpu": "0"}, cohort=cohort)
    cq["spec"]["resourceGroups"] = [{"coveredResources": ["cpu"], "flavors": list(flavors)}]
    return cq


def cohort(name: str, parent: str | None = None, cpu: str | None = None) -> JSON:
    spec: JSON = {}
    if parent is not None:
        spec["parent"] = parent
    if cpu is not None:
        spec["resourceGroups"] = [
            {"coveredResources": ["cpu"], "flavors": [cpu_flavor("default", cpu)]}
        ]
    return {
        "apiVersion": names.API_VERSION,
        "kind": "Cohort",
        "metadata": {"name": name},
        "spec": spec,
    }


def status_of(world: World, kind: kinds.Kind, name: str) -> JSON:
    obj = world.api.read_back(kind, name)
    assert obj is not None and "status" in obj, f"{kind.kind} {name} has no status"
    status: JSON = obj["status"]
    return status


def usage(status: JSON) -> dict[tuple[str, str], dict[str, str]]:
    """(flavor, resource) -> the figures a status shows for it."""
    return {
        (flavor["name"], res["name"]): {k: v for k, v in res.items() if k != "name"}
        for flavor in status["flavorsUsage"]
        for res in flavor["resources"]
    }


def active(status: JSON) -> JSON:
    [found] = [c for c in status["conditions"] if c["type"] == "Active"]
    return dict(found)


# -- flavors --------------------------------------------------------------------------------


async def test_a_cluster_queue_with_two_flavors_keeps_separate_quota_per_flavor(
    started: list[World],
) -> None:
    cq = flavored_queue("cq", cpu_flavor("on-demand", "2"), cpu_flavor("spot", "3"))
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, cq),
            (kinds.RESOURCE_FLAVORS, resource_flavor("on-demand")),
            (kinds.RESOURCE_FLAVORS, resource_flavor("spot")),
            (kinds.JOBS, held_job("small", 2)),
            (kinds.JOBS, held_job("large", 3)),
        ),
    )

    stats = await world.reconciler.reconcile_once()

    # 2 cpu fill on-demand; 3 more fit only spot's own quota, not a sum over the flavors.
    assert stats.admitted == 2
    assert usage(status_of(world, kinds.CLUSTER_QUEUES, "cq")) == {
        ("on-demand", "cpu"): {"total": "2", "borrowed": "0"},
        ("spot", "cpu"): {"total": "3", "borrowed": "0"},
    }

    world.api.put(kinds.JOBS, held_job("late", 1))
    await world.api.settle()
    stats = await world.reconciler.reconcile_once()

    # 5 cpu of quota in all, 5 used: one more cpu fits neither flavor.
    assert stats.admitted == 0
    assert world.suspended("late") is True
    waiting = world.workload("job-late")
    assert waiting is not None
    assert waiting["status"]["pendingReason"].startswith("Waiting for quota")


async def test_a_gang_of_a_queue_whose_only_flavor_does_not_exist_holds_no_quota_and_says_why(
    started: list[World],
) -> None:
    cq = flavored_queue("cq", cpu_flavor("spot", "4"))
    world = await start(started, World((kinds.CLUSTER_QUEUES, cq), (kinds.JOBS, held_job("j", 2))))

    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 0
    assert world.suspended("j") is True
    waiting = world.workload("job-j")
    assert waiting is not None
    assert "ResourceFlavor(s) spot it names do not exist" in waiting["status"]["pendingReason"]
    assert usage(status_of(world, kinds.CLUSTER_QUEUES, "cq"))[("spot", "cpu")]["total"] == "0"

    world.api.put(kinds.RESOURCE_FLAVORS, resource_flavor("spot"))
    await world.api.settle()
    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 1
    assert world.suspended("j") is False


def state_with(*objects: tuple[kinds.Kind, JSON], namespace_filter: bool = False) -> ClusterState:
    """A controller's state, with the placement check on, that has seen `objects`."""
    settings = Settings(pods_ready_timeout=None, core=quota.Config(placement=True))
    state = ClusterState(settings, PodGroupSettings(), namespace_filter=namespace_filter)
    for kind, obj in objects:
        state.observe(kind, None, decoder(TYPES[kind])(json.dumps(obj).encode()))
    return state


def job_with_workload(name: str, pods: int, namespace: str = "team-a") -> list[tuple[Any, JSON]]:
    """A held Job of `pods` one-cpu pods in LocalQueue `research`, and its Workload."""
    job = make_job(name, namespace=namespace, parallelism=pods, completions=pods, memory=None)
    editor = Editor(job)
    REGISTRY.instance(JobAdapter).default(editor, Mutation("research"))
    workload: JSON = {
        "metadata": {
            "namespace": namespace,
            "name": f"job-{name}",
            "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE},
        },
        "spec": {"queueName": "research", "podSets": [{"name": "main", "count": pods}]},
    }
    return [(kinds.JOBS, editor.doc), (kinds.WORKLOADS, workload)]


def node(name: str, pool: str, cpu: str = "4") -> JSON:
    return {
        "metadata": {"name": name, "labels": {"pool": pool}},
        "status": {
            "allocatable": {"cpu": cpu, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def flavor(name: str, **labels: str) -> JSON:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": labels},
    }


def test_resource_flavors_put_each_gang_on_its_flavors_nodes() -> None:
    state = state_with(
        (
            kinds.CLUSTER_QUEUES,
            flavored_queue("cq", cpu_flavor("fast", "2"), cpu_flavor("slow", "8")),
        ),
        (kinds.LOCAL_QUEUES, local_queue("team-a", "research", "cq")),
        (kinds.RESOURCE_FLAVORS, flavor("fast", pool="fast")),
        (kinds.RESOURCE_FLAVORS, flavor("slow", pool="slow")),
        (kinds.NODES, node("n-fast", "fast")),
        (kinds.NODES, node("n-slow", "slow")),
        *job_with_workload("first", 2),
        *job_with_workload("second", 2),
    )
    state.sync(NOW)

    decisions = state.decide(NOW)

    placed = {a.gang: ({p.node for p in a.placement}, a.flavors) for a in decisions.admissions}
    assert placed == {
        "team-a/job-first": ({"n-fast"}, {"main": {"cpu": "fast"}}),
        # fast's quota is used up: the next flavor, on its own nodes.
        "team-a/job-second": ({"n-slow"}, {"main": {"cpu": "slow"}}),
    }


def test_a_changed_resource_flavor_moves_the_next_gangs_to_its_new_nodes() -> None:
    state = state_with(
        (kinds.CLUSTER_QUEUES, flavored_queue("cq", cpu_flavor("fast", "8"))),
        (kinds.LOCAL_QUEUES, local_queue("team-a", "research", "cq")),
        (kinds.RESOURCE_FLAVORS, flavor("fast", pool="fast")),
        (kinds.NODES, node("n-fast", "fast")),
        (kinds.NODES, node("n-other", "other")),
        *job_with_workload("train", 2),
    )
    state.sync(NOW)  # the engine knows flavor fast as the nodes of pool fast
    old = decoder(TYPES[kinds.RESOURCE_FLAVORS])(json.dumps(flavor("fast", pool="fast")).encode())
    new = decoder(TYPES[kinds.RESOURCE_FLAVORS])(json.dumps(flavor("fast", pool="other")).encode())
    state.observe(kinds.RESOURCE_FLAVORS, old, new)
    state.sync(NOW)

    [admission] = state.decide(NOW).admissions

    assert {p.node for p in admission.placement} == {"n-other"}


# -- cohort trees ---------------------------------------------------------------------------


async def test_a_cohort_cycle_makes_its_trees_gangs_wait_and_every_status_says_so(
    started: list[World],
) -> None:
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, cluster_queue("cq", {"cpu": "4"}, cohort="team")),
            (kinds.COHORTS, cohort("team", parent="org")),
            (kinds.COHORTS, cohort("org", parent="team")),
            (kinds.JOBS, held_job("train", 1)),
        ),
    )

    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 0
    assert world.suspended("train") is True
    waiting = world.workload("job-train")
    assert waiting is not None
    assert "cycle of parents" in waiting["status"]["pendingReason"]
    assert "(team -> org -> team)" in waiting["status"]["pendingReason"]
    for name, cycle in (("team", "team -> org -> team"), ("org", "org -> team -> org")):
        condition = active(status_of(world, kinds.COHORTS, name))
        assert (condition["status"], condition["reason"]) == ("False", "CohortCycle")
        assert f"Cohort {name} is in a cycle of parents ({cycle})" in condition["message"]
    queue = active(status_of(world, kinds.CLUSTER_QUEUES, "cq"))
    assert (queue["status"], queue["reason"]) == ("False", "CohortCycle")


async def test_a_cohort_below_a_cycle_says_its_parents_lead_into_it(
    started: list[World],
) -> None:
    world = await start(
        started,
        World(
            (kinds.COHORTS, cohort("team", parent="org")),
            (kinds.COHORTS, cohort("org", parent="company")),
            (kinds.COHORTS, cohort("company", parent="org")),
        ),
    )

    await world.reconciler.reconcile_once()

    condition = active(status_of(world, kinds.COHORTS, "team"))
    assert condition["status"] == "False"
    assert (
        "the parents of Cohort team lead into a cycle (org -> company -> org)"
        in (condition["message"])
    )


async def test_a_cohort_whose_parent_is_no_cohort_object_is_reported(
    started: list[World],
) -> None:
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, cluster_queue("cq", {"cpu": "4"}, cohort="team")),
            (kinds.COHORTS, cohort("team", parent="ghost")),
            (kinds.JOBS, held_job("train", 1)),
        ),
    )

    stats = await world.reconciler.reconcile_once()

    # The missing parent is an implicit cohort: the tree still admits.
    assert stats.admitted == 1
    condition = active(status_of(world, kinds.COHORTS, "team"))
    assert (condition["status"], condition["reason"]) == ("True", "ParentNotFound")
    assert "ghost is no Cohort object" in condition["message"]
    assert "implicit cohort with no quota of its own" in condition["message"]


async def test_cohort_statuses_show_their_trees_usage_quota_and_share(
    started: list[World],
) -> None:
    """cq (2 cpu) is in team, team in org; org adds 4 cpu of its own. A gang of 4 cpu uses
    cq's 2 and borrows 2 through team from org."""
    metrics = ControllerMetrics(CollectorRegistry())
    world = World(
        (kinds.CLUSTER_QUEUES, cluster_queue("cq", {"cpu": "2"}, cohort="team")),
        (kinds.COHORTS, cohort("team", parent="org")),
        (kinds.COHORTS, cohort("org", cpu="4")),
        (kinds.JOBS, held_job("train", 4)),
    )
    world.reconciler.metrics = metrics
    await start(started, world)

    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 1
    team, org = status_of(world, kinds.COHORTS, "team"), status_of(world, kinds.COHORTS, "org")
    assert usage(team) == {
        ("default", "cpu"): {"total": "4", "subtreeQuota": "2", "borrowed": "2"},
    }
    assert usage(org) == {
        ("default", "cpu"): {"total": "4", "subtreeQuota": "6", "borrowed": "0"},
    }
    # team borrows 2 of the 6 cpu org holds: a share of 334 (x1000, rounded up); org is a root.
    assert (team["weightedShare"], org["weightedShare"]) == (334, 0)
    assert active(team)["status"] == active(org)["status"] == "True"
    share = metrics.registry.get_sample_value("kohort_cohort_weighted_share", {"cohort": "team"})
    assert share == 334

    writes = len(world.api.log)
    await world.reconciler.reconcile_once()

    # Nothing changed: no status is written again.
    assert not [w for w in world.api.log[writes:] if w[1] == "cohorts/status"]


def namespace(name: str) -> JSON:
    return {"metadata": {"name": name, "labels": {}}}


def test_with_a_namespace_selector_the_engine_takes_whole_cohort_trees() -> None:
    """team-a uses cq-a only; cq-b lends to it through the tree (left and right under org),
    so it counts too. cq-c, in a tree of its own, does not."""
    state = state_with(
        (kinds.NAMESPACES, namespace("team-a")),
        (kinds.LOCAL_QUEUES, local_queue("team-a", "research", "cq-a")),
        (kinds.LOCAL_QUEUES, local_queue("elsewhere", "research", "cq-c")),
        (kinds.CLUSTER_QUEUES, cluster_queue("cq-a", {"cpu": "1"}, cohort="left")),
        (kinds.CLUSTER_QUEUES, cluster_queue("cq-b", {"cpu": "8"}, cohort="right")),
        (kinds.CLUSTER_QUEUES, cluster_queue("cq-c", {"cpu": "8"}, cohort="alone")),
        (kinds.COHORTS, cohort("left", parent="org")),
        (kinds.COHORTS, cohort("right", parent="org")),
        (kinds.COHORTS, cohort("org", cpu="2")),
        (kinds.COHORTS, cohort("alone")),
        namespace_filter=True,
    )

    state.sync(NOW)

    assert sorted(state.engine.queues) == ["cq-a", "cq-b"]
    assert [n.name for n in state.engine.cohort_nodes] == ["left", "org", "right"]
    [org] = [n for n in state.engine.cohort_nodes if n.name == "org"]
    assert org.subtree == {("default", "cpu"): 2_000 + 1_000 + 8_000}
