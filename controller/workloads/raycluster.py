"""ray.io/v1 RayCluster: held with spec.suspend; one gang of its head and all its workers.

The head is pod set `head` (one pod); each worker group is the pod set of its groupName, of
`replicas` (kept within minReplicas and maxReplicas, as KubeRay does) times `numOfHosts` pods.
KubeRay makes the pods itself, only while the cluster is not suspended, and deletes them all
when it is: they carry the admission gate, removed once it runs. Released and held as
`suspended.py` says. A RayCluster never finishes: its quota is given back when it is deleted.

The Ray autoscaler (enableInTreeAutoscaling) adds and removes workers, so an autoscaling
cluster has no fixed size and is refused; so is a suspended worker group
(workerGroupSpecs[].suspend), which KubeRay accepts only behind a feature gate. A RayCluster
made by another controller (a RayJob's, a RayService's) is then its own gang, held and admitted
like any other.
"""

from __future__ import annotations

from typing import ClassVar

from controller.api import kube, names
from controller.api.kinds import Kind
from controller.workloads.edits import Path
from controller.workloads.suspended import HeldTemplate, SuspendedAdapter, negative

HEAD = "head"
# KubeRay's default maxReplicas: the largest int32.
UNBOUNDED = 2**31 - 1


def _group(index: int) -> Path:
    return ("spec", "workerGroupSpecs", index)


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


class RayClusterAdapter(SuspendedAdapter):
    KIND: ClassVar[Kind] = kube.RayCluster.KIND
    model: ClassVar[type[kube.RayCluster]] = kube.RayCluster
    PREFIX: ClassVar[str] = "raycluster"
    GATED: ClassVar[bool] = True

    def held_templates(self, obj: kube.RayCluster) -> list[HeldTemplate]:
        head = HeldTemplate(
            HEAD, ("spec", "headGroupSpec", "template"), obj.spec.head_group_spec.template, 1
        )
        return [head] + [
            HeldTemplate(group.group_name, (*_group(i), "template"), group.template, workers(group))
            for i, group in enumerate(obj.spec.worker_group_specs)
        ]

    def problem(self, obj: kube.RayCluster) -> str | None:
        if obj.spec.enable_in_tree_autoscaling:
            return (
                "spec.enableInTreeAutoscaling: true lets the Ray autoscaler add and remove"
                " workers, but kohort admits a RayCluster as one gang of a fixed size; turn"
                " autoscaling off and give each worker group its replicas"
            )
        for i, group in enumerate(obj.spec.worker_group_specs):
            if group.suspend:
                return (
                    f"spec.workerGroupSpecs[{i}].suspend: true is refused by KubeRay unless its"
                    " RayJobDeletionPolicy feature gate is on, so the cluster would be admitted"
                    " and never run; leave suspend unset (kohort holds the whole cluster with"
                    " spec.suspend)"
                )
        return negative(
            [
                ((*_group(i), field), value)
                for i, group in enumerate(obj.spec.worker_group_specs)
                for field, value in (
                    ("replicas", group.replicas),
                    ("minReplicas", group.min_replicas),
                    ("maxReplicas", group.max_replicas),
                    ("numOfHosts", group.num_of_hosts),
                )
            ]
        )

    def suspended(self, obj: kube.RayCluster) -> bool:
        return obj.spec.suspend is True

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        labels = pod.metadata.labels
        if labels.get(names.RAY_NODE_TYPE_LABEL) == HEAD:
            return HEAD
        return labels.get(names.RAY_GROUP_LABEL)
