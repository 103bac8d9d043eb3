"""What a gang is charged for the devices its pods claim through ResourceClaimTemplates (DRA),
and which claims cannot be charged (controller/workloads/devices.py): pure, no server."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from controller.api import kube
from controller.quota.snapshot import PodSet
from controller.state.objects import min_resources
from controller.workloads.base import GangShape
from controller.workloads.devices import (
    DeviceError,
    claim_requests,
    class_devices,
    class_selects,
    device_resource,
    node_devices,
    pod_devices,
    with_devices,
)
from hack.objects import GPU, claim_template

CLASSES = {"gpu.example.com": GPU, "nic.example.com": "example.com/nic"}


def template(obj: dict[str, Any]) -> kube.ResourceClaimTemplate:
    return msgspec.convert(obj, kube.ResourceClaimTemplate)


def with_request(**exactly: Any) -> kube.ResourceClaimTemplate:
    request: dict[str, Any] = {"name": "r"}
    if exactly:
        request["exactly"] = {"deviceClassName": "gpu.example.com", **exactly}
    obj = claim_template("t", "gpu.example.com")
    obj["spec"]["spec"]["devices"]["requests"] = [request]
    return template(obj)


def shape(*pod_sets: PodSet) -> GangShape:
    return GangShape(name="g", min_member=sum(p.count for p in pod_sets), pod_sets=pod_sets)


def test_a_claim_for_2_gpus_is_charged_2_of_the_mapped_resource() -> None:
    assert claim_requests(template(claim_template("t", "gpu.example.com", 2)), CLASSES) == {
        GPU: 2000
    }


def test_a_claim_with_requests_of_two_classes_is_charged_each_as_its_resource() -> None:
    obj = claim_template("t", "gpu.example.com", 4)
    obj["spec"]["spec"]["devices"]["requests"].append(
        {"name": "nic", "exactly": {"deviceClassName": "nic.example.com", "count": 1}}
    )
    assert claim_requests(template(obj), CLASSES) == {GPU: 4000, "example.com/nic": 1000}


def test_a_request_without_a_count_asks_for_one_device() -> None:
    obj = claim_template("t", "gpu.example.com")
    del obj["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"]
    del obj["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"]
    assert claim_requests(template(obj), CLASSES) == {GPU: 1000}


def test_selectors_narrow_which_devices_but_not_how_many_are_charged() -> None:
    selected = with_request(count=2, selectors=[{"cel": {"expression": "true"}}])
    assert claim_requests(selected, CLASSES) == {GPU: 2000}


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        (
            {"allocationMode": "All", "selectors": [{"cel": {"expression": "true"}}]},
            "uses allocationMode All with selectors",
        ),
        ({"count": 1, "adminAccess": True}, "asks for adminAccess"),
        (None, r"uses firstAvailable \(a prioritized list\)"),
    ],
)
def test_claims_whose_device_count_is_not_certain_are_refused(
    request_: dict[str, Any] | None, says: str
) -> None:
    if request_ is None:
        obj = claim_template("t", "gpu.example.com")
        obj["spec"]["spec"]["devices"]["requests"] = [
            {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.example.com"}]}
        ]
        claim = template(obj)
    else:
        claim = with_request(**request_)
    with pytest.raises(DeviceError, match=says):
        claim_requests(claim, CLASSES)


# -- claims for all of a node's devices (allocationMode All) ---------------------------------

ALL_GPUS = template(claim_template("all-gpus", "gpu.example.com", allocation_mode="All"))


def test_a_pod_claiming_all_gpus_of_its_node_is_charged_the_nodes_8_and_needs_all_8_free() -> None:
    nodes = {"gpu.example.com": {"n1": 8, "n2": 8}}
    pods = PodSet(count=2, requests={"cpu": 1000}, claim_templates=("all-gpus",))
    charged = with_devices(shape(pods), {"all-gpus": ALL_GPUS}, CLASSES, nodes).pod_sets[0]
    assert charged.requests == {"cpu": 1000, GPU: 8000}
    assert charged.devices == {GPU: 8000}
    assert charged.claimed == {device_resource("gpu.example.com"): 8000}


def test_nodes_without_the_class_do_not_change_what_an_all_claim_is_charged() -> None:
    nodes = class_devices(
        {
            "n1": {device_resource("gpu.example.com"): 4000},
            "n2": {device_resource("gpu.example.com"): 4000},
            "cpu-only": {device_resource("gpu.example.com"): 0},
        }
    )
    assert nodes == {"gpu.example.com": {"n1": 4, "n2": 4}}
    assert claim_requests(ALL_GPUS, CLASSES, nodes) == {GPU: 4000}


def test_an_all_claim_is_refused_when_nodes_have_different_numbers_of_the_classs_devices() -> None:
    nodes = {"gpu.example.com": {"a": 4, "b": 8, "c": 8}}
    with pytest.raises(DeviceError, match=r"different numbers of them \(4 on a, 8 on b\)"):
        claim_requests(ALL_GPUS, CLASSES, nodes)


def test_an_all_claim_is_refused_when_no_node_has_devices_of_the_class() -> None:
    with pytest.raises(DeviceError, match="no node has any that kohort can count"):
        claim_requests(ALL_GPUS, CLASSES, {"nic.example.com": {"n1": 2}})


def test_a_bound_pod_with_an_all_claim_takes_every_device_of_the_class_on_its_node() -> None:
    spec = msgspec.convert(
        {"resourceClaims": [{"name": "a", "resourceClaimTemplateName": "all-gpus"}]},
        kube.PodSpec,
    )
    node_has = {device_resource("gpu.example.com"): 8000, device_resource("x"): 2000}
    assert pod_devices(spec.resource_claims, {"all-gpus": ALL_GPUS}, node_has) == {
        device_resource("gpu.example.com"): 8000
    }


def test_a_pod_set_is_charged_its_claims_on_top_of_its_containers_requests() -> None:
    pods = PodSet(count=4, requests={"cpu": 1000}, claim_templates=("two", "two"))
    templates = {"two": template(claim_template("two", "gpu.example.com", 2))}
    charged = with_devices(shape(pods), templates, CLASSES)
    assert charged.pod_sets[0].requests == {"cpu": 1000, GPU: 4000}
    assert charged.pod_sets[0].claimed == {device_resource("gpu.example.com"): 4000}


def test_a_gang_without_claims_is_left_as_it_is() -> None:
    plain = shape(PodSet(count=2, requests={"cpu": 1000}))
    assert with_devices(plain, {}, CLASSES) is plain


def test_a_pod_set_that_names_a_shared_claim_cannot_be_charged() -> None:
    pods = PodSet(count=2, requests={}, name="workers", shared_claims=("team-gpus",))
    with pytest.raises(DeviceError, match="pod set workers names ResourceClaim team-gpus"):
        with_devices(shape(pods), {}, CLASSES)


def test_a_gang_scheduler_is_told_only_what_its_pods_take_of_nodes_not_their_claimed_devices() -> (
    None
):
    pods = PodSet(count=4, requests={"cpu": 1000, GPU: 1000}, claim_templates=("two",))
    templates = {"two": template(claim_template("two", "gpu.example.com", 2))}
    charged = with_devices(shape(pods), templates, CLASSES)
    assert charged.pod_sets[0].requests == {"cpu": 1000, GPU: 3000}
    assert min_resources(charged) == {"cpu": 4000, GPU: 4000}


# -- the devices of nodes, for the placement check -------------------------------------------


def device_class(*expressions: str) -> kube.DeviceClass:
    obj = {
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }
    return msgspec.convert(obj, kube.DeviceClass)


def test_a_class_selecting_one_drivers_devices_is_evaluated() -> None:
    selects = class_selects(device_class('device.driver == "gpu.example.com"'))
    assert selects is not None
    assert selects("gpu.example.com") and not selects("nic.example.com")


def test_a_class_without_selectors_selects_every_device() -> None:
    selects = class_selects(device_class())
    assert selects is not None and selects("anything.example.com")


@pytest.mark.parametrize(
    "expression",
    [
        'device.attributes["gpu.example.com"].model == "h100"',
        'device.driver == "a" || device.driver == "b"',
        "device.capacity['gpu.example.com'].memory.compareTo(quantity('80Gi')) >= 0",
    ],
)
def test_a_class_whose_selector_is_outside_the_subset_is_not_evaluated(expression: str) -> None:
    assert class_selects(device_class('device.driver == "gpu.example.com"', expression)) is None


def test_nodes_have_the_devices_their_slices_publish_for_each_evaluated_class() -> None:
    def published(node: str, driver: str, devices: int) -> kube.ResourceSlice:
        obj = {
            "metadata": {"name": f"{node}-{driver}"},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "devices": [{"name": f"d{i}"} for i in range(devices)],
            },
        }
        return msgspec.convert(obj, kube.ResourceSlice)

    slices = [published("n1", "gpu.example.com", 4), published("n1", "nic.example.com", 2)]
    slices.append(published("n2", "gpu.example.com", 8))
    gpus = class_selects(device_class('device.driver == "gpu.example.com"'))
    assert gpus is not None
    assert node_devices(slices, {"gpu.example.com": gpus}) == {
        "n1": {device_resource("gpu.example.com"): 4000},
        "n2": {device_resource("gpu.example.com"): 8000},
    }


def test_a_pod_takes_the_devices_of_the_claims_its_templates_make_on_its_node() -> None:
    spec = msgspec.convert(
        {"resourceClaims": [{"name": "a", "resourceClaimTemplateName": "two"}, {"name": "b"}]},
        kube.PodSpec,
    )
    templates = {"two": template(claim_template("two", "gpu.example.com", 2))}
    assert pod_devices(spec.resource_claims, templates) == {
        device_resource("gpu.example.com"): 2000
    }
