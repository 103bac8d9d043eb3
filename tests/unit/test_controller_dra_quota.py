"""GPUs claimed through Dynamic Resource Allocation are charged to the gang's queue, against an
API server in memory: the controller maps DeviceClass gpu.example.com to nvidia.com/gpu, so a
DRA gang and an extended-resource gang share one GPU quota, and a gang whose devices cannot be
counted waits, saying why."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import kinds
from hack.objects import (
    GPU,
    claim_template,
    claims_from,
    cluster_queue,
    condition,
    pending_reason,
)
from tests.unit.controller_world import World, held_job, passes, queue_used, start, workload

JSON = dict[str, Any]
CLASSES = {"gpu.example.com": GPU}


def in_ns(obj: JSON) -> JSON:
    obj["metadata"]["namespace"] = "ns"
    return obj


def two_gpus() -> JSON:
    return in_ns(claim_template("two-gpus", "gpu.example.com", 2))


def dra_job(name: str, pods: int, *templates: str) -> JSON:
    """A held Job whose every pod gets its own claim from each of `templates`."""
    job = held_job(name, pods)
    job["spec"]["template"]["spec"].update(claims_from(*templates))
    return job


def gpu_job(name: str, pods: int, gpus: str) -> JSON:
    """A held Job whose pods ask for the extended resource nvidia.com/gpu."""
    job = held_job(name, pods)
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    resources.setdefault("limits", {})[GPU] = gpus
    return job


def gpu_queue(gpus: str) -> JSON:
    return cluster_queue("cq", {"cpu": "64", GPU: gpus})


def gpus_used(world: World) -> str | None:
    return queue_used(world, GPU)


async def waits_alone(started: list[World], template: JSON) -> str:
    """The pending reason of a 1-pod Job claiming from `template`, alone in a queue of 8 GPUs
    (it must still be held)."""
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, gpu_queue("8")),
            (kinds.RESOURCE_CLAIM_TEMPLATES, in_ns(template)),
            (kinds.JOBS, dra_job("lone", 1, template["metadata"]["name"])),
            device_classes=CLASSES,
        ),
    )
    await passes(world)
    assert world.suspended("lone") is True
    return pending_reason(world.workload("job-lone"))


async def gpu_world(started: list[World], gpus: str, *objects: tuple[kinds.Kind, JSON]) -> World:
    """A queue of `gpus` GPUs, the template `two-gpus`, `objects`, after two passes."""
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, gpu_queue(gpus)),
            (kinds.RESOURCE_CLAIM_TEMPLATES, two_gpus()),
            *objects,
            device_classes=CLASSES,
        ),
    )
    await passes(world)
    return world


async def put(world: World, kind: kinds.Kind, *objects: JSON) -> None:
    """`objects` written to the API server, and the controller's passes after."""
    for obj in objects:
        world.api.put(kind, obj)
    await world.api.settle()
    await passes(world)


def usage(world: World, name: str) -> dict[str, str]:
    admitted = world.workload(name)
    assigned = admitted["status"]["admission"]["podSetAssignments"][0] if admitted else {}
    return dict(assigned.get("resourceUsage", {}))


async def test_a_gang_of_4_pods_each_claiming_2_gpus_is_charged_8_and_fills_its_queue(
    started: list[World],
) -> None:
    world = await gpu_world(
        started,
        "8",
        (kinds.JOBS, dra_job("first", 4, "two-gpus")),
        (kinds.JOBS, dra_job("second", 1, "two-gpus")),
    )

    assert world.suspended("first") is False
    assert usage(world, "job-first") == {"cpu": "4", GPU: "8"}
    assert world.suspended("second") is True
    assert f"needs 2 {GPU}, queue can take 0 more" in pending_reason(world.workload("job-second"))
    assert gpus_used(world) == "8"


async def test_a_gang_of_4_pods_claiming_2_gpus_each_waits_in_a_queue_of_7(
    started: list[World],
) -> None:
    world = await gpu_world(
        started,
        "7",
        (kinds.JOBS, dra_job("big", 4, "two-gpus")),
    )

    assert world.suspended("big") is True
    assert f"needs 8 {GPU}" in pending_reason(world.workload("job-big"))


