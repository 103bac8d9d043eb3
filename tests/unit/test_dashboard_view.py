"""What the dashboard shows, from the objects the API server holds: the pure view."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from controller.api import kinds
from controller.api.kube import Node
from controller.api.queues import ClusterQueue, Cohort, LocalQueue
from controller.api.times import format_time
from controller.api.workload import Workload
from dashboard.live import Live, Stores
from dashboard.view import (
    GPU,
    PENDING_SHOWN,
    GpuSample,
    View,
    build_view,
    eviction_of,
    gpu_sample,
)
from hack.objects import cluster_queue, cohort, local_queue

T0 = 1_800_000_000.0
NO_GPUS = GpuSample(at=T0, allocated=0, held=0, idle=0)


def cq(name: str, quotas: dict[str, str], **options: Any) -> ClusterQueue:
    return ClusterQueue.model_validate(cluster_queue(name, quotas, **options))


def with_usage(queue: ClusterQueue, total: str, borrowed: str = "0") -> ClusterQueue:
    """The queue with its status reporting GPUs used (and borrowed) on flavor default."""
    resources = [{"name": GPU, "total": total, "borrowed": borrowed}]
    status = {"flavorsUsage": [{"name": "default", "resources": resources}]}
    return ClusterQueue.model_validate(
        {**queue.model_dump(by_alias=True, exclude_none=True), "status": status}
    )


def lq(namespace: str, name: str, target: str) -> LocalQueue:
    return LocalQueue.model_validate(local_queue(namespace, name, target))


def workload(
    name: str,
    *,
    queue: str = "team",
    namespace: str = "ns",
    pods: int = 4,
    gpus_per_pod: int = 8,
    priority: int = 0,
    created: float = T0,
    status: dict[str, Any] | None = None,
) -> Workload:
    return Workload.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": format_time(created),
            },
            "spec": {
                "queueName": queue,
                "priority": priority,
                "podSets": [{"count": pods, "requests": {GPU: str(gpus_per_pod)}}],
            },
            "status": status or {},
        }
    )


def condition(kind: str, status: bool, reason: str, at: float, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_time(at),
    }


def admitted(name: str, queue: str, gpus: int, *, at: float, running: bool) -> Workload:
    conditions = [condition("QuotaReserved", True, "QuotaReserved", at)]
    if running:
        conditions.append(condition("PodsReady", True, "Started", at + 5))
    status = {
        "conditions": conditions,
        "admission": {
            "clusterQueue": queue,
            "admittedAt": format_time(at),
            "podSetAssignments": [
                {"name": "main", "count": gpus // 8, "resourceUsage": {GPU: str(gpus)}}
            ],
        },
    }
    return workload(name, pods=gpus // 8, status=status)


def node(name: str, gpus: int, *, ready: bool = True) -> Node:
    return msgspec.convert(
        {
            "metadata": {"name": name},
            "status": {
                "allocatable": {GPU: str(gpus)},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        },
        Node,
    )


def view_of(
    queues: list[ClusterQueue],
    *,
    cohorts: tuple[Cohort, ...] = (),
    local_queues: tuple[LocalQueue, ...] = (),
    workloads: tuple[Workload, ...] = (),
) -> View:
    return build_view(
        cluster_queues=queues,
        cohorts=cohorts,
        local_queues=local_queues,
        workloads=workloads,
        gpus=NO_GPUS,
        now=T0,
    )


def test_a_queue_shows_its_usage_against_nominal_quota_and_borrowing_limit() -> None:
    queue = with_usage(
        cq("research", {GPU: "16"}, cohort="org", borrowing_limits={GPU: "8"}),
        "20",
        "4",
    )
    view = view_of([queue])
    (line,) = view.queues["research"].resources
    assert (line.flavor, line.resource) == ("default", GPU)
    assert (line.usage, line.nominal, line.borrowing_limit, line.borrowed) == (20, 16, 8, 4)
    assert line.lendable == 0


def test_a_queue_lends_what_it_does_not_use_up_to_its_lending_limit() -> None:
    idle = with_usage(
        cq("infra", {GPU: "32"}, cohort="org", lending_limits={GPU: "10"}),
        "8",
        "0",
    )
    quiet = with_usage(cq("quiet", {GPU: "32"}, cohort="org"), "8", "0")
    view = view_of([idle, quiet])
    assert view.queues["infra"].resources[0].lendable == 10
    assert view.queues["quiet"].resources[0].lendable == 24


def test_the_cohort_tree_nests_cohorts_and_their_queues_and_sums_what_is_borrowed() -> None:
    org = Cohort.model_validate(cohort("org"))
    lab = Cohort.model_validate(cohort("lab", parent="org"))
    queues = [
        with_usage(cq("a", {GPU: "8"}, cohort="lab"), "12", "4"),
        with_usage(cq("b", {GPU: "8"}, cohort="lab"), "10", "2"),
        cq("c", {GPU: "8"}, cohort="org"),
        cq("alone", {GPU: "8"}),
        cq("stray", {GPU: "8"}, cohort="implicit"),
    ]
    view = view_of(
        queues,
        cohorts=(
            org,
            lab,
        ),
    )
    assert view.roots == ["implicit", "org"]
    assert view.lone_queues == ["alone"]
    assert view.cohorts["org"].cohorts == ["lab"]
    assert view.cohorts["org"].queues == ["c"]
    assert view.cohorts["lab"].queues == ["a", "b"]
    assert view.cohorts["lab"].borrowed_by_queues == {GPU: 6}
    assert view.cohorts["implicit"].queues == ["stray"]


def test_pending_gangs_are_listed_in_the_order_their_queue_admits_them_with_reason() -> None:
    gangs = [
        workload("old", created=T0, status={"pendingReason": "needs 32 GPUs, 8 free"}),
        workload("new", created=T0 + 60),
        workload("urgent", created=T0 + 120, priority=10),
        workload("elsewhere", queue="other"),
    ]
    view = view_of(
        [cq("research", {GPU: "16"}), cq("infra", {GPU: "16"})],
        local_queues=(
            lq("ns", "team", "research"),
            lq("ns", "other", "infra"),
        ),
        workloads=tuple(gangs),
    )
    research = view.queues["research"]
    assert [g.name for g in research.pending_gangs] == ["urgent", "old", "new"]
    assert research.pending == 3
    assert research.pending_gangs[1].reason == "needs 32 GPUs, 8 free"
    assert research.pending_gangs[1].gpus == 32
    assert research.local_queues == ["ns/team"]
    assert [g.name for g in view.queues["infra"].pending_gangs] == ["elsewhere"]


def test_positions_and_forecasts_are_shown_only_when_the_status_carries_them() -> None:
    gangs = [
        workload("b", status={"positionInClusterQueue": 0, "forecast": "in 5m"}),
        workload("a", status={"positionInClusterQueue": 1}),
        workload("c", created=T0 - 60),
    ]
    view = view_of(
        [cq("research", {GPU: "16"})],
        local_queues=(lq("ns", "team", "research"),),
        workloads=tuple(gangs),
    )
    shown = view.queues["research"].pending_gangs
    assert [(g.name, g.position, g.forecast) for g in shown] == [
        ("b", 0, "in 5m"),
        ("a", 1, None),
        ("c", None, None),
    ]


def test_a_long_queue_lists_its_first_gangs_and_counts_the_rest() -> None:
    gangs = [workload(f"g{i:03}", created=T0 + i) for i in range(PENDING_SHOWN + 7)]
    view = view_of(
        [cq("research", {GPU: "16"})],
        local_queues=(lq("ns", "team", "research"),),
        workloads=tuple(gangs),
    )
    research = view.queues["research"]
    assert research.pending == PENDING_SHOWN + 7
    assert len(research.pending_gangs) == PENDING_SHOWN
    assert research.pending_gangs[0].name == "g000"


def test_admitted_and_finished_gangs_are_not_pending() -> None:
    finished = workload(
        "done", status={"conditions": [condition("Finished", True, "Succeeded", T0)]}
    )
    view = view_of(
        [cq("research", {GPU: "64"})],
        local_queues=(lq("ns", "team", "research"),),
        workloads=(
            admitted("running", "research", 16, at=T0, running=True),
            finished,
        ),
    )
    assert view.queues["research"].pending == 0
    assert view.queues["research"].admitted == 1


def test_gpus_of_gangs_whose_pods_do_not_all_run_are_held_not_allocated() -> None:
    workloads = [
        admitted("running", "q", 16, at=T0, running=True),
        admitted("partial", "q", 8, at=T0, running=False),
        workload("waiting"),
    ]
    nodes = [
        node("n1", 8),
        node("n2", 8),
        node("n3", 8),
        node("n4", 8),
        node("down", 8, ready=False),
    ]
    sample = gpu_sample(workloads, nodes, T0)
    assert (sample.allocated, sample.held, sample.idle) == (16, 8, 8)


def _evicted(before: Workload, at: float, preempted: str | None) -> Workload:
    conditions = [
        condition("Evicted", True, "Preempted" if preempted else "PodsReadyTimeout", at, "why"),
        condition("QuotaReserved", False, "Pending", at),
    ]
    if preempted:
        conditions.append(condition("Preempted", True, preempted, at))
    body = before.model_dump(by_alias=True, exclude_none=True)
    body["status"] = {"conditions": conditions, "pendingReason": "waiting again"}
    return Workload.model_validate(body)


@pytest.mark.parametrize(
    ("preempted", "kind", "cause"),
    [
        ("InCohortReclamation", "reclaim", "InCohortReclamation"),
        ("InClusterQueue", "preemption", "InClusterQueue"),
        (None, "eviction", "PodsReadyTimeout"),
    ],
)
def test_an_eviction_names_its_cause_and_the_gpu_work_thrown_away(
    preempted: str | None, kind: str, cause: str
) -> None:
    before = admitted("train", "research", 16, at=T0, running=True)
    eviction = eviction_of(before, _evicted(before, T0 + 600, preempted), T0 + 601)
    assert eviction is not None
    assert (eviction.kind, eviction.cause, eviction.cluster_queue) == (kind, cause, "research")
    assert eviction.gpu_seconds == 16 * 600
    assert eviction.at == T0 + 600


def test_changes_that_are_not_evictions_record_none() -> None:
    before = admitted("train", "research", 16, at=T0, running=False)
    after = admitted("train", "research", 16, at=T0, running=True)
    assert eviction_of(before, after, T0) is None
    assert eviction_of(None, after, T0) is None
    assert eviction_of(after, None, T0) is None


def test_the_live_view_keeps_evictions_and_a_bounded_gpu_history() -> None:
    now = [T0]
    workloads = {("ns", "train"): admitted("train", "research", 16, at=T0, running=True)}
    live = Live(
        Stores(workloads=workloads, nodes={("", "n"): node("n", 32)}),
        clock=lambda: now[0],
        hours=1,
        interval=600,
    )
    for _ in range(10):
        live.sample()
        now[0] += 600
    assert len(live.history) == 6
    before = workloads["ns", "train"]
    woken = live.wake
    live.changed(kinds.WORKLOADS, before, _evicted(before, now[0], "InCohortReclamation"))
    assert woken.is_set()
    version, body = live.rendered()
    page = msgspec.json.decode(body)
    assert version == live.version
    assert page["evictions"][0]["kind"] == "reclaim"
    assert len(page["gpu_history"]) == 6
    assert page["gpus"]["allocated"] == 16


def test_a_change_redraws_only_the_queue_it_touches() -> None:
    workloads = {("ns", "a"): workload("a"), ("other", "b"): workload("b", namespace="other")}
    live = Live(
        Stores(
            cluster_queues={
                ("", "research"): cq("research", {GPU: "8"}),
                ("", "infra"): cq("infra", {GPU: "8"}),
            },
            local_queues={
                ("ns", "team"): lq("ns", "team", "research"),
                ("other", "team"): lq("other", "team", "infra"),
            },
            workloads=workloads,
        ),
        clock=lambda: T0,
    )
    first = msgspec.json.decode(live.rendered()[1])["queue_versions"]
    workloads["ns", "a2"] = workload("a2")
    live.changed(kinds.WORKLOADS, None, workloads["ns", "a2"])
    page = msgspec.json.decode(live.rendered()[1])
    assert page["queue_versions"]["research"] == first["research"] + 1
    assert page["queue_versions"]["infra"] == first["infra"]
    assert page["queues"]["research"]["pending"] == 2
    assert page["queues"]["infra"]["pending"] == 1
