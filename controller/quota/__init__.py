"""The pure decision core: state in, decisions out, deterministic and input-order independent.

Rule: no I/O, no asyncio, no clock, no Kubernetes client here. The controller and the simulator
keep one `Engine` alive and feed it what changes; `decide` runs one cycle over a whole snapshot
(tests and benches).
"""

from __future__ import annotations

from controller.quota.engine import Config, Engine
from controller.quota.outcomes import (
    Admission,
    Decisions,
    Eviction,
    EvictionCause,
    NoFit,
    Pending,
    PendingCause,
    PlacementShortfall,
    PodPlacement,
    QuotaShortfall,
    Shrink,
)
from controller.quota.snapshot import (
    DEFAULT_FLAVOR,
    AdmittedGang,
    CohortSpec,
    FlavorQuota,
    FlavorSpec,
    Fungibility,
    Gang,
    Node,
    PodSet,
    QueueSpec,
    Quota,
    ResourceGroup,
    Snapshot,
    Taint,
    Toleration,
    admitted_as,
)


def decide(snapshot: Snapshot, now: float, config: Config | None = None) -> Decisions:
    """One admission cycle over `snapshot` at time `now` (seconds)."""
    engine = Engine(
        snapshot.queues,
        snapshot.nodes,
        config,
        flavors=snapshot.flavors,
        cohorts=snapshot.cohorts,
    )
    for admitted in sorted(snapshot.admitted, key=lambda a: a.gang.name):
        engine.add_admitted(admitted)
    for gang in sorted(snapshot.pending, key=lambda g: g.name):
        engine.add_pending(gang)
    return engine.cycle(now)


__all__ = [
    "DEFAULT_FLAVOR",
    "Admission",
    "AdmittedGang",
    "CohortSpec",
    "Config",
    "Decisions",
    "Engine",
    "Eviction",
    "EvictionCause",
    "FlavorQuota",
    "FlavorSpec",
    "Fungibility",
    "Gang",
    "NoFit",
    "Node",
    "Pending",
    "PendingCause",
    "PlacementShortfall",
    "PodPlacement",
    "PodSet",
    "QueueSpec",
    "Quota",
    "QuotaShortfall",
    "ResourceGroup",
    "Shrink",
    "Snapshot",
    "Taint",
    "Toleration",
    "admitted_as",
    "decide",
]
