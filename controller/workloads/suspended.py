"""Kinds held by a suspend field, run as one gang of every pod their pod templates make.

A JobSet, a PyTorchJob, a RayCluster or a RayJob is created suspended, its operator making no
pod until it is unsuspended, and each of its pod templates is one pod set of its gang. The
webhook gives every template the gang's fields (and, for kinds whose operator makes the pods
itself, the admission gate; not to a template whose pods come only once the rest of the gang
runs, such as a RayJob's submitter, which is neither gated nor in the gang's minMember). The
controller releases the object by unsuspending it and, in the same write, puts each template's
pods on the nodes of its pod set's flavors: their node labels merged into the template's
nodeSelector, their tolerations appended. The templates' own nodeSelector and
tolerations are kept, by pod set, in one annotation written with the release, and put back by
the write that suspends the object again (these operators let a template's scheduling fields
change while the object is, or is being, suspended). A template may sit in a list, so the
writes are JSON Patches, guarded by the resourceVersion they were computed from.

An object made by a workload of a kind kohort manages (its ownerReference with
`controller: true` names one: a RayJob's RayCluster) is part of that workload's gang and is
left alone. One made by a controller kohort does not manage (a Kubeflow TrainJob's JobSet, a
RayService's RayCluster) is then its own gang, held and admitted like any other.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import msgspec

from controller.api import kube, names
from controller.api.kinds import Kind
from controller.api.workload import MAX_POD_SETS
from controller.workloads.base import (
    NO_FLAVORS,
    Denied,
    Finished,
    Flavors,
    GangShape,
    Mutation,
    PodSetFlavors,
    Write,
    decorate_pod_template,
    field_path,
    gang_name,
    gate_problem,
    gates_value,
    guarded_patch,
    has_gate,
    made_by,
    object_name,
    pod_group_of,
    priority_classes,
    same_toleration,
    shown,
    spec_gated,
    template_gang,
    template_requests,
    toleration_json,
    ungate_up_to,
)
from controller.workloads.capabilities import Registrable
from controller.workloads.edits import Editor, JSONDict, Path, lookup, pointer
from controller.workloads.pinning import pinned, required_of, required_ops, with_required
from controller.workloads.pod_rules import TemplatePods, gang_pod_sets

log = logging.getLogger("kohort.workloads")

# The templates' own nodeSelector and tolerations by pod set, kept while their flavors' are in.
TEMPLATES_BEFORE_FLAVORS = f"{names.GROUP}/templates-before-flavors"

# What kohort's webhook writes alike into every pod template of a gang, naming the gang.
GANG_WIDE_FIELDS: tuple[Path, ...] = (
    ("metadata", "labels", names.POD_GROUP_LABEL),
    ("metadata", "labels", names.COSCHEDULING_GROUP_LABEL),
    ("metadata", "annotations", names.VOLCANO_GROUP_ANNOTATION),
    ("spec", "workloadRef"),
    ("spec", "schedulingGroup"),
)


class Scheduling(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """A pod template's nodeSelector, tolerations and required node affinity."""

    node_selector: dict[str, str] = {}
    tolerations: list[kube.Toleration] = []
    required_node_affinity: kube.NodeSelector | None = None

    @classmethod
    def of(cls, spec: kube.PodSpec) -> Scheduling:
        return cls(
            node_selector=dict(spec.node_selector),
            tolerations=list(spec.tolerations),
            required_node_affinity=required_of(spec),
        )

    def same(self, other: Scheduling) -> bool:
        return (
            self.node_selector == other.node_selector
            and same_tolerations(self.tolerations, other.tolerations)
            and self.required_node_affinity == other.required_node_affinity
        )

    def on(self, flavors: PodSetFlavors | None, *, affinity: bool = False) -> Scheduling:
        """These fields with the flavors' node labels and tolerations added, and the pod set's
        domain labels; with `affinity` (a template whose owner lets its node affinity change),
        pinned to its planned nodes too."""
        if flavors is None:
            return self
        required = self.required_node_affinity
        if affinity and flavors.nodes:
            required = pinned(required, flavors.nodes)
        return Scheduling(
            node_selector=flavors.selector_on(self.node_selector),
            tolerations=[*self.tolerations, *flavors.tolerations_missing(self.tolerations)],
            required_node_affinity=required,
        )

    def applied(self, template: kube.PodTemplate) -> kube.PodTemplate:
        """`template` with these scheduling fields."""
        spec = msgspec.structs.replace(
            template.spec, node_selector=self.node_selector, tolerations=self.tolerations
        )
        if required_of(spec) != self.required_node_affinity:
            spec = with_required(spec, self.required_node_affinity)
        return msgspec.structs.replace(template, spec=spec)


