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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.api import names
from controller.api.conditions import WorkloadCondition
from controller.api.quantity import parse_quantity
from controller.cluster.testing import condition, reserved
from controller.workloads.edits import lookup

JSONDict = dict[str, Any]


class Check(enum.StrEnum):
    # Safety: never, not even for an instant.
    QUEUE_OVER_LIMIT = "queue over nominal + borrowing limit"
    COHORT_OVER_QUOTA = "cohort over its queues' nominal quota"
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


@dataclass(frozen=True)
class QueueLimits:
    cohort: str | None
    nominal: Mapping[str, int]
    borrowing: Mapping[str, int | None]


def queue_limits(queue: Mapping[str, Any]) -> QueueLimits:
    nominal: dict[str, int] = defaultdict(int)
    borrowing: dict[str, int | None] = {}
    for group in lookup(queue, ["spec", "resourceGroups"]) or []:
        for flavor in group.get("flavors") or []:
            for entry in flavor.get("resources") or []:
                resource = str(entry["name"])
                nominal[resource] += parse_quantity(str(entry["nominalQuota"]))
                limit = entry.get("borrowingLimit")
                if limit is None:
                    borrowing[resource] = None
                elif borrowing.get(resource, 0) is not None:
                    borrowing[resource] = (borrowing.get(resource) or 0) + parse_quantity(
                        str(limit)
                    )
    cohort = lookup(queue, ["spec", "cohort"])
    return QueueLimits(str(cohort) if cohort else None, dict(nominal), borrowing)


def _quota_problems(snapshot: Snapshot) -> Iterable[Problem]:
    limits = {_name(q): queue_limits(q) for q in snapshot.queues}
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for wl in snapshot.workloads:
        queue = lookup(wl, ["status", "admission", "clusterQueue"])
        if holds_quota(wl) and queue in limits:
            for resource, milli in usage_milli(wl).items():
                used[str(queue)][resource] += milli
    cohorts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    cohort_nominal: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, limit in limits.items():
        for resource, nominal in limit.nominal.items():
            if limit.cohort:
                cohort_nominal[limit.cohort][resource] += nominal
        for resource, milli in used[name].items():
            cap = limit.nominal.get(resource, 0)
            borrow = limit.borrowing.get(resource, 0)
            if limit.cohort is None:
                borrow = 0
            if borrow is not None and milli > cap + borrow:
                yield Problem(
                    Check.QUEUE_OVER_LIMIT,
                    name,
                    f"{resource} {milli / 1000:g} admitted > {cap / 1000:g} nominal"
                    f" + {borrow / 1000:g} borrowing limit",
                )
            if limit.cohort:
                cohorts[limit.cohort][resource] += milli
    for cohort, resources in cohorts.items():
        for resource, milli in resources.items():
            if milli > cohort_nominal[cohort][resource]:
                yield Problem(
                    Check.COHORT_OVER_QUOTA,
                    cohort,
                    f"{resource} {milli / 1000:g} admitted >"
                    f" {cohort_nominal[cohort][resource] / 1000:g} nominal in the cohort",
                )


@dataclass
class _Gang:
    name: str
    owner: str  # "Job/x", "StatefulSet/x", "pod group x"
    owner_uids: set[str] = field(default_factory=set)
    released: bool | None = None  # Job: not suspended; None: judged by its pods' gates
    pods: list[JSONDict] = field(default_factory=list)


def _gangs(snapshot: Snapshot) -> tuple[dict[str, _Gang], list[Problem]]:
    """The managed gangs of the snapshot by gang name, and the objects that escaped the webhook."""
    gangs: dict[str, _Gang] = {}
    escaped: list[Problem] = []
    for kind, objects in (("Job", snapshot.jobs), ("StatefulSet", snapshot.statefulsets)):
        for obj in objects:
            if names.QUEUE_LABEL not in _labels(obj):
                continue
            template = lookup(obj, ["spec", "template", "metadata", "labels"]) or {}
            gang = template.get(names.POD_GROUP_LABEL)
            if not gang:
                escaped.append(Problem(Check.ESCAPED, f"{kind}/{_name(obj)}", "no gang label"))
                continue
            entry = gangs.setdefault(str(gang), _Gang(str(gang), f"{kind}/{_name(obj)}"))
            entry.owner_uids.add(str(lookup(obj, ["metadata", "uid"]) or ""))
            if kind == "Job":
                entry.released = lookup(obj, ["spec", "suspend"]) is not True
    owners = {uid for gang in gangs.values() for uid in gang.owner_uids}
    for pod in snapshot.pods:
        controller = [
            str(o.get("uid"))
            for o in lookup(pod, ["metadata", "ownerReferences"]) or []
            if o.get("controller")
        ]
        if controller and controller[0] not in owners:
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
    return gangs, escaped


def problems(snapshot: Snapshot) -> list[Problem]:
    """Everything wrong with one snapshot, safety and consistency alike."""
    found = list(_quota_problems(snapshot))
    gangs, escaped = _gangs(snapshot)
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
        if len(several) > 1:
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
