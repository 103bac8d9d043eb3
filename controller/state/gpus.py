"""The cluster's GPUs as an admin counts the money: allocated to gangs that run, held by
admitted gangs whose pods do not all run yet (paid for, computing nothing), idle.

Rule: counted from what the state already holds (each gang's record and pods, the Ready
nodes), when the metrics are scraped; it decides nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller import quota
from controller.api.quantity import QuantityError, parse_quantity
from controller.quota.snapshot import GPU
from controller.state.gangs import ManagedGang
from controller.state.inventory import UNSCHEDULABLE_TAINT


@dataclass(frozen=True, slots=True)
class GpuCounts:
    allocated: float = 0.0
    held: float = 0.0
    idle: float = 0.0


def admitted_gpus(gang: ManagedGang, gpu: str = GPU) -> float:
    """The GPUs the gang's admission record charges it (0 when it holds no quota)."""
    status = gang.workload.status if gang.workload is not None else None
    if status is None or status.admission is None:
        return 0.0
    milli = 0
    for assignment in status.admission.pod_set_assignments:
        try:
            milli += parse_quantity(assignment.resource_usage.get(gpu) or "0")
        except QuantityError:
            continue
    return milli / 1000


def all_running(gang: ManagedGang) -> bool:
    """Whether the gang's pods run: its Workload says PodsReady, or as many of its pods as
    must run at once are running (before that condition is written)."""
    if gang.pods_ready:
        return True
    shape = gang.shape
    return shape is not None and gang.running_pods() >= max(shape.min_member, 1)


def gpu_counts(
    gangs: Iterable[ManagedGang], nodes: Iterable[quota.Node | None], gpu: str = GPU
) -> GpuCounts:
    """GPUs allocated to admitted gangs whose pods all run, held by admitted gangs whose pods
    do not, and idle on the Ready nodes that take pods (capacity less both)."""
    allocated = held = 0.0
    for gang in gangs:
        if not gang.reserved or gang.workload_finished or gang.finished is not None:
            continue
        gpus = admitted_gpus(gang, gpu)
        if not gpus:
            continue
        if all_running(gang):
            allocated += gpus
        else:
            held += gpus
    capacity = sum(
        node.allocatable.get(gpu, 0) / 1000
        for node in nodes
        if node is not None and UNSCHEDULABLE_TAINT not in node.taints
    )
    return GpuCounts(allocated, held, max(0.0, capacity - allocated - held))
