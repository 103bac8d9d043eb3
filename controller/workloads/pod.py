"""core/v1 Pod: the pods of managed workloads, bare pods, and plain pod groups.

Which gang a new pod joins:
- a pod of a LeaderWorkerSet: its group's, known from its group-index label;
- a pod of a managed Job, StatefulSet, PyTorchJob or RayCluster: its owner's, named on the
  owner's pod template (a Job's pods are created only once the Job is released, so they get no
  gate); the pods of a JobSet's Jobs carry the JobSet's gang, copied from its templates, and
  those of a RayJob's RayCluster and submitter Job the RayJob's;
- a pod that shares a user-chosen `kohort.dev/pod-group` with others: that plain pod group,
  whose size the user gives with `kohort.dev/pod-group-total-count`;
- any other pod in a queue (bare, or made by a controller kohort has no adapter for, such as a
  ReplicaSet): a gang by itself, marked with a total count of 1.
Every pod but a Job's gets the gate if it arrives without it (defence in depth).
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
    labels,
    object_name,
    owned_by,
    pod_set,
    priority_classes,
    shown,
    ungate,
    ungate_up_to,
)
from controller.workloads.edits import Editor, JSONDict, Path
from controller.workloads.leaderworkerset import group_gang_name

ROOT: tuple[str, ...] = ()


def owned_by_job(obj: JSONDict) -> bool:
    return owned_by(obj, kinds.JOBS)


def owned_by_statefulset(obj: JSONDict) -> bool:
    return owned_by(obj, kinds.STATEFULSETS)


# The kinds whose pods are made from pod templates that name the owner's gang and carry the
# admission gate: they join that gang, gated until its release.
GATED_OWNERS = (kinds.STATEFULSETS, kinds.PYTORCHJOBS, kinds.RAYCLUSTERS)


def of_gated_workload(obj: JSONDict) -> bool:
    return any(owned_by(obj, kind) for kind in GATED_OWNERS)


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


# Gang names kohort gives the workloads of its other kinds: no plain pod group may take one.
RESERVED_PREFIXES = (
    "job-",
    "sts-",
    "lws-",
    "jobset-",
    "pytorchjob-",
    "raycluster-",
    "rayjob-",
)


def impersonation(obj: JSONDict) -> str | None:
    """Why a pod pretends to belong to a workload it does not: a LeaderWorkerSet's labels on a
    pod no StatefulSet made, or a plain group named like another kind's gang."""
    pod_labels = labels(obj)
    if pod_labels.get(names.LWS_NAME_LABEL) and not owned_by_statefulset(obj):
        return f"only a LeaderWorkerSet's StatefulSets create pods labelled {names.LWS_NAME_LABEL}"
    group = pod_labels.get(names.POD_GROUP_LABEL)
    if (
        isinstance(group, str)
        and group.startswith(RESERVED_PREFIXES)
        and controller_owner(obj) is None
    ):
        return (
            f"{names.POD_GROUP_LABEL}={group}: names starting with"
            f" {', '.join(RESERVED_PREFIXES)} are the gangs of Jobs, StatefulSets,"
            " LeaderWorkerSets, JobSets, PyTorchJobs, RayClusters and RayJobs; choose another name"
            " for a plain pod group"
        )
    return None


def of_unmanaged_job(obj: JSONDict) -> bool:
    """A pod of a Job kohort does not manage (its template names no gang): in a namespace that
    opted in, such a Job was made before the opt-in, or opted out itself."""
    return owned_by_job(obj) and not labels(obj).get(names.POD_GROUP_LABEL)


def _job_not_queued(obj: JSONDict) -> str:
    return (
        f"its {_owner_text(obj)} is not in a kohort queue (its pod template is labelled, the Job"
        f" is not): put {names.QUEUE_LABEL} on the Job itself"
    )


