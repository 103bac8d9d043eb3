"""Releasing gangs on the resource flavors they were admitted on, against an API server in
memory: a released gang's pods carry their flavors' node labels and tolerations, an evicted Job
gets its own template back, and the record of an admission says (and, after a restart, charges)
the flavors it was given.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from controller.api import kinds, kube
from controller.api.times import format_time
from controller.workloads.base import Mutation, is_gated
from controller.workloads.edits import Editor
from controller.workloads.statefulset import StatefulSetAdapter
from hack.objects import condition, flavored_cluster_queue, resource_flavor
from tests.fakes.workloads import make_statefulset
from tests.unit.controller_world import NOW, World, held_job, start, workload

JSON = dict[str, Any]

GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
H100 = resource_flavor(
    "h100",
    node_labels={"gpu": "h100"},
    node_taints=[{"key": "gpu", "value": "h100", "effect": "NoSchedule"}],
    tolerations=[GPU_TOLERATION],
)
A100 = resource_flavor("a100", node_labels={"gpu": "a100"})


def job_in_zone(name: str, pods: int) -> JSON:
    """A held Job whose template asks for zone a itself."""
    job = held_job(name, pods)
    job["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "a"}
    return job


def template(world: World, name: str) -> JSON:
    job = world.api.read_back(kinds.JOBS, name, "ns")
    assert job is not None
    spec: JSON = job["spec"]["template"]["spec"]
    return spec


def reserved_on(job: JSON, flavor: str, *, queue: str = "cq") -> JSON:
    """The Workload of `job`, admitted on `flavor` for cpu (the record a controller wrote)."""
    pods = job["spec"]["parallelism"]
    record = workload(job, reserved=True)
    record["status"]["admission"]["clusterQueue"] = queue
    record["status"]["admission"]["podSetAssignments"] = [
        {
            "name": "main",
            "count": pods,
            "flavors": {"cpu": flavor},
            "resourceUsage": {"cpu": str(pods)},
        }
    ]
    return record


async def passes(world: World, n: int = 2) -> None:
    for _ in range(n):
        await world.reconciler.reconcile_once()
        await world.api.settle()


# -- Jobs ---------------------------------------------------------------------------------


async def test_a_job_admitted_on_flavor_h100_is_unsuspended_with_the_flavors_node_selector_and_toleration_in_its_template(  # noqa: E501
    started: list[World],
) -> None:
    world = await start(
        started,
        World(
            (kinds.RESOURCE_FLAVORS, H100),
            (kinds.CLUSTER_QUEUES, flavored_cluster_queue("cq", {"h100": {"cpu": "4"}})),
            (kinds.JOBS, job_in_zone("train", 2)),
        ),
    )

    await world.reconciler.reconcile_once()

    assert world.suspended("train") is False
    spec = template(world, "train")
    assert spec["nodeSelector"] == {"zone": "a", "gpu": "h100"}
    assert spec["tolerations"] == [GPU_TOLERATION]
    # One write unsuspends the Job and puts it on the flavor's nodes.
    assert [w for w in world.api.log if w[1].startswith("jobs")] == [("patch", "jobs", "train")]
    wl = world.workload("job-train")
    assert wl is not None
    [assignment] = wl["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"] == {"cpu": "h100"}
    [admitted] = [e for e in world.api.all(kinds.EVENTS) if e["reason"] == "Admitted"]
    assert "on flavor h100" in admitted["message"]


async def test_a_job_admitted_on_a_flavor_of_no_labels_keeps_its_template(
    started: list[World],
) -> None:
    world = await start(started, World((kinds.JOBS, job_in_zone("train", 2))))

    await world.reconciler.reconcile_once()

    assert world.suspended("train") is False
    assert template(world, "train")["nodeSelector"] == {"zone": "a"}
    job = world.api.read_back(kinds.JOBS, "train", "ns")
    assert job is not None and not job["metadata"].get("annotations")


async def test_an_evicted_job_gets_its_original_template_back(started: list[World]) -> None:
    world = await start(
        started,
        World(
            (kinds.RESOURCE_FLAVORS, H100),
            (kinds.CLUSTER_QUEUES, flavored_cluster_queue("cq", {"h100": {"cpu": "4"}})),
            (kinds.JOBS, job_in_zone("train", 2)),
        ),
    )
    await world.reconciler.reconcile_once()
    assert template(world, "train")["nodeSelector"] == {"zone": "a", "gpu": "h100"}
    job = world.api.read_back(kinds.JOBS, "train", "ns")
    assert job is not None
    job["status"] = {"startTime": format_time(NOW)}  # as the Job controller starts it
    # Resized beyond what its queue holds: evicted, and held from then on.
    job["spec"]["parallelism"] = job["spec"]["completions"] = 5
    world.api.put(kinds.JOBS, job)
    await world.api.settle()
    del world.api.log[:]

    await passes(world)

    assert world.suspended("train") is True
    spec = template(world, "train")
    assert spec["nodeSelector"] == {"zone": "a"}
    assert "tolerations" not in spec
    job = world.api.read_back(kinds.JOBS, "train", "ns")
    assert job is not None
    assert not job["metadata"].get("annotations")
    assert "startTime" not in job["status"]
    # Suspended first: Kubernetes lets a Job's template scheduling fields change only while it
    # is suspended and has no startTime.
    assert [w for w in world.api.log if w[1].startswith("jobs")] == [
        ("patch", "jobs", "train"),
        ("patch", "jobs/status", "train"),
        ("patch", "jobs", "train"),
    ]
    wl = world.workload("job-train")
    assert wl is not None and (condition(wl, "Evicted") or {}).get("status") == "True"


async def test_a_job_evicted_by_a_controller_that_stopped_half_way_gets_its_template_back(
    started: list[World],
) -> None:
    world = await start(
        started,
        World(
            (kinds.RESOURCE_FLAVORS, H100),
            (kinds.CLUSTER_QUEUES, flavored_cluster_queue("cq", {"h100": {"cpu": "4"}})),
            (kinds.JOBS, job_in_zone("train", 2)),
        ),
    )
    await world.reconciler.reconcile_once()
    released = world.api.read_back(kinds.JOBS, "train", "ns")
    assert released is not None

    # A new controller finds the Job suspended with the flavor's fields, and no quota held.
    restarted = copy.deepcopy(released)
    restarted["spec"]["suspend"] = True
    restarted["spec"]["parallelism"] = restarted["spec"]["completions"] = 9  # too big for cq
    after = await start(
        started,
        World(
            (kinds.RESOURCE_FLAVORS, H100),
            (kinds.CLUSTER_QUEUES, flavored_cluster_queue("cq", {"h100": {"cpu": "4"}})),
            (kinds.JOBS, restarted),
        ),
    )
    await passes(after)

    assert after.suspended("train") is True
    assert template(after, "train")["nodeSelector"] == {"zone": "a"}


async def test_a_job_admitted_again_on_another_flavor_gets_only_that_flavors_fields(
    started: list[World],
) -> None:
    queue = flavored_cluster_queue("cq", {"a100": {"cpu": "4"}, "h100": {"cpu": "4"}})
    job = job_in_zone("train", 2)
    # Released once on h100; its template was not given back before it was admitted again.
    job["metadata"].setdefault("annotations", {})["kohort.dev/template-before-flavors"] = (
        '{"nodeSelector":{"zone":"a"}}'
    )
    job["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "a", "gpu": "h100"}
    job["spec"]["template"]["spec"]["tolerations"] = [GPU_TOLERATION]
    world = await start(
        started,
        World(
            (kinds.RESOURCE_FLAVORS, A100),
            (kinds.RESOURCE_FLAVORS, H100),
            (kinds.CLUSTER_QUEUES, queue),
            (kinds.JOBS, job),
        ),
    )

    await world.reconciler.reconcile_once()

    wl = world.workload("job-train")
    assert wl is not None
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "a100"}
    spec = template(world, "train")
    assert spec["nodeSelector"] == {"zone": "a", "gpu": "a100"}
    assert "tolerations" not in spec


# -- gated pods ---------------------------------------------------------------------------


def held_statefulset(name: str, replicas: int) -> tuple[JSON, list[JSON]]:
    """A StatefulSet as kohort's webhook stores it, and its gated pods."""
    sts = make_statefulset(name, namespace="ns", queue="lq", replicas=replicas, memory=None)
    editor = Editor(sts)
    StatefulSetAdapter().default(editor, Mutation("lq"))
    sts = editor.doc
    sts["metadata"]["uid"] = f"uid-{name}"
    pods = []
    for i in range(replicas):
        tpl = copy.deepcopy(sts["spec"]["template"])
        tpl["metadata"]["name"] = f"{name}-{i}"
        tpl["metadata"]["namespace"] = "ns"
        tpl["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": name,
                "uid": f"uid-{name}",
                "controller": True,
            }
        ]
        pods.append({"apiVersion": "v1", "kind": "Pod", **tpl})
    return sts, pods


