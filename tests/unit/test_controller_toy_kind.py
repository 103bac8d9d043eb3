"""A new workload kind is one adapter module plus one registry line (tests/unit/toy_kind.py):
the controller side.

Registered next to the built-in kinds, the toy kind's objects are found as gangs, recorded in
Workloads, admitted by the decision core and released, or held with a reason, through its
adapter alone: nothing else in the controller knows the kind.
"""

from __future__ import annotations

from typing import Any

from controller.api import kinds
from controller.workloads.registry import REGISTRY
from tests.unit.controller_world import World, start
from tests.unit.toy_kind import TRAINING_RUNS, TrainingRunAdapter, training_run

JSON = dict[str, Any]
# The one registry line.
WITH_TOY = REGISTRY.with_kinds(TrainingRunAdapter())


def paused(world: World, name: str) -> bool:
    run = world.api.read_back(TRAINING_RUNS, name, "ns")
    assert run is not None
    return bool(run["spec"]["paused"])


async def test_a_toy_kind_runs_through_state_decision_and_writers(started: list[World]) -> None:
    world = await start(
        started,
        World(
            (TRAINING_RUNS, training_run("early", workers=4)),
            (TRAINING_RUNS, training_run("late", workers=3)),
            cpu_quota="4",
            registry=WITH_TOY,
        ),
    )

    stats = await world.reconciler.reconcile_once()

    # Both are recorded as gangs of their whole size; only the first fits the 4 cpus of quota.
    early, late = world.workload("run-early"), world.workload("run-late")
    assert early is not None and late is not None
    [pod_set] = late["spec"]["podSets"]
    assert (pod_set["name"], pod_set["count"], pod_set["requests"]) == ("worker", 3, {"cpu": "1"})
    assert early["metadata"]["ownerReferences"][0]["kind"] == "TrainingRun"
    assert stats.admitted == 1
    assert not paused(world, "early") and paused(world, "late")
    assert late["status"]["pendingReason"].startswith("Waiting for quota: needs 3 cpu")

    done = world.api.read_back(TRAINING_RUNS, "early", "ns")
    assert done is not None
    done["status"] = {"phase": "Done"}
    world.api.put(TRAINING_RUNS, done)
    await world.api.settle()
    stats = await world.reconciler.reconcile_once()

    assert stats.admitted == 1
    assert not paused(world, "late")
    finished = world.workload("run-early")
    assert finished is not None
    assert [c["type"] for c in finished["status"]["conditions"] if c["status"] == "True"] == [
        "Finished"
    ]
    assert world.api.read_back(kinds.VOLCANO_PODGROUPS, "run-late", "ns") is not None
