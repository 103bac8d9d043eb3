"""ray.io/v1 RayCluster: held with spec.suspend; one gang of its head and all its workers.

Its pod sets are its cluster spec's (see `ray.py`). KubeRay makes the pods itself, only while
the cluster is not suspended, and deletes them all when it is: they carry the admission gate,
removed once it runs. Released and held as `suspended.py` says. A RayCluster never finishes:
its quota is given back when it is deleted.

The Ray autoscaler (enableInTreeAutoscaling) adds and removes workers, so an autoscaling
cluster has no fixed size and is refused; so is a suspended worker group
(workerGroupSpecs[].suspend), which KubeRay accepts only behind a feature gate. A RayCluster
made by a RayJob is part of the RayJob's gang (see rayjob.py) and left alone; one made by
another controller (a RayService's) is its own gang, held and admitted like any other.
"""

from __future__ import annotations

from typing import ClassVar

from controller.api import kube
from controller.api.kinds import Kind
from controller.workloads.capabilities import OwnPods
from controller.workloads.edits import Path
from controller.workloads.ray import cluster_problem, cluster_templates, ray_pod_set
from controller.workloads.suspended import HeldTemplate, SuspendedAdapter

SPEC: Path = ("spec",)


class RayClusterAdapter(SuspendedAdapter):
    KIND: ClassVar[Kind] = kube.RayCluster.KIND
    model: ClassVar[type[kube.RayCluster]] = kube.RayCluster
    GANG_PREFIX: ClassVar[str] = "raycluster"
    OPTIONAL_CRD: ClassVar[bool] = True
    MAKES: ClassVar[tuple[Kind, ...]] = ()
    OWN_PODS: ClassVar[OwnPods] = OwnPods.BY_OPERATOR
    GATED: ClassVar[bool] = True

    def held_templates(self, obj: kube.RayCluster) -> list[HeldTemplate]:
        return cluster_templates(obj.spec, SPEC)

    def problem(self, obj: kube.RayCluster) -> str | None:
        return cluster_problem(obj.spec, SPEC, self.KIND.kind)

    def suspended(self, obj: kube.RayCluster) -> bool:
        return obj.spec.suspend is True

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return ray_pod_set(pod)
