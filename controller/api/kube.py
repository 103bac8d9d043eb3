"""Typed views of the Kubernetes objects kohort reads (and the few it writes that are not ours).

Rule: each view names only the members kohort reads; msgspec skips everything else while
decoding, so the controller's cache holds small immutable objects (no managedFields, no
container images or env). Field names are snake_case in Python and camelCase on the wire.
The kohort.dev kinds are pydantic models (controller.api.queues, controller.api.workload);
their metadata is this module's `ObjectMeta` too, so every object's metadata is one type.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from controller.api import kinds, names
from controller.api.kinds import Kind

Quantity = str | int | float


class View(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """Base of every view: camelCase on the wire, unknown members skipped. Treat as read-only."""


class MetaView(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True, frozen=True):
    """Base of the metadata views, as `View` but frozen: objects built from others (a
    Workload's gang owner, owner references) share their metadata."""


class OwnerReference(MetaView, frozen=True):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(MetaView, frozen=True):
    """The metadata of every object kohort reads, its own kinds' included."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = {}
    owner_references: list[OwnerReference] = []

    def controller_owner(self) -> OwnerReference | None:
        return next((o for o in self.owner_references if o.controller), None)


def controller_reference(kind: Kind, meta: ObjectMeta) -> OwnerReference:
    """A reference to the object of `kind` with `meta`, as its controller (an owner whose
    deletion the owned object does not block)."""
    return OwnerReference(
        api_version=kind.api_version,
        kind=kind.kind,
        name=meta.name,
        uid=meta.uid,
        controller=True,
        block_owner_deletion=False,
    )


class Condition(View):
    type: str
    status: str = "Unknown"
    reason: str = ""
    message: str = ""


class Taint(View):
    """A node's taint. kohort's CRDs hold theirs as `common.Taint` (validated, with a schema);
    both reach the decision core through `controller.workloads.taints`."""

    key: str = ""
    value: str = ""
    effect: str = ""


class Toleration(View):
    """A pod's toleration (see `Taint`, and `common.Toleration` for the CRDs')."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class ResourceRequirements(View):
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}


class ContainerPort(View):
    container_port: int = 0
    host_port: int | None = None
    protocol: str = ""
    host_ip: str = msgspec.field(default="", name="hostIP")


class Container(View):
    name: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    # "Always" on an init container makes it a sidecar.
    restart_policy: str | None = None
    ports: list[ContainerPort] = []


class SchedulingGate(View):
    name: str


class SelectorRequirement(View):
    """One requirement of a label selector, or of a node selector term (matchExpressions,
    matchFields)."""

    key: str = ""
    operator: str = ""
    values: list[str] = []


class LabelSelector(View):
    match_labels: dict[str, str] = {}
    match_expressions: list[SelectorRequirement] = []


class NodeSelectorTerm(View):
    match_expressions: list[SelectorRequirement] = []
    match_fields: list[SelectorRequirement] = []


class NodeSelector(View):
    node_selector_terms: list[NodeSelectorTerm] = []


class Unread(View):
    """Something kohort only needs to know is there: none of its members are read."""


class NodeAffinity(View):
    """A pod's node affinity: its required part (the preferred one is a preference: only
    whether it is there matters)."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[Unread] | None = None


class PodAffinityTerm(View):
    label_selector: LabelSelector | None = None
    topology_key: str = ""
    namespaces: list[str] = []
    namespace_selector: LabelSelector | None = None
    match_label_keys: list[str] = []
    mismatch_label_keys: list[str] = []


class PodAffinity(View):
    """A pod's (anti-)affinity to other pods: its required terms."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = []


class Affinity(View):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class TopologySpreadConstraint(View):
    max_skew: int = 1
    topology_key: str = ""
    when_unsatisfiable: str = ""
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: list[str] = []


class PodResourceClaim(View):
    """A dynamic resource claim of a pod (DRA): a claim made for each pod from a template, or
    a claim of its own name that the pod shares with whoever else names it."""

    name: str = ""
    resource_claim_template_name: str | None = None
    resource_claim_name: str | None = None


class PodSpec(View):
    containers: list[Container] = []
    init_containers: list[Container] = []
    overhead: dict[str, Quantity] = {}
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    priority_class_name: str | None = None
    scheduling_gates: list[SchedulingGate] = []
    scheduler_name: str | None = None
    node_name: str | None = None
    affinity: Affinity | None = None
    topology_spread_constraints: list[TopologySpreadConstraint] = []
    resource_claims: list[PodResourceClaim] = []
    # Its containers' ports are the node's ports (a port's hostPort defaults to its own).
    host_network: bool = False


