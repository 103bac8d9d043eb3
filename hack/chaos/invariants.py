"""What must hold while faults strike: pure checks of one sampled snapshot of a namespace.

Rule: `problems(snapshot)` judges one instant. Safety problems (a queue over its limit, a gang
placed in part, an object that escaped the webhook) are violations the moment they are seen.
Consistency problems (a gang released but not yet charged, a PodGroup left behind) are normal
for the instant a write is under way; `Checker` makes them violations only when the same one
persists longer than its grace period.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from controller.api import names
from controller.api.conditions import WorkloadCondition
from controller.api.quantity import parse_quantity
from controller.workloads.edits import lookup
from hack.objects import condition, reserved

JSONDict = dict[str, Any]


class Check(enum.StrEnum):
    # Safety: never, not even for an instant.
    QUEUE_OVER_LIMIT = "queue over nominal + borrowing limit"
    COHORT_OVER_QUOTA = "cohort over its subtree's quota (+ its borrowing limit)"
    PARTLY_PLACED = "pods of a gang bound while others are held"
    ESCAPED = "a workload in a queue without kohort's gang fields"
    # Consistency: allowed while a write is under way, not longer than the grace period.
    NO_WORKLOAD = "a managed gang has no Workload"
    ORPHAN_WORKLOAD = "a Workload whose object is gone"
    DUPLICATE_WORKLOAD = "an object with more than one Workload"
    STRAY_PODGROUP = "a PodGroup of kohort's with no Workload"
    RELEASED_WITHOUT_QUOTA = "a gang released (or running) without quota"
    HELD_WITH_QUOTA = "a gang holds quota but is not released"
    PARTLY_RELEASED = "some pods of a gang released, others held"
    PODGROUP_WITHOUT_QUOTA = "a PodGroup for a gang that holds no quota"
    MISSING_PODGROUP = "an admitted gang without its PodGroup"
    DONE_WITH_QUOTA = "a gang done by its objects' say whose Workload still holds quota"

    @property
    def safety(self) -> bool:
        return self in SAFETY


SAFETY = frozenset(
    {Check.QUEUE_OVER_LIMIT, Check.COHORT_OVER_QUOTA, Check.PARTLY_PLACED, Check.ESCAPED}
)


@dataclass(frozen=True)
class Problem:
    check: Check
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check.value}: {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Snapshot:
    """One namespace's objects (and the run's ClusterQueues) as listed at one moment."""

    queues: Sequence[JSONDict] = ()
    workloads: Sequence[JSONDict] = ()
    jobs: Sequence[JSONDict] = ()
    statefulsets: Sequence[JSONDict] = ()
    pods: Sequence[JSONDict] = ()
    podgroups: Sequence[JSONDict] = ()
    cohorts: Sequence[JSONDict] = ()
    leader_worker_sets: Sequence[JSONDict] = ()


def holds_quota(workload: Mapping[str, Any] | None) -> bool:
    return reserved(workload)


def finished(workload: Mapping[str, Any] | None) -> bool:
    found = condition(workload, WorkloadCondition.FINISHED)
    return found is not None and found.get("status") == "True"


def evicted(workload: Mapping[str, Any] | None) -> bool:
    found = condition(workload, WorkloadCondition.EVICTED)
    return found is not None and found.get("status") == "True"


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return lookup(obj, ["metadata", "labels"]) or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(lookup(obj, ["metadata", "name"]) or "")


def _live(pod: Mapping[str, Any]) -> bool:
    return not lookup(pod, ["metadata", "deletionTimestamp"]) and lookup(
        pod, ["status", "phase"]
    ) not in ("Succeeded", "Failed")


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = lookup(pod, ["spec", "schedulingGates"]) or []
    return any(g.get("name") == names.ADMISSION_GATE for g in gates if isinstance(g, Mapping))


def _bound(pod: Mapping[str, Any]) -> bool:
    return bool(lookup(pod, ["spec", "nodeName"])) and _live(pod)


def usage_milli(workload: Mapping[str, Any]) -> dict[str, int]:
    """What an admitted Workload charges its queue: what its admission record says it charged,
    else each pod set's requests times its count."""
    total: dict[str, int] = defaultdict(int)
    assignments = lookup(workload, ["status", "admission", "podSetAssignments"]) or []
    charged = [a.get("resourceUsage") for a in assignments if a.get("resourceUsage")]
    if charged:
        for usage in charged:
            for resource, quantity in usage.items():
                total[resource] += parse_quantity(str(quantity))
        return dict(total)
    for pod_set in lookup(workload, ["spec", "podSets"]) or []:
        count = int(pod_set.get("count") or 0)
        for resource, quantity in (pod_set.get("requests") or {}).items():
            total[resource] += count * parse_quantity(str(quantity))
    return dict(total)


