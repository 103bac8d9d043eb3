"""Keep the dashboard's stores up to date: one informer per kind, as the controller's own.

Read-only: list and watch, nothing else (the chart's ClusterRole for the dashboard grants only
get, list and watch on these kinds).
"""

from __future__ import annotations

from typing import Any

from controller.api import kinds
from controller.api.kube import Node
from controller.api.queues import ClusterQueue, Cohort, LocalQueue
from controller.api.workload import Workload
from controller.cluster.clients import Client, decoder
from controller.cluster.informers import Informer
from dashboard.live import Live, Stores


class Watch:
    """The informers of the kinds the page shows, feeding `live`: their stores become
    `live.stores`, and every change reaches `live.changed`."""

    def __init__(self, api: Client, live: Live) -> None:
        listener = live.changed
        self.cluster_queues = Informer(
            api, kinds.CLUSTER_QUEUES, decoder(ClusterQueue), listener=listener
        )
        self.cohorts = Informer(api, kinds.COHORTS, decoder(Cohort), listener=listener)
        self.local_queues = Informer(
            api, kinds.LOCAL_QUEUES, decoder(LocalQueue), listener=listener
        )
        self.workloads = Informer(api, kinds.WORKLOADS, decoder(Workload), listener=listener)
        self.nodes = Informer(api, kinds.NODES, decoder(Node), listener=listener)
        live.stores = Stores(
            cluster_queues=self.cluster_queues.store,
            cohorts=self.cohorts.store,
            local_queues=self.local_queues.store,
            workloads=self.workloads.store,
            nodes=self.nodes.store,
        )

    @property
    def informers(self) -> list[Informer[Any]]:
        return [self.cluster_queues, self.cohorts, self.local_queues, self.workloads, self.nodes]

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    async def stop(self) -> None:
        for informer in self.informers:
            await informer.stop()