class PodAdapter:
    KIND: ClassVar[Kind] = kube.Pod.KIND
    model: ClassVar[type[kube.Pod]] = kube.Pod

    def gang_name(self, obj: JSONDict, request_uid: str = "") -> str | None:
        """The pod's PodGroup, or None for an LWS pod whose group index is not set yet."""
        pod_labels = labels(obj)
        existing = pod_labels.get(names.POD_GROUP_LABEL)
        if isinstance(existing, str) and existing:
            return existing
        lws = pod_labels.get(names.LWS_NAME_LABEL)
        if isinstance(lws, str) and lws:
            index = pod_labels.get(names.LWS_GROUP_INDEX_LABEL)
            return group_gang_name(lws, index) if isinstance(index, str) and index else None
        return gang_name("pod", object_name(obj, request_uid))

    # -- webhook side ---------------------------------------------------------------------------

    def default(self, editor: Editor, mutation: Mutation) -> list[str]:
        obj = editor.doc
        pretends = impersonation(obj)
        if pretends:
            raise Denied(pretends)
        gang = self.gang_name(obj, mutation.request_uid)
        pod_labels = labels(obj)
        if pod_labels.get(names.LWS_NAME_LABEL):
            return decorate_pod_template(editor, ROOT, mutation, gang=gang, gate=True)
        size = _declared_size(obj)
        group = pod_labels.get(names.POD_GROUP_LABEL)
        if owned_by_job(obj):
            if not group:
                raise Denied(_job_not_queued(obj))
            return decorate_pod_template(editor, ROOT, mutation, gang=gang, gate=False)
        if group and size is None:
            if of_gated_workload(obj):  # named on its managed owner's template
                return decorate_pod_template(editor, ROOT, mutation, gang=gang, gate=True)
            raise Denied(_missing_size(str(group)))
        if size is None:
            editor.merge(("metadata", "labels"), {names.POD_GROUP_TOTAL_COUNT_LABEL: "1"})
        return decorate_pod_template(editor, ROOT, mutation, gang=gang, gate=True)

    def keep_defaults(self, editor: Editor, old: JSONDict, mutation: Mutation) -> list[str]:
        # Scheduling gates can be removed from a pod but never added back.
        return []

    def unheld(self, obj: JSONDict) -> str | None:
        pretends = impersonation(obj)
        if pretends:
            return pretends
        pod_labels = labels(obj)
        group = pod_labels.get(names.POD_GROUP_LABEL)
        if owned_by_job(obj):
            # A managed Job's pods exist only once the Job is released.
            return None if group else _job_not_queued(obj)
        lws = pod_labels.get(names.LWS_NAME_LABEL)
        if lws and not group:
            # Its gang is its group's, named when the pod is made; a pod that missed that
            # would keep its whole group from ever being complete.
            return (
                f"a pod of LeaderWorkerSet {lws} must carry {names.POD_GROUP_LABEL} (its"
                f" group's gang), which kohort's mutating webhook adds when the pod is created,"
                f" from the {names.LWS_GROUP_INDEX_LABEL} label LeaderWorkerSet's own webhook"
                f" sets: kohort's webhook did not answer (the StatefulSet controller creates"
                f" the pod again), or that label is missing (is LeaderWorkerSet's webhook"
                f" running?)"
            )
        if not lws and _declared_size(obj) is None and not of_gated_workload(obj):
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
        # Pods of managed workloads belong to their owner's gang (an LWS pod whose
        # LeaderWorkerSet is not known yet waits for it). Pods made before the total
        # count existed are gangs of one when nothing owns them.
        if meta.labels.get(names.LWS_NAME_LABEL):
            return []
        if declared is None and meta.controller_owner() is not None:
            return []
        size = 1 if declared is None else group_size(declared)
        name = meta.labels.get(names.POD_GROUP_LABEL) or gang_name("pod", meta.name)
        template = kube.PodTemplate(spec=obj.spec)
        pods = pod_set("main", size, template)
        return [GangShape(name, size, (pods,), priority_classes(template))]

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


def alike(pod: kube.Pod) -> PodSet:
    """What a pod asks for, as one pod of a pod set: the pods of a plain group must be alike."""
    return pod_set("main", 1, kube.PodTemplate(spec=pod.spec))