@dataclass
class _Limits:
    """One node of the quota tree (a ClusterQueue or a cohort), per (flavor, resource)."""

    parent: str | None = None
    nominal: dict[tuple[str, str], int] = field(default_factory=dict)
    borrowing: dict[tuple[str, str], int | None] = field(default_factory=dict)
    lending: dict[tuple[str, str], int | None] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    # resource -> the first flavor listing it (for records that name no flavor).
    first_flavor: dict[str, str] = field(default_factory=dict)


def _limits(obj: Mapping[str, Any], parent: str | None) -> _Limits:
    out = _Limits(parent)
    for group in lookup(obj, ["spec", "resourceGroups"]) or []:
        for flavor in group.get("flavors") or []:
            for entry in flavor.get("resources") or []:
                fr = (str(flavor["name"]), str(entry["name"]))
                out.first_flavor.setdefault(fr[1], fr[0])
                out.nominal[fr] = parse_quantity(str(entry["nominalQuota"]))
                for limits, key in (
                    (out.borrowing, "borrowingLimit"),
                    (out.lending, "lendingLimit"),
                ):
                    value = entry.get(key)
                    limits[fr] = None if value is None else parse_quantity(str(value))
    return out


def quota_tree(snapshot: Snapshot) -> dict[str, _Limits]:
    """The run's ClusterQueues and cohorts as a tree; a cohort named but not made has no quota
    of its own. A cohort in a cycle of parents is cut from its parent (nothing in it admits)."""
    nodes: dict[str, _Limits] = {}
    for cohort in snapshot.cohorts:
        parent = lookup(cohort, ["spec", "parent"])
        nodes[f"cohort/{_name(cohort)}"] = _limits(cohort, f"cohort/{parent}" if parent else None)
    for queue in snapshot.queues:
        cohort_name = lookup(queue, ["spec", "cohort"])
        parent = f"cohort/{cohort_name}" if cohort_name else None
        nodes[f"queue/{_name(queue)}"] = _limits(queue, parent)
    for name in list(nodes):
        seen = [name]
        current = nodes[name].parent
        while current is not None:
            if current in seen:
                nodes[name].parent = None
                break
            seen.append(current)
            nodes.setdefault(current, _Limits())
            current = nodes[current].parent
    for name, node in nodes.items():
        if node.parent is not None:
            nodes[node.parent].children.append(name)
    return nodes


def _subtree(nodes: Mapping[str, _Limits], name: str, fr: tuple[str, str]) -> int:
    node = nodes[name]
    return node.nominal.get(fr, 0) + sum(
        _subtree(nodes, child, fr) - _guaranteed(nodes, child, fr) for child in node.children
    )


def _guaranteed(nodes: Mapping[str, _Limits], name: str, fr: tuple[str, str]) -> int:
    lending = nodes[name].lending.get(fr)
    return 0 if lending is None else max(0, _subtree(nodes, name, fr) - lending)


def charged_milli(
    workload: Mapping[str, Any], first_flavor: Mapping[str, str]
) -> dict[tuple[str, str], int]:
    """What an admitted Workload charges its queue per (flavor, resource): its admission record's
    usage under the flavors it names (a resource with no flavor named: the queue's first flavor
    for it), else each pod set's requests times its count."""
    total: dict[tuple[str, str], int] = defaultdict(int)
    assignments = lookup(workload, ["status", "admission", "podSetAssignments"]) or []
    if any(a.get("resourceUsage") for a in assignments):
        for a in assignments:
            flavors = a.get("flavors") or {}
            for resource, quantity in (a.get("resourceUsage") or {}).items():
                flavor = flavors.get(resource) or first_flavor.get(resource, "")
                total[(str(flavor), str(resource))] += parse_quantity(str(quantity))
        return dict(total)
    for resource, milli in usage_milli(workload).items():
        total[(first_flavor.get(resource, ""), resource)] += milli
    return dict(total)