def pod(world: World, name: str) -> kube.Pod:
    found = world.api.read_back(kinds.PODS, name, "ns")
    assert found is not None
    return msgspec.convert(found, kube.Pod)


async def test_gated_statefulset_pods_get_the_flavors_node_selector_before_their_gate_is_removed(
    started: list[World],
) -> None:
    sts, pods = held_statefulset("serve", 2)
    world = await start(
        started,
        World(
            (kinds.RESOURCE_FLAVORS, H100),
            (kinds.CLUSTER_QUEUES, flavored_cluster_queue("cq", {"h100": {"cpu": "4"}})),
            (kinds.STATEFULSETS, sts),
            *((kinds.PODS, p) for p in pods),
        ),
    )

    await passes(world)

    for name in ("serve-0", "serve-1"):
        released = pod(world, name)
        assert not is_gated(released)
        assert released.spec.node_selector == {"gpu": "h100"}
        assert [(t.key, t.operator, t.effect) for t in released.spec.tolerations] == [
            ("gpu", "Exists", "NoSchedule")
        ]
        # The gate went in the same write that gave the pod its flavor's fields.
        assert world.api.log.count(("patch", "pods", name)) == 1


# -- the record -----------------------------------------------------------------------------


async def test_a_restarted_controller_charges_an_admitted_gang_to_the_flavor_in_its_record(
    started: list[World],
) -> None:
    queue = flavored_cluster_queue("cq", {"a100": {"cpu": "4"}, "h100": {"cpu": "4"}})
    running = held_job("running", 3)
    running["spec"]["suspend"] = False
    waiting = held_job("waiting", 4)
    world = await start(
        started,
        World(
            (kinds.RESOURCE_FLAVORS, A100),
            (kinds.RESOURCE_FLAVORS, H100),
            (kinds.CLUSTER_QUEUES, queue),
            (kinds.JOBS, running),
            (kinds.WORKLOADS, reserved_on(running, "h100")),
            (kinds.JOBS, waiting),
        ),
    )

    await passes(world)

    # Charged on h100 as recorded, `running` leaves a100 (the first flavor) whole for `waiting`.
    wl = world.workload("job-waiting")
    assert wl is not None
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "a100"}
    cq = world.api.read_back(kinds.CLUSTER_QUEUES, "cq")
    assert cq is not None
    usage = {f["name"]: f["resources"][0]["total"] for f in cq["status"]["flavorsUsage"]}
    assert usage == {"a100": "4", "h100": "3"}


