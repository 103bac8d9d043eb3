"""ray.io/v1 RayJob: held with spec.suspend; one gang of its cluster's head and workers and of
its submitter pod.

KubeRay runs a RayJob on a RayCluster it makes from spec.rayClusterSpec (owned by the RayJob)
and, in K8sJobMode (the default), submits the Ray job from a submitter pod: a batch Job it makes
from spec.submitterPodTemplate once the cluster is ready. The whole RayJob is one gang, held by
its own spec.suspend: while it is suspended KubeRay makes nothing, and suspending a running one
(KubeRay moves it from Initializing or Running to Suspending) deletes its RayCluster and its
submitter Job, so their pods go with them. The RayCluster and the Job are no gangs of their own
(see raycluster.py, job.py); the webhook writes the gang's fields into the templates of
spec.rayClusterSpec and spec.submitterPodTemplate, so they flow into the RayCluster, the Job and
all their pods. Released and held as `suspended.py` says.

Pod sets: `head` (one pod) and one per worker group, as for a RayCluster (see `ray.py`), then
`submitter` (one pod) in K8sJobMode. The submitter is in the gang's quota but not in its
minMember: KubeRay makes it only once the head and workers run, so a gang scheduler that waited
for it before placing those would wait forever. minMember is the head and the workers; the
submitter joins the gang's PodGroup once that has started (Volcano then places it as a member
beyond minMember), and is not gated (a Job's pods exist only once the gang is released, as for
any managed Job). The cluster's pods are gated until the release, like a RayCluster's. When
spec.submitterPodTemplate is unset, the webhook writes the one KubeRay would use (one
`ray-job-submitter` container of the head's image, 500m CPU and 200Mi requested), so that the
submitter carries the gang too. In SidecarMode KubeRay adds that container to the head pod
instead: it is counted in the head's requests. HTTPMode has no submitter pod.

The quota is given back when the RayJob finishes (jobDeploymentStatus Complete or Failed, or
ValidationFailed: KubeRay will never run it). What is refused, each with its reason:
- spec.clusterSelector: the job runs on an existing RayCluster, which is not part of its gang
  (and KubeRay does not suspend such a RayJob);
- InteractiveMode: KubeRay ignores suspend while it waits for the user's job id, so the RayJob
  could not be evicted;
- shutdownAfterJobFinishes: false (KubeRay refuses to suspend such a RayJob; the webhook sets it
  when unset, so that the cluster goes when the job is done and its quota is given back), and
  deletionStrategy.deletionRules, which KubeRay does not take with it;
- autoscaling and suspended worker groups, as for a RayCluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import msgspec

from controller.api import kinds, kube
from controller.api.kinds import Kind
from controller.workloads.base import Finished, Mutation, made_by
from controller.workloads.capabilities import OwnPods
from controller.workloads.edits import Editor, JSONDict, Path, lookup
from controller.workloads.ray import cluster_problem, cluster_templates, ray_pod_set
from controller.workloads.suspended import HeldTemplate, SuspendedAdapter

CLUSTER_SPEC: Path = ("spec", "rayClusterSpec")
SUBMITTER_TEMPLATE: Path = ("spec", "submitterPodTemplate")
SUBMISSION_MODE: Path = ("spec", "submissionMode")
SHUTDOWN: Path = ("spec", "shutdownAfterJobFinishes")
SUBMITTER = "submitter"

K8S_JOB_MODE = "K8sJobMode"
SIDECAR_MODE = "SidecarMode"
INTERACTIVE_MODE = "InteractiveMode"

# KubeRay's submitter container when a RayJob names none (GetDefaultSubmitterContainer).
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_REQUESTS = {"cpu": "500m", "memory": "200Mi"}
SUBMITTER_LIMITS = {"cpu": "1", "memory": "1Gi"}

FINISHED = {
    "Complete": Finished.SUCCEEDED,
    "Failed": Finished.FAILED,
    "ValidationFailed": Finished.FAILED,
}


def submission_mode(obj: kube.RayJob) -> str:
    return obj.spec.submission_mode or K8S_JOB_MODE


def default_submitter(obj: JSONDict) -> JSONDict:
    """The submitter pod template KubeRay uses when a RayJob names none."""
    container: JSONDict = {
        "name": SUBMITTER_CONTAINER,
        "resources": {"requests": dict(SUBMITTER_REQUESTS), "limits": dict(SUBMITTER_LIMITS)},
    }
    image = lookup(obj, [*CLUSTER_SPEC, "headGroupSpec", "template", "spec", "containers", 0])
    if isinstance(image, dict) and isinstance(image.get("image"), str):
        container["image"] = image["image"]
    return {"spec": {"containers": [container], "restartPolicy": "Never"}}


def _with_sidecar(template: kube.PodTemplate) -> kube.PodTemplate:
    """The head's template with the submitter container KubeRay adds in SidecarMode."""
    sidecar = kube.Container(
        name=SUBMITTER_CONTAINER,
        resources=kube.ResourceRequirements(requests=dict(SUBMITTER_REQUESTS)),
    )
    spec = msgspec.structs.replace(template.spec, containers=[*template.spec.containers, sidecar])
    return msgspec.structs.replace(template, spec=spec)


