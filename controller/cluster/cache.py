"""The informers the controller needs, each decoding its kind into a typed object.

Rule: which kinds are watched follows from the workload registry (one informer per managed
kind, optional where the kind's CRD is) plus the kinds every gang needs (pods, nodes, queues,
cohorts, flavors, Workloads, PodGroups).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from controller.api import kinds, kube
from controller.api.checks import AdmissionCheck
from controller.api.kinds import Kind
from controller.api.queues import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Topology
from controller.api.workload import Workload
from controller.cluster.clients import Client, decoder
from controller.cluster.informers import Informer
from controller.workloads.registry import REGISTRY, Registry

Listener = Callable[[Kind, Any, Any], None]

# Kinds besides the workload kinds that the cluster may not serve (the gang schedulers' CRDs;
# Cohorts' CRD is newer than the others, and a cluster whose CRDs are installed by another tool
# may lack it: no Cohort then). Which workload kinds may be missing, their adapters say.
# Topologies' CRD is newer still.
# ResourceClaimTemplates are served from Kubernetes 1.34 on (resource.k8s.io/v1).
OPTIONAL = frozenset(
    {
        kinds.COSCHEDULING_PODGROUPS,
        kinds.VOLCANO_PODGROUPS,
        kinds.COHORTS,
        kinds.TOPOLOGIES,
        kinds.ADMISSION_CHECKS,
        kinds.PROVISIONING_REQUESTS,
        kinds.RESOURCE_CLAIM_TEMPLATES,
        kinds.RESOURCE_SLICES,
        kinds.DEVICE_CLASSES,
    }
)


def optional_kinds(registry: Registry) -> frozenset[Kind]:
    """The kinds whose informers wait for their CRDs instead of failing."""
    return OPTIONAL | registry.optional_kinds


def models(registry: Registry, podgroup_kind: Kind | None) -> dict[Kind, type[Any]]:
    """Each watched kind and the type its objects are decoded into."""
    watched: dict[Kind, type[Any]] = {
        kinds.CLUSTER_QUEUES: ClusterQueue,
        kinds.LOCAL_QUEUES: LocalQueue,
        # A cohort tree's shape and quota, and the nodes each flavor stands for.
        kinds.COHORTS: Cohort,
        kinds.RESOURCE_FLAVORS: ResourceFlavor,
        # The levels of a flavor's nodes, for gangs that ask to be placed in one domain.
        kinds.TOPOLOGIES: Topology,
        # What gangs pass between quota and release, and the autoscaler's answers for those
        # waiting for new nodes (its CRD comes with the autoscaler).
        kinds.ADMISSION_CHECKS: AdmissionCheck,
        kinds.PROVISIONING_REQUESTS: kube.ProvisioningRequest,
        kinds.WORKLOADS: Workload,
        kinds.PODS: kube.Pod,
        kinds.NODES: kube.Node,
        kinds.PRIORITY_CLASSES: kube.PriorityClass,
        # Their labels decide what ClusterQueues' namespaceSelectors admit.
        kinds.NAMESPACES: kube.Namespace,
        # The devices the pods of a gang claim through them (DRA), charged to its queue.
        kinds.RESOURCE_CLAIM_TEMPLATES: kube.ResourceClaimTemplate,
        # The devices each node has, and which of them each DeviceClass selects: the placement
        # check counts free devices per node.
        kinds.RESOURCE_SLICES: kube.ResourceSlice,
        kinds.DEVICE_CLASSES: kube.DeviceClass,
    }
    watched.update((kind, adapter.model) for kind, adapter in registry.adapters.items())
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
        registry: Registry = REGISTRY,
    ) -> None:
        optional = optional_kinds(registry)
        self.informers: dict[Kind, Informer[Any]] = {
            kind: Informer(
                api,
                kind,
                decoder(model),
                optional=kind in optional,
                label_selector=namespace_selector if kind == kinds.NAMESPACES else None,
            )
            for kind, model in models(registry, podgroup_kind).items()
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
