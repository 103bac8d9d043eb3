"""Through the controller's state and engine: a gang whose pods' own rules cannot hold on the
cluster's nodes waits, says which rule, and holds no quota; host ports bound by other pods keep
a gang's pods off their nodes."""

from __future__ import annotations

from typing import Any

from controller.api import kinds
from controller.quota.snapshot import HostPort
from controller.state.steps import WriteWorkloadStatus
from controller.workloads.job import JobAdapter
from controller.workloads.registry import REGISTRY
from hack.objects import resource_flavor
from tests.fakes.workloads import make_job
from tests.unit.test_controller_state import (
    NOW,
    cluster_queue,
    held,
    local_queue,
    state_of,
    typed,
    workload_of,
)

JSON = dict[str, Any]
HOST = "kubernetes.io/hostname"
GANG = ("team-a", "job-train")


def node(name: str) -> JSON:
    return {
        "metadata": {"name": name, "labels": {HOST: name}},
        "status": {
            "allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def job(pods: int, **spec: Any) -> JSON:
    made = make_job("train", namespace="team-a", parallelism=pods, completions=pods, memory=None)
    template = made["spec"]["template"]
    template["metadata"] = {"labels": {"app": "train"}}
    template["spec"].update(spec)
    return held(made, REGISTRY.instance(JobAdapter))


def one_per_node() -> JSON:
    term = {"labelSelector": {"matchLabels": {"app": "train"}}, "topologyKey": HOST}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def foreign_pod(node_name: str, host_port: int) -> JSON:
    port = {"containerPort": host_port, "hostPort": host_port}
    container = {"name": "c", "resources": {"requests": {"cpu": "1"}}, "ports": [port]}
    return {
        "metadata": {"namespace": "other", "name": "exporter"},
        "spec": {"nodeName": node_name, "containers": [container]},
        "status": {"phase": "Running"},
    }


def world(obj: JSON, *nodes: str, more: tuple[tuple[kinds.Kind, JSON], ...] = ()) -> Any:
    return state_of(
        (kinds.JOBS, obj),
        (kinds.WORKLOADS, workload_of("job-train")),
        (kinds.RESOURCE_FLAVORS, resource_flavor("default")),
        (kinds.CLUSTER_QUEUES, cluster_queue("cq-a", {"cpu": "16"})),
        (kinds.LOCAL_QUEUES, local_queue("team-a", "research", "cq-a")),
        *((kinds.NODES, node(n)) for n in nodes),
        *more,
    )


def test_a_job_of_one_pod_per_node_on_too_few_nodes_waits_naming_the_anti_affinity() -> None:
    state = world(job(3, affinity=one_per_node()), "n1", "n2")
    state.sync(NOW)

    decisions = state.decide(NOW)

    assert decisions.admissions == ()
    why = decisions.pending["team-a/job-train"].describe()
    assert "pod anti-affinity (one per kubernetes.io/hostname)" in why
    [write] = [
        s
        for s in state.plan_reasons(decisions.pending, NOW)[GANG]
        if isinstance(s, WriteWorkloadStatus)
    ]
    [condition] = [c for c in write.status.conditions if c.type == "QuotaReserved"]
    assert condition.status == "False"
    assert "pod anti-affinity (one per kubernetes.io/hostname)" in condition.message
    assert state.mirror.members[GANG].state == "pending"
    assert not any(state.reporter.queue_figures("cq-a").usage.values())


def test_the_same_job_on_enough_nodes_is_admitted_one_pod_per_node() -> None:
    state = world(job(3, affinity=one_per_node()), "n1", "n2", "n3")
    state.sync(NOW)

    [admission] = state.decide(NOW).admissions

    assert sorted((p.node, p.count) for p in admission.placement) == [
        ("n1", 1),
        ("n2", 1),
        ("n3", 1),
    ]


def test_host_ports_of_pods_outside_admitted_gangs_reach_the_engine_and_leave_with_them() -> None:
    exporter = foreign_pod("n1", 9100)
    state = world(job(1), "n1", "n2", more=((kinds.PODS, exporter),))
    state.sync(NOW)
    index = state.engine.index

    assert index.ports[index.by_name["n1"]] == (HostPort(9100),)
    assert index.ports[index.by_name["n2"]] == ()

    state.observe(kinds.PODS, typed(kinds.PODS, exporter), None)
    state.sync(NOW)

    assert state.engine.index.ports[index.by_name["n1"]] == ()


def test_a_job_binding_a_host_port_goes_to_a_node_where_it_is_free() -> None:
    port = {"containerPort": 9100, "hostPort": 9100}
    containers = [{"name": "main", "resources": {"requests": {"cpu": "1"}}, "ports": [port]}]
    state = world(
        job(1, containers=containers),
        "n1",
        "n2",
        more=((kinds.PODS, foreign_pod("n1", 9100)),),
    )
    state.sync(NOW)

    [admission] = state.decide(NOW).admissions

    # n1 is the fuller node, which best fit would take: its port is bound.
    assert [p.node for p in admission.placement] == ["n2"]


def test_a_pod_set_names_what_its_placement_check_leaves_unchecked() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOST}
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    state = world(job(2, affinity=affinity), "n1")

    gang = state.index.get(GANG)

    assert gang is not None and gang.shape is not None
    assert gang.shape.pod_sets[0].unchecked == (
        "pod affinity to pods of other workloads (app=cache)",
    )


def test_a_gang_admitted_with_rules_the_check_cannot_model_says_so_on_its_workload() -> None:
    cache = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOST}
    near_cache = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [cache]}}
    state = world(job(2, affinity=near_cache), "n1", "n2")
    state.sync(NOW)
    [admission] = state.decide(NOW).admissions

    plan = state.plan_admissions([admission], NOW)

    record = plan.records[GANG]
    [status] = [s.status for s in record if isinstance(s, WriteWorkloadStatus)]
    [checked] = [c for c in status.conditions if c.type == "PlacementChecked"]
    assert (checked.status, checked.reason) == ("False", "PlacementNotChecked")
    assert "main: pod affinity to pods of other workloads (app=cache)" in checked.message
    warnings = [s for s in record if getattr(s, "reason", None) == "PlacementNotChecked"]
    assert len(warnings) == 1 and warnings[0].warning