class RayJobAdapter(SuspendedAdapter):
    KIND: ClassVar[Kind] = kube.RayJob.KIND
    model: ClassVar[type[kube.RayJob]] = kube.RayJob
    GANG_PREFIX: ClassVar[str] = "rayjob"
    OPTIONAL_CRD: ClassVar[bool] = True
    MAKES: ClassVar[tuple[Kind, ...]] = (kinds.RAYCLUSTERS, kinds.JOBS)
    OWN_PODS: ClassVar[OwnPods] = OwnPods.NONE
    GATED: ClassVar[bool] = True

    # -- webhook side: the raw object -----------------------------------------------------------

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        """Also shutdownAfterJobFinishes: true when unset (KubeRay suspends no RayJob without
        it), and, in K8sJobMode, KubeRay's own submitter template when none is given."""
        if self._managed(editor.doc):
            editor.set_default(SHUTDOWN, True)
            if (
                self._submits_from_a_pod(editor.doc)
                and lookup(editor.doc, SUBMITTER_TEMPLATE) is None
            ):
                editor.set(SUBMITTER_TEMPLATE, default_submitter(editor.doc))
        return super().default(editor, mutation)

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        """Also puts back what `default` wrote when an update drops it."""
        if self._managed(editor.doc) and self._managed(old):
            for path in (SHUTDOWN, SUBMITTER_TEMPLATE):
                before = lookup(old, path)
                if before is not None and lookup(editor.doc, path) is None:
                    editor.set(path, before)
        return super().keep_defaults(editor, old, mutation)

    def _managed(self, obj: JSONDict) -> bool:
        """Whether a raw RayJob is one kohort holds (not made by a workload it manages)."""
        try:
            return not self.owned_elsewhere(msgspec.convert(obj, self.model))
        except msgspec.ValidationError:
            return False  # managed_templates says why

    @staticmethod
    def _submits_from_a_pod(obj: JSONDict) -> bool:
        mode = lookup(obj, SUBMISSION_MODE)
        return mode in (None, "", K8S_JOB_MODE)

    # -- what the kind says (the typed view) ----------------------------------------------------

    def held_templates(self, obj: kube.RayJob) -> list[HeldTemplate]:
        spec = obj.spec.ray_cluster_spec
        if spec is None:
            return []
        held = cluster_templates(spec, CLUSTER_SPEC)
        mode = submission_mode(obj)
        if mode == SIDECAR_MODE:
            head = held[0]
            held[0] = HeldTemplate(head.pod_set, head.path, _with_sidecar(head.template), 1)
        submitter = obj.spec.submitter_pod_template
        if mode == K8S_JOB_MODE and submitter is not None:
            held.append(HeldTemplate(SUBMITTER, SUBMITTER_TEMPLATE, submitter, 1, True))
        return held

    def problem(self, obj: kube.RayJob) -> str | None:
        spec = obj.spec
        if spec.cluster_selector:
            return (
                "spec.clusterSelector runs the job on an existing RayCluster, which kohort cannot"
                " admit as part of this RayJob's gang (and KubeRay cannot suspend such a RayJob);"
                " give the RayJob its own spec.rayClusterSpec, or submit to that cluster from"
                " outside kohort's queues"
            )
        if spec.ray_cluster_spec is None:
            return "spec.rayClusterSpec is missing: kohort admits the cluster a RayJob makes"
        mode = submission_mode(obj)
        if mode == INTERACTIVE_MODE:
            return (
                f"spec.submissionMode: {INTERACTIVE_MODE} waits for a job id, and KubeRay does not"
                " suspend a RayJob while it waits, so kohort could not evict it; use K8sJobMode,"
                " HTTPMode or SidecarMode"
            )
        if spec.shutdown_after_job_finishes is False:
            return (
                "spec.shutdownAfterJobFinishes: false keeps the cluster after the job is done,"
                " and KubeRay refuses to suspend such a RayJob, so kohort could neither hold nor"
                " evict it; leave it unset or set it to true"
            )
        if spec.deletion_strategy is not None and spec.deletion_strategy.deletion_rules:
            return (
                "spec.deletionStrategy.deletionRules cannot go with shutdownAfterJobFinishes,"
                " without which KubeRay refuses to suspend a RayJob; use shutdownAfterJobFinishes"
                " (and ttlSecondsAfterFinished) for a RayJob in a kohort queue"
            )
        if mode == K8S_JOB_MODE and spec.submitter_pod_template is None:
            return (
                "spec.submitterPodTemplate is missing: kohort's mutating webhook writes KubeRay's"
                " default one, so that the submitter pod joins the gang (is it registered?)"
            )
        return cluster_problem(spec.ray_cluster_spec, CLUSTER_SPEC, self.KIND.kind)

    def suspended(self, obj: kube.RayJob) -> bool:
        return obj.spec.suspend is True

    def finished(self, obj: kube.RayJob) -> Finished | None:
        return FINISHED.get(obj.status.job_deployment_status)

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        if made_by(pod, kube.Job.KIND.kind):
            return SUBMITTER
        return ray_pod_set(pod)

    def operator_pods(self, obj: Any, pods: Sequence[kube.Pod]) -> list[kube.Pod]:
        """The pods of the RayJob's RayCluster (KubeRay made them from its templates)."""
        cluster = obj.status.ray_cluster_name or None
        return [
            p
            for p in pods
            if made_by(p, kube.RayCluster.KIND.kind)
            and (cluster is None or _owner_name(p) == cluster)
        ]


def _owner_name(pod: kube.Pod) -> str:
    owner = pod.metadata.controller_owner()
    return owner.name if owner is not None else ""
