"""Plain pod groups: bare pods that share a group label and declare the group's size."""

from __future__ import annotations

from typing import Any

import msgspec

from controller.api import kinds, kube, names
from controller.quota.outcomes import Eviction, EvictionCause
from controller.workloads.base import Mutation, is_gated
from controller.workloads.edits import Editor
from controller.workloads.pod import PodAdapter
from controller.workloads.registry import REGISTRY
from tests.fakes.workloads import make_pod
from tests.unit.controller_world import NOW, World, start

JSON = dict[str, Any]


def group_pod(name: str, size: int = 4, cpu: str = "1") -> JSON:
    """A pod of group `ring`, as kohort's webhook stores it."""
    labels = {names.POD_GROUP_LABEL: "ring", names.POD_GROUP_TOTAL_COUNT_LABEL: str(size)}
    pod = make_pod(name, namespace="ns", queue="lq", labels=labels)
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    editor = Editor(pod)
    REGISTRY.instance(PodAdapter).default(editor, Mutation("lq"))
    return editor.doc


def gated(world: World, name: str) -> bool:
    pod = world.api.read_back(kinds.PODS, name, "ns")
    assert pod is not None
    return is_gated(msgspec.convert(pod, kube.Pod))


def reason(world: World) -> str:
    wl = world.workload("ring")
    assert wl is not None
    return str(wl["status"].get("pendingReason"))


async def admitted_group(started: list[World]) -> World:
    """Group `ring` of two pods (r0, r1), admitted and released."""
    pods = [(kinds.PODS, group_pod(f"r{i}", size=2)) for i in range(2)]
    world = await start(started, World(*pods, cpu_quota="8"))
    for _ in range(2):
        await world.reconciler.reconcile_once()
        await world.api.settle()
    return world


async def test_a_group_waits_for_all_its_pods_then_is_admitted_whole(
    started: list[World],
) -> None:
    pods = [(kinds.PODS, group_pod(f"r{i}")) for i in range(3)]
    world = await start(started, World(*pods, cpu_quota="8"))
    await world.reconciler.reconcile_once()
    await world.api.settle()
    await world.reconciler.reconcile_once()

    assert "3 of the 4 pods of group ring exist" in reason(world)
    assert all(gated(world, f"r{i}") for i in range(3))

    world.api.put(kinds.PODS, group_pod("r3"))
    await world.api.settle()
    await world.reconciler.reconcile_once()

    assert not any(gated(world, f"r{i}") for i in range(4))
    wl = world.workload("ring")
    assert wl is not None and wl["spec"]["podSets"][0]["count"] == 4


async def test_a_group_larger_than_its_queue_charges_every_pod_not_one(
    started: list[World],
) -> None:
    pods = [(kinds.PODS, group_pod(f"r{i}")) for i in range(4)]
    world = await start(started, World(*pods, cpu_quota="2"))
    for _ in range(2):
        await world.reconciler.reconcile_once()
        await world.api.settle()

    assert all(gated(world, f"r{i}") for i in range(4))
    assert "needs 4 cpu" in reason(world)


async def test_a_group_whose_pods_differ_is_not_admitted(started: list[World]) -> None:
    pods = [(kinds.PODS, group_pod("r0", size=2)), (kinds.PODS, group_pod("r9", size=2, cpu="3"))]
    world = await start(started, World(*pods, cpu_quota="8"))
    for _ in range(2):
        await world.reconciler.reconcile_once()
        await world.api.settle()

    assert "the pods of a plain group must be alike" in reason(world)
    assert gated(world, "r0") and gated(world, "r9")


async def test_a_group_keeps_its_quota_until_every_pod_has_finished(started: list[World]) -> None:
    world = await admitted_group(started)

    def finish(name: str) -> None:
        pod = world.api.read_back(kinds.PODS, name, "ns")
        assert pod is not None
        pod["status"] = {"phase": "Succeeded"}
        world.api.put(kinds.PODS, pod)

    def finished() -> bool:
        wl = world.workload("ring")
        assert wl is not None
        return any(
            c["type"] == "Finished" and c["status"] == "True" for c in wl["status"]["conditions"]
        )

    finish("r0")  # the pod that gave the gang its shape
    await world.api.settle()
    await world.reconciler.reconcile_once()
    assert not finished()

    finish("r1")
    await world.api.settle()
    await world.reconciler.reconcile_once()
    assert finished()


async def test_a_group_whose_finished_pods_were_deleted_still_finishes(
    started: list[World],
) -> None:
    world = await admitted_group(started)
    first = world.api.read_back(kinds.PODS, "r0", "ns")
    assert first is not None
    first["status"] = {"phase": "Succeeded"}
    world.api.put(kinds.PODS, first)
    await world.api.settle()
    await world.api.delete(kinds.PODS, "r0", "ns")
    second = world.api.read_back(kinds.PODS, "r1", "ns")
    assert second is not None
    second["status"] = {"phase": "Succeeded"}
    world.api.put(kinds.PODS, second)
    await world.api.settle()
    await world.reconciler.reconcile_once()

    wl = world.workload("ring")
    assert wl is not None
    assert any(
        c["type"] == "Finished" and c["status"] == "True" for c in wl["status"]["conditions"]
    )


async def test_an_evicted_group_keeps_its_workload_and_its_pods_made_again_rejoin_it(
    started: list[World],
) -> None:
    world = await admitted_group(started)
    admitted = world.workload("ring")
    assert admitted is not None and reserved(admitted)
    assert not admitted["metadata"].get("ownerReferences"), "no pod owns it: it outlives them"

    eviction = Eviction("ns/ring", "cq", "ns/lender", EvictionCause.RECLAIMED, "cq-b")
    for steps in world.state.plan_evictions([eviction], NOW).values():
        for step in steps:
            await world.reconciler.writers.perform(step)
    await world.api.settle()
    await world.reconciler.reconcile_once()
    await world.api.settle()

    assert world.api.all(kinds.PODS) == [], "a bare pod is evicted by deleting it"
    kept = world.workload("ring")
    assert kept is not None and not reserved(kept)
    told = [e["message"] for e in world.api.all(kinds.EVENTS) if e["reason"] == "Preempted"]
    assert any("create them again, labelled kohort.dev/pod-group=ring" in m for m in told)

    for i in range(2):
        world.api.put(kinds.PODS, group_pod(f"r{i}", size=2))
    await world.api.settle()
    await world.reconciler.reconcile_once()

    back = world.workload("ring")
    assert back is not None and back["metadata"]["uid"] == kept["metadata"]["uid"]
    assert back["status"]["requeueState"]["count"] == 1
    # A preempted gang is back in its queue at once: with the room free, admitted again.
    assert reserved(back)
    assert not any(gated(world, f"r{i}") for i in range(2))


def reserved(workload: JSON) -> bool:
    return any(
        c["type"] == "QuotaReserved" and c["status"] == "True"
        for c in workload["status"]["conditions"]
    )


async def test_a_lone_pods_workload_is_owned_by_it_and_goes_with_it(started: list[World]) -> None:
    pod = make_pod("solo", namespace="ns", queue="lq")
    editor = Editor(pod)
    REGISTRY.instance(PodAdapter).default(editor, Mutation("lq"))
    world = await start(started, World((kinds.PODS, editor.doc), cpu_quota="8"))
    await world.reconciler.reconcile_once()
    await world.api.settle()

    wl = world.workload("pod-solo")
    assert wl is not None
    assert [o["name"] for o in wl["metadata"]["ownerReferences"]] == ["solo"]
