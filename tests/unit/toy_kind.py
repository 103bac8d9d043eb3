"""A workload kind kohort has never heard of, written as one adapter module.

`TrainingRun` (example.com/v1) runs `spec.workers` pods of `spec.template` and waits while
`spec.paused` is true; it is done when `status.phase` says so. Its operator makes the pods from
the template while the run is not paused. This module is everything the kind needs, both
sides: the webhook pauses a new run and gives its template the gang's fields and the admission
gate (the pods then join the run's gang, gated: the Pod adapter learns that from the registry,
through `OWN_PODS`); the controller finds its gang, unpauses it and ungates its pods, or pauses
it again. A test registers it with one line (`REGISTRY.with_kinds(TrainingRunAdapter())`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import msgspec

from controller.api import kube, names
from controller.api.kinds import Kind
from controller.workloads.base import (
    NO_FLAVORS,
    Finished,
    Flavors,
    GangShape,
    Mutation,
    Patch,
    Write,
    decorate_pod_template,
    gang_name,
    gate_problem,
    has_gate,
    made_by,
    object_name,
    pod_group_of,
    pod_set,
    ungate_up_to,
)
from controller.workloads.capabilities import OwnPods
from controller.workloads.edits import Editor, JSONDict, Path, lookup

TRAINING_RUNS = Kind("example.com", "v1", "trainingruns", "TrainingRun")
TEMPLATE = ("spec", "template")
PAUSED = ("spec", "paused")


class TrainingRunSpec(kube.View):
    workers: int = 1
    paused: bool = False
    template: kube.PodTemplate = msgspec.field(default_factory=kube.PodTemplate)


class TrainingRunStatus(kube.View):
    phase: str = ""


class TrainingRun(kube.View):
    KIND: ClassVar[Kind] = TRAINING_RUNS

    metadata: kube.ObjectMeta
    spec: TrainingRunSpec = msgspec.field(default_factory=TrainingRunSpec)
    status: TrainingRunStatus = msgspec.field(default_factory=TrainingRunStatus)


class TrainingRunAdapter:
    KIND: ClassVar[Kind] = TRAINING_RUNS
    model: ClassVar[type[TrainingRun]] = TrainingRun
    GANG_PREFIX: ClassVar[str] = "run"
    OPTIONAL_CRD: ClassVar[bool] = True
    MAKES: ClassVar[tuple[Kind, ...]] = ()
    OWN_PODS: ClassVar[OwnPods] = OwnPods.GATED

    # -- webhook side -------------------------------------------------------------------------

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        editor.set(list(PAUSED), True)
        gang = gang_name(self.GANG_PREFIX, object_name(editor.doc, mutation.request_uid))
        return decorate_pod_template(editor, TEMPLATE, mutation, gang=gang, gate=True)

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        gang = pod_group_of(old, TEMPLATE) or gang_name(self.GANG_PREFIX, object_name(old))
        return decorate_pod_template(editor, TEMPLATE, mutation, gang=gang, gate=True)

    def unheld(self, obj: JSONDict) -> str | None:
        if lookup(obj, PAUSED) is not True:
            return "a TrainingRun in a kohort queue must be created paused"
        return gate_problem(obj, [TEMPLATE])

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        if lookup(old, PAUSED) is True and lookup(new, PAUSED) is not True:
            return "a TrainingRun waiting in a kohort queue is unpaused only by kohort's controller"
        if has_gate(old, TEMPLATE) and not has_gate(new, TEMPLATE):
            return "only kohort's controller may remove the admission gate from the pod template"
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return lookup(old, PAUSED) is True

    def templates(self, obj: JSONDict) -> list[Path]:
        return [TEMPLATE]

    # -- controller side ------------------------------------------------------------------------

    def gangs(self, obj: TrainingRun) -> list[GangShape]:
        workers = pod_set("worker", obj.spec.workers, obj.spec.template)
        name = gang_name(self.GANG_PREFIX, obj.metadata.name)
        return [GangShape(name, obj.spec.workers, (workers,))]

    def finished(self, obj: TrainingRun) -> Finished | None:
        return Finished.SUCCEEDED if obj.status.phase == "Done" else None

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return None

    def release(
        self, obj: TrainingRun, pods: Sequence[kube.Pod], flavors: Flavors = NO_FLAVORS
    ) -> list[Write]:
        """Unpause the run; once it runs, ungate the pods its operator made, at most its
        workers. Its queues name no flavor with nodes of their own: `flavors` adds nothing."""
        if obj.spec.paused:
            return [self._pause(obj, False)]
        own = [p for p in pods if made_by(p, TRAINING_RUNS.kind, obj.metadata.uid or None)]
        return ungate_up_to(obj.spec.workers, own, lambda p: True)

    def hold(self, obj: TrainingRun, pods: Sequence[kube.Pod]) -> list[Write]:
        # Its operator deletes the pods of a paused run.
        return [] if obj.spec.paused else [self._pause(obj, True)]

    def _pause(self, obj: TrainingRun, paused: bool) -> Patch:
        meta = obj.metadata
        return Patch(TRAINING_RUNS, meta.namespace, meta.name, {"spec": {"paused": paused}})


def training_run(name: str, workers: int, cpu: str = "1", *, paused: bool = True) -> JSONDict:
    """A TrainingRun in LocalQueue `lq` of namespace `ns`."""
    return {
        "apiVersion": "example.com/v1",
        "kind": "TrainingRun",
        "metadata": {"name": name, "namespace": "ns", "labels": {names.QUEUE_LABEL: "lq"}},
        "spec": {
            "workers": workers,
            "paused": paused,
            "template": {
                "spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": cpu}}}]}
            },
        },
    }