def _quota_problems(snapshot: Snapshot, done: Set[str] = frozenset()) -> Iterable[Problem]:
    """Every ClusterQueue, and every cohort at every level, within its subtree quota plus its
    borrowing limit (the root within its subtree quota), counted here from the objects alone.
    The gangs in `done` (finished by their own objects' say) are not charged: their quota is
    back as soon as their Job or pods say so, before their Workloads' Finished records land."""
    nodes = quota_tree(snapshot)
    usage: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    for wl in snapshot.workloads:
        queue = f"queue/{lookup(wl, ['status', 'admission', 'clusterQueue'])}"
        if holds_quota(wl) and queue in nodes and _name(wl) not in done:
            for fr, milli in charged_milli(wl, nodes[queue].first_flavor).items():
                usage[queue][fr] += milli

    def used(name: str, fr: tuple[str, str]) -> int:
        node = nodes[name]
        if name.startswith("queue/"):
            return usage[name].get(fr, 0)
        return sum(
            max(0, used(child, fr) - _guaranteed(nodes, child, fr)) for child in node.children
        )

    frs = {fr for per in usage.values() for fr in per}
    for name in sorted(nodes):
        node = nodes[name]
        kind, _, short = name.partition("/")
        for fr in sorted(frs):
            amount = used(name, fr)
            quota = _subtree(nodes, name, fr)
            borrow = node.borrowing.get(fr) if node.parent is not None else 0
            if borrow is None or amount <= quota + borrow:
                continue
            flavor, resource = fr
            of = f" of flavor {flavor}" if flavor else ""
            yield Problem(
                Check.QUEUE_OVER_LIMIT if kind == "queue" else Check.COHORT_OVER_QUOTA,
                short,
                f"{resource}{of} {amount / 1000:g} admitted > {quota / 1000:g} quota"
                f" + {borrow / 1000:g} borrowing limit",
            )


@dataclass
class _Gang:
    name: str
    owner: str  # "Job/x", "StatefulSet/x", "LeaderWorkerSet/x", "pod group x"
    owner_uids: set[str] = field(default_factory=set)
    released: bool | None = None  # Job: not suspended; None: judged by its pods' gates
    job_done: bool = False  # its Job's conditions say it is done
    pods: list[JSONDict] = field(default_factory=list)

    def done(self) -> bool:
        """Finished by its own objects' say: its Job met its success criteria or its failure
        target (or completed, or failed), or, a plain pod group, some of its pods have run
        and none of the others still runs."""
        if self.job_done:
            return True
        if not self.owner.startswith("pod group"):
            return False
        ran = any(lookup(p, ["status", "phase"]) in ("Succeeded", "Failed") for p in self.pods)
        return ran and not any(_live(p) and not _gated(p) for p in self.pods)


def _uid(obj: Mapping[str, Any]) -> str:
    return str(lookup(obj, ["metadata", "uid"]) or "")


def _controller(obj: Mapping[str, Any], field: str) -> str | None:
    """`field` ("uid", "kind") of the object's controller ownerReference, if it has one."""
    for owner in lookup(obj, ["metadata", "ownerReferences"]) or []:
        if owner.get("controller"):
            return str(owner.get(field))
    return None


# The Job conditions that end a Job's claim on its quota (the Job controller sets the first two
# before it is done with the pods' tracking finalizers, and Complete or Failed after that).
JOB_DONE = frozenset({"SuccessCriteriaMet", "FailureTarget", "Complete", "Failed"})


def _true_conditions(obj: Mapping[str, Any]) -> set[str]:
    found = lookup(obj, ["status", "conditions"]) or []
    return {str(c.get("type")) for c in found if c.get("status") == "True"}


