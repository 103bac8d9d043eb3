"""The informers the controller needs, each decoding its kind into a typed object.

Rule: which kinds are watched follows from the workload registry (one informer per managed
kind) plus the kinds every gang needs (pods, nodes, queues, cohorts, flavors, Workloads,
PodGroups).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from controller.api import kinds, kube
from controller.api.kinds import Kind
from controller.api.queues import ClusterQueue, Cohort, LocalQueue, ResourceFlavor
from controller.api.workload import Workload
from controller.cluster.clients import Client, decoder
from controller.cluster.informers import Informer
from controller.workloads.base import WorkloadAdapter
from controller.workloads.registry import ADAPTERS

Listener = Callable[[Kind, Any, Any], None]

# Kinds the cluster may not serve (their CRDs are optional; Cohorts' CRD is newer than the
# others, and a cluster whose CRDs are installed by another tool may lack it: no Cohort then).
OPTIONAL = frozenset(
    {
        kinds.LEADERWORKERSETS,
        kinds.JOBSETS,
        kinds.PYTORCHJOBS,
        kinds.RAYCLUSTERS,
        kinds.RAYJOBS,
        kinds.COSCHEDULING_PODGROUPS,
        kinds.VOLCANO_PODGROUPS,
        kinds.COHORTS,
    }
)


def models(
    adapters: Mapping[Kind, WorkloadAdapter], podgroup_kind: Kind | None
) -> dict[Kind, type[Any]]:
    """Each watched kind and the type its objects are decoded into."""
    watched: dict[Kind, type[Any]] = {
        kinds.CLUSTER_QUEUES: ClusterQueue,
        kinds.LOCAL_QUEUES: LocalQueue,
        # A cohort tree's shape and quota, and the nodes each flavor stands for.
        kinds.COHORTS: Cohort,
        kinds.RESOURCE_FLAVORS: ResourceFlavor,
        kinds.WORKLOADS: Workload,
        kinds.PODS: kube.Pod,
        kinds.NODES: kube.Node,
        kinds.PRIORITY_CLASSES: kube.PriorityClass,
        # Their labels decide what ClusterQueues' namespaceSelectors admit.
        kinds.NAMESPACES: kube.Namespace,
    }
    watched.update((kind, adapter.model) for kind, adapter in adapters.items())
    if podgroup_kind is not None:
        watched[podgroup_kind] = kube.GangObject
    return watched


class Cache:
    def __init__(
        self,
        api: Client,
        *,
        podgroup_kind: Kind | None,
        namespace_selector: str | None = None,
        adapters: Mapping[Kind, WorkloadAdapter] = ADAPTERS,
    ) -> None:
        self.informers: dict[Kind, Informer[Any]] = {
            kind: Informer(
                api,
                kind,
                decoder(model),
                optional=kind in OPTIONAL,
                label_selector=namespace_selector if kind == kinds.NAMESPACES else None,
            )
            for kind, model in models(adapters, podgroup_kind).items()
        }

    def listen(self, listener: Listener) -> None:
        """Call `listener` with every change of every kind (set before `start`)."""
        for informer in self.informers.values():
            informer.listener = listener

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    async def stop(self) -> None:
        await asyncio.gather(*(i.stop() for i in self.informers.values()))

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    async def wait_synced(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.informers.values()))