class ExactDeviceRequest(View):
    """What one request of a claim asks for (resource.k8s.io/v1 ExactDeviceRequest): only
    what counting its devices needs, and what tells that it cannot be counted."""

    device_class_name: str = ""
    allocation_mode: str = "ExactCount"
    count: int = 1
    admin_access: bool | None = None
    selectors: list[Unread] = []


class DeviceRequest(View):
    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: list[Unread] = []


class DeviceClaim(View):
    requests: list[DeviceRequest] = []


class ResourceClaimSpec(View):
    devices: DeviceClaim = msgspec.field(default_factory=DeviceClaim)


class ResourceClaimTemplateSpec(View):
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(View):
    KIND: ClassVar[Kind] = kinds.RESOURCE_CLAIM_TEMPLATES
    metadata: ObjectMeta
    spec: ResourceClaimTemplateSpec = msgspec.field(default_factory=ResourceClaimTemplateSpec)


class CELSelector(View):
    expression: str = ""


class DeviceSelector(View):
    cel: CELSelector | None = None


class DeviceClassSpec(View):
    selectors: list[DeviceSelector] = []


class DeviceClass(View):
    KIND: ClassVar[Kind] = kinds.DEVICE_CLASSES
    metadata: ObjectMeta
    spec: DeviceClassSpec = msgspec.field(default_factory=DeviceClassSpec)


class Device(View):
    """A device a ResourceSlice publishes: only its name is read."""

    name: str = ""


class ResourceSliceSpec(View):
    driver: str = ""
    node_name: str | None = None
    all_nodes: bool | None = None
    devices: list[Device] = []


class ResourceSlice(View):
    KIND: ClassVar[Kind] = kinds.RESOURCE_SLICES
    metadata: ObjectMeta
    spec: ResourceSliceSpec = msgspec.field(default_factory=ResourceSliceSpec)


class PlacementAnnotations(MetaView, frozen=True):
    """The annotations of a pod template (or pod) that ask for a topology: kohort's, and
    Kueue's of the same meaning; any other annotation is skipped while decoding."""

    required_topology: str | None = msgspec.field(
        default=None, name=names.REQUIRED_TOPOLOGY_ANNOTATION
    )
    preferred_topology: str | None = msgspec.field(
        default=None, name=names.PREFERRED_TOPOLOGY_ANNOTATION
    )
    unconstrained_topology: str | None = msgspec.field(
        default=None, name=names.UNCONSTRAINED_TOPOLOGY_ANNOTATION
    )
    slice_required_topology: str | None = msgspec.field(
        default=None, name=names.SLICE_REQUIRED_TOPOLOGY_ANNOTATION
    )
    slice_size: str | None = msgspec.field(default=None, name=names.SLICE_SIZE_ANNOTATION)
    kueue_required_topology: str | None = msgspec.field(
        default=None, name=names.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION
    )
    kueue_preferred_topology: str | None = msgspec.field(
        default=None, name=names.KUEUE_PREFERRED_TOPOLOGY_ANNOTATION
    )
    kueue_unconstrained_topology: str | None = msgspec.field(
        default=None, name=names.KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION
    )
    kueue_slice_required_topology: str | None = msgspec.field(
        default=None, name=names.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION
    )
    kueue_slice_size: str | None = msgspec.field(
        default=None, name=names.KUEUE_SLICE_SIZE_ANNOTATION
    )
    # Not about topology: the ProvisioningRequest whose capacity a released pod takes.
    consumes: str | None = msgspec.field(default=None, name=names.CONSUME_REQUEST_ANNOTATION)


class TemplateMeta(View):
    labels: dict[str, str] = {}
    annotations: PlacementAnnotations | None = None