async def test_an_extended_resource_gang_and_a_dra_gang_share_one_queues_gpus(
    started: list[World],
) -> None:
    world = await gpu_world(
        started,
        "8",
        (kinds.JOBS, gpu_job("extended", 4, "1")),
        (kinds.JOBS, dra_job("dra", 2, "two-gpus")),
        (kinds.JOBS, dra_job("third", 1, "two-gpus")),
    )

    assert world.suspended("extended") is False
    assert world.suspended("dra") is False
    assert usage(world, "job-extended")[GPU] == "4"
    assert usage(world, "job-dra")[GPU] == "4"
    assert world.suspended("third") is True
    assert gpus_used(world) == "8"


async def test_claims_from_two_templates_and_container_gpus_add_up_per_pod(
    started: list[World],
) -> None:
    one = in_ns(claim_template("one-gpu", "gpu.example.com", 1))
    job = gpu_job("mixed", 2, "1")
    job["spec"]["template"]["spec"].update(claims_from("two-gpus", "one-gpu"))
    world = await gpu_world(
        started,
        "8",
        (kinds.RESOURCE_CLAIM_TEMPLATES, one),
        (kinds.JOBS, job),
    )

    assert world.suspended("mixed") is False
    assert usage(world, "job-mixed")[GPU] == "8"  # 2 pods x (1 + 2 + 1)


async def test_a_gang_whose_claim_template_is_missing_waits_until_it_appears(
    started: list[World],
) -> None:
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, gpu_queue("8")),
            (kinds.JOBS, dra_job("early", 4, "two-gpus")),
            device_classes=CLASSES,
        ),
    )

    await passes(world)

    assert world.suspended("early") is True
    reason = pending_reason(world.workload("job-early"))
    assert "the devices its pods claim cannot be charged" in reason
    assert "ResourceClaimTemplate two-gpus (pod set main) not found" in reason
    assert gpus_used(world) in (None, "0")

    await put(world, kinds.RESOURCE_CLAIM_TEMPLATES, two_gpus())

    assert world.suspended("early") is False
    assert usage(world, "job-early")[GPU] == "8"


async def test_a_device_class_without_a_quota_resource_keeps_its_gang_waiting_naming_the_flag(
    started: list[World],
) -> None:
    reason = await waits_alone(started, claim_template("nics", "nic.example.com", 1))
    assert "DeviceClass nic.example.com (ResourceClaimTemplate nics)" in reason
    assert "--device-class nic.example.com=RESOURCE" in reason


def all_gpus() -> JSON:
    return in_ns(claim_template("all-gpus", "gpu.example.com", allocation_mode="All"))


def admitted_running(pods: int, template: str, gpus: int) -> tuple[JSON, JSON]:
    """A running Job `running` of `pods` pods claiming from `template`, and its Workload as a
    controller wrote it at admission: each pod charged `gpus` GPUs."""
    running = dra_job("running", pods, template)
    running["spec"]["suspend"] = False
    record = workload(running, reserved=True)
    record["spec"]["podSets"][0]["requests"] = {"cpu": "1", GPU: str(gpus)}
    record["status"]["admission"]["podSetAssignments"] = [
        {
            "name": "main",
            "count": pods,
            "flavors": {"cpu": "default", GPU: "default"},
            "resourceUsage": {"cpu": str(pods), GPU: str(pods * gpus)},
        }
    ]
    return running, record


async def test_a_claim_for_all_of_a_nodes_devices_waits_while_no_node_is_known_to_have_any(
    started: list[World],
) -> None:
    reason = await waits_alone(started, all_gpus())
    assert "asks for all devices of DeviceClass gpu.example.com" in reason
    assert "no node has any that kohort can count" in reason


async def test_an_admitted_dra_gang_keeps_its_charge_when_its_template_is_deleted(
    started: list[World],
) -> None:
    running, record = admitted_running(4, "two-gpus", 2)
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, gpu_queue("8")),
            (kinds.RESOURCE_CLAIM_TEMPLATES, two_gpus()),
            (kinds.JOBS, running),
            (kinds.WORKLOADS, record),
            (kinds.JOBS, dra_job("next", 1, "two-gpus")),
            device_classes=CLASSES,
        ),
    )
    await passes(world)
    assert gpus_used(world) == "8"

    await world.api.delete(kinds.RESOURCE_CLAIM_TEMPLATES, "two-gpus", "ns")
    await world.api.settle()
    await passes(world)

    assert world.suspended("running") is False
    assert (condition(world.workload("job-running"), "Evicted") or {}).get("status") != "True"
    assert gpus_used(world) == "8"
    assert world.suspended("next") is True


