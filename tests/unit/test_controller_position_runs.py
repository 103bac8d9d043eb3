"""Positions computed over passes under a CPU budget: a large backlog costs each pass a bounded
slice, and what is written in the end is what a whole computation gives.

The reporter is driven as the controller drives it, a pass at a time, with a CPU clock that
counts each step of the computation as 0.3 ms (so a 2 ms budget makes at most six a pass).
"""

from __future__ import annotations

import pytest

from controller.quota import Engine, QueueSpec
from controller.quota.positions import Position, positions
from controller.settings import Settings
from controller.state.gangs import GangKey, key_of
from controller.state.positions import STEP_GAP, PositionReport, PositionReporter
from tests.unit.test_quota_builders import gang, node, queue

STEP_COST = 0.0003
BUDGET_MS = 2.0
LOCAL = ("ns", "lq")


class Backlog:
    """An engine with `pending` gangs over `queues` queues of one GPU of quota each, and a
    reporter stepping a computation under `BUDGET_MS` with the counting clock."""

    def __init__(self, pending: int, queues: int = 20, period: float = 0.0) -> None:
        specs: list[QueueSpec] = [queue(f"q{i:02}", 1, cohort=None) for i in range(queues)]
        self.engine = Engine(specs, [node(f"n{i}") for i in range(queues)])
        for i in range(pending):
            self.engine.add_pending(gang(f"ns/g{i:05}", f"q{i % queues:02}", gpus=1))
        settings = Settings(
            positions_budget=BUDGET_MS, positions_period=period, position_writes=pending
        )
        self.reporter = PositionReporter(settings, clock=self.cpu)
        self.steps_per_pass: list[int] = []

    def cpu(self) -> float:
        return self.reporter.steps * STEP_COST

    def local(self) -> dict[GangKey, tuple[tuple[str, str], bool]]:
        return {key_of(name): (LOCAL, False) for name in self.engine.pending}

    def report(self, now: float) -> PositionReport:
        before = self.reporter.steps
        report = self.reporter.report(self.engine, now, self.local(), lambda key: None)
        self.steps_per_pass.append(self.reporter.steps - before)
        return report

    def until_written(self, now: float) -> tuple[PositionReport, float]:
        """Passes a second apart from `now` until one writes positions: it, and its time."""
        for _ in range(1000):
            report = self.report(now)
            if report.writes:
                return report, now
            now += 1.0
        raise AssertionError("no positions written in 1,000 passes")


def told(report: PositionReport) -> dict[str, Position | None]:
    out: dict[str, Position | None] = {}
    for (namespace, name), write in report.writes.items():
        at = write.position
        out[f"{namespace}/{name}"] = (
            None if at is None else Position(at.cluster_queue, at.local_queue, at.cohort or 0)
        )
    return out


def test_positions_of_2000_pending_gangs_are_written_after_many_passes_within_budget() -> None:
    backlog = Backlog(2000, queues=250)
    whole = positions(backlog.engine, 0.0, {n: "ns/lq" for n in backlog.engine.pending})

    first = backlog.report(0.0)
    assert not first.writes and backlog.reporter.under_way is not None
    assert backlog.reporter.next_step() == 0.0 + STEP_GAP  # the next pass comes soon
    report, _ = backlog.until_written(1.0)

    assert told(report) == whole
    assert report.queues == {f"q{i:02}" for i in range(250)}
    in_q07 = [f"g{i:05}" for i in range(7, 2000, 250)]
    assert [w.name for w in backlog.reporter.head("q07")] == in_q07
    assert backlog.reporter.last_passes == len(backlog.steps_per_pass) > 10
    assert max(backlog.steps_per_pass) * STEP_COST <= BUDGET_MS / 1000
    assert backlog.reporter.under_way is None and backlog.reporter.next_step() is None


def test_a_gang_admitted_while_positions_are_computed_gets_none_and_those_behind_move_up() -> None:
    backlog = Backlog(400, queues=1)
    backlog.report(0.0)
    assert backlog.reporter.under_way is not None

    admitted = [a.gang for a in backlog.engine.cycle(0.5).admissions]
    assert admitted == ["ns/g00000"]
    report, _ = backlog.until_written(1.0)

    found = told(report)
    assert "ns/g00000" not in found
    assert found["ns/g00001"] == Position(1, 1, 1)
    assert found["ns/g00399"] == Position(399, 399, 399)


def test_a_gang_that_came_while_positions_are_computed_waits_for_the_next_computation() -> None:
    backlog = Backlog(400, queues=1)
    backlog.report(0.0)
    backlog.engine.add_pending(gang("ns/late", "q00", gpus=1, priority=5))
    report, ended = backlog.until_written(1.0)
    assert "ns/late" not in told(report)
    assert told(report)["ns/g00000"] == Position(1, 1, 1)

    again, _ = backlog.until_written(ended + 1.0)
    assert told(again)["ns/late"] == Position(1, 1, 1)


def test_a_new_computation_starts_only_positions_period_after_the_last_ended() -> None:
    backlog = Backlog(400, queues=4, period=30.0)
    _, ended = backlog.until_written(0.0)

    backlog.report(ended + 29.0)
    assert backlog.reporter.under_way is None
    backlog.report(ended + 30.0)
    assert backlog.reporter.under_way is not None


def test_without_a_budget_positions_are_computed_whole_in_the_pass() -> None:
    backlog = Backlog(400, queues=4)
    backlog.reporter = PositionReporter(Settings(positions_budget=None, position_writes=400))
    report = backlog.report(0.0)
    whole = positions(backlog.engine, 0.0, {n: "ns/lq" for n in backlog.engine.pending})
    assert told(report) == whole and backlog.reporter.under_way is None


@pytest.mark.parametrize("passes", [2, 5, 9])
def test_a_gang_admitted_at_any_point_of_a_computation_is_never_told_a_position(
    passes: int,
) -> None:
    """Admitted while the run walks the order or while its positions are being told: every
    other gang is told its position, none more than one place off."""
    backlog = Backlog(800, queues=1)
    for now in range(passes):
        assert not backlog.report(float(now)).writes
    assert backlog.reporter.under_way is not None

    assert [a.gang for a in backlog.engine.cycle(passes - 0.5).admissions] == ["ns/g00000"]
    report, _ = backlog.until_written(float(passes))

    found = told(report)
    assert "ns/g00000" not in found and len(found) == 799
    exact = positions(backlog.engine, 0.0, {n: "ns/lq" for n in backlog.engine.pending})
    assert all(abs(found[n].cluster_queue - exact[n].cluster_queue) <= 1 for n in exact)
