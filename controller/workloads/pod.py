"""core/v1 Pod: the pods of managed workloads, bare pods, and plain pod groups.

Which gang a new pod joins:
- a pod that carries a kind's mark (`capabilities.MarksPods`: a LeaderWorkerSet's name): the
  gang that kind names, its group's;
- a pod of a managed Job, or of a kind whose pods carry the gate (`capabilities.OwnPods`: a
  StatefulSet, PyTorchJob or RayCluster): its owner's, named on the owner's pod template (a
  Job's pods are created only once the Job is released, so they get no gate); the pods of a
  JobSet's Jobs carry the JobSet's gang, copied from its templates, and those of a RayJob's
  RayCluster and submitter Job the RayJob's;
- a pod that shares a user-chosen `kohort.dev/pod-group` with others: that plain pod group,
  whose size the user gives with `kohort.dev/pod-group-total-count`;
- any other pod in a queue (bare, or made by a controller kohort has no adapter for, such as a
  ReplicaSet): a gang by itself, marked with a total count of 1.
Every pod but a Job's gets the gate if it arrives without it (defence in depth). What the Pod
adapter knows of the other kinds (which mark their pods, whose pods are gated, the prefixes of
their gangs' names) it asks the registry that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from controller.api import kinds, kube, names
from controller.api.kinds import Kind
from controller.quota.flavor_assignment import flavored
from controller.quota.snapshot import PodSet
from controller.workloads.base import (
    NO_FLAVORS,
    Denied,
    Finished,
    Flavors,
    GangShape,
    Mutation,
    Write,
    controller_owner,
    decorate_pod_template,
    delete_ungated,
    gang_name,
    gate_problem,
    has_gate,
    is_gated,
    labels,
    object_name,
    owned_by,
    pod_set,
    priority_classes,
    queue_in,
    shown,
    ungate,
    ungate_up_to,
)
from controller.workloads.capabilities import OwnPods, PodMark, Registrable
from controller.workloads.edits import Editor, JSONDict, Path
from controller.workloads.pod_rules import TemplatePods, gang_pod_sets

ROOT: tuple[str, ...] = ()


def owned_by_job(obj: JSONDict) -> bool:
    return owned_by(obj, kinds.JOBS)


# More pods than this in one plain group is a typo, not a gang.
MAX_GROUP_SIZE = 10_000


def group_size(value: Any) -> int:
    """The pod count a `kohort.dev/pod-group-total-count` label value gives; ValueError if bad."""
    if not isinstance(value, str) or not value.isdigit() or not 1 <= int(value) <= MAX_GROUP_SIZE:
        raise ValueError(
            f"label {names.POD_GROUP_TOTAL_COUNT_LABEL} must be the number of pods in the group"
            f" (1 to {MAX_GROUP_SIZE}), got {shown(value)}"
        )
    return int(value)


def _declared_size(obj: JSONDict) -> int | None:
    value = labels(obj).get(names.POD_GROUP_TOTAL_COUNT_LABEL)
    if value is None:
        return None
    try:
        return group_size(value)
    except ValueError as err:
        raise Denied(str(err)) from err


def _owner_text(obj: JSONDict) -> str:
    owner = controller_owner(obj) or {}
    return f"{owner.get('kind', 'owner')} {owner.get('name', '')}".strip()


def _missing_size(group: str) -> str:
    return (
        f"pods that share {names.POD_GROUP_LABEL}={group} run as one gang: set"
        f" {names.POD_GROUP_TOTAL_COUNT_LABEL} to the number of pods in the group"
    )


def of_unmanaged_job(obj: JSONDict) -> bool:
    """A pod of a Job kohort does not manage (its template names no gang): in a namespace that
    opted in, such a Job was made before the opt-in, or opted out itself."""
    return owned_by_job(obj) and not labels(obj).get(names.POD_GROUP_LABEL)


def _job_not_queued(obj: JSONDict) -> str:
    return (
        f"its {_owner_text(obj)} is not in a kohort queue (its pod template is labelled, the Job"
        f" is not): put {names.QUEUE_LABEL} on the Job itself"
    )


class PodAdapter(Registrable):
    KIND: ClassVar[Kind] = kube.Pod.KIND
    model: ClassVar[type[kube.Pod]] = kube.Pod
    GANG_PREFIX: ClassVar[str] = "pod"
    OPTIONAL_CRD: ClassVar[bool] = False
    MAKES: ClassVar[tuple[Kind, ...]] = ()
    OWN_PODS: ClassVar[OwnPods] = OwnPods.NONE

    def gang_name(self, obj: JSONDict, request_uid: str = "") -> str | None:
        """The pod's PodGroup, or None for a marked pod whose gang is not named yet."""
        pod_labels = labels(obj)
        existing = pod_labels.get(names.POD_GROUP_LABEL)
        if isinstance(existing, str) and existing:
            return existing
        mark = self.kinds.pod_mark(pod_labels)
        if mark is not None:
            return mark.gang
        return gang_name(self.GANG_PREFIX, object_name(obj, request_uid))

    def of_gated_workload(self, obj: JSONDict) -> bool:
        """Whether the pod's controller is of a kind whose pods carry the gate and the gang."""
        return any(owned_by(obj, kind) for kind in self.kinds.gated_pod_makers)

    def reserved_prefixes(self) -> tuple[str, ...]:
        """The gang names kohort gives the workloads of its other kinds: no plain pod group may
        take one."""
        prefixes = self.kinds.gang_prefixes
        return tuple(f"{p}-" for kind, p in prefixes.items() if kind != self.KIND)

    def impersonation(self, obj: JSONDict, mark: PodMark | None) -> str | None:
        """Why a pod pretends to belong to a workload it does not: another kind's mark on a pod
        no object of the kind that makes such pods made, or a plain group named like another
        kind's gang."""
        if mark is not None and not owned_by(obj, mark.maker):
            return f"only a {mark.kind.kind}'s {mark.maker.kind}s create pods labelled {mark.label}"
        group = labels(obj).get(names.POD_GROUP_LABEL)
        reserved = self.reserved_prefixes()
        if isinstance(group, str) and group.startswith(reserved) and controller_owner(obj) is None:
            others = [kind.kind + "s" for kind in self.kinds.gang_prefixes if kind != self.KIND]
            return (
                f"{names.POD_GROUP_LABEL}={group}: names starting with"
                f" {', '.join(reserved)} are the gangs of {_listed(others)}; choose another name"
                " for a plain pod group"
            )
        return None

    # -- webhook side ---------------------------------------------------------------------------

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        obj = editor.doc
        pod_labels = labels(obj)
        mark = self.kinds.pod_mark(pod_labels)
        pretends = self.impersonation(obj, mark)
        if pretends:
            raise Denied(pretends)
        gang = self.gang_name(obj, mutation.request_uid)
        if mark is not None:
            return decorate_pod_template(editor, ROOT, mutation, gang=gang, gate=True)
        size = _declared_size(obj)
        group = pod_labels.get(names.POD_GROUP_LABEL)
        if owned_by_job(obj):
            if not group:
                raise Denied(_job_not_queued(obj))
            return decorate_pod_template(editor, ROOT, mutation, gang=gang, gate=False)
        if group and size is None:
            if self.of_gated_workload(obj):  # named on its managed owner's template
                return decorate_pod_template(editor, ROOT, mutation, gang=gang, gate=True)
            raise Denied(_missing_size(str(group)))
        if size is None:
            editor.merge(("metadata", "labels"), {names.POD_GROUP_TOTAL_COUNT_LABEL: "1"})
        return decorate_pod_template(editor, ROOT, mutation, gang=gang, gate=True)

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        # Scheduling gates can be removed from a pod but never added back.
        return []

    def unheld(self, obj: JSONDict) -> str | None:
        pod_labels = labels(obj)
        mark = self.kinds.pod_mark(pod_labels)
        pretends = self.impersonation(obj, mark)
        if pretends:
            return pretends
        group = pod_labels.get(names.POD_GROUP_LABEL)
        if owned_by_job(obj):
            # A managed Job's pods exist only once the Job is released.
            return None if group else _job_not_queued(obj)
        if mark is not None and not group:
            # Its gang is named when the pod is made; a pod that missed that would keep its
            # whole group from ever being complete.
            return mark.unnamed
        if mark is None and _declared_size(obj) is None and not self.of_gated_workload(obj):
            return _missing_size(str(group or "<name>"))
        return gate_problem(obj, [ROOT])

    def bypass(self, old: JSONDict, new: JSONDict) -> str | None:
        if has_gate(old) and not has_gate(new):
            return (
                f"only kohort's controller may remove the {names.ADMISSION_GATE} scheduling "
                "gate: the pod's gang has not been admitted by its queue"
            )
        return None

    def queue_may_change(self, old: JSONDict) -> bool:
        return False

    def templates(self, obj: JSONDict) -> list[Path]:
        return [ROOT]

    # -- controller side: a pod that is a gang by itself, or one of a plain pod group ------------

    def gangs(self, obj: kube.Pod) -> list[GangShape]:
        meta = obj.metadata
        declared = meta.labels.get(names.POD_GROUP_TOTAL_COUNT_LABEL)
        # Pods of managed workloads belong to their owner's gang (a marked pod whose
        # LeaderWorkerSet is not known yet waits for it). Pods made before the total
        # count existed are gangs of one when nothing owns them.
        if self.kinds.pod_mark(meta.labels) is not None:
            return []
        if declared is None and meta.controller_owner() is not None:
            return []
        size = 1 if declared is None else group_size(declared)
        name = meta.labels.get(names.POD_GROUP_LABEL) or gang_name(self.GANG_PREFIX, meta.name)
        # A pod of a plain group is its group's template.
        own = kube.TemplateMeta(labels=meta.labels, annotations=meta.annotations)
        template = kube.PodTemplate(metadata=own, spec=obj.spec)
        sets = gang_pod_sets([TemplatePods("main", size, template)], meta.namespace)
        return [GangShape(name, size, sets, priority_classes(template))]

    def finished(self, obj: kube.Pod) -> Finished | None:
        phase = obj.status.phase
        if phase == Finished.SUCCEEDED:
            return Finished.SUCCEEDED
        return Finished.FAILED if phase == Finished.FAILED else None

    def pod_set_of(self, pod: kube.Pod) -> str | None:
        return None

    def release(
        self, obj: kube.Pod, pods: Sequence[kube.Pod], flavors: Flavors = NO_FLAVORS
    ) -> list[Write]:
        """Ungate the gang's pods, each put on its flavors' nodes in the same write: at most
        its size, and only pods alike the one that gave the gang its shape (a pod that joins a
        group later with other requests stays held). Pods already given their flavors are
        alike those not yet given them."""
        mine = flavors.get("main")
        specs = mine.flavors if mine is not None else ()

        def same(pod: kube.Pod) -> PodSet:
            return flavored(alike(pod), specs)

        gangs = self.gangs(obj)
        if not gangs:
            return ungate(pods, lambda p: mine)
        expected = same(obj)
        return ungate_up_to(
            gangs[0].min_member, pods, lambda p: same(p) == expected, lambda p: mine
        )

    def hold(self, obj: kube.Pod, pods: Sequence[kube.Pod]) -> list[Write]:
        # A scheduling gate cannot be put back on a pod: a bare pod is evicted by deleting it.
        return delete_ungated(pods)

    # -- the gang of its own members (capabilities.WeakOwner, capabilities.GangOfMembers) --------

    def shares_gangs(self) -> bool:
        return True  # the pods of a plain group

    def group_done(
        self, owner: kube.Pod, shape: GangShape, members: Sequence[kube.Pod]
    ) -> Finished | None:
        """A lone pod is done when it is; a plain pod group when its pods have run and none
        still runs, whatever its owner is (finished pods may be deleted meanwhile; extra pods
        stay gated)."""
        if shape.min_member < 2:
            return self.finished(owner)
        done = [p for p in members if p.finished()]
        running = any(p.live() and not is_gated(p) for p in members)
        if not done or running:
            return None
        failed = any(p.status.phase == Finished.FAILED for p in done)
        return Finished.FAILED if failed else Finished.SUCCEEDED

    def incomplete(
        self, owner: kube.Pod, shape: GangShape, members: Sequence[kube.Pod]
    ) -> str | None:
        """Why a plain pod group cannot be admitted yet: fewer pods than its total count, more,
        or pods that ask for other resources than the one that gave the gang its shape."""
        size = shape.min_member
        if size < 2:
            return None
        live = [p for p in members if p.live()]
        group = shape.name
        label = names.POD_GROUP_TOTAL_COUNT_LABEL
        if len(live) < size:
            return f"{len(live)} of the {size} pods of group {group} exist ({label})"
        if len(live) > size:
            return (
                f"{len(live)} pods carry {names.POD_GROUP_LABEL}={group} but {label} says"
                f" {size}; delete the extra pods or recreate the group with the right count"
            )
        expected = alike(owner)
        odd = sorted(p.metadata.name for p in live if alike(p) != expected)
        if odd:
            return (
                f"pod(s) {', '.join(odd)} ask for other resources than pod"
                f" {owner.metadata.name}; the pods of a plain group must be alike"
            )
        return None

    def successor(self, gone: str, gang: str, members: Sequence[kube.Pod]) -> kube.Pod | None:
        """A plain pod group whose owning pod went: another live pod of it that declares the
        same gang owns it from now on (the first by name)."""
        for pod in sorted(members, key=lambda p: p.metadata.name):
            if pod.metadata.name == gone or not pod.live():
                continue
            if any(shape.name == gang for shape in self._shapes_of(pod)):
                return pod
        return None

    def outlives_members(self, owner: kube.Pod, gang: str) -> bool:
        """A plain pod group: pods sharing a `kohort.dev/pod-group` their creator chose. Its
        Workload has no owner and outlives its pods. (A lone pod, `pod-<name>` of one, is not
        one: its Workload goes with it.)"""
        labels_ = owner.metadata.labels
        lone = gang.startswith("pod-") and labels_.get(names.POD_GROUP_TOTAL_COUNT_LABEL) == "1"
        return names.POD_GROUP_TOTAL_COUNT_LABEL in labels_ and not lone

    def _shapes_of(self, pod: kube.Pod) -> list[GangShape]:
        """The gangs a pod declares, none when it is being deleted, not queued or malformed."""
        meta = pod.metadata
        if meta.deletion_timestamp or queue_in(meta.labels) is None:
            return []
        try:
            return self.gangs(pod)
        except ValueError:
            return []


def alike(pod: kube.Pod) -> PodSet:
    """What a pod asks for, as one pod of a pod set: the pods of a plain group must be alike."""
    return pod_set("main", 1, kube.PodTemplate(spec=pod.spec))


def _listed(items: Sequence[str]) -> str:
    """`a, b and c`."""
    return items[0] if len(items) < 2 else f"{', '.join(items[:-1])} and {items[-1]}"