class PodTemplate(View):
    metadata: TemplateMeta = msgspec.field(default_factory=TemplateMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class PodStatus(View):
    phase: str | None = None


class PodMeta(ObjectMeta, frozen=True):
    """A pod's metadata: of its annotations, only those that ask for a topology (a pod of a
    plain group is its own template)."""

    annotations: PlacementAnnotations | None = None


class Pod(View):
    KIND: ClassVar[Kind] = kinds.PODS

    metadata: PodMeta
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    def finished(self) -> bool:
        return self.status.phase in ("Succeeded", "Failed")

    def live(self) -> bool:
        """Not being deleted and not finished: it holds (or will hold) its node's capacity."""
        return self.metadata.deletion_timestamp is None and not self.finished()


class NodeSpec(View):
    taints: list[Taint] = []
    unschedulable: bool = False


class NodeStatus(View):
    allocatable: dict[str, Quantity] = {}
    conditions: list[Condition] = []


class Node(View):
    KIND: ClassVar[Kind] = kinds.NODES

    metadata: ObjectMeta
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class JobSpec(View):
    parallelism: int | None = None
    completions: int | None = None
    completion_mode: str | None = None
    suspend: bool | None = None
    active_deadline_seconds: int | None = None
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class JobStatus(View):
    conditions: list[Condition] = []
    # Set while the Job runs: its template's scheduling fields may change only while it is
    # suspended and this is unset.
    start_time: str | None = None


class AnnotatedMeta(ObjectMeta, frozen=True):
    """Metadata with annotations, for the kinds whose annotations kohort reads (few: pods'
    annotations can be large)."""

    annotations: dict[str, str] = {}


class Job(View):
    KIND: ClassVar[Kind] = kinds.JOBS

    metadata: AnnotatedMeta
    spec: JobSpec = msgspec.field(default_factory=JobSpec)
    status: JobStatus = msgspec.field(default_factory=JobStatus)


class ReplicaSpec(View):
    """`replicas` pods of one pod template."""

    replicas: int | None = None
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class StatefulSet(View):
    KIND: ClassVar[Kind] = kinds.STATEFULSETS

    metadata: ObjectMeta
    spec: ReplicaSpec = msgspec.field(default_factory=ReplicaSpec)


class LeaderWorkerTemplate(View):
    size: int | None = None
    leader_template: PodTemplate | None = None
    worker_template: PodTemplate | None = None


class LeaderWorkerSetSpec(View):
    replicas: int | None = None
    leader_worker_template: LeaderWorkerTemplate = msgspec.field(
        default_factory=LeaderWorkerTemplate
    )


class LeaderWorkerSet(View):
    KIND: ClassVar[Kind] = kinds.LEADERWORKERSETS

    metadata: ObjectMeta
    spec: LeaderWorkerSetSpec = msgspec.field(default_factory=LeaderWorkerSetSpec)


class JobTemplateMeta(View):
    annotations: dict[str, str] = {}


class JobTemplate(View):
    metadata: JobTemplateMeta = msgspec.field(default_factory=JobTemplateMeta)
    spec: JobSpec = msgspec.field(default_factory=JobSpec)


class DependsOn(View):
    name: str = ""


class ReplicatedJob(View):
    name: str = ""
    replicas: int | None = None
    template: JobTemplate = msgspec.field(default_factory=JobTemplate)
    depends_on: list[DependsOn] = []


class StartupPolicy(View):
    startup_policy_order: str = ""


class JobSetSpec(View):
    suspend: bool | None = None
    replicated_jobs: list[ReplicatedJob] = []
    startup_policy: StartupPolicy | None = None


class JobSetStatus(View):
    conditions: list[Condition] = []
    terminal_state: str = ""


class JobSet(View):
    KIND: ClassVar[Kind] = kinds.JOBSETS

    metadata: AnnotatedMeta
    spec: JobSetSpec = msgspec.field(default_factory=JobSetSpec)
    status: JobSetStatus = msgspec.field(default_factory=JobSetStatus)


class RunPolicy(View):
    suspend: bool | None = None


class ElasticPolicy(View):
    min_replicas: int | None = None
    max_replicas: int | None = None


class PyTorchJobSpec(View):
    run_policy: RunPolicy = msgspec.field(default_factory=RunPolicy)
    elastic_policy: ElasticPolicy | None = None
    pytorch_replica_specs: dict[str, ReplicaSpec] = {}


class KubeflowJobStatus(View):
    conditions: list[Condition] = []


class PyTorchJob(View):
    KIND: ClassVar[Kind] = kinds.PYTORCHJOBS

    metadata: AnnotatedMeta
    spec: PyTorchJobSpec = msgspec.field(default_factory=PyTorchJobSpec)
    status: KubeflowJobStatus = msgspec.field(default_factory=KubeflowJobStatus)


class HeadGroupSpec(View):
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class WorkerGroupSpec(View):
    group_name: str = ""
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    num_of_hosts: int | None = None
    suspend: bool | None = None
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)


