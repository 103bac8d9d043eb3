"""Gangs of a queue with a ProvisioningRequest check on an autoscaled flavor, against an API
server in memory: a gang that needs new nodes holds its quota and asks for them with one
ProvisioningRequest, is released only once it fits whole on real nodes, and a request that
fails gives the quota back and is made again after the check's backoff."""

from __future__ import annotations

from typing import Any

from controller.api import kinds
from controller.api.times import parse_time
from hack.objects import (
    condition,
    flavored_cluster_queue,
    local_queue,
    provisioning_check,
    resource_flavor,
)
from tests.unit.controller_world import NOW, World, held_job, passes, start

JSON = dict[str, Any]

POOL = {"pool": "gpu"}


def pool_flavor(max_nodes: int) -> JSON:
    return resource_flavor(
        "gpu-pool",
        node_labels=POOL,
        max_nodes=max_nodes,
        node_allocatable={"cpu": "8", "pods": "110"},
    )


def check(limit: int = 3, klass: str | None = None) -> JSON:
    settings: JSON = {"retryStrategy": {"backoffLimitCount": limit, "backoffBaseSeconds": 60}}
    if klass is not None:
        settings["provisioningClassName"] = klass
    return provisioning_check("provision", **settings)


def queue_with_check() -> JSON:
    return flavored_cluster_queue(
        "cq", {"gpu-pool": {"cpu": "32"}}, checks={"provision": ["gpu-pool"]}
    )


