"""The stand-in cluster-autoscaler (hack/provisioner.py) on the real local control plane: an
empty GPU node group (8 GPUs a node, at most 4 nodes), ProvisioningRequests, kwok nodes."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from hack.localcluster import Autoscaler, ClusterOptions, LocalCluster, NodeGroup, NodePool
from hack.provisioner import ATOMIC_SCALE_UP, CHECK_CAPACITY, CONSUMER_ANNOTATION, GROUP_ANNOTATION
from hack.rest import ApiError, RestClient

T = TypeVar("T")
GPU_GROUP = NodeGroup("gpu", max_count=4, gpus=8, cpu="64", memory="512Gi")
UNNEEDED_SECONDS = 4.0
REQUESTS = "/apis/autoscaling.x-k8s.io/v1/namespaces/{ns}/provisioningrequests"


@pytest.fixture(scope="module")
def autoscaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane with kube-scheduler, one CPU node kohort's provisioner did not make,
    and the provisioner with an empty GPU group."""
    autoscaler = Autoscaler(
        groups=(GPU_GROUP,), scan_interval=0.5, scale_down_unneeded_time=UNNEEDED_SECONDS
    )
    options = ClusterOptions(
        node_pools=(NodePool("cpu", 1, cpu="32"),),
        scheduler="kube-scheduler",
        autoscaler=autoscaler,
    )
    with LocalCluster(options, tmp_path_factory.mktemp("autoscaled")) as local:
        yield local


@pytest.fixture
def ns(autoscaled: LocalCluster) -> Iterator[str]:
    """A namespace whose ProvisioningRequests are deleted after the test; it starts once the
    group's nodes of earlier tests are gone (scaled down), so each test sees an empty group."""
    name = f"provreq-{uuid.uuid4().hex[:6]}"
    rest = autoscaled.rest
    until("an empty GPU group", lambda: group_nodes(rest), lambda nodes: not nodes)
    rest.create("/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    for request in rest.get(REQUESTS.format(ns=name))["items"]:
        rest.delete(f"{REQUESTS.format(ns=name)}/{request['metadata']['name']}")
    rest.delete(f"/api/v1/namespaces/{name}")


def until(what: str, probe: Callable[[], T], accept: Callable[[T], bool], within: float = 60) -> T:
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {within:.0f}s waiting for {what}; last: {value!r}")
        time.sleep(0.5)


def request(rest: RestClient, ns: str, name: str, klass: str, pods: int, **requests: str) -> None:
    """A PodTemplate of one container with `requests` (gpu= for nvidia.com/gpu), and a
    ProvisioningRequest for `pods` of them."""
    asks = {("nvidia.com/gpu" if k == "gpu" else k): v for k, v in requests.items()}
    # Extended resources must be limited as much as they are requested.
    limits = {k: v for k, v in asks.items() if "/" in k}
    template = {
        "metadata": {"name": f"ppt-{name}"},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "resources": {"requests": asks, "limits": limits},
                    }
                ]
            }
        },
    }
    rest.create(f"/api/v1/namespaces/{ns}/podtemplates", template)
    rest.create(
        REQUESTS.format(ns=ns),
        {
            "apiVersion": "autoscaling.x-k8s.io/v1",
            "kind": "ProvisioningRequest",
            "metadata": {"name": name},
            "spec": {
                "provisioningClassName": klass,
                "podSets": [{"podTemplateRef": {"name": f"ppt-{name}"}, "count": pods}],
            },
        },
    )


def conditions(rest: RestClient, ns: str, name: str) -> dict[str, tuple[str, str]]:
    obj = rest.get(f"{REQUESTS.format(ns=ns)}/{name}")
    found = (obj.get("status") or {}).get("conditions") or []
    return {c["type"]: (c["status"], c["message"]) for c in found}


def answered(rest: RestClient, ns: str, name: str, kind: str) -> tuple[str, str]:
    """The request's condition `kind` (status, message), once it has one."""
    found = until(
        f"{name} to get {kind}",
        lambda: conditions(rest, ns, name),
        lambda found: kind in found,
    )
    return found[kind]


