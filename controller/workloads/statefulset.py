"""apps/v1 StatefulSet: pods held by the scheduling gate; one gang of `replicas` pods.

The gang needs every pod to exist at once, so the set must use `podManagementPolicy: Parallel`.
The API server defaults the field to OrderedReady before admission webhooks run, so a webhook
cannot tell "unset" from "OrderedReady" by the field alone. OrderedReady counts as explicit
only when the user's own manifest says so: the `kubectl apply` last-applied annotation or a
server-side apply entry in managedFields. An explicit OrderedReady is denied (a gang could never
form); anything else becomes Parallel.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from controller.api import kube
from controller.api.kinds import Kind
from controller.workloads.base import (
    NO_FLAVORS,
    Denied,
    Finished,
    Flavors,
    GangShape,
    Mutation,
    Write,
    decorate_pod_template,
    delete_ungated,
    gang_name,
    gate_problem,
    has_gate,
    made_by,
    non_negative_int,
    object_name,
    ordinal,
    pod_group_of,
    priority_classes,
    shown,
    template_gang,
    ungate,
)
from controller.workloads.capabilities import OwnPods
from controller.workloads.edits import Editor, JSONDict, Path, lookup
from controller.workloads.pod_rules import TemplatePods, gang_pod_sets

TEMPLATE = ("spec", "template")
POLICY = ("spec", "podManagementPolicy")
PARALLEL = "Parallel"
ORDERED_READY = "OrderedReady"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ORDERED_READY_DENIED = (
    "spec.podManagementPolicy: OrderedReady starts one pod at a time and waits for it to be "
    "ready, so a gang of all replicas can never form; use Parallel (or leave it unset) for a "
    "StatefulSet in a kohort queue"
)


def _applied_policy(obj: JSONDict) -> Any:
    """The podManagementPolicy the user wrote, when the request carries their manifest."""
    last_applied = lookup(obj, ["metadata", "annotations", LAST_APPLIED])
    if isinstance(last_applied, str):
        try:
            manifest = json.loads(last_applied)
        except (ValueError, RecursionError):
            manifest = None
        written = lookup(manifest, list(POLICY))
        if written is not None:
            return written
    entries = lookup(obj, ["metadata", "managedFields"])
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping) or entry.get("operation") != "Apply":
            continue
        if lookup(entry, ["fieldsV1", "f:spec", "f:podManagementPolicy"]) is not None:
            return lookup(obj, list(POLICY))
    return None


class StatefulSetAdapter:
    KIND: ClassVar[Kind] = kube.StatefulSet.KIND
    model: ClassVar[type[kube.StatefulSet]] = kube.StatefulSet
    GANG_PREFIX: ClassVar[str] = "sts"
    OPTIONAL_CRD: ClassVar[bool] = False
    MAKES: ClassVar[tuple[Kind, ...]] = ()
    OWN_PODS: ClassVar[OwnPods] = OwnPods.GATED

    def gang_name(self, obj: JSONDict, request_uid: str = "") -> str:
        return gang_name(self.GANG_PREFIX, object_name(obj, request_uid))

    # -- webhook side ---------------------------------------------------------------------------

    def replicas(self, obj: JSONDict) -> int:
        return non_negative_int(obj, ["spec", "replicas"], 1) or 0

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        self.replicas(editor.doc)
        policy = editor.get(list(POLICY))
        if policy == ORDERED_READY and _applied_policy(editor.doc) == ORDERED_READY:
            raise Denied(ORDERED_READY_DENIED)
        if policy not in (None, ORDERED_READY, PARALLEL):
            raise Denied(f"spec.podManagementPolicy: unknown policy {shown(policy)}")
        editor.set(list(POLICY), PARALLEL)
        gang = self.gang_name(editor.doc, mutation.request_uid)
        return decorate_pod_template(editor, TEMPLATE, mutation, gang=gang, gate=True)

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        gang = pod_group_of(old, TEMPLATE) or self.gang_name(old)
        return decorate_pod_template(editor, TEMPLATE, mutation, gang=gang, gate=True)

    def unheld(self, obj: JSONDict) -> str | None:
        self.replicas(obj)
        return gate_problem(obj, [TEMPLATE])

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        if has_gate(old, TEMPLATE) and not has_gate(new, TEMPLATE):
            return "only kohort's controller may remove the admission gate from the pod template"
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        # Its pods may already run: moving it to another queue would bypass admission.
        return False

    def templates(self, obj: JSONDict) -> list[Path]:
        return [TEMPLATE]

    # -- controller side ------------------------------------------------------------------------

    def gangs(self, obj: kube.StatefulSet) -> list[GangShape]:
        template = obj.spec.template
        name = template_gang(template)  # written by the webhook: authoritative
        replicas = obj.spec.replicas if obj.spec.replicas is not None else 1
        if name is None or replicas < 1:
            return []
        sets = gang_pod_sets([TemplatePods("main", replicas, template)], obj.metadata.namespace)
        return [GangShape(name, replicas, sets, priority_classes(template))]

    def finished(self, obj: kube.StatefulSet) -> Finished | None:
        return None

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return None

    def release(
        self, obj: kube.StatefulSet, pods: Sequence[kube.Pod], flavors: Flavors = NO_FLAVORS
    ) -> list[Write]:
        """Ungate the set's own pods, ordinals below its replicas, each put on its flavors'
        nodes in the same write: a pod that only carries the gang's label, or one of a scale-up
        not yet judged, stays held."""
        replicas = obj.spec.replicas if obj.spec.replicas is not None else 1
        meta = obj.metadata
        own = [
            p
            for p in pods
            if made_by(p, self.KIND.kind, meta.uid or None)
            and (n := ordinal(p, meta.name)) is not None
            and n < replicas
        ]
        mine = flavors.get("main")
        return ungate(own, lambda pod: mine)

    def hold(self, obj: kube.StatefulSet, pods: Sequence[kube.Pod]) -> list[Write]:
        return delete_ungated(pods)
