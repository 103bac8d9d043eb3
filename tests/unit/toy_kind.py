"""A workload kind kohort has never heard of, written as one adapter module.

`TrainingRun` (example.com/v1) runs `spec.workers` pods of `spec.template` and waits while
`spec.paused` is true; it is done when `status.phase` says so. This module is everything the
kind needs: the test registers it with one line and runs it through the controller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import msgspec

from controller.api import kube
from controller.api.kinds import Kind
from controller.workloads.base import (
    NO_FLAVORS,
    Finished,
    Flavors,
    GangShape,
    Mutation,
    Patch,
    Write,
    gang_name,
    pod_set,
)
from controller.workloads.edits import Editor, JSONDict, Path, lookup

TRAINING_RUNS = Kind("example.com", "v1", "trainingruns", "TrainingRun")


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

    # -- webhook side -------------------------------------------------------------------------

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        editor.set(["spec", "paused"], True)
        return []

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        return []

    def unheld(self, obj: JSONDict) -> str | None:
        return None if lookup(obj, ["spec", "paused"]) is True else "must be created paused"

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return False

    def templates(self, obj: JSONDict) -> list[Path]:
        return [("spec", "template")]

    # -- controller side ------------------------------------------------------------------------

    def gangs(self, obj: TrainingRun) -> list[GangShape]:
        workers = pod_set("worker", obj.spec.workers, obj.spec.template)
        return [GangShape(gang_name("run", obj.metadata.name), obj.spec.workers, (workers,))]

    def finished(self, obj: TrainingRun) -> Finished | None:
        return Finished.SUCCEEDED if obj.status.phase == "Done" else None

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return None

    def release(
        self, obj: TrainingRun, pods: Sequence[kube.Pod], flavors: Flavors = NO_FLAVORS
    ) -> list[Write]:
        # Its queues name no flavor with nodes of their own: `flavors` has nothing to add.
        return [self._pause(obj, False)] if obj.spec.paused else []

    def hold(self, obj: TrainingRun, pods: Sequence[kube.Pod]) -> list[Write]:
        return [] if obj.spec.paused else [self._pause(obj, True)]

    def _pause(self, obj: TrainingRun, paused: bool) -> Patch:
        meta = obj.metadata
        return Patch(TRAINING_RUNS, meta.namespace, meta.name, {"spec": {"paused": paused}})