# -- with the placement check: free devices per node, from ResourceSlices ---------------------

DRIVER_IS = 'device.driver == "gpu.example.com"'


def ready_node(name: str) -> JSON:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def gpu_slice(node: str, devices: int) -> JSON:
    return {
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def gpu_class(expression: str = DRIVER_IS) -> JSON:
    return {
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def nodes_of_4_gpus(*names: str) -> list[tuple[kinds.Kind, JSON]]:
    return [
        *((kinds.NODES, ready_node(n)) for n in names),
        *((kinds.RESOURCE_SLICES, gpu_slice(n, 4)) for n in names),
    ]


async def placed_world(started: list[World], *objects: tuple[kinds.Kind, JSON]) -> World:
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, gpu_queue("16")),
            (kinds.RESOURCE_CLAIM_TEMPLATES, two_gpus()),
            *objects,
            device_classes=CLASSES,
            placement=True,
        ),
    )
    await passes(world)
    return world


def pinned_hosts(world: World, job: str) -> list[str]:
    obj = world.api.read_back(kinds.JOBS, job, "ns") or {}
    affinity = obj["spec"]["template"]["spec"].get("affinity", {})
    terms = affinity.get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}
    )
    return [
        v
        for term in terms.get("nodeSelectorTerms", [])
        for expr in term.get("matchExpressions", [])
        for v in expr["values"]
    ]


async def test_a_dra_gang_is_placed_where_its_devices_are_free_and_the_next_waits_for_devices(
    started: list[World],
) -> None:
    world = await placed_world(
        started,
        (kinds.DEVICE_CLASSES, gpu_class()),
        *nodes_of_4_gpus("n1", "n2"),
        (kinds.JOBS, dra_job("first", 4, "two-gpus")),
        (kinds.JOBS, dra_job("second", 1, "two-gpus")),
    )

    assert world.suspended("first") is False
    admitted = world.workload("job-first")
    assert (condition(admitted, "PlacementChecked") or {}).get("status") != "False"
    assert sorted(pinned_hosts(world, "first")) == ["n1", "n2"]
    assert world.suspended("second") is True
    reason = pending_reason(world.workload("job-second"))
    assert reason.startswith("Quota ok but no node fits")
    assert "devices.kohort.dev/gpu.example.com" in reason


async def test_devices_held_by_pods_outside_kohort_are_not_free(started: list[World]) -> None:
    other = {
        "metadata": {"namespace": "ns", "name": "outside"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c"}],
            **claims_from("two-gpus"),
        },
        "status": {"phase": "Running"},
    }
    world = await placed_world(
        started,
        (kinds.DEVICE_CLASSES, gpu_class()),
        *nodes_of_4_gpus("n1", "n2"),
        (kinds.PODS, other),
        (kinds.JOBS, dra_job("four", 4, "two-gpus")),
    )

    assert world.suspended("four") is True
    assert "devices.kohort.dev/gpu.example.com" in pending_reason(world.workload("job-four"))


async def test_a_class_whose_selector_is_not_evaluated_is_admitted_on_quota_said_unchecked(
    started: list[World],
) -> None:
    by_model = gpu_class('device.attributes["gpu.example.com"].model == "h100"')
    world = await placed_world(
        started,
        (kinds.DEVICE_CLASSES, by_model),
        *nodes_of_4_gpus("n1"),
        (kinds.JOBS, dra_job("first", 4, "two-gpus")),
    )

    assert world.suspended("first") is False
    checked = condition(world.workload("job-first"), "PlacementChecked") or {}
    assert checked.get("status") == "False"
    assert "dynamic resource claims" in checked.get("message", "")
    assert pinned_hosts(world, "first") == []


