"""`kubectl kohort` on a small cluster read from objects: two teams in a cohort, one node,
each team's running gang filling its quota, gangs waiting behind them."""

from __future__ import annotations

import importlib
import json
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest

from controller.api import kube, names
from controller.api.queues import ClusterQueue, Cohort, LocalQueue, ResourceFlavor
from controller.api.times import format_time
from controller.api.workload import Workload
from hack.objects import cluster_queue, cohort, local_queue, resource_flavor
from kohort.kubectl import text, views
from kohort.kubectl.main import build_parser, main, render
from kohort.kubectl.world import Objects, World, world_of

JSON = dict[str, Any]
NOW = 1_800_000_000.0


def workload(
    name: str,
    queue: str,
    pods: int,
    *,
    priority: int = 0,
    created: float = NOW - 100,
    admitted_on: str | None = None,
    cluster_queue_name: str = "",
    reason: str | None = None,
    extra_status: JSON | None = None,
) -> Workload:
    status: JSON = {"conditions": [], **(extra_status or {})}
    if reason:
        status["pendingReason"] = reason
    if admitted_on:
        status["conditions"] = [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"}
        ]
        status["admission"] = {
            "clusterQueue": cluster_queue_name,
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": pods,
                    "flavors": {"cpu": "default"},
                    "nodes": [{"node": admitted_on, "count": pods}],
                }
            ],
            "admittedAt": format_time(created + 10),
        }
    return Workload.model_validate(
        {
            "apiVersion": names.API_VERSION,
            "kind": "Workload",
            "metadata": {
                "namespace": "ns",
                "name": f"job-{name}",
                "creationTimestamp": format_time(created),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name}],
            },
            "spec": {
                "queueName": queue,
                "priority": priority,
                "podSets": [{"name": "main", "count": pods, "requests": {"cpu": "1"}}],
            },
            "status": status,
        }
    )