class RayClusterSpec(View):
    suspend: bool | None = None
    enable_in_tree_autoscaling: bool | None = None
    head_group_spec: HeadGroupSpec = msgspec.field(default_factory=HeadGroupSpec)
    worker_group_specs: list[WorkerGroupSpec] = []


class RayCluster(View):
    KIND: ClassVar[Kind] = kinds.RAYCLUSTERS

    metadata: AnnotatedMeta
    spec: RayClusterSpec = msgspec.field(default_factory=RayClusterSpec)


class RayJobDeletionStrategy(View):
    # Only whether rules are set matters to kohort (KubeRay's RayJobDeletionPolicy gate).
    deletion_rules: list[msgspec.Raw] = []


class RayJobSpec(View):
    suspend: bool | None = None
    # K8sJobMode (KubeRay's default), HTTPMode, InteractiveMode or SidecarMode.
    submission_mode: str | None = None
    shutdown_after_job_finishes: bool | None = None
    cluster_selector: dict[str, str] = {}
    ray_cluster_spec: RayClusterSpec | None = None
    submitter_pod_template: PodTemplate | None = None
    deletion_strategy: RayJobDeletionStrategy | None = None


class RayJobStatus(View):
    job_deployment_status: str = ""
    ray_cluster_name: str = ""


class RayJob(View):
    KIND: ClassVar[Kind] = kinds.RAYJOBS

    metadata: AnnotatedMeta
    spec: RayJobSpec = msgspec.field(default_factory=RayJobSpec)
    status: RayJobStatus = msgspec.field(default_factory=RayJobStatus)


class PriorityClass(View):
    KIND: ClassVar[Kind] = kinds.PRIORITY_CLASSES

    metadata: ObjectMeta
    value: int = 0


class Namespace(View):
    KIND: ClassVar[Kind] = kinds.NAMESPACES

    metadata: ObjectMeta


class PodGroupSpec(View):
    min_member: int
    min_resources: dict[str, str] = {}
    # Volcano only.
    queue: str | None = None
    priority_class_name: str | None = None


class PodGroup(View, kw_only=True):
    """A gang scheduler's PodGroup (Volcano's or coscheduling's: same shape, other group)."""

    # Written out even though every PodGroup has them (views omit default values).
    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: PodGroupSpec


class GangObject(View):
    """Any backend's gang object (a PodGroup, a scheduling.k8s.io Workload), as the controller
    watches it: whether it exists is all it reads."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class ProvisioningRequestStatus(View):
    conditions: list[Condition] = []
    provisioning_class_details: dict[str, str] = {}


class ProvisioningRequest(View):
    """An autoscaler's ProvisioningRequest (autoscaling.x-k8s.io/v1): its conditions are all
    the controller reads."""

    KIND: ClassVar[Kind] = kinds.PROVISIONING_REQUESTS

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    status: ProvisioningRequestStatus = msgspec.field(default_factory=ProvisioningRequestStatus)

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.status.conditions if c.type == kind), None)

    def is_true(self, kind: str) -> bool:
        found = self.condition(kind)
        return found is not None and found.status == "True"


class GangPolicy(View):
    min_count: int


class NativePodGroupPolicy(View):
    gang: GangPolicy


class NativePodGroup(View):
    name: str
    policy: NativePodGroupPolicy


class NativeWorkloadSpec(View):
    pod_groups: list[NativePodGroup]


class NativePodGroupSpec(View):
    scheduling_policy: NativePodGroupPolicy
    # kube-scheduler places a pod group only if its pods have its priority (resolved from this
    # class by the apiserver).
    priority_class_name: str | None = None


class NativePodGroupObject(View, kw_only=True):
    """kube-scheduler's scheduling.k8s.io/v1beta1 PodGroup: its pods are placed all or nothing."""

    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: NativePodGroupSpec


class NativeWorkload(View, kw_only=True):
    """kube-scheduler's scheduling.k8s.io/v1alpha1 Workload: pod groups placed all or nothing."""

    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: NativeWorkloadSpec


class EventSource(View):
    component: str


class ObjectReference(View):
    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str


class Event(View, kw_only=True):
    """A core/v1 Event, what `kubectl describe` lists under the object."""

    KIND: ClassVar[Kind] = kinds.EVENTS

    api_version: str
    kind: str
    metadata: ObjectMeta
    involved_object: ObjectReference
    reason: str
    message: str
    type: str
    source: EventSource
    reporting_component: str
    reporting_instance: str
    first_timestamp: str
    last_timestamp: str
    count: int = 1
