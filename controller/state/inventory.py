"""What the cluster holds besides the gangs: ClusterQueues, Cohorts, ResourceFlavors,
LocalQueues, namespaces, PriorityClasses, nodes and the pods on them.

Rule: the inventory records objects and marks what their changes touch (the queues, flavors
or nodes the engine must take in; the gangs to look at again); it decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from controller import quota
from controller.api import kinds, kube
from controller.api.checks import AdmissionCheck
from controller.api.kinds import Kind
from controller.api.quantity import QuantityError, parse_quantity
from controller.api.queues import ClusterQueue, Cohort, LocalQueue, ResourceFlavor
from controller.quota.snapshot import HostPort
from controller.state import provisioning
from controller.state.cohorts import cohort_spec, flavor_spec, queue_spec, tree_of, trees_used
from controller.state.gangs import GangIndex, GangKey
from controller.workloads.base import GangShape
from controller.workloads.devices import (
    Selects,
    class_devices,
    class_selects,
    device_resource,
    node_devices,
)
from controller.workloads.pod_rules import NODE_NAME_KEY, host_ports
from controller.workloads.requests import pod_requests
from controller.workloads.taints import repelling_taints

UNSCHEDULABLE_TAINT = quota.Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def core_node(node: kube.Node, used: Mapping[str, int]) -> quota.Node | None:
    """A Ready node as the core sees it (None when it is not Ready); its name is among its
    labels too, as NODE_NAME_KEY (what a node affinity's matchFields on metadata.name asks)."""
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    if not ready:
        return None
    allocatable: dict[str, int] = {}
    for resource, amount in node.status.allocatable.items():
        try:
            allocatable[resource] = parse_quantity(amount)
        except QuantityError:
            allocatable[resource] = 0
    taints = list(repelling_taints(node.spec.taints))
    if node.spec.unschedulable:
        taints.append(UNSCHEDULABLE_TAINT)
    return quota.Node(
        name=node.metadata.name,
        allocatable=allocatable,
        labels={**node.metadata.labels, NODE_NAME_KEY: node.metadata.name},
        taints=tuple(taints),
        used=dict(used),
    )


def _pod_usage(pod: kube.Pod) -> dict[str, int]:
    try:
        usage = pod_requests(pod.spec)
    except (QuantityError, ValueError):
        usage = {}
    usage["pods"] = usage.get("pods", 0) + 1000
    return usage


@dataclass(frozen=True, slots=True)
class _OnNode:
    """What a pod holds on its node: its gang (None: none, or it shuts down), its requests (and
    the devices of its claims) and its host ports."""

    gang: GangKey | None
    usage: dict[str, int]
    ports: tuple[HostPort, ...]
    pod: kube.Pod


def _keep(store: dict[str, Any], old: Any, new: Any, value: Any) -> None:
    """Keep `value` for a cluster-scoped object by name, or forget it once it is deleted."""
    name = (new or old).metadata.name
    if new is None:
        store.pop(name, None)
    else:
        store[name] = value


class Inventory:
    """Every object of the cluster's shape, as the engine and the reports need them."""

    def __init__(self, index: GangIndex, *, namespace_filter: bool = False) -> None:
        self._index = index
        self.cluster_queues: dict[str, ClusterQueue] = {}
        self.cohorts: dict[str, Cohort] = {}
        # Each ResourceFlavor as the core sees it, and as the API has it.
        self.flavors: dict[str, quota.FlavorSpec] = {}
        self._flavor_objects: dict[str, ResourceFlavor] = {}
        # Each Topology's levels.
        self.topologies: dict[str, tuple[str, ...]] = {}
        # AdmissionChecks by name, and the ProvisioningRequests of gangs waiting for nodes, by
        # (namespace, name).
        self.admission_checks: dict[str, AdmissionCheck] = {}
        self.provisioning_requests: dict[tuple[str, str], kube.ProvisioningRequest] = {}
        # (namespace, LocalQueue) -> its ClusterQueue, and the object
        self.local_queues: dict[tuple[str, str], str] = {}
        self.local_queue_objects: dict[tuple[str, str], LocalQueue] = {}
        # Namespaces whose workloads this controller manages (None: all).
        self.namespaces: set[str] | None = set() if namespace_filter else None
        self.priority_classes: dict[str, int] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        # Each node as the core sees it, without usage (None: not Ready).
        self.nodes: dict[str, quota.Node | None] = {}
        # Every node's labels, Ready or not (an admitted gang stays pinned to its planned nodes
        # while one of them is NotReady).
        self._labels_of: dict[str, Mapping[str, str]] = {}
        # node -> pod (namespace, name) -> what it holds there
        self._on_node: dict[str, dict[GangKey, _OnNode]] = {}
        # DRA: the ResourceSlices by name, the DeviceClasses whose selector the placement check
        # evaluates, and node -> the devices of each such class it has (node resources
        # `devices.kohort.dev/<class>`; every node has each, 0 when it has none).
        self._slices: dict[str, dict[str, kube.ResourceSlice]] = {}  # node -> name -> slice
        self._device_classes: dict[str, Selects] = {}
        self._node_devices: dict[str, dict[str, int]] = {}
        self._classes_taken: set[str] = set()
        # What the engine has yet to take in.
        self.queues_changed = False
        self.flavors_changed = False
        self.nodes_changed = False
        self.dirty_nodes: set[str] = set()

    # -- reading ------------------------------------------------------------------------------

    def ours(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def parents(self) -> dict[str, str | None]:
        return {name: c.spec.parent for name, c in self.cohorts.items()}

    def priority(self, shape: GangShape) -> int:
        """A gang's priority: its own, or the highest of its PriorityClasses' (0 if unknown)."""
        if shape.priority is not None:
            return shape.priority
        values = [self.priority_classes.get(c, 0) for c in shape.priority_classes]
        return max(values, default=0)

    def relevant(self) -> tuple[set[str], set[str]]:
        """The ClusterQueues and Cohorts this controller looks after: all of them, or with a
        namespace filter the queues our namespaces use and the whole cohort trees they are in
        (every queue, lenders too, and every Cohort of those trees)."""
        queues = set(self.cluster_queues)
        cohorts = set(self.cohorts)
        if self.namespaces is None:
            return queues, cohorts
        used = {cq for (ns, _), cq in self.local_queues.items() if self.ours(ns)}
        parents = self.parents()
        trees = trees_used(self.cluster_queues, used, parents)
        queues = {
            name
            for name, cq in self.cluster_queues.items()
            if name in used or (cq.spec.cohort and tree_of(cq.spec.cohort, parents) in trees)
        }
        cohorts = {name for name in self.cohorts if tree_of(name, parents) in trees}
        return queues, cohorts

    def specs(
        self, queues: set[str], cohorts: set[str]
    ) -> tuple[tuple[quota.QueueSpec, ...], tuple[quota.CohortSpec, ...]]:
        """The core's view of these queues and cohorts, in name order."""
        return (
            tuple(self._queue_spec(self.cluster_queues[n]) for n in sorted(queues)),
            tuple(cohort_spec(self.cohorts[n]) for n in sorted(cohorts)),
        )

    def _queue_spec(self, cq: ClusterQueue) -> quota.QueueSpec:
        spec = queue_spec(cq)
        if not cq.spec.admission_checks:
            return spec
        grown = provisioning.provisioned_flavors(cq, self.admission_checks, self._flavor_objects)
        return replace(spec, provisioned=grown) if grown else spec

    def request_classes(self) -> dict[str, str]:
        """Each AdmissionCheck's ProvisioningRequest class, by check name."""
        return {
            name: check.spec.provisioning_request.provisioning_class_name
            for name, check in self.admission_checks.items()
        }

    def pools(self, flavors: Iterable[str]) -> str:
        """What the pools of these autoscaled flavors may grow to, in words."""
        shown = []
        for name in sorted(flavors):
            found = self._flavor_objects.get(name)
            scaling = found.spec.autoscaling if found is not None else None
            if scaling is not None:
                shown.append(f"flavor {name} grows to {scaling.max_nodes} node(s) at most")
        return "; ".join(shown)

    def pool_nodes(self, held: Iterable[str]) -> list[quota.Node]:
        """The nodes autoscaled flavors' pools can still add (see provisioning.pool_nodes)."""
        return provisioning.pool_nodes(
            self._flavor_objects.values(), self._labels_of.values(), held
        )

    def node_labels(self, node: str) -> Mapping[str, str] | None:
        """The labels of a node, Ready or not (an admitted gang's pods are pinned by them);
        None once it is gone."""
        return self._labels_of.get(node)

    def flavor_specs(self) -> tuple[quota.FlavorSpec, ...]:
        return tuple(self.flavors[name] for name in sorted(self.flavors))

    def core_nodes(self, admitted: Callable[[GangKey], bool]) -> list[quota.Node]:
        """Every Ready node with what pods outside admitted gangs use and bind on it, and the
        devices of the DeviceClasses the placement check evaluates."""
        none = {device_resource(c): 0 for c in self._device_classes}
        return [
            replace(
                node,
                allocatable={**node.allocatable, **none, **self._node_devices.get(name, {})},
                used=self.node_used(name, admitted),
                ports=self.node_ports(name, admitted),
            )
            for name, node in sorted(self.nodes.items())
            if node is not None
        ]

    def checked_devices(self) -> frozenset[str]:
        """The node device resources the placement check counts (one per DeviceClass whose
        selector it evaluates)."""
        return frozenset(device_resource(c) for c in self._device_classes)

    def _outside(self, name: str, admitted: Callable[[GangKey], bool]) -> list[_OnNode]:
        """The node's pods outside admitted gangs (the engine counts those gangs)."""
        return [
            held
            for held in self._on_node.get(name, {}).values()
            if held.gang is None or not admitted(held.gang)
        ]

    def node_used(self, name: str, admitted: Callable[[GangKey], bool]) -> dict[str, int]:
        """What pods outside admitted gangs use on the node."""
        used: dict[str, int] = {}
        for held in self._outside(name, admitted):
            for resource, amount in held.usage.items():
                used[resource] = used.get(resource, 0) + amount
        return used

    def node_ports(self, name: str, admitted: Callable[[GangKey], bool]) -> tuple[HostPort, ...]:
        """The host ports pods outside admitted gangs bind on the node, each once."""
        ports = (port for held in self._outside(name, admitted) for port in held.ports)
        return tuple(dict.fromkeys(ports))

    # -- changes --------------------------------------------------------------------------------

    def observe(self, kind: Kind, old: Any, new: Any) -> None:
        """A queue, cohort, flavor, LocalQueue, node, PriorityClass or namespace changed."""
        if kind == kinds.CLUSTER_QUEUES:
            self._cluster_queue_changed(old, new)
        elif kind == kinds.COHORTS:
            _keep(self.cohorts, old, new, new)
            if old is None or new is None or old.spec != new.spec:
                self.queues_changed = True
        elif kind == kinds.RESOURCE_FLAVORS:
            self._flavor_changed(old, new)
        elif kind == kinds.ADMISSION_CHECKS:
            _keep(self.admission_checks, old, new, new)
            if old is None or new is None or old.spec != new.spec:
                self.queues_changed = True
        elif kind == kinds.TOPOLOGIES:
            self._topology_changed(old, new)
        elif kind == kinds.LOCAL_QUEUES:
            self._local_queue_changed(old, new)
        elif kind == kinds.NODES:
            self._node_changed(old, new)
        elif kind == kinds.PRIORITY_CLASSES:
            _keep(self.priority_classes, old, new, new and new.value)
        elif kind == kinds.NAMESPACES:
            self._namespace_changed(old, new)
        elif kind == kinds.RESOURCE_SLICES:
            self._slice_changed(old, new)
        elif kind == kinds.DEVICE_CLASSES:
            name = (new or old).metadata.name
            selects = class_selects(new) if new is not None else None
            if selects is None:
                self._device_classes.pop(name, None)
            else:
                self._device_classes[name] = selects
            self._take_devices()

    def _slice_changed(
        self, old: kube.ResourceSlice | None, new: kube.ResourceSlice | None
    ) -> None:
        """The devices of the nodes of a changed ResourceSlice again."""
        nodes = {s.spec.node_name for s in (old, new) if s is not None and s.spec.node_name}
        if old is not None and old.spec.node_name:
            self._slices.get(old.spec.node_name, {}).pop(old.metadata.name, None)
        if new is not None and new.spec.node_name:
            self._slices.setdefault(new.spec.node_name, {})[new.metadata.name] = new
        self._take_devices(nodes)

    def _take_devices(self, nodes: set[str] | None = None) -> None:
        """The devices of `nodes` (None: every node) again."""
        names = set(self._slices) if nodes is None else nodes
        published = [s for n in names for s in self._slices.get(n, {}).values()]
        found = node_devices(published, self._device_classes)
        changed = set(self._device_classes) != self._classes_taken
        moved = set()
        for name in names:
            after = found.get(name, {})
            if self._node_devices.get(name, {}) != after:
                changed = True
                moved.add(name)
                self._node_devices[name] = after
        if changed:
            self._classes_taken = set(self._device_classes)
            self.nodes_changed = True
            self._index.class_devices_changed(class_devices(self._node_devices))
            for name in moved:
                self._count_claims_again(name, lambda pod: True)

    def _count_claims_again(self, node: str, names: Callable[[kube.Pod], bool]) -> None:
        """What the pods of `node` with claims (those `names` picks) hold of its devices, again."""
        pods = self._on_node.get(node, {})
        for ref, held in pods.items():
            if held.pod.spec.resource_claims and names(held.pod):
                pods[ref] = replace(held, usage=self._usage(held.pod))
                self.dirty_nodes.add(node)

    def _cluster_queue_changed(self, old: Any, new: Any) -> None:
        _keep(self.cluster_queues, old, new, new)
        if old is None or new is None or old.spec != new.spec:
            self.queues_changed = True
        if (old and old.spec.namespace_selector) != (new and new.spec.namespace_selector):
            self._index.dirty.update(g.key for g in self._index)  # rare: look at every gang

    def _namespace_changed(self, old: kube.Namespace | None, new: kube.Namespace | None) -> None:
        name = (new or old).metadata.name  # type: ignore[union-attr]
        labels = dict(new.metadata.labels) if new is not None else None
        if labels is None:
            self.namespace_labels.pop(name, None)
        else:
            self.namespace_labels[name] = labels
        if old is not None and new is not None and old.metadata.labels == new.metadata.labels:
            return
        self._index.dirty.update(self._index.in_namespace(name))
        if self.namespaces is not None and (old is None) != (new is None):
            # A namespace selected, or no longer selected.
            if new is None:
                self.namespaces.discard(name)
            else:
                self.namespaces.add(name)
            self.queues_changed = True

    def _flavor_changed(self, old: Any, new: Any) -> None:
        _keep(self._flavor_objects, old, new, new)
        self._take_flavor((new or old).metadata.name)
        before = old.spec.autoscaling if old is not None else None
        after = new.spec.autoscaling if new is not None else None
        if before != after:  # the nodes its pool can add, and the queues that may use them
            self.nodes_changed = self.queues_changed = True

    def _take_flavor(self, name: str) -> None:
        """The core's view of flavor `name` (as its object and its Topology are now)."""
        flavor = self._flavor_objects.get(name)
        before = self.flavors.pop(name, None)
        after = flavor_spec(flavor, self.topologies) if flavor is not None else None
        if after is not None:
            self.flavors[name] = after
        if before != after:
            self.flavors_changed = True

    def _topology_changed(self, old: Any, new: Any) -> None:
        _keep(self.topologies, old, new, new and new.levels())
        name = (new or old).metadata.name
        for flavor, obj in self._flavor_objects.items():
            if obj.spec.topology_name == name:
                self._take_flavor(flavor)

    def _local_queue_changed(self, old: Any, new: Any) -> None:
        obj = new or old
        key = (obj.metadata.namespace or "", obj.metadata.name)
        if new is None:
            self.local_queues.pop(key, None)
            self.local_queue_objects.pop(key, None)
        else:
            self.local_queues[key] = new.spec.cluster_queue
            self.local_queue_objects[key] = new
        if old is not None and new is not None and old.spec == new.spec:
            return  # (its status: kohort's own write)
        self._index.dirty.update(self._index.in_queue(*key))
        self.queues_changed = True

    def _node_changed(self, old: kube.Node | None, new: kube.Node | None) -> None:
        name = (new or old).metadata.name  # type: ignore[union-attr]
        before = self.nodes.pop(name, None)
        after = core_node(new, {}) if new is not None else None
        if new is not None:
            self.nodes[name] = after
            self._labels_of[name] = new.metadata.labels
        else:
            self._labels_of.pop(name, None)
        if before != after:
            self.nodes_changed = True

    def pod_changed(self, old: kube.Pod | None, new: kube.Pod | None, gang: GangKey | None) -> None:
        """A pod of `gang` (None: of no gang) changed: what it holds on its node."""
        pod = new or old
        assert pod is not None
        ref = (pod.metadata.namespace, pod.metadata.name)
        before = old.spec.node_name if old is not None else None
        if before:
            self._on_node.get(before, {}).pop(ref, None)
            self.dirty_nodes.add(before)
        if new is not None and new.spec.node_name and not new.finished():
            # A pod shutting down counts on its node whatever its gang's state: an evicted gang
            # may be admitted again (with a new placement) before its old pods are gone.
            owner = gang if new.metadata.deletion_timestamp is None else None
            held = _OnNode(owner, self._usage(new), host_ports(new.spec), new)
            self._on_node.setdefault(new.spec.node_name, {})[ref] = held
            self.dirty_nodes.add(new.spec.node_name)

    def _usage(self, pod: kube.Pod) -> dict[str, int]:
        usage = _pod_usage(pod)
        node_has = self._node_devices.get(pod.spec.node_name or "", {})
        usage.update(self._index.pod_devices(pod, node_has))
        return usage

    def template_changed(self, namespace: str, name: str) -> None:
        """ResourceClaimTemplate `name` of `namespace` changed: the devices the pods that name
        it hold on their nodes are counted again (a template may arrive after its pods)."""

        def names_it(pod: kube.Pod) -> bool:
            return pod.metadata.namespace == namespace and any(
                c.resource_claim_template_name == name for c in pod.spec.resource_claims
            )

        for node in self._on_node:
            self._count_claims_again(node, names_it)