def node(name: str, cpus: int) -> kube.Node:
    return msgspec.convert(
        {
            "metadata": {"name": name},
            "status": {
                "allocatable": {"cpu": str(cpus), "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
        kube.Node,
    )


def cluster(*pending: Workload) -> World:
    """team-a and team-b (4 cpu each, weights 1 and 2) in cohort org; an 8-cpu node; each
    team's running gang of 4 pods holds its whole quota."""
    objects = Objects(
        cluster_queues=[
            ClusterQueue.model_validate(cluster_queue("team-a", {"cpu": "4"}, cohort="org")),
            ClusterQueue.model_validate(
                cluster_queue("team-b", {"cpu": "4"}, cohort="org", weight="2")
            ),
        ],
        cohorts=[Cohort.model_validate(cohort("org"))],
        local_queues=[
            LocalQueue.model_validate(local_queue("ns", "lq-a", "team-a")),
            LocalQueue.model_validate(local_queue("ns", "lq-b", "team-b")),
        ],
        flavors=[ResourceFlavor.model_validate(resource_flavor("default"))],
        workloads=[
            workload("run-a", "lq-a", 4, admitted_on="n1", cluster_queue_name="team-a"),
            workload("run-b", "lq-b", 4, admitted_on="n1", cluster_queue_name="team-b"),
            *pending,
        ],
        nodes=[node("n1", 8)],
    )
    return world_of(objects, NOW)


WAITING = (
    workload("big", "lq-a", 3, created=NOW - 50, reason="Waiting for quota: needs 3 cpu"),
    workload("urgent", "lq-a", 2, created=NOW - 40, priority=5),
    workload("other", "lq-b", 1, created=NOW - 60),
)


def test_queues_show_each_teams_quota_usage_and_share() -> None:
    rows = views.queues(cluster(*WAITING))

    by_name = {r["name"]: r for r in rows}
    assert (by_name["team-a"]["pending"], by_name["team-a"]["admitted"]) == (2, 1)
    [cpu] = [f for f in by_name["team-a"]["flavors"] if f["resource"] == "cpu"]
    assert (cpu["flavor"], cpu["nominal"], cpu["usage"], cpu["borrowed"]) == (
        "default",
        "4",
        "4",
        "0",
    )
    shown = text.queues(rows)
    assert shown.splitlines()[1].split() == [
        "team-a",
        "org",
        "2",
        "1",
        "default/cpu",
        "4",
        "4",
        "0",
        "0",
    ]
    assert max(len(line) for line in shown.splitlines()) <= 100


def test_the_tree_puts_both_teams_under_their_cohort() -> None:
    forest = views.tree(cluster(*WAITING))

    [org] = forest
    assert org["name"] == "org" and org["kind"] == "Cohort"
    assert [c["name"] for c in org["children"]] == ["team-a", "team-b"]
    shown = text.tree(forest)
    assert shown.splitlines()[0].startswith("org (cohort")
    assert "default/cpu: usage 8 of 8" in shown  # what its members lend it
    assert "|-- team-a (queue" in shown and "`-- team-b (queue" in shown


def test_pending_lists_a_queues_backlog_in_order_with_positions() -> None:
    rows = views.pending(cluster(*WAITING), "team-a", None)

    assert [(r["name"], r["positionInClusterQueue"]) for r in rows] == [
        ("job-urgent", 1),
        ("job-big", 2),
    ]
    shown = text.pending(rows)
    assert shown.splitlines()[0] == "Namespace: ns"
    assert shown.splitlines()[2].split()[:4] == ["1", "1", "2", "job-urgent"]
    assert max(len(line) for line in shown.splitlines()) <= 100


def test_pending_of_a_local_queue_counts_its_own_positions() -> None:
    rows = views.pending(cluster(*WAITING), None, ("ns", "lq-b"))

    assert [(r["name"], r["positionInLocalQueue"]) for r in rows] == [("job-other", 1)]


def test_why_tells_the_reason_what_is_ahead_and_which_running_gang_must_finish() -> None:
    world = cluster(*WAITING)
    wl = views.find(world, "ns", "job/big")
    assert wl is not None and wl.metadata.name == "job-big"

    data = views.why(world, wl)

    assert data["reason"] == "Waiting for quota: needs 3 cpu"
    assert data["position"] == {"clusterQueue": 2, "localQueue": 2, "cohort": 3}
    assert [a["workload"] for a in data["ahead"]] == ["ns/job-urgent"]
    changes = data["wouldBeAdmittedNow"]
    assert changes["fewerPods"] is None  # the node and the quota are full
    assert changes["finishing"]["smallest"] == "ns/job-run-a"
    [default] = changes["flavors"]
    assert default["admitted"] is False
    shown = text.why(data)
    assert "once job-run-a finishes" in shown  # its own namespace goes without saying
    assert max(len(line) for line in shown.splitlines()) <= 100


def test_why_names_how_many_pods_would_fit_now() -> None:
    """With team-b's running gang gone, 4 cpu are free: 4 of big's 6 pods would fit."""
    world = cluster(workload("big", "lq-a", 6, created=NOW - 50))
    left = tuple(a for a in world.snapshot.admitted if a.gang.name != "ns/job-run-b")
    freed = replace(world, snapshot=replace(world.snapshot, admitted=left))
    wl = views.find(freed, "ns", "big")
    assert wl is not None

    changes = views.why(freed, wl)["wouldBeAdmittedNow"]

    assert changes["fewerPods"] == {"podSet": "main", "pods": 4, "insteadOf": 6}


def test_why_shows_a_forecast_its_status_carries() -> None:
    late = workload(
        "late", "lq-a", 1, extra_status={"forecast": {"startAt": "2027-01-01T00:00:00Z"}}
    )
    world = cluster(late)
    wl = views.find(world, "ns", "late")
    assert wl is not None

    data = views.why(world, wl)

    assert data["forecast"] == {"forecast": {"startAt": "2027-01-01T00:00:00Z"}}
    assert "Forecast:" in text.why(data)


def test_a_job_without_a_workload_is_not_found() -> None:
    assert views.find(cluster(*WAITING), "ns", "job/nothing") is None


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_scripts_get_the_data_itself(output: str) -> None:
    rows = views.pending(cluster(*WAITING), "team-a", None)

    printed = render(rows, text.pending(rows), output)

    if output == "json":
        assert json.loads(printed)[0]["name"] == "job-urgent"
    else:
        assert "positionInClusterQueue: 1" in printed


def test_the_command_line_has_the_three_subcommands() -> None:
    parser = build_parser()
    assert parser.parse_args(["queues", "--tree"]).tree is True
    assert parser.parse_args(["pending", "lq-a", "-n", "ns"]).namespace == "ns"
    assert parser.parse_args(["-o", "json", "why", "job/big"]).job == "job/big"


def test_the_plugin_is_installed_as_kubectl_kohort() -> None:
    """kubectl finds a plugin by its executable's name: the package installs one."""
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    target = project["project"]["scripts"]["kubectl-kohort"]
    module, _, function = target.partition(":")
    assert getattr(importlib.import_module(module), function) is main
