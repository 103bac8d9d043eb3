"""jobset.x-k8s.io/v1alpha2 JobSet: held with spec.suspend; one gang of all its Jobs' pods.

Each replicated job is a pod set named after it, of `replicas` Jobs times the pods one Job runs
at once. The JobSet controller creates its Jobs suspended while the JobSet is, with the JobSet's
pod templates (so their pods carry its gang), and unsuspends them when it is: those Jobs are
no gangs of their own (see job.py). Released and held as `suspended.py` says; the JobSet
webhook lets a replicated job's pod template change while the JobSet is, or is being,
suspended. Replicated jobs that start one after another (startupPolicy InOrder, dependsOn)
cannot be one gang, which needs all its pods at once: they are refused. So is exclusive
placement (the exclusive-topology annotation) without the node-selector strategy: JobSet's pod
webhook then holds each Job's follower pods until its leader pod is scheduled, while the gang
waits for all of them.

The JobSet controller labels its Jobs from each replicated job's Job template (not from the
JobSet), so the webhook puts the queue label there too: the Jobs are then in the validating
webhook's reach, which guards them for their JobSet. That template is immutable once the JobSet
exists, so an update keeps what its creation wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from controller.api import kinds, kube, names
from controller.api.kinds import Kind
from controller.workloads.base import Finished, Mutation, made_by, running_pods
from controller.workloads.capabilities import OwnPods
from controller.workloads.edits import Editor, JSONDict, Path, lookup
from controller.workloads.suspended import HeldTemplate, SuspendedAdapter, negative

IN_ORDER = "InOrder"
# JobSet's exclusive placement (jobset.x-k8s.io/v1alpha2 ExclusiveKey, NodeSelectorStrategyKey),
# on the JobSet or on a replicated job's Job template.
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY = "alpha.jobset.sigs.k8s.io/node-selector"


def _replicated_job(index: int) -> Path:
    return ("spec", "replicatedJobs", index)


class JobSetAdapter(SuspendedAdapter):
    KIND: ClassVar[Kind] = kube.JobSet.KIND
    model: ClassVar[type[kube.JobSet]] = kube.JobSet
    GANG_PREFIX: ClassVar[str] = "jobset"
    # The JobSet controller merges a resumed JobSet's template fields into the Jobs it kept
    # while suspended (their nodeSelector and scheduling gates): pins go on the pods.
    PINS_ON_PODS: ClassVar[bool] = True
    OPTIONAL_CRD: ClassVar[bool] = True
    MAKES: ClassVar[tuple[Kind, ...]] = (kinds.JOBS,)
    OWN_PODS: ClassVar[OwnPods] = OwnPods.NONE

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

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        warnings = super().default(editor, mutation)
        if self.managed_templates(editor.doc) is not None:
            for i, _ in enumerate(_replicated_jobs(editor.doc)):
                _label_job_template(editor, i, mutation.queue)
        return warnings

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        warnings = super().keep_defaults(editor, old, mutation)
        if not self.managed_templates(editor.doc):
            return warnings
        # The JobSet webhook refuses any change to a Job template once the JobSet exists: keep
        # the label its creation wrote (none for a JobSet made before kohort wrote it), and only
        # a replicated job new to the JobSet gets the queue.
        before = {_name(job): job for job in _replicated_jobs(old)}
        for i, job in enumerate(_replicated_jobs(editor.doc)):
            if _name(job) not in before:
                _label_job_template(editor, i, mutation.queue)
                continue
            queue = lookup(
                before[_name(job)], ["template", "metadata", "labels", names.QUEUE_LABEL]
            )
            if isinstance(queue, str):
                _label_job_template(editor, i, queue)
        return warnings

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
            if _exclusive_without_node_selector(obj, job):
                return (
                    f"{EXCLUSIVE_TOPOLOGY} without {NODE_SELECTOR_STRATEGY} makes the pods of"
                    f" each of {job.name}'s Jobs wait for its first one to be scheduled, so a gang"
                    " of all their pods can never form; add the annotation"
                    f" {NODE_SELECTOR_STRATEGY} (with nodes labelled for it) or remove"
                    f" {EXCLUSIVE_TOPOLOGY} for a JobSet in a kohort queue"
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

    def operator_pods(self, obj: kube.JobSet, pods: Sequence[kube.Pod]) -> list[kube.Pod]:
        """The gang's pods its Jobs made (a release that pins them one by one gates them)."""
        name = obj.metadata.name
        return [
            p
            for p in pods
            if made_by(p, kube.Job.KIND.kind)
            and p.metadata.labels.get(names.JOBSET_NAME_LABEL) == name
        ]


def _exclusive_without_node_selector(obj: kube.JobSet, job: kube.ReplicatedJob) -> bool:
    """Whether the replicated job's Jobs are placed exclusively by JobSet's pod webhook (which
    holds follower pods until their leader is scheduled), not by the node-selector strategy:
    the JobSet controller gives each Job the JobSet's exclusive-topology annotation and then
    the replicated job's, each with the node-selector annotation of the same object."""
    selector = False
    exclusive = False
    for marks in (obj.metadata.annotations, job.template.metadata.annotations):
        if EXCLUSIVE_TOPOLOGY in marks:
            exclusive = True
            selector = selector or NODE_SELECTOR_STRATEGY in marks
    return exclusive and not selector


def _replicated_jobs(obj: JSONDict) -> list[Any]:
    jobs = lookup(obj, ["spec", "replicatedJobs"])
    return jobs if isinstance(jobs, list) else []


def _name(job: Any) -> Any:
    return job.get("name") if isinstance(job, dict) else None


def _label_job_template(editor: Editor, index: int, queue: str) -> None:
    """The queue label on a replicated job's Job template (the Jobs' own labels)."""
    labels = {"metadata": {"labels": {names.QUEUE_LABEL: queue}}}
    editor.merge((*_replicated_job(index), "template"), labels)