def _gangs(snapshot: Snapshot) -> tuple[dict[str, _Gang], list[Problem], dict[str, int]]:
    """The managed gangs of the snapshot by gang name, the objects that escaped the webhook,
    and how many Workloads each managed object owns (one per gang)."""
    gangs: dict[str, _Gang] = {}
    escaped: list[Problem] = []
    per_owner: dict[str, int] = {}
    # A LeaderWorkerSet: one gang per group, its pods made by the StatefulSets it owns.
    for lws in snapshot.leader_worker_sets:
        if names.QUEUE_LABEL not in _labels(lws):
            continue
        replicas = lookup(lws, ["spec", "replicas"])
        groups = 1 if replicas is None else int(replicas)
        per_owner[_uid(lws)] = groups
        for i in range(groups):
            group = f"lws-{_name(lws)}-{i}"
            gangs[group] = _Gang(group, f"LeaderWorkerSet/{_name(lws)}", {_uid(lws)})
    lws_uids = set(per_owner)
    made_by_lws = {_uid(s) for s in snapshot.statefulsets if _controller(s, "uid") in lws_uids}
    for kind, objects in (("Job", snapshot.jobs), ("StatefulSet", snapshot.statefulsets)):
        for obj in objects:
            if names.QUEUE_LABEL not in _labels(obj) or _uid(obj) in made_by_lws:
                continue
            template = lookup(obj, ["spec", "template", "metadata", "labels"]) or {}
            gang = template.get(names.POD_GROUP_LABEL)
            if not gang:
                escaped.append(Problem(Check.ESCAPED, f"{kind}/{_name(obj)}", "no gang label"))
                continue
            entry = gangs.setdefault(str(gang), _Gang(str(gang), f"{kind}/{_name(obj)}"))
            entry.owner_uids.add(_uid(obj))
            per_owner[_uid(obj)] = 1
            if kind == "Job":
                entry.released = lookup(obj, ["spec", "suspend"]) is not True
                # (a JobSet's or RayJob's Jobs: their owner says when the gang is done)
                if _controller(obj, "kind") not in ("JobSet", "RayJob"):
                    entry.job_done = bool(_true_conditions(obj) & JOB_DONE)
    owners = {uid for gang in gangs.values() for uid in gang.owner_uids} | made_by_lws
    for pod in snapshot.pods:
        controller = _controller(pod, "uid")
        if controller is not None and controller not in owners:
            continue  # its Job or StatefulSet is gone: the garbage collector's business
        pod_labels = _labels(pod)
        gang = pod_labels.get(names.POD_GROUP_LABEL)
        if not gang:
            if names.QUEUE_LABEL in pod_labels:
                escaped.append(Problem(Check.ESCAPED, f"Pod/{_name(pod)}", "no gang label"))
            continue
        entry = gangs.setdefault(str(gang), _Gang(str(gang), f"pod group {gang}"))
        if not lookup(pod, ["metadata", "ownerReferences"]):
            entry.owner_uids.add(str(lookup(pod, ["metadata", "uid"]) or ""))
        entry.pods.append(pod)
    return gangs, escaped, per_owner


def problems(snapshot: Snapshot) -> list[Problem]:
    """Everything wrong with one snapshot, safety and consistency alike."""
    gangs, escaped, per_owner = _gangs(snapshot)
    found = list(_quota_problems(snapshot, {name for name, g in gangs.items() if g.done()}))
    found += escaped
    workloads = {_name(wl): wl for wl in snapshot.workloads}
    podgroups = {
        _name(pg)
        for pg in snapshot.podgroups
        if _labels(pg).get(names.MANAGED_LABEL) == names.MANAGED_VALUE
    }
    owner_uids = {uid for gang in gangs.values() for uid in gang.owner_uids}
    by_owner: dict[str, list[str]] = defaultdict(list)
    for wl in snapshot.workloads:
        owners = {str(o.get("uid")) for o in lookup(wl, ["metadata", "ownerReferences"]) or []}
        if owners and not owners & owner_uids and not finished(wl):
            found.append(Problem(Check.ORPHAN_WORKLOAD, _name(wl), "its owner is gone"))
        elif not owners and _name(wl) not in gangs and not finished(wl) and not evicted(wl):
            # (a plain pod group's Workload has no owner; kept only after an eviction)
            found.append(Problem(Check.ORPHAN_WORKLOAD, _name(wl), "no owner and no pods"))
        for uid in owners:
            by_owner[uid].append(_name(wl))
    for uid, several in by_owner.items():
        if len(several) > per_owner.get(uid, 1):
            found.append(Problem(Check.DUPLICATE_WORKLOAD, uid, ", ".join(sorted(several))))
    for name, gang in sorted(gangs.items()):
        found += _gang_problems(gang, workloads.get(name), name in podgroups)
    for name in sorted(podgroups - set(gangs)):
        left = workloads.get(name)
        if left is None:
            found.append(Problem(Check.STRAY_PODGROUP, name, "no Workload of that name"))
        elif not holds_quota(left) and not finished(left):
            found.append(Problem(Check.PODGROUP_WITHOUT_QUOTA, name, "gang has no object either"))
    return found