def provisioned_nodes(cluster: LocalCluster, ns: str, name: str) -> list[str]:
    """The nodes made for a request, once it is Provisioned and they are Ready."""
    status, message = answered(cluster.rest, ns, name, "Provisioned")
    assert status == "True", message
    made = details(cluster.rest, ns, name)["nodes"].split(",")
    cluster.wait_nodes_ready(made)
    return made


def details(rest: RestClient, ns: str, name: str) -> dict[str, str]:
    obj = rest.get(f"{REQUESTS.format(ns=ns)}/{name}")
    found: dict[str, str] = obj["status"].get("provisioningClassDetails") or {}
    return found


def group_nodes(rest: RestClient) -> set[str]:
    return {
        n["metadata"]["name"]
        for n in rest.get("/api/v1/nodes")["items"]
        if GROUP_ANNOTATION in (n["metadata"].get("annotations") or {})
    }


def node_names(rest: RestClient) -> set[str]:
    return {n["metadata"]["name"] for n in rest.get("/api/v1/nodes")["items"]}


def test_an_atomic_request_for_two_eight_gpu_pods_makes_two_nodes_that_become_ready(
    autoscaled: LocalCluster, ns: str
) -> None:
    rest = autoscaled.rest
    request(rest, ns, "two", ATOMIC_SCALE_UP, pods=2, gpu="8")

    made = provisioned_nodes(autoscaled, ns, "two")
    assert len(made) == 2
    assert conditions(rest, ns, "two")["Accepted"][0] == "True"
    for name in made:
        node: dict[str, Any] = rest.get(f"/api/v1/nodes/{name}")
        assert name.startswith("gpu-")
        assert node["spec"]["providerID"] == f"kwok:{name}"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["metadata"]["annotations"][GROUP_ANNOTATION] == "gpu"


def test_an_atomic_request_for_five_eight_gpu_pods_fails_naming_the_groups_max(
    autoscaled: LocalCluster, ns: str
) -> None:
    rest = autoscaled.rest
    request(rest, ns, "five", ATOMIC_SCALE_UP, pods=5, gpu="8")

    status, message = answered(rest, ns, "five", "Failed")
    assert status == "True"
    assert message == (
        "node group gpu would need 5 new node(s), but its max-count is 4 and it has 0 node(s)"
    )
    assert group_nodes(rest) == set()


def test_raising_the_groups_max_in_the_configmap_lets_a_new_request_for_five_succeed(
    autoscaled: LocalCluster, ns: str
) -> None:
    rest = autoscaled.rest
    request(rest, ns, "five", ATOMIC_SCALE_UP, pods=5, gpu="8")
    assert answered(rest, ns, "five", "Failed")[0] == "True"

    autoscaled.set_node_groups([dataclasses.replace(GPU_GROUP, max_count=6)])
    try:
        request(rest, ns, "five-again", ATOMIC_SCALE_UP, pods=5, gpu="8")
        assert len(provisioned_nodes(autoscaled, ns, "five-again")) == 5
    finally:
        autoscaled.set_node_groups([GPU_GROUP])


def test_check_capacity_with_room_is_provisioned_without_new_nodes(
    autoscaled: LocalCluster, ns: str
) -> None:
    rest = autoscaled.rest
    before = node_names(rest)
    request(rest, ns, "fits", CHECK_CAPACITY, pods=2, cpu="4")

    status, message = answered(rest, ns, "fits", "Provisioned")
    assert (status, message) == ("True", "2 pod(s) fit on the Ready nodes' free capacity")
    assert node_names(rest) <= before


def test_check_capacity_without_room_is_not_provisioned_and_says_what_is_missing(
    autoscaled: LocalCluster, ns: str
) -> None:
    rest = autoscaled.rest
    request(rest, ns, "too-big", CHECK_CAPACITY, pods=1, cpu="64")

    status, message = answered(rest, ns, "too-big", "Provisioned")
    assert status == "False"
    assert "no room for 1 more, e.g. a pod of ppt-too-big (cpu=64)" in message


