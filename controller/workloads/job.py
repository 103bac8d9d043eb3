"""batch/v1 Job: held with spec.suspend; one gang of min(parallelism, completions) pods.

A Job admitted on flavors is put on their nodes in its pod template, in the write that
unsuspends it: the flavors' node labels merged into the template's nodeSelector, their
tolerations appended. Kubernetes lets a Job's template scheduling fields change only while it
is suspended and has no status.startTime, so the template's own nodeSelector and tolerations
are kept in an annotation written with the release, and an eviction suspends the Job, clears
its startTime and puts them back (a controller restarted meanwhile finishes that from the
annotation).

A Job that an object of a kind which makes Jobs for its gang made (its controller: a JobSet,
whose Jobs' pods join the JobSet's gang, named on the template the JobSet controller copied; a
RayJob's submitter Job, in the RayJob's gang) is no gang of its own: the owner is what kohort
holds. It is not suspended, and free to be unsuspended. Which kinds make Jobs is what they
declare (`MAKES`), told to the Job adapter by the registry that holds it. The webhook leaves a
new object made by any managed workload alone before asking an adapter (see
`registry.Registry.part_of_managed_workload`).

A new Job of the usual shape is answered from its pruned view (`fast_defaults`), with the same
operations, in the same order, as `defaults` merged by `edits.merge_operations`, without
building and walking dicts: the review the webhook answers most, and the one a burst of
`kubectl apply` sends by the hundred. It takes metadata, spec and spec.template.spec present,
no scheduler chosen by the user, no controller; anything else goes the general way, which also
writes every warning and denial. A property test over generated Jobs holds the two ways equal
(tests/unit/test_webhook_pruned_reviews.py).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from msgspec import UNSET

from controller.api import kube, names
from controller.api.kinds import Kind
from controller.workloads.base import (
    DEFAULT_SCHEDULER,
    NO_FLAVORS,
    Backend,
    Finished,
    Flavors,
    GangShape,
    Mutation,
    Patch,
    Placement,
    Write,
    controlled_by,
    gang_name,
    gates_value,
    made_by,
    non_negative_int,
    object_name,
    owned_by,
    pod_template_fields,
    priority_classes,
    running_pods,
    spec_gated,
    template_gang,
    template_requests,
    toleration_json,
    ungate_up_to,
)
from controller.workloads.capabilities import OwnPods, Registrable
from controller.workloads.edits import Editor, JSONDict, Path, lookup
from controller.workloads.pinning import affinity_merge, required_of
from controller.workloads.pod_rules import TemplatePods, gang_pod_sets
from controller.workloads.pruned import ObjectMeta, PodSpec, Workload, merge_ops, set_op
from controller.workloads.suspended import Scheduling, encoded, kept_in, same_tolerations

TEMPLATE = ("spec", "template")
UNSUSPENDED = "a workload in a kohort queue must be created with spec.suspend: true"
# The pod template's own nodeSelector and tolerations, kept while its flavors' are added.
TEMPLATE_BEFORE_FLAVORS = f"{names.GROUP}/template-before-flavors"
_TEMPLATE_META = "/spec/template/metadata"


def scheduling_before_flavors(obj: kube.Job) -> Scheduling | None:
    """The template's own nodeSelector and tolerations, while its flavors' are in it."""
    return kept_in(obj.metadata, TEMPLATE_BEFORE_FLAVORS, kube.Job.KIND, Scheduling)


def _template_patch(obj: kube.Job, target: Scheduling) -> JSONDict:
    """The merge patch of the template's spec that makes its scheduling fields `target`."""
    spec = obj.spec.template.spec
    patch: JSONDict = {}
    selector: dict[str, Any] = {
        k: v for k, v in target.node_selector.items() if spec.node_selector.get(k) != v
    }
    selector.update({k: None for k in spec.node_selector if k not in target.node_selector})
    if selector:
        patch["nodeSelector"] = selector
    if not same_tolerations(spec.tolerations, target.tolerations):
        patch["tolerations"] = [toleration_json(t) for t in target.tolerations] or None
    required = target.required_node_affinity
    if required_of(spec) != required:
        patch["affinity"] = affinity_merge(spec, required)
    return patch