def _gang_problems(gang: _Gang, workload: JSONDict | None, has_podgroup: bool) -> list[Problem]:
    live = [p for p in gang.pods if _live(p)]
    gated = [p for p in live if _gated(p)]
    ungated = [p for p in live if not _gated(p)]
    bound = [p for p in live if _bound(p)]
    found: list[Problem] = []
    # A partial placement is a gang that was admitted and started in part. Without quota,
    # bound pods are an eviction still under way (RELEASED_WITHOUT_QUOTA below).
    if bound and gated and holds_quota(workload):
        found.append(
            Problem(
                Check.PARTLY_PLACED,
                gang.name,
                f"{len(bound)} pod(s) bound while {len(gated)} still gated",
            )
        )
    if gated and ungated:
        found.append(
            Problem(
                Check.PARTLY_RELEASED,
                gang.name,
                f"{len(ungated)} pod(s) released, {len(gated)} gated",
            )
        )
    if workload is None:
        if gang.owner_uids or live:
            found.append(Problem(Check.NO_WORKLOAD, gang.name, gang.owner))
        return found
    if finished(workload):
        return found
    if gang.done() and holds_quota(workload):
        # (not charged by the quota checks: its Finished record must follow within the grace)
        found.append(Problem(Check.DONE_WITH_QUOTA, gang.name, gang.owner))
    released = gang.released if gang.released is not None else bool(ungated)
    if holds_quota(workload):
        if not released and (gang.released is not None or gated):
            found.append(Problem(Check.HELD_WITH_QUOTA, gang.name, gang.owner))
        if not has_podgroup:
            found.append(Problem(Check.MISSING_PODGROUP, gang.name, gang.owner))
    else:
        if released or bound:
            found.append(
                Problem(
                    Check.RELEASED_WITHOUT_QUOTA,
                    gang.name,
                    f"{gang.owner}: {len(bound)} pod(s) bound",
                )
            )
        if has_podgroup:
            found.append(Problem(Check.PODGROUP_WITHOUT_QUOTA, gang.name, gang.owner))
    return found


@dataclass(frozen=True)
class Violation:
    problem: Problem
    first_seen: float
    last_seen: float

    def __str__(self) -> str:
        return f"{self.problem} (seen for {self.last_seen - self.first_seen:.1f}s)"


class Checker:
    """Feeds on snapshots; keeps the violations: every safety problem, and the consistency
    problems that persisted past `grace` seconds (measured between samples)."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.samples = 0
        self.last_problems: list[Problem] = []
        self._open: dict[tuple[Check, str], float] = {}
        self._violations: dict[tuple[Check, str], Violation] = {}

    def observe(self, snapshot: Snapshot, at: float) -> list[Problem]:
        """Judge one snapshot taken at `at`; its problems."""
        self.samples += 1
        found = problems(snapshot)
        current = {(p.check, p.subject): p for p in found}
        self._open = {key: since for key, since in self._open.items() if key in current}
        for key, problem in current.items():
            since = self._open.setdefault(key, at)
            if problem.check.safety or at - since > self.grace:
                self._violations[key] = Violation(problem, since, at)
        self.last_problems = found
        return found

    @property
    def violations(self) -> list[Violation]:
        return sorted(self._violations.values(), key=lambda v: v.first_seen)