def same_tolerations(a: Sequence[kube.Toleration], b: Sequence[kube.Toleration]) -> bool:
    return len(a) == len(b) and all(same_toleration(x, y) for x, y in zip(a, b, strict=True))


def encoded(value: Any) -> str:
    """A value as an annotation keeps it: compact JSON, keys sorted."""
    return json.dumps(msgspec.to_builtins(value), sort_keys=True, separators=(",", ":"))


T = TypeVar("T")


def kept_in(meta: kube.AnnotatedMeta, annotation: str, kind: Kind, type_: type[T]) -> T | None:
    """What an annotation of kohort's keeps on an object; None when it has none (or one that
    does not decode, which is logged and ignored)."""
    text = meta.annotations.get(annotation)
    if text is None:
        return None
    try:
        return msgspec.json.decode(text, type=type_)
    except (msgspec.ValidationError, msgspec.DecodeError):
        log.warning(
            "%s %s/%s: annotation %s is not the nodeSelector and tolerations kohort keeps; ignored",
            kind.kind,
            meta.namespace,
            meta.name,
            annotation,
        )
        return None


def scheduling_ops(template_path: Path, spec: kube.PodSpec, wanted: Scheduling) -> list[JSONDict]:
    """JSON Patch operations that give the template at `template_path` (whose spec is `spec`)
    the nodeSelector and tolerations `wanted`, each replaced whole."""
    ops: list[JSONDict] = []
    if dict(spec.node_selector) != wanted.node_selector:
        ops.append(_put((*template_path, "spec", "nodeSelector"), wanted.node_selector or None))
    if not same_tolerations(spec.tolerations, wanted.tolerations):
        tolerations = [toleration_json(t) for t in wanted.tolerations]
        ops.append(_put((*template_path, "spec", "tolerations"), tolerations or None))
    return ops + required_ops(template_path, spec, wanted.required_node_affinity)


def annotation_ops(meta: kube.AnnotatedMeta, annotation: str, value: str | None) -> list[JSONDict]:
    """JSON Patch operations that set an annotation to `value` (None: remove it)."""
    if meta.annotations.get(annotation) == value:
        return []
    if value is not None and not meta.annotations:
        return [{"op": "add", "path": "/metadata/annotations", "value": {annotation: value}}]
    return [_put(("metadata", "annotations", annotation), value)]


def _put(path: Path, value: Any) -> JSONDict:
    """Set a member (None: remove it, which must then be there)."""
    if value is None:
        return {"op": "remove", "path": pointer(path)}
    return {"op": "add", "path": pointer(path), "value": value}


@dataclass(frozen=True)
class HeldTemplate:
    """One pod template of an object: the pod set its pods are, where it is, how many it makes."""

    pod_set: str
    path: Path
    template: kube.PodTemplate
    count: int
    # Pods its operator makes only once the rest of the gang runs (a RayJob's submitter): in
    # the gang's quota, but not in its minMember (a gang scheduler would wait for them before
    # placing the pods they wait for), and not gated (the operator's other pods are).
    starts_later: bool = False


def negative(counts: Sequence[tuple[Path, int | None]]) -> str | None:
    """Why one of these counts (field, value) is not a count."""
    for path, value in counts:
        if value is not None and value < 0:
            return f"{field_path(path)} must be a non-negative integer, got {value}"
    return None