def test_unneeded_nodes_are_removed_after_the_delay_and_nodes_it_did_not_make_stay(
    autoscaled: LocalCluster, ns: str
) -> None:
    rest = autoscaled.rest
    request(rest, ns, "one", ATOMIC_SCALE_UP, pods=1, gpu="8")
    [made] = provisioned_nodes(autoscaled, ns, "one")
    rest.delete(f"{REQUESTS.format(ns=ns)}/one")  # no booking holds it any more
    deleted_at = time.monotonic()

    until(f"{made} removed", lambda: node_names(rest), lambda names: made not in names)
    assert time.monotonic() - deleted_at >= UNNEEDED_SECONDS - 1
    assert "cpu-0" in node_names(rest)


def test_a_node_running_a_pod_is_kept_and_goes_once_the_pod_is_gone(
    autoscaled: LocalCluster, ns: str
) -> None:
    rest = autoscaled.rest
    request(rest, ns, "one", ATOMIC_SCALE_UP, pods=1, gpu="8")
    [made] = provisioned_nodes(autoscaled, ns, "one")
    pod = {
        "metadata": {"name": "trainer", "annotations": {CONSUMER_ANNOTATION: "one"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": made},
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "resources": {
                        "requests": {"nvidia.com/gpu": "8"},
                        "limits": {"nvidia.com/gpu": "8"},
                    },
                }
            ],
        },
    }
    until(
        "the pod created (its namespace's ServiceAccount exists)",
        lambda: _create(rest, f"/api/v1/namespaces/{ns}/pods", pod),
        bool,
    )
    until(
        "the pod running on the new node",
        lambda: rest.get(f"/api/v1/namespaces/{ns}/pods/trainer"),
        lambda p: p["spec"].get("nodeName") == made and p["status"].get("phase") == "Running",
    )
    rest.delete(f"{REQUESTS.format(ns=ns)}/one")

    time.sleep(UNNEEDED_SECONDS * 2.5)
    assert made in node_names(rest)

    rest.delete(f"/api/v1/namespaces/{ns}/pods/trainer")
    until(f"{made} removed", lambda: node_names(rest), lambda names: made not in names)


def _create(rest: RestClient, path: str, obj: dict[str, Any]) -> bool:
    try:
        rest.create(path, obj)
    except ApiError as err:
        if err.status in (403, 404):  # the namespace's default ServiceAccount is not there yet
            return False
        raise
    return True


def test_deleting_a_node_made_for_a_booked_request_revokes_its_capacity(
    autoscaled: LocalCluster, ns: str
) -> None:
    rest = autoscaled.rest
    request(rest, ns, "one", ATOMIC_SCALE_UP, pods=1, gpu="8")
    [made] = provisioned_nodes(autoscaled, ns, "one")
    rest.delete(f"/api/v1/nodes/{made}")

    status, message = answered(rest, ns, "one", "CapacityRevoked")
    assert status == "True"
    assert message == f"node(s) {made} made for the request were deleted"


def test_a_requests_class_and_pod_sets_cannot_be_changed_and_it_asks_for_at_most_32_sets(
    autoscaled: LocalCluster, ns: str
) -> None:
    rest = autoscaled.rest
    request(rest, ns, "fixed", CHECK_CAPACITY, pods=1, cpu="1")
    path = f"{REQUESTS.format(ns=ns)}/fixed"
    changes = (
        {"spec": {"provisioningClassName": ATOMIC_SCALE_UP}},
        {"spec": {"podSets": [{"podTemplateRef": {"name": "ppt-fixed"}, "count": 2}]}},
    )
    for change in changes:
        with pytest.raises(ApiError) as refused:
            rest.patch(path, change)
        assert refused.value.status == 422
        assert "immutable" in str(refused.value)

    too_many = [{"podTemplateRef": {"name": "ppt-fixed"}, "count": 1}] * 33
    body = {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": "wide"},
        "spec": {"provisioningClassName": CHECK_CAPACITY, "podSets": too_many},
    }
    with pytest.raises(ApiError) as refused:
        rest.create(REQUESTS.format(ns=ns), body)
    assert refused.value.status == 422