async def test_a_gang_whose_flavor_object_was_deleted_is_not_released(
    started: list[World],
) -> None:
    job = held_job("train", 2)
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, flavored_cluster_queue("cq", {"h100": {"cpu": "4"}})),
            (kinds.JOBS, job),
            (kinds.WORKLOADS, reserved_on(job, "h100")),
        ),
    )

    await passes(world)

    assert world.suspended("train") is True
    wl = world.workload("job-train")
    assert wl is not None
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "True"
    assert wl["status"]["pendingReason"].startswith(
        "Admitted but not released: ResourceFlavor h100 does not exist"
    )
    warnings = [e for e in world.api.all(kinds.EVENTS) if e["reason"] == "FlavorNotFound"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
    assert not [w for w in world.api.log if w[1] == "podgroups"]

    world.api.put(kinds.RESOURCE_FLAVORS, H100)
    await world.api.settle()
    await passes(world)

    assert world.suspended("train") is False
    assert template(world, "train")["nodeSelector"] == {"gpu": "h100"}
    wl = world.workload("job-train")
    assert wl is not None and "pendingReason" not in wl["status"]


async def test_a_running_gang_whose_flavor_was_deleted_keeps_running_and_is_not_reported_held(
    started: list[World],
) -> None:
    # Released on h100 and running; the ResourceFlavor was deleted, then the controller started.
    job = held_job("train", 2)
    job["spec"]["suspend"] = False
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, flavored_cluster_queue("cq", {"h100": {"cpu": "4"}})),
            (kinds.JOBS, job),
            (kinds.WORKLOADS, reserved_on(job, "h100")),
        ),
    )

    await passes(world)

    assert world.suspended("train") is False
    wl = world.workload("job-train")
    assert wl is not None and "pendingReason" not in wl["status"]
    assert not [e for e in world.api.all(kinds.EVENTS) if e["reason"] == "FlavorNotFound"]
