"""The pure decision core: snapshot in, decisions out, deterministic and input-order independent.

Rule: no I/O, no asyncio, no clock, no Kubernetes client here. The controller, the simulator and
the benchmarks all call `decide` (or keep an `Engine` and feed it changes).
"""

from __future__ import annotations

from controller.quota.engine import Config, Engine
from controller.quota.snapshot import (
    Admission,
    AdmittedGang,
    Decisions,
    Eviction,
    Gang,
    Node,
    PodPlacement,
    PodSet,
    QueueSpec,
    Quota,
    Snapshot,
    Taint,
    Toleration,
)


def decide(snapshot: Snapshot, now: float, config: Config | None = None) -> Decisions:
    """One admission cycle over `snapshot` at time `now` (seconds)."""
    engine = Engine(snapshot.queues, snapshot.nodes, config)
    for admitted in sorted(snapshot.admitted, key=lambda a: a.gang.name):
        engine.add_admitted(admitted)
    for gang in sorted(snapshot.pending, key=lambda g: g.name):
        engine.add_pending(gang)
    decisions = engine.cycle(now)
    return Decisions(
        decisions.admissions,
        decisions.evictions,
        engine.pending_reasons(),
        decisions.reservations,
    )


__all__ = [
    "Admission",
    "AdmittedGang",
    "Config",
    "Decisions",
    "Engine",
    "Eviction",
    "Gang",
    "Node",
    "PodPlacement",
    "PodSet",
    "QueueSpec",
    "Quota",
    "Snapshot",
    "Taint",
    "Toleration",
    "decide",
]
