"""kubeflow.org/v1 PyTorchJob: held with spec.runPolicy.suspend; one gang of its master and
workers.

Each replica type of spec.pytorchReplicaSpecs (Master, Worker) is a pod set, `master` or
`worker` as the training operator labels its pods, of `replicas` pods (default 1). The operator
makes the pods itself, from the replica templates, only while the job is not suspended, and
deletes them when it is suspended: they carry the admission gate, removed once it runs.
Released and held as `suspended.py` says. An elastic PyTorchJob whose workers may number
anything between minReplicas and maxReplicas has no fixed size, so it is refused.
"""

from __future__ import annotations

from typing import ClassVar

from controller.api import kube, names
from controller.api.kinds import Kind
from controller.workloads.base import Finished, Mutation, shown
from controller.workloads.capabilities import OwnPods
from controller.workloads.edits import Editor
from controller.workloads.suspended import HeldTemplate, SuspendedAdapter, negative

SPECS = ("spec", "pytorchReplicaSpecs")
CLEAN_POD_POLICY = ("spec", "runPolicy", "cleanPodPolicy")
# Replica types as the operator labels their pods, in pod-set order.
ROLES = ("master", "worker")


class PyTorchJobAdapter(SuspendedAdapter):
    KIND: ClassVar[Kind] = kube.PyTorchJob.KIND
    model: ClassVar[type[kube.PyTorchJob]] = kube.PyTorchJob
    SUSPEND: ClassVar[tuple[str, ...]] = ("spec", "runPolicy", "suspend")
    GANG_PREFIX: ClassVar[str] = "pytorchjob"
    OPTIONAL_CRD: ClassVar[bool] = True
    MAKES: ClassVar[tuple[Kind, ...]] = ()
    OWN_PODS: ClassVar[OwnPods] = OwnPods.BY_OPERATOR
    GATED: ClassVar[bool] = True

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        """Also `cleanPodPolicy: Running` when unset: the operator's default (None) leaves the
        other pods of a finished job running, on resources whose quota kohort gives back when
        the job finishes."""
        warnings = super().default(editor, mutation)
        if self.managed_templates(editor.doc) is not None:
            editor.set_default(CLEAN_POD_POLICY, "Running")
        return warnings

    def held_templates(self, obj: kube.PyTorchJob) -> list[HeldTemplate]:
        specs = obj.spec.pytorch_replica_specs
        return [
            HeldTemplate(
                role.lower(),
                (*SPECS, role, "template"),
                spec.template,
                1 if spec.replicas is None else spec.replicas,
            )
            for role, spec in sorted(specs.items(), key=lambda item: _order(item[0]))
        ]

    def problem(self, obj: kube.PyTorchJob) -> str | None:
        specs = obj.spec.pytorch_replica_specs
        unknown = sorted(r for r in specs if r.lower() not in ROLES)
        if unknown:
            return (
                f"spec.pytorchReplicaSpecs: unknown replica type {shown(unknown[0])} (a PyTorchJob"
                " has Master and Worker)"
            )
        wrong = negative([((*SPECS, role, "replicas"), s.replicas) for role, s in specs.items()])
        if wrong:
            return wrong
        elastic = obj.spec.elastic_policy
        worker = next((s for r, s in specs.items() if r.lower() == "worker"), None)
        workers = None if worker is None else 1 if worker.replicas is None else worker.replicas
        if elastic is not None and {elastic.min_replicas, elastic.max_replicas} - {None, workers}:
            return (
                "spec.elasticPolicy lets the number of workers change between minReplicas and"
                " maxReplicas, but kohort admits a PyTorchJob as one gang of a fixed size: set"
                " both to the Worker replicas, or leave elasticPolicy out"
            )
        return None

    def suspended(self, obj: kube.PyTorchJob) -> bool:
        return obj.spec.run_policy.suspend is True

    def finished(self, obj: kube.PyTorchJob) -> Finished | None:
        done = {c.type for c in obj.status.conditions if c.status == "True"}
        if Finished.SUCCEEDED in done:
            return Finished.SUCCEEDED
        return Finished.FAILED if Finished.FAILED in done else None

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        role = pod.metadata.labels.get(names.KUBEFLOW_REPLICA_TYPE_LABEL, "").lower()
        return role if role in ROLES else None


def _order(role: str) -> int:
    """Where a replica type's pod set comes: the master first."""
    lowered = role.lower()
    return ROLES.index(lowered) if lowered in ROLES else len(ROLES)
