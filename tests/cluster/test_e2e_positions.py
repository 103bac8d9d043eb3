"""Where is my job, on the real control plane: the positions kohort writes on pending
Workloads are the order in which it admits them, across queues, priorities and fair sharing;
and `kubectl kohort` shows the queues, the backlog and why a job waits.

Scenario: cohort org (implicit: no Cohort object) with a lender queue (6 cpu, no jobs of its
own) and two borrowing queues, a (weight 1) and b (weight 2), no quota of their own. Six
1-pod, 1-cpu Jobs wait, one of them urgent (a higher PriorityClass); no node of the test can
take them yet. Then 1-cpu nodes come one at a time: each lets exactly one gang in, the next one
in line.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import Probe, cluster_queue, gang_job, local_queue, reserved
from tests.conftest import TestNodes
from tests.support import eventually, pod_isolation

pytestmark = pytest.mark.volcano

JOBS = ("a1", "a2", "b1", "b2", "a3", "b3")  # in the order they are created
URGENT = "a3"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def urgent(cluster: LocalCluster, namespace: str) -> Iterator[str]:
    name = f"{namespace}-urgent"
    cluster.rest.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": 1000,
        },
    )
    yield name
    cluster.rest.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def kubectl_kohort(cluster: LocalCluster, *words: str) -> str:
    """The plugin's output, run as its own process the way kubectl runs it."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kohort.kubectl.main",
            "--kubeconfig",
            str(cluster.kubeconfig),
            *words,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    if os.environ.get("KOHORT_SHOW_PLUGIN"):  # to copy real output into the docs
        print(f"\n$ kubectl kohort {' '.join(words)}\n{done.stdout}")
    return done.stdout


async def positions(team: Probe) -> dict[str, dict[str, Any]]:
    """Each Job's Workload position, of those that show one."""
    out = {}
    for wl in await team.workloads():
        at = (wl.get("status") or {}).get("position")
        if at is not None:
            out[wl["metadata"]["name"].removeprefix("job-")] = at
    return out


async def admitted(team: Probe) -> list[str]:
    return sorted(
        wl["metadata"]["name"].removeprefix("job-") for wl in await team.workloads() if reserved(wl)
    )


async def test_positions_are_the_order_of_admissions_and_the_plugin_shows_them(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    urgent: str,
    drained: None,
) -> None:
    stack.enroll(namespace)
    # Short names (cluster-scoped, so unique to this test) keep the plugin's tables narrow.
    prefix = f"pos{namespace[-6:]}"
    org, lender, qa, qb = (f"{prefix}-{n}" for n in ("org", "lender", "a", "b"))
    apply_queues(
        cluster.rest,
        [
            cluster_queue(lender, {"cpu": "6"}, cohort=org),
            cluster_queue(qa, {"cpu": "0"}, cohort=org),
            cluster_queue(qb, {"cpu": "0"}, cohort=org, weight="2"),
            local_queue(namespace, "team-a", qa),
            local_queue(namespace, "team-b", qb),
        ],
    )
    team = Probe(admin, namespace)
    for name in JOBS:
        job = gang_job(
            name,
            queue=f"team-{name[0]}",
            pods=1,
            requests={"cpu": "1"},
            isolation=pod_isolation(namespace),
            priority_class=urgent if name == URGENT else None,
        )
        await team.create(kinds.JOBS, job)
        await asyncio.sleep(1.1)  # creation times a second apart: the order within a queue

    told = await eventually(
        lambda: positions(team),
        # Every one told, and told since the last Job arrived: a cohort place moved by a later
        # arrival alone is written at the refresh rate (--position-refresh), so until then
        # two gangs may show the same one.
        lambda found: (
            len(found) == len(JOBS)
            and sorted(p["cohort"] for p in found.values()) == list(range(1, len(JOBS) + 1))
        ),
        within=150,
        what="every pending Workload shows its position, each cohort place once",
    )
    line = sorted(told, key=lambda n: told[n]["cohort"])
    assert [told[n]["cohort"] for n in line] == list(range(1, len(JOBS) + 1))
    # Within a queue: the urgent one first, then by age.
    in_a = sorted((n for n in line if n.startswith("a")), key=lambda n: told[n]["clusterQueue"])
    assert in_a == ["a3", "a1", "a2"]
    assert [told[n]["localQueue"] for n in in_a] == [1, 2, 3]

    everything = kubectl_kohort(cluster, "pending")
    # (the namespace is said once when every row is of it, else before each name)
    rows = [r.split() for r in everything.splitlines() if r.split()[:1] != ["Namespace:"]]
    ours = [r for r in rows[1:] if r[3].removeprefix(f"{namespace}/").startswith("job-")]
    assert [r[3].removeprefix(f"{namespace}/").removeprefix("job-") for r in ours] == line
    assert [int(r[2]) for r in ours] == list(range(1, len(JOBS) + 1))
    pending = kubectl_kohort(cluster, "pending", qa)
    assert pending.splitlines()[0] == f"Namespace: {namespace}"
    assert [row.split()[3] for row in pending.splitlines()[2:]] == [f"job-{n}" for n in in_a]
    why = kubectl_kohort(cluster, "why", "job/a2", "-n", namespace)
    assert f"LocalQueue team-a -> ClusterQueue {qa}" in why
    assert f"Position:     {told['a2']['clusterQueue']} in its ClusterQueue" in why
    assert "1. job-a3 (priority 1000)" in why  # ahead of it
    data = json.loads(kubectl_kohort(cluster, "-o", "json", "why", "job/a2", "-n", namespace))
    assert "node" in data["reason"]  # no node of the test yet
    assert data["position"] == told["a2"]

    for step, expected in enumerate(line, start=1):
        test_nodes(f"slot{step}", 1, cpu="1")
        now = await eventually(
            lambda: admitted(team),
            lambda names, step=step: len(names) >= step,
            within=90,
            what=f"admission number {step}",
        )
        assert len(now) == step, now
        assert expected in now, (step, expected, now)
        if step == 2:
            shown = kubectl_kohort(cluster, "queues")
            # CLUSTERQUEUE COHORT PENDING ADMITTED FLAVOR/RESOURCE NOMINAL USAGE BORROWED SHARE
            rows = {r.split()[0]: r.split()[1:] for r in shown.splitlines()[1:] if r.strip()}
            assert rows[lender] == [org, "0", "0", "default/cpu", "6", "0", "0", "0"]
            used = {q: (int(rows[q][5]), int(rows[q][6])) for q in (qa, qb)}
            assert sum(u for u, _ in used.values()) == 2  # all of it borrowed
            assert all(u == b for u, b in used.values())
            assert sum(int(rows[q][2]) for q in (qa, qb)) == 2  # admitted
            # Both 1-cpu nodes are taken: a gang still waiting needs one of the two to finish.
            waiting = next(n for n in line if n not in now)
            shown = kubectl_kohort(cluster, "why", f"job/{waiting}", "-n", namespace)
            assert "Would be admitted now:" in shown
            data = json.loads(
                kubectl_kohort(cluster, "-o", "json", "why", f"job/{waiting}", "-n", namespace)
            )
            finishing = data["wouldBeAdmittedNow"]["finishing"]
            assert {n.removeprefix(f"{namespace}/job-") for n in finishing["anyOneOf"]} == set(now)
            assert f"once job-{finishing['smallest'].rsplit('-', 1)[1]} finishes" in shown
            tree = kubectl_kohort(cluster, "queues", "--tree")
            assert f"{org} (cohort" in tree and "default/cpu: usage 2 of 6" in tree
