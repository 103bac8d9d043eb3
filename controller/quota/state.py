"""The core's working state: gangs with precomputed totals, their queues, classes and nodes.

Rule: derived numbers (a gang's total request, its pod shapes, its equivalence class) are
computed once when the gang enters the state, never in the admission loop.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controller.quota.outcomes import Pending
from controller.quota.placement import NodeIndex, PodShape, Vector
from controller.quota.quota import QueueState
from controller.quota.snapshot import FR, Gang, QueueSpec

if TYPE_CHECKING:
    from controller.quota.flavor_assignment import FlavorOption

# Gangs of one queue with the same priority, the same pod sets and the same declared runtime are
# interchangeable for quota and placement (and for backfill, which reads the runtime): if the
# oldest of them does not fit, none of them does this cycle.
ClassKey = tuple[object, ...]


@dataclass(slots=True)
class GangInfo:
    gang: Gang
    total: dict[str, int]
    shapes: list[tuple[int, PodShape, int]]
    class_key: ClassKey
    # Its flavor options in its queue, in preference order; filled by the engine on first use.
    options: list[FlavorOption] | None = None

    @property
    def name(self) -> str:
        return self.gang.name

    def order_key(self) -> tuple[int, float, str]:
        """Within a queue: higher priority first, then older, then by name."""
        return (-self.gang.priority, self.gang.created, self.gang.name)


def gang_info(gang: Gang, index: NodeIndex) -> GangInfo:
    total: dict[str, int] = {}
    shapes: list[tuple[int, PodShape, int]] = []
    for i, pod_set in enumerate(gang.pod_sets):
        for resource, amount in pod_set.requests.items():
            if amount:
                total[resource] = total.get(resource, 0) + amount * pod_set.count
        shapes.append((i, index.shape(pod_set), pod_set.count))
    key: ClassKey = (
        gang.priority,
        gang.max_runtime,
        tuple(
            (
                ps.count,
                ps.min_count,
                tuple(sorted(ps.requests.items())),
                shape.selector,
                shape.tolerations,
                shape.affinity,
                shape.rules,
            )
            for ps, (_, shape, _) in zip(gang.pod_sets, shapes, strict=True)
        ),
    )
    return GangInfo(gang, total, shapes, key)


@dataclass(slots=True)
class RunningGang:
    info: GangInfo
    admitted_at: float
    # (pod set index, node index, pod count)
    plan: list[tuple[int, int, int]]
    # What it holds of each flavor and resource, and its flavors: pod set -> resource -> flavor.
    charge: dict[FR, int] = field(default_factory=dict)
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)
    # The gang's largest fraction of any cluster resource, and the nodes it runs on.
    dominant: float = 0.0
    nodes: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return self.info.gang.name

    def on_nodes(self) -> list[tuple[Vector, int, int]]:
        """(per-pod request, node index, count) for releasing the gang's pods."""
        return [(self.info.shapes[ps][1].request, node, n) for ps, node, n in self.plan]


@dataclass(slots=True)
class GangClass:
    key: ClassKey
    # Pending gangs, oldest first: sorted by (created, name).
    gangs: list[tuple[float, str, GangInfo]] = field(default_factory=list)

    def add(self, info: GangInfo) -> None:
        bisect.insort(self.gangs, (info.gang.created, info.gang.name, info))

    def remove(self, info: GangInfo) -> None:
        k = bisect.bisect_left(self.gangs, (info.gang.created, info.gang.name))
        if k < len(self.gangs) and self.gangs[k][1] == info.gang.name:
            del self.gangs[k]

    def head(self) -> GangInfo | None:
        return self.gangs[0][2] if self.gangs else None


@dataclass(slots=True)
class QueueRuntime:
    state: QueueState
    classes: dict[ClassKey, GangClass] = field(default_factory=dict)
    running: dict[str, RunningGang] = field(default_factory=dict)
    # Classes that did not fit -> why; judged again once capacity comes back.
    blocked: dict[ClassKey, Pending] = field(default_factory=dict)
    # Class -> the reason last reported for its gangs.
    reported: dict[ClassKey, Pending] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def spec(self) -> QueueSpec:
        spec = self.state.spec
        assert spec is not None
        return spec

    def add_pending(self, info: GangInfo) -> None:
        cls = self.classes.get(info.class_key)
        if cls is None:
            cls = self.classes[info.class_key] = GangClass(info.class_key)
        cls.add(info)

    def remove_pending(self, info: GangInfo) -> None:
        cls = self.classes.get(info.class_key)
        if cls is not None:
            cls.remove(info)
            if not cls.gangs:
                del self.classes[info.class_key]
                self.reported.pop(info.class_key, None)

    def head(self) -> GangInfo | None:
        """The first pending gang in queue order among classes not blocked this cycle."""
        best: GangInfo | None = None
        blocked = self.blocked
        for key, cls in self.classes.items():
            if key in blocked:
                continue
            info = cls.head()
            if info is not None and (best is None or info.order_key() < best.order_key()):
                best = info
        return best
