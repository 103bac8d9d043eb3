"""How a pod set with a topology request is put into domains: the strategies an engine may run.

Rule: a strategy is chosen once per engine (`Config.topology`) and sees only what this module
names: each eligible node's labels and how many pods of the set its free capacity takes; it
answers how many pods go on which node, or how many it could place. It never changes capacity:
the placer puts the pods, checking the set's other rules (constrained.py).

- "best-fit" (kohort's default): constrained.py's own choice, the tightest domain that fits,
  pods packed within it by the node packing rule.
- "kueue-tas": Kueue's topology-aware scheduling algorithm (kueue_tas.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from controller.quota.snapshot import TopologyRequest

DomainChoice = Literal["best-fit", "kueue-tas"]


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """A node a pod set may go to: its index in the node index, its name and labels, and how
    many pods of the set its free capacity (and the set's rules per node) take."""

    node: int
    name: str
    labels: Mapping[str, str]
    room: int


@dataclass(frozen=True, slots=True)
class DomainPlan:
    """A strategy's answer: pods per node (empty: the request cannot be met), and, when it
    cannot, the most pods the request allowed (for the reason shown)."""

    pods: Mapping[int, int] = field(default_factory=dict)
    fitted: int = 0


# (the eligible nodes, the pod set's pod count, its request, the levels of its flavor's
# topology, coarsest first) -> where its pods go.
DomainAssigner = Callable[[Sequence[NodeRoom], int, TopologyRequest, tuple[str, ...]], DomainPlan]
