"""The informers the controller needs, started together, read together as one ClusterView."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from controller.cluster import clients
from controller.cluster.clients import Client, JSONDict, Kind
from controller.cluster.informers import Informer
from controller.cluster.view import ClusterView, build_view

# Kinds the cluster may not serve (their CRDs are optional).
OPTIONAL = frozenset(
    {clients.LEADERWORKERSETS, clients.COSCHEDULING_PODGROUPS, clients.VOLCANO_PODGROUPS}
)


class Cache:
    def __init__(
        self,
        api: Client,
        *,
        podgroup_kind: Kind | None,
        on_change: Callable[[Kind, str, JSONDict], None] | None = None,
        namespace_selector: str | None = None,
    ) -> None:
        kinds = [
            clients.CLUSTER_QUEUES,
            clients.LOCAL_QUEUES,
            clients.WORKLOADS,
            clients.JOBS,
            clients.STATEFULSETS,
            clients.LEADERWORKERSETS,
            clients.PODS,
            clients.NODES,
            clients.PRIORITY_CLASSES,
        ]
        if podgroup_kind is not None:
            kinds.append(podgroup_kind)
        if namespace_selector:
            kinds.append(clients.NAMESPACES)
        self.namespace_selector = namespace_selector
        self.podgroup_kind = podgroup_kind
        self.informers: dict[Kind, Informer] = {
            kind: Informer(
                api,
                kind,
                listener=on_change,
                optional=kind in OPTIONAL,
                label_selector=namespace_selector if kind == clients.NAMESPACES else None,
            )
            for kind in kinds
        }

    @property
    def stores(self) -> Mapping[Kind, Informer]:
        return self.informers

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    async def stop(self) -> None:
        await asyncio.gather(*(i.stop() for i in self.informers.values()))

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    async def wait_synced(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.informers.values()))

    def _items(self, kind: Kind) -> list[JSONDict]:
        informer = self.informers.get(kind)
        return list(informer.items()) if informer is not None else []

    def view(self) -> ClusterView:
        namespaces = None
        if self.namespace_selector:
            namespaces = frozenset(
                str(ns["metadata"]["name"]) for ns in self._items(clients.NAMESPACES)
            )
        return build_view(
            namespaces=namespaces,
            jobs=self._items(clients.JOBS),
            statefulsets=self._items(clients.STATEFULSETS),
            leaderworkersets=self._items(clients.LEADERWORKERSETS),
            pods=self._items(clients.PODS),
            workloads=self._items(clients.WORKLOADS),
            cluster_queues=self._items(clients.CLUSTER_QUEUES),
            local_queues=self._items(clients.LOCAL_QUEUES),
            nodes=self._items(clients.NODES),
            podgroups=self._items(self.podgroup_kind) if self.podgroup_kind else [],
            priority_classes=self._items(clients.PRIORITY_CLASSES),
        )