async def test_a_dra_gang_waits_for_nodes_with_devices_and_is_admitted_once_slices_appear(
    started: list[World],
) -> None:
    world = await placed_world(
        started,
        (kinds.DEVICE_CLASSES, gpu_class()),
        (kinds.NODES, ready_node("n1")),
        (kinds.NODES, ready_node("n2")),
        (kinds.JOBS, dra_job("first", 4, "two-gpus")),
    )
    assert world.suspended("first") is True
    assert "devices.kohort.dev/gpu.example.com" in pending_reason(world.workload("job-first"))

    await put(world, kinds.RESOURCE_SLICES, gpu_slice("n1", 4), gpu_slice("n2", 4))

    assert world.suspended("first") is False
    assert sorted(pinned_hosts(world, "first")) == ["n1", "n2"]


def running_with_record(gpus_charged: str | None) -> tuple[JSON, JSON]:
    """A running DRA Job of 4 pods claiming 2 GPUs each, and its Workload as a controller
    wrote it at admission: charged `gpus_charged` GPUs in all (None: no GPU, as one that
    counted no devices then)."""
    running = dra_job("running", 4, "two-gpus")
    running["spec"]["suspend"] = False
    record = workload(running, reserved=True)
    assignment: JSON = {"name": "main", "count": 4, "flavors": {"cpu": "default"}}
    assignment["resourceUsage"] = {"cpu": "4"}
    if gpus_charged is not None:
        record["spec"]["podSets"][0]["requests"] = {"cpu": "1", GPU: "2"}
        assignment["flavors"][GPU] = "default"
        assignment["resourceUsage"][GPU] = gpus_charged
    record["status"]["admission"]["podSetAssignments"] = [assignment]
    return running, record


async def test_a_restarted_controller_leaves_a_running_dra_gang_whose_template_was_deleted(
    started: list[World],
) -> None:
    running, record = running_with_record("8")
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, gpu_queue("8")),
            (kinds.JOBS, running),
            (kinds.WORKLOADS, record),
            device_classes=CLASSES,
        ),
    )
    await passes(world, 3)

    assert world.suspended("running") is False
    assert condition(world.workload("job-running"), "Evicted") is None
    assert gpus_used(world) == "8"  # what its record charged


async def test_device_classes_configured_later_do_not_evict_gangs_admitted_before(
    started: list[World],
) -> None:
    running, record = running_with_record(None)
    world = await start(
        started,
        World(
            (kinds.CLUSTER_QUEUES, gpu_queue("8")),
            (kinds.RESOURCE_CLAIM_TEMPLATES, two_gpus()),
            (kinds.JOBS, running),
            (kinds.WORKLOADS, record),
            device_classes=CLASSES,
        ),
    )
    await passes(world, 3)

    assert world.suspended("running") is False
    assert condition(world.workload("job-running"), "Evicted") is None


# -- claims for all of a node's devices (allocationMode All) ---------------------------------


async def all_gpus_world(started: list[World], *objects: tuple[kinds.Kind, JSON]) -> World:
    """The template `all-gpus` (every GPU of a node), GPUs selected by driver, `objects`."""
    return await placed_world(
        started,
        (kinds.RESOURCE_CLAIM_TEMPLATES, all_gpus()),
        (kinds.DEVICE_CLASSES, gpu_class()),
        *objects,
    )


async def test_a_gang_of_2_pods_claiming_all_gpus_of_their_nodes_is_charged_8_one_pod_per_node(
    started: list[World],
) -> None:
    world = await all_gpus_world(
        started,
        *nodes_of_4_gpus("n1", "n2"),
        (kinds.JOBS, dra_job("first", 2, "all-gpus")),
        (kinds.JOBS, dra_job("second", 1, "all-gpus")),
    )

    assert world.suspended("first") is False
    assert usage(world, "job-first")[GPU] == "8"
    assert gpus_used(world) == "8"
    assert sorted(pinned_hosts(world, "first")) == ["n1", "n2"]
    # The queue has 16 GPUs, but no node has its 4 free any more.
    assert world.suspended("second") is True
    reason = pending_reason(world.workload("job-second"))
    assert reason.startswith("Quota ok but no node fits")


