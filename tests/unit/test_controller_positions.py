"""Where is my job: each pending Workload shows its positions, each queue's status lists its
first pending Workloads, and what is written is bounded however long the backlog."""

from __future__ import annotations

from typing import Any

from controller.api import kinds
from tests.unit.controller_world import NOW, World, held_job, start, workload

JSON = dict[str, Any]


async def settle(world: World, passes: int = 2) -> None:
    for _ in range(passes):
        await world.reconciler.reconcile_once()
        await world.api.settle()


def position(world: World, name: str) -> JSON | None:
    wl = world.workload(f"job-{name}")
    assert wl is not None
    found: JSON | None = (wl.get("status") or {}).get("position")
    return found


def head(world: World, kind: kinds.Kind, name: str, namespace: str = "") -> list[str]:
    obj = world.api.read_back(kind, name, namespace)
    assert obj is not None
    listed = (obj.get("status") or {}).get("pendingHead", [])
    return [w["name"].removeprefix("job-") for w in listed]


def jobs(*names: str) -> list[tuple[kinds.Kind, JSON]]:
    return [(kinds.JOBS, held_job(n, 2)) for n in names]


async def test_pending_workloads_show_their_place_in_line_and_admitted_ones_show_none(
    started: list[World],
) -> None:
    world = await start(started, World(*jobs("a", "b", "c", "d", "e"), cpu_quota="4"))
    await settle(world)

    assert position(world, "a") is None and position(world, "b") is None
    assert position(world, "c") == {"clusterQueue": 1, "localQueue": 1, "cohort": 1}
    assert position(world, "d") == {"clusterQueue": 2, "localQueue": 2, "cohort": 2}
    assert position(world, "e") == {"clusterQueue": 3, "localQueue": 3, "cohort": 3}
    assert head(world, kinds.CLUSTER_QUEUES, "cq") == ["c", "d", "e"]
    assert head(world, kinds.LOCAL_QUEUES, "lq", "ns") == ["c", "d", "e"]


async def test_when_a_gang_ahead_is_admitted_the_ones_behind_move_up(
    started: list[World],
) -> None:
    world = await start(started, World(*jobs("a", "b", "c", "d"), cpu_quota="4"))
    await settle(world)
    assert position(world, "d") == {"clusterQueue": 2, "localQueue": 2, "cohort": 2}

    await world.api.delete(kinds.JOBS, "a", "ns")
    await settle(world, 3)

    assert position(world, "c") is None
    assert position(world, "d") == {"clusterQueue": 1, "localQueue": 1, "cohort": 1}
    assert head(world, kinds.CLUSTER_QUEUES, "cq") == ["d"]


async def test_beyond_the_head_only_a_bounded_number_of_positions_is_written_per_pass(
    started: list[World],
) -> None:
    """With a head of 1 and one write per pass beyond it, 4 waiting gangs: the first is told
    at once, the three behind it one per pass."""
    world = await start(
        started,
        World(
            *jobs("a", "b", "c", "d", "e", "f"), cpu_quota="4", positions_head=1, position_writes=1
        ),
    )
    await settle(world, 2)
    told = [n for n in "cdef" if position(world, n) is not None]
    assert "c" in told and len(told) == 3  # the head, and one more per pass

    await settle(world, 1)
    assert all(position(world, n) is not None for n in "cdef")
    assert head(world, kinds.CLUSTER_QUEUES, "cq") == ["c"]


async def test_positions_are_not_written_again_when_nothing_moved(started: list[World]) -> None:
    world = await start(started, World(*jobs("a", "b", "c", "d"), cpu_quota="4"))
    await settle(world)
    before = world.workload("job-d")
    assert before is not None

    await settle(world, 3)

    after = world.workload("job-d")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_positions_are_computed_again_only_once_their_period_has_passed(
    started: list[World],
) -> None:
    clock = [NOW]
    world = await start(
        started,
        World(
            *jobs("a", "b", "c", "d"), cpu_quota="4", positions_period=30.0, clock=lambda: clock[0]
        ),
    )
    await settle(world)
    assert position(world, "d") == {"clusterQueue": 2, "localQueue": 2, "cohort": 2}

    await world.api.delete(kinds.JOBS, "a", "ns")
    await settle(world, 3)
    assert position(world, "d") == {"clusterQueue": 2, "localQueue": 2, "cohort": 2}

    clock[0] += 31.0
    await settle(world, 2)
    assert position(world, "c") is None
    assert position(world, "d") == {"clusterQueue": 1, "localQueue": 1, "cohort": 1}


async def test_a_restarted_controller_removes_the_position_an_admitted_workload_still_shows(
    started: list[World],
) -> None:
    job = held_job("a", 2)
    stale = workload(job, reserved=True)
    stale["status"]["position"] = {"clusterQueue": 3, "localQueue": 3, "cohort": 3}
    world = await start(started, World((kinds.JOBS, job), (kinds.WORKLOADS, stale)))

    await settle(world)

    assert position(world, "a") is None


async def test_under_a_cpu_budget_positions_come_after_a_few_passes_and_are_the_same(
    started: list[World],
) -> None:
    """A budget of next to nothing: each pass makes one step of the computation, and asks for
    the next pass soon while one is under way."""
    world = await start(
        started, World(*jobs("a", "b", "c", "d", "e"), cpu_quota="4", positions_budget=1e-9)
    )
    await settle(world, 1)  # the Workloads are made
    passes, under_way = 1, False
    while position(world, "e") is None and passes < 20:
        await settle(world, 1)
        passes += 1
        positions = world.state.reporter.positions
        if positions.under_way is not None:
            under_way = True
            assert world.state.next_timer() == positions.next_step()

    assert under_way and passes > 2
    assert position(world, "a") is None and position(world, "b") is None
    assert position(world, "c") == {"clusterQueue": 1, "localQueue": 1, "cohort": 1}
    assert position(world, "e") == {"clusterQueue": 3, "localQueue": 3, "cohort": 3}
    assert head(world, kinds.CLUSTER_QUEUES, "cq") == ["c", "d", "e"]