class SuspendedAdapter(Registrable):
    """The adapter of a kind held by a suspend field. A kind names where its suspend field is,
    the facts of its kind (`capabilities.KindAdapter`: the prefix of its gang's name, ...) and
    whether its operator's pods carry the admission gate, and says which templates it has, why
    it cannot be one gang, when it is suspended or done, and which pod set a pod of it is. It is
    told the other kinds when registered: an object one of them made is left to that one."""

    KIND: ClassVar[Kind]
    model: ClassVar[type[Any]]
    SUSPEND: ClassVar[tuple[str, ...]] = ("spec", "suspend")
    GANG_PREFIX: ClassVar[str]
    # Whether its own operator makes its pods: they are then gated until the release too, since
    # kohort lets a pod skip the gate only when the Job controller makes it (see pod.py).
    GATED: ClassVar[bool] = False
    # Whether its pods get the pins to their planned nodes and domain only as they are
    # ungated, never through its templates: a kind whose operator merges a template's
    # scheduling fields into the objects it made before (a JobSet's Jobs, kept while it is
    # suspended) would keep an earlier release's pins beside the next one's.
    PINS_ON_PODS: ClassVar[bool] = False

    # -- what each kind says (the typed view) --------------------------------------------------

    def held_templates(self, obj: Any) -> list[HeldTemplate]:
        """Every pod template, in order, with the pods it makes."""
        raise NotImplementedError

    def problem(self, obj: Any) -> str | None:
        """Why the object cannot run as one gang of a fixed size."""
        return None

    def suspended(self, obj: Any) -> bool:
        raise NotImplementedError

    def finished(self, obj: Any) -> Finished | None:
        return None

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return None

    def gated(self, template: HeldTemplate) -> bool:
        """Whether the template's pods carry the admission gate until the release."""
        return self.GATED and not template.starts_later

    def operator_pods(self, obj: Any, pods: Sequence[kube.Pod]) -> list[kube.Pod]:
        """The gang's pods its operator made (those it may ungate): the object's own."""
        return [p for p in pods if made_by(p, self.KIND.kind, obj.metadata.uid or None)]

    def owned_elsewhere(self, obj: Any) -> bool:
        """Whether a workload of a kind kohort manages made the object: it is part of that
        one's gang. One made by any other controller is a gang of its own."""
        return self.kinds.made_by_managed(obj.metadata)

    def _gang_problem(self, obj: Any) -> str | None:
        problem = self.problem(obj)
        if problem is not None:
            return problem
        held = self.held_templates(obj)
        # Every template's pod set, those of no pods too: their scheduling is kept by name.
        named = [t.pod_set for t in held]
        if "" in named:
            return "each of its pod templates needs a name: kohort names its pod set after it"
        twice = sorted({s for s in named if named.count(s) > 1})
        if twice:
            return (
                f"two of its pod templates would be pod set {shown(twice[0])}: each pod set of"
                " a gang needs its own name"
            )
        sets = [t.pod_set for t in held if t.count > 0]
        if len(sets) > MAX_POD_SETS:
            return (
                f"its pods come from {len(sets)} pod templates, but a gang has at most"
                f" {MAX_POD_SETS} pod sets"
            )
        return None

    # -- webhook side: the raw object -----------------------------------------------------------

    def gang_name(self, obj: JSONDict, request_uid: str = "") -> str:
        return gang_name(self.GANG_PREFIX, object_name(obj, request_uid))

    def managed_templates(self, obj: JSONDict) -> list[HeldTemplate] | None:
        """The templates of a raw object kohort holds (None when a managed workload made it);
        Denied says why it cannot be one gang."""
        try:
            view = msgspec.convert(obj, self.model)
        except msgspec.ValidationError as err:
            raise Denied(str(err)) from err
        if self.owned_elsewhere(view):
            return None
        problem = self._gang_problem(view)
        if problem is not None:
            raise Denied(problem)
        held = self.held_templates(view)
        for template in held:
            template_requests(obj, template.path)
        return held

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        held = self.managed_templates(editor.doc)
        if held is None:
            return []
        editor.set(list(self.SUSPEND), True)
        return self._decorate(
            editor, held, mutation, self.gang_name(editor.doc, mutation.request_uid)
        )

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        held = self.managed_templates(editor.doc)
        if not held:
            return []
        gang = pod_group_of(old, held[0].path) or self.gang_name(old)
        return self._decorate(editor, held, mutation, gang)

    def _decorate(
        self, editor: Editor, held: list[HeldTemplate], mutation: Mutation, gang: str
    ) -> list[str]:
        warnings: list[str] = []
        for template in held:
            warnings += decorate_pod_template(
                editor, template.path, mutation, gang=gang, gate=self.gated(template)
            )
        return warnings

    def _is_suspended(self, obj: JSONDict) -> bool:
        return lookup(obj, self.SUSPEND) is True

    def unheld(self, obj: JSONDict) -> str | None:
        held = self.managed_templates(obj)
        if held is None:
            return None
        if not self._is_suspended(obj):
            return (
                f"a {self.KIND.kind} in a kohort queue must be created with"
                f" {field_path(self.SUSPEND)}: true"
            )
        return gate_problem(obj, [t.path for t in held if self.gated(t)])

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        before = self.managed_templates(old)
        if before is None:
            return None
        held = self.managed_templates(new)
        if held is None:
            return (
                f"a {self.KIND.kind} in a kohort queue cannot be handed to another workload kohort"
                " manages (an ownerReference with controller: true); delete and recreate it"
            )
        if self._is_suspended(old) and not self._is_suspended(new):
            return (
                f"a {self.KIND.kind} waiting in a kohort queue is unsuspended only by kohort's"
                " controller"
            )
        for template in [t for t in held if self.gated(t)]:
            if has_gate(old, template.path) and not has_gate(new, template.path):
                return (
                    "only kohort's controller may remove the admission gate from"
                    f" {field_path(template.path)}"
                )
        return self._ungang_problem(old, before, new, held)

    def _ungang_problem(
        self, old: JSONDict, before: list[HeldTemplate], new: JSONDict, held: list[HeldTemplate]
    ) -> str | None:
        """Why a template of pods in `new` (one just added, say) is not in the gang `old`'s
        templates are in: it must carry the same gang fields (and, for a gated kind, the
        admission gate), or its pods would run outside the gang and its quota. Nothing is
        required of an object whose templates name no gang (kohort's webhook never saw it)."""
        reference = next((t.path for t in before if pod_group_of(old, t.path)), None)
        if reference is None:
            return None
        for template in held:
            if template.count <= 0:
                continue
            where = field_path(template.path)
            if self.gated(template) and not has_gate(new, template.path):
                return (
                    f"{where} must carry the {names.ADMISSION_GATE} scheduling gate, as the"
                    " other pod templates of its gang do (is kohort's mutating webhook"
                    " registered?)"
                )
            for field in GANG_WIDE_FIELDS:
                want = lookup(old, [*reference, *field])
                if want is not None and lookup(new, [*template.path, *field]) != want:
                    return (
                        f"{where}.{field_path(field)} must be {shown(want)}, as kohort set it in"
                        " the other pod templates of its gang (is kohort's mutating webhook"
                        " registered?)"
                    )
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return self._is_suspended(old)

    def templates(self, obj: JSONDict) -> list[Path]:
        try:
            held = self.managed_templates(obj)
        except Denied:
            return []
        return [t.path for t in held or []]

    # -- controller side: the typed view --------------------------------------------------------

    def gangs(self, obj: Any) -> list[GangShape]:
        if self.owned_elsewhere(obj) or self._gang_problem(obj) is not None:
            return []
        held = self.held_templates(obj)
        # The webhook wrote the gang's name into every template: it is authoritative.
        name = template_gang(held[0].template) if held else None
        before = self._before(obj)
        # The gang is what the user asked for, not the flavors it was released on.
        asked = [
            (t, before[t.pod_set].applied(t.template) if t.pod_set in before else t.template)
            for t in held
            if t.count > 0
        ]
        if name is None or not asked:
            return []
        sets = gang_pod_sets(
            [TemplatePods(t.pod_set, t.count, template) for t, template in asked],
            obj.metadata.namespace,
        )
        size = sum(t.count for t, _ in asked if not t.starts_later)
        return [GangShape(name, size, sets, priority_classes(*(tpl for _, tpl in asked)))]

    def _before(self, obj: Any) -> dict[str, Scheduling]:
        kept = kept_in(obj.metadata, TEMPLATES_BEFORE_FLAVORS, self.KIND, dict[str, Scheduling])
        return kept or {}

    def _own(self, template: HeldTemplate, before: dict[str, Scheduling]) -> Scheduling:
        """The template's own scheduling fields: as kept at its release, or as it is."""
        return before.get(template.pod_set) or Scheduling.of(template.template.spec)

    def release(
        self, obj: Any, pods: Sequence[kube.Pod], flavors: Flavors = NO_FLAVORS
    ) -> list[Write]:
        """Unsuspend the object, each template on the nodes of its pod set's flavors in the same
        write (its own nodeSelector and tolerations kept in an annotation); once it runs, ungate
        the pods its operator made, when they are gated."""
        held, before = self.held_templates(obj), self._before(obj)
        if not self.suspended(obj):
            # (every gated pod: one its operator made from a template gated for an earlier
            # release is released too)
            return self._ungate(obj, pods, flavors)

        def wanted(template: HeldTemplate) -> Scheduling:
            mine = flavors.get(template.pod_set)
            if mine is not None and self.PINS_ON_PODS:
                mine = PodSetFlavors(mine.flavors)
            return self._own(template, before).on(mine)

        kept = {
            t.pod_set: self._own(t, before)
            for t in held
            if not wanted(t).same(self._own(t, before))
        }
        ops = [{"op": "add", "path": pointer(self.SUSPEND), "value": False}]
        ops += _scheduled(held, wanted)
        for t in held:
            mine = flavors.get(t.pod_set)
            if not self.gated(t) and not t.starts_later and mine is not None:
                pinned = self.PINS_ON_PODS and bool(mine.nodes or mine.domain)
                ops += _gate_ops(t, gated=pinned or mine.pinned_per_pod)
        value = encoded(kept) if kept else None
        ops += annotation_ops(obj.metadata, TEMPLATES_BEFORE_FLAVORS, value)
        return [guarded_patch(self.KIND, obj.metadata, ops)]

    def hold(self, obj: Any, pods: Sequence[kube.Pod]) -> list[Write]:
        """Suspend the object (its operator deletes its pods), its templates given back their
        own nodeSelector and tolerations in the same write when a release changed them."""
        suspended = self.suspended(obj)
        if suspended and TEMPLATES_BEFORE_FLAVORS not in obj.metadata.annotations:
            return []
        before = self._before(obj)
        ops: list[JSONDict] = []
        if not suspended:
            ops.append({"op": "add", "path": pointer(self.SUSPEND), "value": True})
        held = self.held_templates(obj)
        ops += _scheduled(held, lambda t: self._own(t, before))
        ops += [op for t in held if not self.gated(t) for op in _gate_ops(t, gated=False)]
        ops += annotation_ops(obj.metadata, TEMPLATES_BEFORE_FLAVORS, None)
        return [guarded_patch(self.KIND, obj.metadata, ops)]

    def _ungate(self, obj: Any, pods: Sequence[kube.Pod], flavors: Flavors) -> list[Write]:
        """Ungate the pods the object's operator made for it, at most the gang's size, each on
        the nodes of its pod set's flavors."""
        held = self.held_templates(obj)
        if not held:
            return []
        own = self.operator_pods(obj, pods)
        first = held[0].pod_set
        return ungate_up_to(
            # (its pods that were never gated count among those released)
            sum(t.count for t in held if not t.starts_later),
            own,
            lambda p: True,
            lambda p: flavors.get(self.pod_set_of(p) or first),
        )


def _gate_ops(template: HeldTemplate, *, gated: bool) -> list[JSONDict]:
    """The operations that put the admission gate on a template's pods (`gated`) or take it
    off them: a release gates the pods of a pod set pinned one by one."""
    spec = template.template.spec
    if spec_gated(spec) == gated:
        return []
    return [_put((*template.path, "spec", "schedulingGates"), gates_value(spec, gated))]


def _scheduled(
    held: Sequence[HeldTemplate], wanted: Callable[[HeldTemplate], Scheduling]
) -> list[JSONDict]:
    """The operations that give each template the scheduling fields `wanted` says."""
    return [op for t in held for op in scheduling_ops(t.path, t.template.spec, wanted(t))]
