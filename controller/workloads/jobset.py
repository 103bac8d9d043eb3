"""jobset.x-k8s.io/v1alpha2 JobSet: held with spec.suspend; one gang of all its Jobs' pods.

Each replicated job is a pod set named after it, of `replicas` Jobs times the pods one Job runs
at once. The JobSet controller creates its Jobs suspended while the JobSet is, with the JobSet's
pod templates (so their pods carry its gang), and unsuspends them when it is: those Jobs are
no gangs of their own (see job.py). Released and held as `suspended.py` says; the JobSet
webhook lets a replicated job's pod template change while the JobSet is, or is being,
suspended. Replicated jobs that start one after another (startupPolicy InOrder, dependsOn)
cannot be one gang, which needs all its pods at once: they are refused.
"""

from __future__ import annotations

from typing import ClassVar

from controller.api import kube, names
from controller.api.kinds import Kind
from controller.workloads.base import Finished
from controller.workloads.edits import Path
from controller.workloads.job import running_pods
from controller.workloads.suspended import HeldTemplate, SuspendedAdapter, negative

IN_ORDER = "InOrder"


def _replicated_job(index: int) -> Path:
    return ("spec", "replicatedJobs", index)


class JobSetAdapter(SuspendedAdapter):
    KIND: ClassVar[Kind] = kube.JobSet.KIND
    model: ClassVar[type[kube.JobSet]] = kube.JobSet
    PREFIX: ClassVar[str] = "jobset"

    def held_templates(self, obj: kube.JobSet) -> list[HeldTemplate]:
        return [
            HeldTemplate(
                job.name,
                (*_replicated_job(i), "template", "spec", "template"),
                job.template.spec.template,
                (1 if job.replicas is None else job.replicas) * running_pods(job.template.spec),
            )
            for i, job in enumerate(obj.spec.replicated_jobs)
        ]

    def problem(self, obj: kube.JobSet) -> str | None:
        policy = obj.spec.startup_policy
        if policy is not None and policy.startup_policy_order == IN_ORDER:
            return (
                f"spec.startupPolicy.startupPolicyOrder: {IN_ORDER} starts each replicated job"
                " only once the one before is ready, so a gang of all their pods can never form;"
                " use AnyOrder (the default) for a JobSet in a kohort queue"
            )
        counts: list[tuple[Path, int | None]] = []
        for i, job in enumerate(obj.spec.replicated_jobs):
            if job.depends_on:
                return (
                    f"spec.replicatedJobs[{i}].dependsOn starts {job.name} only once"
                    f" {job.depends_on[0].name} has, so a gang of all their pods can never form;"
                    " remove dependsOn for a JobSet in a kohort queue"
                )
            at, spec = _replicated_job(i), job.template.spec
            counts += [
                ((*at, "replicas"), job.replicas),
                ((*at, "template", "spec", "parallelism"), spec.parallelism),
                ((*at, "template", "spec", "completions"), spec.completions),
            ]
        return negative(counts)

    def suspended(self, obj: kube.JobSet) -> bool:
        return obj.spec.suspend is True

    def finished(self, obj: kube.JobSet) -> Finished | None:
        done = {c.type for c in obj.status.conditions if c.status == "True"}
        done.add(obj.status.terminal_state)
        if "Completed" in done:
            return Finished.SUCCEEDED
        return Finished.FAILED if "Failed" in done else None

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return pod.metadata.labels.get(names.JOBSET_REPLICATED_JOB_LABEL)
