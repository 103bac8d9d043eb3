"""What a RayCluster and a RayJob share: a Ray cluster's spec as one gang's pod sets.

The head is pod set `head` (one pod); each worker group is the pod set of its groupName, of
`replicas` (kept within minReplicas and maxReplicas, as KubeRay does) times `numOfHosts` pods.
A cluster whose size is not fixed (the Ray autoscaler, a suspended worker group) cannot be one
gang. A RayCluster's spec is its own `spec`; a RayJob's is its `spec.rayClusterSpec`.
"""

from __future__ import annotations

from controller.api import kube, names
from controller.workloads.base import field_path
from controller.workloads.edits import Path
from controller.workloads.suspended import HeldTemplate, negative

HEAD = "head"
# KubeRay's default maxReplicas: the largest int32.
UNBOUNDED = 2**31 - 1


def _group(spec_path: Path, index: int) -> Path:
    return (*spec_path, "workerGroupSpecs", index)


def workers(group: kube.WorkerGroupSpec) -> int:
    """The pods KubeRay keeps for a worker group: replicas within [minReplicas, maxReplicas]
    (maxReplicas when they contradict), times numOfHosts; none for a suspended group."""
    if group.suspend:
        return 0
    low = group.min_replicas or 0
    high = UNBOUNDED if group.max_replicas is None else group.max_replicas
    wanted = low if group.replicas is None else group.replicas
    replicas = high if low > high else min(max(wanted, low), high)
    return replicas * (1 if group.num_of_hosts is None else group.num_of_hosts)


def cluster_templates(spec: kube.RayClusterSpec, spec_path: Path) -> list[HeldTemplate]:
    """The head (pod set `head`, one pod) and each worker group (the pod set of its groupName)
    of a RayCluster spec found at `spec_path`."""
    head_path = (*spec_path, "headGroupSpec", "template")
    head = HeldTemplate(HEAD, head_path, spec.head_group_spec.template, 1)
    return [head] + [
        HeldTemplate(
            group.group_name, (*_group(spec_path, i), "template"), group.template, workers(group)
        )
        for i, group in enumerate(spec.worker_group_specs)
    ]


def cluster_problem(spec: kube.RayClusterSpec, spec_path: Path, kind: str) -> str | None:
    """Why a RayCluster spec at `spec_path` of a `kind` cannot be one gang of a fixed size."""
    where = field_path(spec_path)
    if spec.enable_in_tree_autoscaling:
        return (
            f"{where}.enableInTreeAutoscaling: true lets the Ray autoscaler add and remove"
            f" workers, but kohort admits a {kind} as one gang of a fixed size; turn"
            " autoscaling off and give each worker group its replicas"
        )
    for i, group in enumerate(spec.worker_group_specs):
        if group.suspend:
            return (
                f"{where}.workerGroupSpecs[{i}].suspend: true is refused by KubeRay unless its"
                " RayJobDeletionPolicy feature gate is on, so the cluster would be admitted"
                f" and never run; leave suspend unset (kohort holds the whole {kind} with"
                " spec.suspend)"
            )
    return negative(
        [
            ((*_group(spec_path, i), field), value)
            for i, group in enumerate(spec.worker_group_specs)
            for field, value in (
                ("replicas", group.replicas),
                ("minReplicas", group.min_replicas),
                ("maxReplicas", group.max_replicas),
                ("numOfHosts", group.num_of_hosts),
            )
        ]
    )


def ray_pod_set(pod: kube.Pod) -> str | None:
    """The pod set of a pod KubeRay made: `head`, or its worker group's name."""
    labels = pod.metadata.labels
    if labels.get(names.RAY_NODE_TYPE_LABEL) == HEAD:
        return HEAD
    return labels.get(names.RAY_GROUP_LABEL)