async def test_a_pod_claiming_all_gpus_goes_to_the_node_where_none_is_taken(
    started: list[World],
) -> None:
    one_taken = {
        "metadata": {"namespace": "ns", "name": "outside"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}], **claims_from("one-gpu")},
        "status": {"phase": "Running"},
    }
    world = await placed_world(
        started,
        (kinds.RESOURCE_CLAIM_TEMPLATES, all_gpus()),
        (kinds.RESOURCE_CLAIM_TEMPLATES, in_ns(claim_template("one-gpu", "gpu.example.com"))),
        (kinds.DEVICE_CLASSES, gpu_class()),
        *nodes_of_4_gpus("n1", "n2"),
        (kinds.PODS, one_taken),
        (kinds.JOBS, dra_job("whole", 1, "all-gpus")),
    )

    assert world.suspended("whole") is False
    assert usage(world, "job-whole")[GPU] == "4"
    assert pinned_hosts(world, "whole") == ["n2"]


async def test_a_claim_for_all_gpus_waits_while_nodes_have_different_numbers_of_them(
    started: list[World],
) -> None:
    world = await all_gpus_world(
        started,
        *nodes_of_4_gpus("n1"),
        (kinds.NODES, ready_node("n2")),
        (kinds.RESOURCE_SLICES, gpu_slice("n2", 8)),
        (kinds.JOBS, dra_job("whole", 1, "all-gpus")),
    )
    assert world.suspended("whole") is True
    reason = pending_reason(world.workload("job-whole"))
    assert "different numbers of them (4 on n1, 8 on n2)" in reason

    await put(world, kinds.RESOURCE_SLICES, gpu_slice("n2", 4))

    assert world.suspended("whole") is False
    assert usage(world, "job-whole")[GPU] == "4"


async def test_a_running_gang_claiming_all_gpus_keeps_its_charge_when_every_node_gets_more(
    started: list[World],
) -> None:
    world = await all_gpus_world(
        started,
        *nodes_of_4_gpus("n1", "n2"),
        (kinds.JOBS, dra_job("whole", 2, "all-gpus")),
    )
    assert world.suspended("whole") is False

    await put(world, kinds.RESOURCE_SLICES, gpu_slice("n1", 8), gpu_slice("n2", 8))

    assert world.suspended("whole") is False
    assert usage(world, "job-whole")[GPU] == "8"
    assert gpus_used(world) == "8"


async def test_a_restarted_controller_leaves_a_running_all_gpus_gang_whose_nodes_got_more(
    started: list[World],
) -> None:
    running, record = admitted_running(2, "all-gpus", 4)
    world = await all_gpus_world(
        started,
        *((kinds.NODES, ready_node(n)) for n in ("n1", "n2")),
        *((kinds.RESOURCE_SLICES, gpu_slice(n, 8)) for n in ("n1", "n2")),
        (kinds.JOBS, running),
        (kinds.WORKLOADS, record),
    )
    await passes(world, 3)

    assert world.suspended("running") is False
    assert condition(world.workload("job-running"), "Evicted") is None
    assert gpus_used(world) == "8"  # what its record charged


@pytest.mark.parametrize("slices_first", [True, False], ids=["slices-first", "slices-later"])
async def test_a_running_gang_claiming_all_gpus_keeps_its_nodes_whichever_the_controller_sees_first(
    started: None, slices_first: bool
) -> None:
    # A restarted controller may list the running gang before the nodes' slices: once the
    # slices come, it knows how many devices the gang's pods hold on their nodes.
    running, record = admitted_running(2, "all-gpus", 4)
    record["status"]["admission"]["podSetAssignments"][0]["nodes"] = [
        {"node": "n1", "count": 1},
        {"node": "n2", "count": 1},
    ]
    slices = [(kinds.RESOURCE_SLICES, gpu_slice(n, 4)) for n in ("n1", "n2")]
    world = await all_gpus_world(
        started,
        *((kinds.NODES, ready_node(n)) for n in ("n1", "n2")),
        *(slices if slices_first else []),
        (kinds.JOBS, running),
        (kinds.WORKLOADS, record),
    )
    await passes(world, 3)
    if not slices_first:
        await put(world, kinds.RESOURCE_SLICES, gpu_slice("n1", 4), gpu_slice("n2", 4))
        await passes(world, 3)

    await put(world, kinds.JOBS, dra_job("second", 1, "all-gpus"))
    await passes(world, 3)

    assert world.suspended("second") is True
    assert gpus_used(world) == "8"