@dataclass(frozen=True)
class PartialRelease:
    """What the release of a partially admitted Job changed: the parallelism and completions
    its user asked for, and the parallelism it was released with (kept in an annotation)."""

    parallelism: int
    completions: int | None
    released: int

    def encoded(self) -> str:
        return json.dumps(
            {
                "parallelism": self.parallelism,
                "completions": self.completions,
                "released": self.released,
            },
            separators=(",", ":"),
        )


def partial_release(obj: kube.Job) -> PartialRelease | None:
    """The Job's partial release, as its annotation keeps it (None: none, or unreadable)."""
    value = obj.metadata.annotations.get(names.PARTIALLY_ADMITTED_ANNOTATION)
    if value is None:
        return None
    try:
        kept = json.loads(value)
        completions = kept["completions"]
        return PartialRelease(
            int(kept["parallelism"]),
            None if completions is None else int(completions),
            int(kept["released"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def min_parallelism(obj: kube.Job) -> int | None:
    """The fewest pods the Job may start with: its `kohort.dev/min-parallelism` annotation, else
    Kueue's `kueue.x-k8s.io/job-min-parallelism` (a positive integer; anything else: none)."""
    for key in (names.MIN_PARALLELISM_ANNOTATION, names.KUEUE_MIN_PARALLELISM_ANNOTATION):
        value = obj.metadata.annotations.get(key)
        if value is None:
            continue
        with contextlib.suppress(ValueError):
            least = int(value)
            return least if least > 0 else None
        return None
    return None


def asked_size(obj: kube.Job) -> tuple[int, int | None]:
    """The parallelism and completions its user asked for: as its spec says, but those a
    partial release lowered, which its annotation keeps."""
    spec = obj.spec
    parallelism = spec.parallelism if spec.parallelism is not None else 1
    partial = partial_release(obj)
    if partial is not None and parallelism == partial.released:
        return partial.parallelism, partial.completions
    return parallelism, spec.completions


def completions_follow(obj: kube.Job, parallelism: int, completions: int | None) -> bool:
    """Whether a partial release lowers completions with parallelism: for an Indexed Job whose
    completions equal its parallelism (one index per worker; Kueue's
    job-completions-equal-parallelism annotation asks the same, and is honoured only where
    they are equal: Kubernetes lets an Indexed Job change its completions only to its new
    parallelism, so unequal ones could not be given back); otherwise completions are kept and
    the Job runs them with fewer pods at once."""
    return obj.spec.completion_mode == "Indexed" and completions == parallelism


def _suspended(obj: JSONDict) -> bool:
    return lookup(obj, ["spec", "suspend"]) is True


class JobAdapter(Registrable):
    KIND: ClassVar[Kind] = kube.Job.KIND
    model: ClassVar[type[kube.Job]] = kube.Job
    GANG_PREFIX: ClassVar[str] = "job"
    OPTIONAL_CRD: ClassVar[bool] = False
    MAKES: ClassVar[tuple[Kind, ...]] = ()
    OWN_PODS: ClassVar[OwnPods] = OwnPods.UNGATED

    def gang_name(self, obj: JSONDict, request_uid: str = "") -> str:
        return gang_name(self.GANG_PREFIX, object_name(obj, request_uid))

    def _in_owners_gang(self, obj: JSONDict) -> bool:
        """Whether an object of a kind that makes Jobs for its gang made this raw Job."""
        return any(owned_by(obj, kind) for kind in self.kinds.makers_of(self.KIND))

    # -- webhook side ---------------------------------------------------------------------------

    def sizes(self, obj: JSONDict) -> tuple[int, int]:
        """(pods running at once, gang size); Denied names a field that is not a count."""
        parallelism = non_negative_int(obj, ["spec", "parallelism"], 1) or 0
        completions = non_negative_int(obj, ["spec", "completions"], None)
        return parallelism, parallelism if completions is None else min(parallelism, completions)

    def defaults(self, obj: JSONDict, mutation: Mutation) -> tuple[JSONDict, list[str]]:
        self.sizes(obj)  # rejects a spec that cannot form a gang
        gang = self.gang_name(obj, mutation.request_uid)
        template = lookup(obj, TEMPLATE)
        fields, warnings = pod_template_fields(template, TEMPLATE, mutation, gang=gang)
        values = {
            "metadata": {"labels": {names.QUEUE_LABEL: mutation.queue}},
            "spec": {"suspend": True, "template": fields},
        }
        return values, warnings

    def fast_defaults(
        self, obj: Workload, *, queue: str, placement: Placement, request_uid: str
    ) -> list[JSONDict] | None:
        """`defaults` as a JSON Patch, for a new Job of the usual shape (see the module); what
        a `Mutation` would hold comes as arguments (building one costs as much as a fifth of
        this answer)."""
        meta, spec = obj.metadata, obj.spec
        if type(meta) is not ObjectMeta or spec is None or spec is UNSET:
            return None
        owners = meta.ownerReferences
        if type(owners) is list and any(o.controller is True for o in owners):
            return None
        template = spec.template
        if template is None or template is UNSET:
            return None
        pod_spec = template.spec
        if type(pod_spec) is not PodSpec:
            return None
        if placement.backend is Backend.KUBERNETES:
            return None  # pods name their gang's Workload (spec.workloadRef): the general path
        wanted_scheduler = placement.scheduler_name
        scheduler = pod_spec.schedulerName
        if scheduler not in (UNSET, None, "", DEFAULT_SCHEDULER, wanted_scheduler):
            return None  # kept with a warning: the general path writes it

        ops: list[JSONDict] = []
        merge_ops(ops, "/metadata/labels", meta.labels, {names.QUEUE_LABEL: queue})
        if spec.suspend is not True:
            set_op(ops, "/spec/suspend", spec.suspend, True)

        template_meta = template.metadata
        template_labels: Any = UNSET
        annotations: Any = UNSET
        if isinstance(template_meta, ObjectMeta):
            template_labels, annotations = template_meta.labels, template_meta.annotations
        name = meta.name
        if not name:  # only generateName: named like the general path names it
            name = object_name({"metadata": {"generateName": meta.generateName}}, request_uid)
        # Always this Job's own gang: a template copied from another workload names the other's.
        gang = gang_name(self.GANG_PREFIX, name)
        wanted_labels = {
            names.QUEUE_LABEL: queue,
            names.MANAGED_LABEL: names.MANAGED_VALUE,
            names.POD_GROUP_LABEL: gang,
        }
        wanted_annotations: dict[str, str] = {}
        if not (isinstance(annotations, dict) and names.SAFE_TO_EVICT_ANNOTATION in annotations):
            wanted_annotations[names.SAFE_TO_EVICT_ANNOTATION] = "false"
        backend = placement.backend
        if backend is Backend.VOLCANO:
            wanted_annotations[names.VOLCANO_GROUP_ANNOTATION] = gang
        if backend is Backend.COSCHEDULING:
            wanted_labels[names.COSCHEDULING_GROUP_LABEL] = gang
        wanted_meta: dict[str, Any] = {"labels": wanted_labels}
        if wanted_annotations:
            wanted_meta["annotations"] = wanted_annotations
        if not isinstance(template_meta, ObjectMeta):
            set_op(ops, _TEMPLATE_META, template_meta, wanted_meta)
        else:
            merge_ops(ops, f"{_TEMPLATE_META}/labels", template_labels, wanted_labels)
            if wanted_annotations:
                merge_ops(ops, f"{_TEMPLATE_META}/annotations", annotations, wanted_annotations)
        if wanted_scheduler is not None and scheduler != wanted_scheduler:
            set_op(ops, "/spec/template/spec/schedulerName", scheduler, wanted_scheduler)
        return ops

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        values, warnings = self.defaults(editor.doc, mutation)
        editor.merge((), values)
        return warnings

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        # The template of a Job is immutable; suspend belongs to the controller.
        return []

    def unheld(self, obj: JSONDict) -> str | None:
        self.sizes(obj)
        template_requests(obj, TEMPLATE)
        return None if _suspended(obj) else UNSUSPENDED

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        if self._in_owners_gang(old):
            return None
        if self._in_owners_gang(new):
            owners = " or ".join(f"a {kind.kind}" for kind in self.kinds.makers_of(self.KIND))
            return f"a Job in a kohort queue cannot be handed to {owners}; delete and recreate it"
        if _suspended(old) and not _suspended(new):
            return "a Job waiting in a kohort queue is unsuspended only by kohort's controller"
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return self._in_owners_gang(old) or _suspended(old)

    def templates(self, obj: JSONDict) -> list[Path]:
        return [TEMPLATE]

    # -- controller side ------------------------------------------------------------------------

    def gangs(self, obj: kube.Job) -> list[GangShape]:
        if any(controlled_by(obj.metadata, k) for k in self.kinds.makers_of(self.KIND)):
            return []  # its pods are in its owner's gang (a JobSet's, a RayJob's)
        template = obj.spec.template
        before = scheduling_before_flavors(obj)
        if before is not None:
            # The gang is what the user asked for: not the flavors it was released on.
            template = before.applied(template)
        # The webhook wrote the gang's name into the template: it is authoritative (a name
        # chosen with generateName at CREATE differs from what would be derived later).
        name = template_gang(template)
        parallelism, completions = asked_size(obj)
        if name is None or parallelism < 1:
            return []
        sets = gang_pod_sets([TemplatePods("main", parallelism, template)], obj.metadata.namespace)
        # Elastic, unless its user changed parallelism since a partial release: the size they
        # ask for then is the one to admit (a resize), none smaller.
        partial = partial_release(obj)
        changed = partial is not None and obj.spec.parallelism != partial.released
        least = None if changed else min_parallelism(obj)
        if least is not None and least < parallelism:
            sets = (replace(sets[0], min_count=least), *sets[1:])
        size = parallelism if completions is None else min(parallelism, completions)
        running = obj.spec.parallelism if obj.spec.suspend is not True else None
        if running is None and obj.spec.suspend is not True:
            running = 1  # (an unset parallelism runs one pod)
        return [GangShape(name, max(size, 1), sets, priority_classes(template), running=running)]

    def finished(self, obj: kube.Job) -> Finished | None:
        done = {c.type for c in obj.status.conditions if c.status == "True"}
        if done & {"Complete", "SuccessCriteriaMet"}:
            return Finished.SUCCEEDED
        if done & {"Failed", "FailureTarget"}:
            return Finished.FAILED
        return None

    def max_runtime(self, obj: kube.Job) -> float | None:
        """The least of its `activeDeadlineSeconds` and its `kohort.dev/max-runtime-seconds`
        annotation (a positive number of seconds; anything else is ignored)."""
        declared = [float(obj.spec.active_deadline_seconds or 0)]
        with contextlib.suppress(KeyError, ValueError):
            declared.append(float(obj.metadata.annotations[names.MAX_RUNTIME_ANNOTATION]))
        positive = [seconds for seconds in declared if 0 < seconds < float("inf")]
        return min(positive, default=None)

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return None

    def shrinks_in_place(self, owner: kube.Job) -> bool:
        """A Job whose parallelism is lowered keeps running: the Job controller deletes the
        pods beyond it (for an Indexed Job, the highest indexes) and the others run on."""
        return True

    def shrink(self, owner: kube.Job, counts: Mapping[str, int]) -> list[Write]:
        """Lower the Job's parallelism to the pods kept; its controller deletes the others (which
        ones it picks: see `shrinks_in_place`)."""
        meta = owner.metadata
        body = {"spec": {"parallelism": counts["main"]}}
        return [Patch(self.KIND, meta.namespace, meta.name, body, expected=True)]

    def release(
        self, obj: kube.Job, pods: Sequence[kube.Pod], flavors: Flavors = NO_FLAVORS
    ) -> list[Write]:
        """Unsuspend the Job, its template on the nodes of its flavors in the same write (and
        its own nodeSelector and tolerations kept in an annotation). A Job whose plan spreads
        its pods over several nodes has its template gated too, and each of its pods is then
        ungated pinned to its own planned node (see `base.ungate`)."""
        mine = flavors.get("main")
        if obj.spec.suspend is not True:
            # Only a template the release gated makes gated pods; at most as many run as the
            # Job runs at once.
            if not spec_gated(obj.spec.template.spec):
                return []
            own = [p for p in pods if made_by(p, self.KIND.kind, obj.metadata.uid or None)]
            return ungate_up_to(running_pods(obj.spec), own, lambda pod: True, lambda pod: mine)
        before = scheduling_before_flavors(obj) or Scheduling.of(obj.spec.template.spec)
        target = before.on(mine, affinity=True)
        body: JSONDict = {"spec": {"suspend": False}}
        writes: list[Write] = []
        template = _template_patch(obj, target)
        per_pod = mine is not None and mine.pinned_per_pod
        if spec_gated(obj.spec.template.spec) != per_pod:
            template["schedulingGates"] = gates_value(obj.spec.template.spec, per_pod)
        if template:
            body["spec"]["template"] = {"spec": template}
            writes += self._clear_start_time(obj)
        kept = None if target.same(before) else encoded(before)
        if obj.metadata.annotations.get(TEMPLATE_BEFORE_FLAVORS) != kept:
            body["metadata"] = {"annotations": {TEMPLATE_BEFORE_FLAVORS: kept}}
        if mine is not None and mine.count is not None:
            self._partially(obj, mine.count, body)
        meta = obj.metadata
        return [*writes, Patch(self.KIND, meta.namespace, meta.name, body)]

    def _partially(self, obj: kube.Job, count: int, body: JSONDict) -> None:
        """Into the release's patch `body`: run `count` pods at once, when the admission took
        fewer than the Job asks for (completions lowered too where they follow, see
        `completions_follow`), what it asked for kept in an annotation."""
        parallelism, completions = asked_size(obj)
        if count >= parallelism:
            if obj.spec.parallelism != parallelism:  # (lowered by a partial release before)
                body["spec"]["parallelism"] = parallelism
                if completions is not None and obj.spec.completions != completions:
                    body["spec"]["completions"] = completions
                body.setdefault("metadata", {}).setdefault("annotations", {})[
                    names.PARTIALLY_ADMITTED_ANNOTATION
                ] = None
            return
        body["spec"]["parallelism"] = count
        if completions is not None and completions_follow(obj, parallelism, completions):
            body["spec"]["completions"] = count
        partial = PartialRelease(parallelism, completions, count).encoded()
        body.setdefault("metadata", {}).setdefault("annotations", {})[
            names.PARTIALLY_ADMITTED_ANNOTATION
        ] = partial

    def _restore_size(self, obj: kube.Job) -> list[Write]:
        """Give a held Job back the parallelism and completions its user asked for, which a
        partial release lowered (unless its user changed them since: theirs are kept)."""
        if names.PARTIALLY_ADMITTED_ANNOTATION not in obj.metadata.annotations:
            return []
        partial = partial_release(obj)
        body: JSONDict = {"metadata": {"annotations": {names.PARTIALLY_ADMITTED_ANNOTATION: None}}}
        if partial is not None and obj.spec.parallelism == partial.released:
            spec: JSONDict = {"parallelism": partial.parallelism}
            if obj.spec.completions != partial.completions:
                spec["completions"] = partial.completions
            body["spec"] = spec
        meta = obj.metadata
        return [Patch(self.KIND, meta.namespace, meta.name, body)]

    def hold(self, obj: kube.Job, pods: Sequence[kube.Pod]) -> list[Write]:
        """Suspend the Job; then give its template back its own nodeSelector, tolerations and
        node affinity when a release changed them (which needs its startTime cleared, and, on
        Kubernetes that lets a suspended Job's template change only once its pods are gone,
        waits for that: the write is tolerated until then and made again as the Job changes)."""
        writes: list[Write] = [] if obj.spec.suspend is True else [self._suspend(obj, True)]
        writes += self._restore_size(obj)
        if TEMPLATE_BEFORE_FLAVORS not in obj.metadata.annotations:
            return writes
        before = scheduling_before_flavors(obj)
        body: JSONDict = {"metadata": {"annotations": {TEMPLATE_BEFORE_FLAVORS: None}}}
        template = _template_patch(obj, before) if before is not None else {}
        if spec_gated(obj.spec.template.spec):
            template["schedulingGates"] = gates_value(obj.spec.template.spec, False)
        if template:
            body["spec"] = {"template": {"spec": template}}
            writes += self._clear_start_time(obj)
        meta = obj.metadata
        restore = Patch(self.KIND, meta.namespace, meta.name, body, expected=bool(template))
        return [*writes, restore]

    def _suspend(self, obj: kube.Job, suspended: bool) -> Patch:
        meta = obj.metadata
        return Patch(self.KIND, meta.namespace, meta.name, {"spec": {"suspend": suspended}})

    def _clear_start_time(self, obj: kube.Job) -> list[Write]:
        """Forget when a suspended Job last started: only then may its template's nodeSelector
        and tolerations change (it gets a new startTime when it runs again)."""
        if obj.status.start_time is None:
            return []
        meta = obj.metadata
        body = {"status": {"startTime": None}}
        return [Patch(self.KIND, meta.namespace, meta.name, body, subresource="status")]
