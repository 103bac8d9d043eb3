"""Label, annotation, gate and API names shared by the webhook and the controller."""

from typing import Final

GROUP: Final = "kohort.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

# Set by users (or implied by a namespace opt-in) to put a workload in a LocalQueue.
QUEUE_LABEL: Final = "kohort.dev/queue-name"
# A namespace labelled with this (value "true") sends its workloads to the LocalQueue `default`.
NAMESPACE_OPT_IN_LABEL: Final = "kohort.dev/managed"
DEFAULT_LOCAL_QUEUE: Final = "default"
# Objects with this label set to "true" are never touched by the webhook.
OPT_OUT_LABEL: Final = "kohort.dev/opt-out"

# Pod scheduling gate that holds a gang's pods until the controller admits the gang.
ADMISSION_GATE: Final = "kohort.dev/admission"
# Name of the PodGroup (and Workload) a pod belongs to.
POD_GROUP_LABEL: Final = "kohort.dev/pod-group"
# On a pod that is a gang by itself, or one of a plain pod group: how many pods the gang has.
# Pods of a managed workload (a Job, a StatefulSet, ...) join their owner's gang and do not
# carry it.
POD_GROUP_TOTAL_COUNT_LABEL: Final = "kohort.dev/pod-group-total-count"
# Marks objects that kohort manages (pod templates, PodGroups, Workloads).
MANAGED_LABEL: Final = "kohort.dev/managed-by"
MANAGED_VALUE: Final = "kohort"

# Gang placement backends.
VOLCANO_SCHEDULER: Final = "volcano"
# The Volcano queue of kohort's PodGroups: kohort's alone (the validating webhook refuses
# PodGroups others put there), without a capability (quota is kohort's job).
VOLCANO_QUEUE: Final = "kohort"
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
# kube-scheduler's own gang scheduling (KEP-4671): a gang is a scheduling.k8s.io Workload named
# like the gang, with one pod group of this name holding all of its pods.
NATIVE_POD_GROUP: Final = "gang"
# The versions of that API kohort speaks, newest first: scheduling.k8s.io/v1beta1 (PodGroups,
# pods name theirs in spec.schedulingGroup) and v1alpha1 (Workloads, spec.workloadRef).
GANG_APIS: Final = ("v1beta1", "v1alpha1")

# LeaderWorkerSet labels that identify a pod's group.
LWS_NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"

# The labels the JobSet, Kubeflow training and KubeRay operators put on their pods, telling
# which of the owner's pod templates a pod was made from.
JOBSET_REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
# And the one the JobSet controller puts on its Jobs' pods naming their JobSet.
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
KUBEFLOW_REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
RAY_NODE_TYPE_LABEL: Final = "ray.io/node-type"
RAY_GROUP_LABEL: Final = "ray.io/group"

# On a pod template: where its pod set's pods go together in the nodes' topology. The value of
# a level is a node label key (a level of a Topology: a block, a rack, kubernetes.io/hostname).
# All pods in one domain of the level, required, or preferred (the lowest level that can host
# them); none (unconstrained: "true"); and slices of a size, each in one domain of a level.
REQUIRED_TOPOLOGY_ANNOTATION: Final = "kohort.dev/podset-required-topology"
PREFERRED_TOPOLOGY_ANNOTATION: Final = "kohort.dev/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY_ANNOTATION: Final = "kohort.dev/podset-unconstrained-topology"
SLICE_REQUIRED_TOPOLOGY_ANNOTATION: Final = "kohort.dev/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION: Final = "kohort.dev/podset-slice-size"
# The most a Job runs, in seconds, as its user declares it (start-time forecasts read it; a Job's
# own spec.activeDeadlineSeconds says the same).
# The cluster-autoscaler never drains a node for a pod that carries it "false": a gang's pods
# carry it, since losing one pod stops the whole gang (finished pods hold no node).
SAFE_TO_EVICT_ANNOTATION: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
# What the cluster-autoscaler reads on a pod that takes the capacity of a ProvisioningRequest:
# the request, and its class (kohort puts them on the pods of a gang released onto new nodes).
CONSUME_REQUEST_ANNOTATION: Final = "autoscaling.x-k8s.io/consume-provisioning-request"
PROVISIONING_CLASS_ANNOTATION: Final = "autoscaling.x-k8s.io/provisioning-class-name"
MAX_RUNTIME_ANNOTATION: Final = "kohort.dev/max-runtime-seconds"
# Kueue's keys of the same meanings, read too (kohort's win when both are set), so that a
# manifest written for Kueue is placed alike unchanged.
KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE_ANNOTATION: Final = "kueue.x-k8s.io/podset-slice-size"
# Partial admission of a Job: the fewest pods it may start with (Kueue's key read too, kohort's
# wins), and Kueue's key that asks for completions to follow parallelism.
MIN_PARALLELISM_ANNOTATION: Final = "kohort.dev/min-parallelism"
KUEUE_MIN_PARALLELISM_ANNOTATION: Final = "kueue.x-k8s.io/job-min-parallelism"
KUEUE_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION: Final = (
    "kueue.x-k8s.io/job-completions-equal-parallelism"
)
# Written by the release of a partially admitted Job: the parallelism and completions its user
# asked for and the parallelism it was released with (JSON), restored when it is held again.
PARTIALLY_ADMITTED_ANNOTATION: Final = "kohort.dev/partially-admitted"