def node(name: str) -> JSON:
    return {
        "metadata": {"name": name, "labels": {**POOL, "kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def world(
    *extra: tuple[kinds.Kind, JSON],
    max_nodes: int = 4,
    limit: int = 3,
    klass: str | None = None,
    train: bool = True,
    **settings: Any,
) -> World:
    jobs = [(kinds.JOBS, held_job("train", 2, cpu="8"))] if train else []
    return World(
        (kinds.RESOURCE_FLAVORS, pool_flavor(max_nodes)),
        (kinds.ADMISSION_CHECKS, check(limit, klass)),
        (kinds.CLUSTER_QUEUES, queue_with_check()),
        (kinds.LOCAL_QUEUES, local_queue("ns", "lq", "cq")),
        *jobs,
        *extra,
        placement=True,
        **settings,
    )


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def requests(w: World) -> list[JSON]:
    return w.api.all(kinds.PROVISIONING_REQUESTS)


def set_condition(w: World, request: JSON, kind: str, message: str) -> None:
    request = dict(request)
    request["status"] = {
        "conditions": [{"type": kind, "status": "True", "reason": kind, "message": message}]
    }
    w.api.put(kinds.PROVISIONING_REQUESTS, request)


def check_state(w: World) -> JSON:
    wl = w.workload("job-train")
    assert wl is not None
    [state] = wl["status"]["admissionChecks"]
    return dict(state)


async def test_a_gang_that_needs_new_nodes_holds_its_quota_and_asks_for_them_once(
    started: list[World],
) -> None:
    w = await start(started, world())
    await passes(w, 3)

    assert w.suspended("train") is True  # nothing runs before its nodes exist
    wl = w.workload("job-train")
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "True"
    admitted = condition(wl, "Admitted") or {}
    assert (admitted.get("status"), admitted.get("reason")) == ("False", "Provisioning")
    [request] = requests(w)
    assert request["metadata"]["name"] == "job-train-provision-1"
    assert request["spec"]["provisioningClassName"] == (
        "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    )
    [pod_set] = request["spec"]["podSets"]
    assert pod_set["count"] == 2
    [template] = w.api.all(kinds.POD_TEMPLATES)
    assert template["metadata"]["name"] == pod_set["podTemplateRef"]["name"]
    spec = template["template"]["spec"]
    assert spec["nodeSelector"] == POOL
    assert spec["containers"][0]["resources"]["requests"] == {"cpu": "8"}
    state = check_state(w)
    assert (state["name"], state["state"], state["request"]) == (
        "provision",
        "Pending",
        "job-train-provision-1",
    )
    assert "2 new node(s)" in (wl or {})["status"]["pendingReason"]

    await passes(w, 2)
    assert len(requests(w)) == 1  # asked once


async def test_the_gang_is_released_pinned_to_the_new_nodes_once_they_exist(
    started: list[World],
) -> None:
    w = await start(started, world())
    await passes(w, 3)
    [request] = requests(w)

    w.api.put(kinds.NODES, node("gpu-aaaaa"))
    await passes(w, 1)
    assert w.suspended("train") is True  # one of two nodes: it never starts on part of them
    w.api.put(kinds.NODES, node("gpu-bbbbb"))
    set_condition(w, request, "Provisioned", "2 nodes added")
    await passes(w, 2)

    assert w.suspended("train") is False
    wl = w.workload("job-train")
    assert (condition(wl, "Admitted") or {}).get("status") == "True"
    [assignment] = (wl or {})["status"]["admission"]["podSetAssignments"]
    assert sorted(n["node"] for n in assignment["nodes"]) == ["gpu-aaaaa", "gpu-bbbbb"]
    assert check_state(w)["state"] == "Ready"


async def test_a_failed_request_gives_the_quota_back_and_is_made_again_after_the_backoff(
    started: list[World],
) -> None:
    w = await start(started, world())
    await passes(w, 3)
    [request] = requests(w)

    set_condition(w, request, "Failed", "max size of node group gpu reached")
    await passes(w, 2)
    templates = w.api.all(kinds.POD_TEMPLATES)

    wl = w.workload("job-train")
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "False"
    assert (condition(wl, "Evicted") or {}).get("reason") == "AdmissionCheck"
    state = check_state(w)
    assert (state["state"], state["retryCount"]) == ("Retry", 1)
    assert "max size of node group gpu reached" in state["message"]
    requeue_at = parse_time((wl or {})["status"]["requeueState"]["requeueAt"])
    assert requeue_at is not None and requeue_at >= NOW + 60
    assert requests(w) == [] and templates == []  # the failed request is deleted, and its templates
    cq = w.api.read_back(kinds.CLUSTER_QUEUES, "cq")
    used = [
        r["total"]
        for f in (cq or {}).get("status", {}).get("flavorsUsage", [])
        for r in f["resources"]
    ]
    assert set(used) <= {"0"}


async def test_a_gang_that_fits_on_nodes_that_exist_is_released_without_a_request(
    started: list[World],
) -> None:
    w = await start(started, world((kinds.NODES, node("n1")), (kinds.NODES, node("n2"))))
    await passes(w, 2)

    assert w.suspended("train") is False
    assert requests(w) == []


async def test_a_gang_larger_than_the_pool_can_ever_be_is_told_so_and_asks_for_nothing(
    started: list[World],
) -> None:
    w = await start(started, world(max_nodes=1))
    await passes(w, 2)

    wl = w.workload("job-train")
    assert w.suspended("train") is True
    assert (condition(wl, "QuotaReserved") or {}).get("status") != "True"
    assert requests(w) == []
    reason = (wl or {})["status"].get("pendingReason", "")
    assert reason.startswith("Inadmissible")
    assert "flavor gpu-pool grows to 1 node(s) at most" in reason


async def test_a_controller_that_starts_over_keeps_the_nodes_a_waiting_gang_counts_on(
    started: list[World],
) -> None:
    w = await start(started, world(max_nodes=3, train=False))
    w.api.put(kinds.JOBS, held_job("first", 1, cpu="8"))
    await passes(w, 2)
    w.api.put(kinds.JOBS, held_job("train", 2, cpu="8"))
    await passes(w, 2)
    [mine] = (w.workload("job-train") or {})["status"]["admission"]["podSetAssignments"]
    held = sorted(n["node"] for n in mine["nodes"])
    assert held == ["~new-gpu-pool-1", "~new-gpu-pool-2"]  # (first took ~new-gpu-pool-0)
    await w.api.delete(kinds.JOBS, "first", "ns")
    w.api.put(kinds.NODES, node("gpu-aaaaa"))  # one node came (first's, now free)
    await passes(w, 2)

    w.state.reset()  # as a new leader would: the engine rebuilt from the records
    w.api.put(kinds.JOBS, held_job("late", 2, cpu="8"))
    await passes(w, 3)

    # The pool (3 nodes, 1 there) has no node left to add for `late`: train counts on both.
    late = w.workload("job-late")
    assert (condition(late, "QuotaReserved") or {}).get("status") != "True"
    assert not [r for r in requests(w) if "late" in r["metadata"]["name"]]
    assert check_state(w)["request"] == "job-train-provision-1"


async def test_a_gang_that_moves_onto_real_nodes_frees_only_what_the_pool_can_still_add(
    started: list[World],
) -> None:
    w = await start(started, world(max_nodes=2))
    await passes(w, 3)
    [request] = requests(w)
    w.api.put(kinds.NODES, node("gpu-aaaaa"))
    w.api.put(kinds.NODES, node("gpu-bbbbb"))
    set_condition(w, request, "Provisioned", "2 nodes added")
    w.api.put(kinds.JOBS, held_job("next", 1, cpu="8"))
    await passes(w, 3)

    assert w.suspended("train") is False
    # The pool is at its 2 nodes, both train's: nothing left to promise the next gang.
    nxt = w.workload("job-next")
    assert (condition(nxt, "QuotaReserved") or {}).get("status") != "True"
    assert len(requests(w)) == 1


async def test_a_gang_waiting_for_nodes_is_not_timed_out_for_pods_that_cannot_start_yet(
    started: list[World],
) -> None:
    clock = Clock()
    w = await start(started, world(pods_ready_timeout=60.0, clock=clock))
    await passes(w, 3)
    clock.now += 600
    await passes(w, 2)

    wl = w.workload("job-train")
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "True"
    assert (condition(wl, "Evicted") or {}).get("status") != "True"


async def test_after_the_backoff_a_new_request_is_made(started: list[World]) -> None:
    clock = Clock()
    w = await start(started, world(clock=clock))
    await passes(w, 3)
    [request] = requests(w)
    set_condition(w, request, "BookingExpired", "booking expired")
    await passes(w, 2)
    assert check_state(w)["state"] == "Retry"

    clock.now += 61
    await passes(w, 4)

    assert [r["metadata"]["name"] for r in requests(w)] == ["job-train-provision-2"]
    state = check_state(w)
    assert (state["state"], state["retryCount"], state["attempts"]) == ("Pending", 1, 2)


async def test_out_of_retries_the_check_rejects_and_the_gang_waits_for_nodes_that_exist(
    started: list[World],
) -> None:
    clock = Clock()
    w = await start(started, world(limit=0, clock=clock))
    await passes(w, 3)
    [request] = requests(w)
    set_condition(w, request, "Failed", "out of capacity")
    await passes(w, 2)
    clock.now += 3600
    await passes(w, 3)

    assert check_state(w)["state"] == "Rejected"
    assert requests(w) == []  # no new request
    wl = w.workload("job-train")
    assert (condition(wl, "QuotaReserved") or {}).get("status") != "True"

    w.api.put(kinds.NODES, node("n1"))
    w.api.put(kinds.NODES, node("n2"))
    await passes(w, 2)
    assert w.suspended("train") is False  # admitted once nodes that exist can take it


async def test_a_request_the_api_server_refuses_sends_the_gang_back_saying_why(
    started: list[World],
) -> None:
    w = await start(started, world())
    w.api.failing[("create", "provisioningrequests")] = 403
    await passes(w, 4)

    wl = w.workload("job-train")
    state = check_state(w)
    assert state["state"] == "Retry"
    assert "refused" in state["message"] and "403" in state["message"]
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "False"


async def test_a_gang_whose_check_is_deleted_gives_its_quota_back(started: list[World]) -> None:
    w = await start(started, world())
    await passes(w, 3)
    await w.api.delete(kinds.ADMISSION_CHECKS, "provision")
    await passes(w, 2)

    wl = w.workload("job-train")
    assert (condition(wl, "Evicted") or {}).get("reason") == "AdmissionCheck"
    assert (condition(wl, "QuotaReserved") or {}).get("status") != "True"


async def test_a_gang_resized_while_it_waits_gives_up_its_request(started: list[World]) -> None:
    w = await start(started, world())
    await passes(w, 3)
    assert len(requests(w)) == 1
    job = w.api.read_back(kinds.JOBS, "train", "ns")
    assert job is not None
    job["spec"]["parallelism"] = job["spec"]["completions"] = 3
    w.api.put(kinds.JOBS, job)
    await passes(w, 4)

    names_ = [r["metadata"]["name"] for r in requests(w)]
    assert "job-train-provision-1" not in names_  # asked for 2 pods: given up
    assert names_ == ["job-train-provision-2"]  # the new size's request


async def test_a_check_capacity_check_counts_no_new_nodes(started: list[World]) -> None:
    w = await start(started, world(klass="check-capacity.autoscaling.x-k8s.io"))
    await passes(w, 2)

    wl = w.workload("job-train")
    assert (condition(wl, "QuotaReserved") or {}).get("status") != "True"
    assert requests(w) == []
