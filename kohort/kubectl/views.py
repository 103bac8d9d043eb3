"""What `kubectl kohort` shows, as plain data (for `-o json|yaml`) built from a World.

Rule: pure. Quantities are shown as Kubernetes writes them ("8", "500m"); shares as kohort's
status does (the weighted share, rounded up; -1: infinite).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from controller import quota
from controller.api.quantity import format_quantity
from controller.api.workload import Workload
from controller.quota.quota import QuotaNode, share
from kohort.kubectl.world import World, gang_id, gang_of, state_of, with_count

Data = dict[str, Any]
# How many admitted gangs `why` tries taking away one at a time.
MOST_SINGLE_FINISHES = 60


def _share(value: float) -> int:
    return math.ceil(value) if math.isfinite(value) else -1


def _usage(node: QuotaNode) -> list[Data]:
    rows: list[Data] = []
    for fr in sorted(set(node.quotas) | set(node.usage)):
        # A cohort's quota is its own and what its members lend it.
        own = node.quotas[fr].nominal if fr in node.quotas else 0
        nominal = own if node.spec is not None else node.subtree.get(fr, 0)
        used = node.usage.get(fr, 0)
        rows.append(
            {
                "flavor": fr[0],
                "resource": fr[1],
                "nominal": format_quantity(nominal),
                "usage": format_quantity(used),
                "borrowed": format_quantity(max(0, used - node.subtree.get(fr, 0))),
            }
        )
    return rows


def queues(world: World) -> list[Data]:
    """Each ClusterQueue: its cohort, counts, share, and per flavor and resource its nominal
    quota, usage and what of it is borrowed."""
    engine = world.engine()
    counts: dict[str, list[int]] = {}
    for gang in world.snapshot.pending:
        counts.setdefault(gang.queue, [0, 0])[0] += 1
    for admitted in world.snapshot.admitted:
        counts.setdefault(admitted.gang.queue, [0, 0])[1] += 1
    out: list[Data] = []
    for name in sorted(engine.queues):
        state = engine.queues[name].state
        pending, running = counts.get(name, [0, 0])
        out.append(
            {
                "name": name,
                "cohort": state.spec.cohort if state.spec else None,
                "pending": pending,
                "admitted": running,
                "share": _share(share(state)),
                "flavors": _usage(state),
            }
        )
    return out


def tree(world: World) -> list[Data]:
    """The cohort trees: each root with its cohorts and ClusterQueues below, with their usage
    and shares."""
    engine = world.engine()
    roots: dict[int, QuotaNode] = {}
    for runtime in engine.queues.values():
        root = runtime.state.root()
        roots.setdefault(id(root), root)

    def node(n: QuotaNode) -> Data:
        return {
            "name": n.name,
            "kind": "ClusterQueue" if n.spec is not None else "Cohort",
            "share": _share(share(n)),
            "flavors": _usage(n),
            "children": [node(c) for c in sorted(n.children, key=lambda c: c.name)],
        }

    return [node(r) for r in sorted(roots.values(), key=lambda r: r.name)]


def pending(world: World, cluster_queue: str | None, local: tuple[str, str] | None) -> list[Data]:
    """Pending Workloads in the order they will be considered, with their positions: of one
    ClusterQueue, of one LocalQueue (namespace, name), or all (by cohort position)."""
    found = world.positions()
    rows: list[Data] = []
    for name, at in found.items():
        wl = world.workloads[name]
        cq = world.queue_of(wl)
        if cluster_queue is not None and cq != cluster_queue:
            continue
        if local is not None and (wl.metadata.namespace, wl.spec.queue_name) != local:
            continue
        rows.append(
            {
                "namespace": wl.metadata.namespace,
                "name": wl.metadata.name,
                "localQueue": wl.spec.queue_name,
                "clusterQueue": cq,
                "priority": wl.spec.priority,
                "positionInClusterQueue": at.cluster_queue,
                "positionInLocalQueue": at.local_queue,
                "positionInCohort": at.cohort,
                "reason": wl.status.pending_reason if wl.status else None,
            }
        )
    key = "positionInLocalQueue" if local is not None else "positionInClusterQueue"
    if cluster_queue is None and local is None:
        key = "positionInCohort"
    return sorted(rows, key=lambda r: (r[key], r["clusterQueue"] or ""))


def find(world: World, namespace: str, ref: str) -> Workload | None:
    """The Workload of `ref` in `namespace`: a Workload's name, or the name of the object it
    records (KIND/NAME or NAME: a Job, a JobSet, ...), the newest if several."""
    kind, _, name = ref.rpartition("/")
    mine = [wl for wl in world.workloads.values() if wl.metadata.namespace == namespace]
    if not kind:
        direct = [wl for wl in mine if wl.metadata.name == name]
        if direct:
            return direct[0]
    owned = [
        wl
        for wl in mine
        for owner in wl.metadata.owner_references
        if owner.name == name and (not kind or owner.kind.lower() == kind.lower().rstrip("s"))
    ]
    return max(owned, key=lambda wl: wl.metadata.creation_timestamp or "", default=None)


def _admits(world: World, gang: quota.Gang, **engine: Any) -> quota.Admission | None:
    """Whether `gang`, alone in line, is admitted by one cycle now (with the engine's inputs
    changed as `engine` says); its admission if so."""
    decisions = world.engine(pending=[gang], **engine).cycle(world.now)
    return next((a for a in decisions.admissions if a.gang == gang.name), None)


def _fewer_pods(world: World, gang: quota.Gang) -> Data | None:
    """The most pods its largest pod set may have for the gang to be admitted now."""
    index = max(range(len(gang.pod_sets)), key=lambda i: gang.pod_sets[i].count)
    count = gang.pod_sets[index].count
    low, high, best = 1, count - 1, 0
    while low <= high:
        mid = (low + high) // 2
        if _admits(world, with_count(gang, index, mid)) is not None:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    if not best:
        return None
    return {"podSet": gang.pod_sets[index].name, "pods": best, "insteadOf": count}


def _flavors(world: World, gang: quota.Gang) -> list[Data]:
    """Each flavor of its ClusterQueue alone: admitted there now or why not."""
    specs = {q.name: q for q in world.snapshot.queues}
    spec = specs[gang.queue]
    out: list[Data] = []
    names = sorted({f.flavor for g in spec.resource_groups() for f in g.flavors})
    for flavor in names:
        groups = tuple(
            replace(g, flavors=tuple(f for f in g.flavors if f.flavor == flavor))
            for g in spec.resource_groups()
        )
        only = [replace(spec, groups=groups) if q.name == spec.name else q for q in specs.values()]
        engine = world.engine(pending=[gang], queues=only)
        decisions = engine.cycle(world.now)
        if any(a.gang == gang.name for a in decisions.admissions):
            out.append({"flavor": flavor, "admitted": True, "why": None})
        else:
            out.append(
                {"flavor": flavor, "admitted": False, "why": engine.reason(gang.name).describe()}
            )
    return out


def _same_tree(world: World, gang: quota.Gang) -> list[quota.AdmittedGang]:
    """Admitted gangs whose quota or nodes the gang could need: all of them, those of its
    cohort tree first, the most recently admitted first."""
    engine = world.engine()
    root = engine.queues[gang.queue].state.root()
    near = [
        a
        for a in world.snapshot.admitted
        if a.gang.queue in engine.queues and engine.queues[a.gang.queue].state.root() is root
    ]
    rest = [a for a in world.snapshot.admitted if a not in near]
    by_age = sorted(near, key=lambda a: -a.admitted_at) + sorted(rest, key=lambda a: -a.admitted_at)
    return by_age


def _finishing(world: World, gang: quota.Gang) -> Data | None:
    """Which running gangs must finish for it to be admitted now: one alone if one suffices
    (the smallest), else the fewest found by taking the most recently admitted first."""
    candidates = _same_tree(world, gang)
    alone: list[quota.AdmittedGang] = []
    for running in candidates[:MOST_SINGLE_FINISHES]:
        rest = [a for a in world.snapshot.admitted if a is not running]
        if _admits(world, gang, admitted=rest) is not None:
            alone.append(running)
    if alone:
        smallest = min(alone, key=lambda a: sum(p.count for p in a.gang.pod_sets))
        return {"anyOneOf": [a.gang.name for a in alone], "smallest": smallest.gang.name}
    gone: list[str] = []
    left = list(world.snapshot.admitted)
    for running in candidates:
        left = [a for a in left if a is not running]
        gone.append(running.gang.name)
        if _admits(world, gang, admitted=left) is not None:
            return {"allOf": gone}
    return None


def why(world: World, wl: Workload) -> Data:
    """Why a Workload waits: its reason, positions, what is ahead of it, its forecast (when its
    status carries one), and what change would have it admitted now."""
    status = wl.status
    name = gang_id(wl)
    cq = world.queue_of(wl)
    state = state_of(wl)
    out: Data = {
        "namespace": wl.metadata.namespace,
        "workload": wl.metadata.name,
        "owner": [f"{o.kind}/{o.name}" for o in wl.metadata.owner_references],
        "localQueue": wl.spec.queue_name,
        "clusterQueue": cq,
        "state": state,
        "reason": status.pending_reason if status else None,
        "forecast": _forecast(status.model_extra if status else None),
    }
    if state != "pending" or cq is None:
        return out
    found = world.positions()
    at = found.get(name)
    if at is not None:
        out["position"] = {
            "clusterQueue": at.cluster_queue,
            "localQueue": at.local_queue,
            "cohort": at.cohort,
        }
        ahead = sorted(
            (
                n
                for n, p in found.items()
                if p.cluster_queue < at.cluster_queue and world.queue_of(world.workloads[n]) == cq
            ),
            key=lambda n: found[n].cluster_queue,
        )
        out["ahead"] = [
            {
                "workload": n,
                "priority": world.workloads[n].spec.priority,
                "position": found[n].cluster_queue,
            }
            for n in ahead
        ]
    gang = gang_of(wl, cq)
    admission = _admits(world, gang)
    changes: Data = {}
    if admission is not None:
        changes["alone"] = {
            "admitted": True,
            "evicting": admission.evicted,
            "note": "it fits now: it waits for the gangs ahead of it",
        }
    else:
        changes["fewerPods"] = _fewer_pods(world, gang)
        changes["flavors"] = _flavors(world, gang)
        changes["finishing"] = _finishing(world, gang)
    out["wouldBeAdmittedNow"] = changes
    return out


def _forecast(extra: Mapping[str, Any] | None) -> Data | None:
    """Status fields of a forecast (another component may write them): any whose name speaks
    of a forecast or an estimated start."""
    if not extra:
        return None
    found = {k: v for k, v in extra.items() if "forecast" in k.lower() or "estimat" in k.lower()}
    return found or None
