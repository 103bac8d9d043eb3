"""Where each resource kohort reads or writes lives in the API: one definition per kind.

Rule: every group/version/kind/plural used anywhere in kohort is one of the constants below;
models, adapters, informers, writers and the webhook's registration all refer to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.api.names import GROUP, VERSION


@dataclass(frozen=True, slots=True)
class Kind:
    """A resource's group, version, kind, plural and scope."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


NODES = Kind("", "v1", "nodes", "Node", namespaced=False)
PODS = Kind("", "v1", "pods", "Pod")
EVENTS = Kind("", "v1", "events", "Event")
NAMESPACES = Kind("", "v1", "namespaces", "Namespace", namespaced=False)
JOBS = Kind("batch", "v1", "jobs", "Job")
STATEFULSETS = Kind("apps", "v1", "statefulsets", "StatefulSet")
LEADERWORKERSETS = Kind("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")
JOBSETS = Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
PYTORCHJOBS = Kind("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
RAYCLUSTERS = Kind("ray.io", "v1", "rayclusters", "RayCluster")
RAYJOBS = Kind("ray.io", "v1", "rayjobs", "RayJob")
LEASES = Kind("coordination.k8s.io", "v1", "leases", "Lease")
SECRETS = Kind("", "v1", "secrets", "Secret")
MUTATING_WEBHOOK_CONFIGURATIONS = Kind(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
VALIDATING_WEBHOOK_CONFIGURATIONS = Kind(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)
PRIORITY_CLASSES = Kind(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
# Dynamic Resource Allocation (GA in Kubernetes 1.34): the claim templates pods name, whose
# devices a gang is charged (docs/dra.md).
RESOURCE_CLAIM_TEMPLATES = Kind(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate"
)
# ... and, for the placement check, the devices each node has and which of them a class selects.
RESOURCE_SLICES = Kind("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False)
DEVICE_CLASSES = Kind("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
VOLCANO_PODGROUPS = Kind("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
VOLCANO_QUEUES = Kind("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False)
COSCHEDULING_PODGROUPS = Kind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
# kube-scheduler's gang object (Kubernetes 1.35, feature gates GenericWorkload + GangScheduling);
# not kohort's own kohort.dev Workload.
SCHEDULING_WORKLOADS = Kind("scheduling.k8s.io", "v1alpha1", "workloads", "Workload")
# ... and its newer form (Kubernetes 1.37, gate GenericWorkload): a runtime PodGroup per gang.
SCHEDULING_PODGROUPS = Kind("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup")
CLUSTER_QUEUES = Kind(GROUP, VERSION, "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = Kind(GROUP, VERSION, "localqueues", "LocalQueue")
RESOURCE_FLAVORS = Kind(GROUP, VERSION, "resourceflavors", "ResourceFlavor", namespaced=False)
COHORTS = Kind(GROUP, VERSION, "cohorts", "Cohort", namespaced=False)
TOPOLOGIES = Kind(GROUP, VERSION, "topologies", "Topology", namespaced=False)
WORKLOADS = Kind(GROUP, VERSION, "workloads", "Workload")
ADMISSION_CHECKS = Kind(GROUP, VERSION, "admissionchecks", "AdmissionCheck", namespaced=False)
# The cluster-autoscaler's request for a gang's capacity (autoscaling.x-k8s.io, its CRD installed
# with the autoscaler), and the PodTemplates it names.
PROVISIONING_REQUESTS = Kind(
    "autoscaling.x-k8s.io", "v1", "provisioningrequests", "ProvisioningRequest"
)
POD_TEMPLATES = Kind("", "v1", "podtemplates", "PodTemplate")
CRDS = Kind(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
