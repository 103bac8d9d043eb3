"""The stand-in provisioner's scans, against an in-memory API: what a user sees on their
ProvisioningRequests and nodes (hack/provisioner.py; no server)."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.provisioner import (
    ATOMIC_SCALE_UP,
    CHECK_CAPACITY,
    CONSUMER_ANNOTATION,
    PROVREQS,
    Flags,
    Provisioner,
)
from hack.rest import ApiError, RestClient

GPU = "nvidia.com/gpu"
NS = "team-a"
T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
TEMPLATES = "/api/v1/namespaces/kube-system/configmaps/kwok-provider-templates"


class FakeApi(RestClient):
    """The few paths the provisioner reads and writes, kept in dictionaries."""

    def __init__(self) -> None:
        super().__init__("https://127.0.0.1:1", Path("/nonexistent"))
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.writes: list[dict[str, Any]] = []  # the status patches, in order

    def put(self, path: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.objects[path] = obj

    def _items(self, kind: str) -> dict[str, Any]:
        return {"items": [copy.deepcopy(o) for o in self.objects.values() if o["kind"] == kind]}

    def get(self, path: str) -> Any:
        lists = {"/api/v1/nodes": "Node", "/api/v1/pods": "Pod", PROVREQS: "ProvisioningRequest"}
        if path in lists:
            return self._items(lists[path])
        if path not in self.objects:
            raise ApiError(404, "GET", path, "not found")
        return copy.deepcopy(self.objects[path])

    def create(self, path: str, obj: dict[str, Any], exist_ok: bool = False) -> Any:
        assert path == "/api/v1/nodes"
        self.put(f"{path}/{obj['metadata']['name']}", copy.deepcopy(obj))
        return copy.deepcopy(obj)

    def patch(self, path: str, patch: dict[str, Any]) -> Any:
        assert path.endswith("/status")
        obj = self.objects[path.removesuffix("/status")]
        if "resourceVersion" in patch["metadata"]:
            assert patch["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
        self.writes.append(patch)
        obj.setdefault("status", {}).update(patch["status"])
        self.put(path.removesuffix("/status"), obj)
        return copy.deepcopy(obj)

    def delete(self, path: str, missing_ok: bool = True) -> Any:
        self.objects.pop(path, None)

    # -- what a test sets up --

    def node_groups(self, *groups: tuple[str, int, int]) -> None:
        """(name, GPUs per node, max-count) each."""
        items = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"{name}-template",
                    "labels": {"kwok-nodegroup": name, "accelerator": "h100"},
                    "annotations": {"cluster-autoscaler.kwok.nodegroup/max-count": str(top)},
                },
                "status": {"allocatable": {GPU: str(gpus), "cpu": "64", "pods": "110"}},
            }
            for name, gpus, top in groups
        ]
        listing = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
        self.put(TEMPLATES, {"kind": "ConfigMap", "data": {"templates": listing}})

    def ready_node(self, name: str, gpus: int) -> None:
        self.put(
            f"/api/v1/nodes/{name}",
            {
                "kind": "Node",
                "metadata": {"name": name, "labels": {}},
                "spec": {},
                "status": {
                    "allocatable": {GPU: str(gpus), "cpu": "64", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )

    def request(self, name: str, klass: str, pods: int, gpus: int = 8) -> None:
        template = {"spec": {"containers": [{"resources": {"requests": {GPU: str(gpus)}}}]}}
        self.put(
            f"/api/v1/namespaces/{NS}/podtemplates/ppt-{name}",
            {"kind": "PodTemplate", "metadata": {"name": f"ppt-{name}"}, "template": template},
        )
        self.put(
            f"/apis/autoscaling.x-k8s.io/v1/namespaces/{NS}/provisioningrequests/{name}",
            {
                "kind": "ProvisioningRequest",
                "metadata": {"name": name, "namespace": NS, "creationTimestamp": name},
                "spec": {
                    "provisioningClassName": klass,
                    "podSets": [{"podTemplateRef": {"name": f"ppt-{name}"}, "count": pods}],
                },
            },
        )

    def pod(
        self, name: str, node: str, *, consumes: str = "", gpus: int = 8, phase: str = "Running"
    ) -> None:
        annotations = {CONSUMER_ANNOTATION: consumes} if consumes else {}
        self.put(
            f"/api/v1/namespaces/{NS}/pods/{name}",
            {
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "annotations": annotations},
                "spec": {
                    "nodeName": node,
                    "containers": [{"resources": {"requests": {GPU: str(gpus)}}}],
                },
                "status": {"phase": phase},
            },
        )

    def conditions(self, name: str) -> dict[str, tuple[str, str]]:
        path = f"/apis/autoscaling.x-k8s.io/v1/namespaces/{NS}/provisioningrequests/{name}"
        found = self.objects[path].get("status", {}).get("conditions", [])
        return {c["type"]: (c["status"], c["message"]) for c in found}

    def details(self, name: str) -> dict[str, str]:
        path = f"/apis/autoscaling.x-k8s.io/v1/namespaces/{NS}/provisioningrequests/{name}"
        found: dict[str, str] = self.objects[path]["status"].get("provisioningClassDetails", {})
        return found

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {
            p.rsplit("/", 1)[1]: o
            for p, o in self.objects.items()
            if p.startswith("/api/v1/nodes/")
        }


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi()
    fake.node_groups(("gpu", 8, 4))
    return fake


def provisioner(api: FakeApi, **flags: Any) -> Provisioner:
    defaults: dict[str, Any] = {
        "skip_taint": True,
        "booking_time": dt.timedelta(minutes=10),
        "scale_down_unneeded_time": dt.timedelta(seconds=5),
    }
    return Provisioner(api, Flags(**(defaults | flags)))


def test_an_atomic_request_for_two_eight_gpu_pods_makes_two_kwok_nodes_and_is_provisioned(
    api: FakeApi,
) -> None:
    api.request("two", ATOMIC_SCALE_UP, pods=2)
    provisioner(api).scan_once(T0)

    nodes = api.nodes()
    assert len(nodes) == 2
    assert sorted(api.details("two")["nodes"].split(",")) == sorted(nodes)
    conditions = api.conditions("two")
    assert conditions["Accepted"][0] == "True"
    assert conditions["Provisioned"][0] == "True"
    for name, node in nodes.items():
        assert name.startswith("gpu-") and len(name) == len("gpu-") + 5
        assert node["spec"]["providerID"] == f"kwok:{name}"
        assert node["spec"]["taints"] == []
        assert node["metadata"]["labels"] == {
            "kwok-nodegroup": "gpu",
            "accelerator": "h100",
            "kubernetes.io/hostname": name,
        }
        assert node["metadata"]["annotations"] == {
            "kwok.x-k8s.io/node": "fake",
            "cluster-autoscaler.kwok.nodegroup/name": "gpu",
        }
        assert node["status"]["allocatable"][GPU] == "8"


def test_new_nodes_carry_the_kwok_provider_taint_unless_it_is_skipped(api: FakeApi) -> None:
    api.request("one", ATOMIC_SCALE_UP, pods=1)
    provisioner(api, skip_taint=False).scan_once(T0)
    [node] = api.nodes().values()
    assert node["spec"]["taints"] == [
        {"key": "kwok-provider", "value": "true", "effect": "NoSchedule"}
    ]


def test_an_atomic_request_beyond_the_groups_max_fails_and_makes_no_node(api: FakeApi) -> None:
    api.request("five", ATOMIC_SCALE_UP, pods=5)
    provisioner(api).scan_once(T0)
    assert api.nodes() == {}
    status, message = api.conditions("five")["Failed"]
    assert status == "True"
    assert message == (
        "node group gpu would need 5 new node(s), but its max-count is 4 and it has 0 node(s)"
    )
    assert "Provisioned" not in api.conditions("five")


def test_an_atomic_request_uses_free_room_on_existing_nodes_first(api: FakeApi) -> None:
    api.ready_node("static-0", gpus=8)
    api.request("two", ATOMIC_SCALE_UP, pods=2)
    provisioner(api).scan_once(T0)
    [new] = api.details("two")["nodes"].split(",")
    assert sorted(api.nodes()) == sorted(["static-0", new])


def test_a_raised_max_in_the_configmap_is_read_on_the_next_scan(api: FakeApi) -> None:
    running = provisioner(api)
    api.request("a-five", ATOMIC_SCALE_UP, pods=5)
    running.scan_once(T0)
    api.node_groups(("gpu", 8, 6))
    api.request("b-five-again", ATOMIC_SCALE_UP, pods=5)
    running.scan_once(T0 + dt.timedelta(seconds=1))
    assert api.conditions("a-five")["Failed"][0] == "True"
    assert api.conditions("b-five-again")["Provisioned"][0] == "True"
    assert len(api.nodes()) == 5


def test_check_capacity_with_room_is_provisioned_without_new_nodes(api: FakeApi) -> None:
    api.ready_node("static-0", gpus=8)
    api.request("check", CHECK_CAPACITY, pods=2, gpus=4)
    provisioner(api).scan_once(T0)
    assert api.conditions("check")["Provisioned"] == (
        "True",
        "2 pod(s) fit on the Ready nodes' free capacity",
    )
    assert list(api.nodes()) == ["static-0"]


def test_check_capacity_without_room_says_what_is_missing_and_is_provisioned_once_room_comes(
    api: FakeApi,
) -> None:
    running = provisioner(api)
    api.ready_node("static-0", gpus=8)
    api.pod("busy", "static-0", gpus=4)
    api.request("check", CHECK_CAPACITY, pods=2, gpus=4)
    running.scan_once(T0)
    assert api.conditions("check")["Provisioned"] == (
        "False",
        "1 of 2 pod(s) fit on the Ready nodes' free capacity; no room for 1 more, "
        "e.g. a pod of ppt-check (nvidia.com/gpu=4)",
    )
    api.delete(f"/api/v1/namespaces/{NS}/pods/busy")
    running.scan_once(T0 + dt.timedelta(seconds=1))
    assert api.conditions("check")["Provisioned"][0] == "True"


def test_capacity_booked_by_a_provisioned_request_is_not_offered_to_a_later_one(
    api: FakeApi,
) -> None:
    api.ready_node("static-0", gpus=8)
    api.request("a-first", CHECK_CAPACITY, pods=1, gpus=8)
    api.request("b-second", CHECK_CAPACITY, pods=1, gpus=8)
    provisioner(api).scan_once(T0)
    assert api.conditions("a-first")["Provisioned"][0] == "True"
    assert api.conditions("b-second")["Provisioned"][0] == "False"


def test_a_booking_is_consumed_once_the_requests_pods_are_bound(api: FakeApi) -> None:
    running = provisioner(api)
    api.ready_node("static-0", gpus=16)
    api.request("a-first", CHECK_CAPACITY, pods=1, gpus=8)
    running.scan_once(T0)
    api.pod("consumer", "static-0", consumes="a-first")
    api.request("b-second", CHECK_CAPACITY, pods=1, gpus=8)
    running.scan_once(T0 + dt.timedelta(seconds=1))
    assert api.conditions("b-second")["Provisioned"][0] == "True"


def test_the_nodes_of_a_gang_that_finished_within_its_booking_go_after_the_unneeded_time(
    api: FakeApi,
) -> None:
    running = provisioner(api)
    api.request("short", ATOMIC_SCALE_UP, pods=1)
    running.scan_once(T0)
    [node] = api.nodes()
    api.pod("done", node, consumes="short", phase="Succeeded")  # it came, ran and finished
    running.scan_once(T0 + dt.timedelta(seconds=1))
    running.scan_once(T0 + dt.timedelta(seconds=10))
    assert api.nodes() == {}


def test_an_unknown_class_fails_with_a_clear_message(api: FakeApi) -> None:
    api.request("odd", "queued-provisioning.gke.io", pods=1)
    provisioner(api).scan_once(T0)
    status, message = api.conditions("odd")["Failed"]
    assert status == "True"
    assert "'queued-provisioning.gke.io' is not supported" in message


def test_the_booking_expires_after_the_booking_time(api: FakeApi) -> None:
    running = provisioner(api, booking_time=dt.timedelta(minutes=10))
    api.request("one", ATOMIC_SCALE_UP, pods=1)
    running.scan_once(T0)
    running.scan_once(T0 + dt.timedelta(minutes=9))
    assert "BookingExpired" not in api.conditions("one")
    running.scan_once(T0 + dt.timedelta(minutes=10))
    assert api.conditions("one")["BookingExpired"][0] == "True"


def test_a_node_made_for_a_request_deleted_by_someone_else_revokes_the_capacity(
    api: FakeApi,
) -> None:
    running = provisioner(api)
    api.request("one", ATOMIC_SCALE_UP, pods=1)
    running.scan_once(T0)
    [name] = api.nodes()
    api.delete(f"/api/v1/nodes/{name}")
    running.scan_once(T0 + dt.timedelta(seconds=1))
    status, message = api.conditions("one")["CapacityRevoked"]
    assert status == "True"
    assert name in message


def test_nodes_booked_for_pods_still_to_come_outlive_the_unneeded_time(api: FakeApi) -> None:
    running = provisioner(api)
    api.request("one", ATOMIC_SCALE_UP, pods=1)
    running.scan_once(T0)
    running.scan_once(T0 + dt.timedelta(minutes=1))
    assert len(api.nodes()) == 1
    # Unneeded from when the booking stops holding it, not from when it was made.
    api.delete(f"/apis/autoscaling.x-k8s.io/v1/namespaces/{NS}/provisioningrequests/one")
    running.scan_once(T0 + dt.timedelta(minutes=2))
    running.scan_once(T0 + dt.timedelta(minutes=2, seconds=4))
    assert len(api.nodes()) == 1
    running.scan_once(T0 + dt.timedelta(minutes=2, seconds=5))
    assert api.nodes() == {}


def test_unneeded_nodes_go_after_the_delay_and_busy_ones_and_foreign_ones_stay(
    api: FakeApi,
) -> None:
    running = provisioner(api)
    api.ready_node("static-0", gpus=0)  # a CPU node kohort did not make
    api.request("two", ATOMIC_SCALE_UP, pods=2)
    running.scan_once(T0)
    busy, idle = sorted(api.details("two")["nodes"].split(","))
    api.pod("runs", busy, consumes="two")
    api.delete(f"/apis/autoscaling.x-k8s.io/v1/namespaces/{NS}/provisioningrequests/two")

    running.scan_once(T0 + dt.timedelta(seconds=1))
    running.scan_once(T0 + dt.timedelta(seconds=4))
    assert sorted(api.nodes()) == sorted([busy, idle, "static-0"])
    running.scan_once(T0 + dt.timedelta(seconds=6))
    assert sorted(api.nodes()) == sorted([busy, "static-0"])
    # Once its pod is gone, the busy node is unneeded too (counted from then).
    api.delete(f"/api/v1/namespaces/{NS}/pods/runs")
    running.scan_once(T0 + dt.timedelta(seconds=7))
    running.scan_once(T0 + dt.timedelta(seconds=12))
    assert list(api.nodes()) == ["static-0"]


def test_a_request_whose_pod_template_is_missing_fails_naming_it(api: FakeApi) -> None:
    api.request("orphan", ATOMIC_SCALE_UP, pods=1)
    api.delete(f"/api/v1/namespaces/{NS}/podtemplates/ppt-orphan")
    provisioner(api).scan_once(T0)
    assert api.conditions("orphan")["Failed"] == (
        "True",
        f"PodTemplate {NS}/ppt-orphan does not exist",
    )
    assert api.nodes() == {}


def test_the_answer_after_nodes_are_made_is_written_even_if_the_request_changed_meanwhile(
    api: FakeApi,
) -> None:
    api.request("two", ATOMIC_SCALE_UP, pods=2)
    provisioner(api).scan_once(T0)
    accepted, provisioned = api.writes
    assert "resourceVersion" in accepted["metadata"]
    assert provisioned["metadata"] == {}
    assert provisioned["status"]["conditions"][-1]["type"] == "Provisioned"
