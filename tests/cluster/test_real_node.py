"""A real kubelet joins the local control plane beside the kwok nodes, and `helm install` runs
kohort's Deployments on it as real pods (hack/realnode.py: the pinned Kubernetes' kubelet,
containerd 1.6 and runc from Debian's packages, cgroup v1 allowed, nothing pulled).

Two real nodes: one on the host's network namespace, one in a namespace of its own (its
loopback relayed to the API server's port and nowhere else), so that the chart's two
controller replicas, on the host network at the same ports, each have a node. Everything stays
on loopback: the nodes' address is 127.0.0.1, the pods listen on 127.0.0.1, the API server
calls the webhook at its URL there (the chart's URL mode; the webhook runs on the first node)
and the pods reach the API server there (the in-cluster address pointed at it). The gang that
kohort admits goes to the kwok nodes: the real nodes are tainted for them.

Skips, saying why, without root, containerd, runc, the CNI loopback plugin or the kubelet
(`bash hack/build-testenv.sh kubelet`), and without an image of the code as it is (`make
image`). The module starts its own control plane: the release registers cluster-wide
admission webhooks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from hack import processes, testenv
from hack.localcluster import ClusterOptions, LocalCluster, NodePool
from hack.objects import cluster_queue, local_queue, resource_flavor
from hack.realnode import REAL_NODE_LABEL, REAL_NODE_TAINT, RealNode, why_not
from hack.rest import ApiError
from tests.cluster.test_chart_install import kohort, labelled_job
from tests.cluster.test_image import IMAGE_DIR, TAG, _stale

IMAGE = f"kohort.local/kohort:{TAG}"
NAMESPACE = "kohort-system"
RELEASE = "kohort"
GANG_POOL = NodePool("gang", 2, cpu="8", memory="32Gi")


@dataclass
class Setup:
    cluster: LocalCluster
    node: RealNode  # on the host's network namespace, with the API server
    second: RealNode  # in a network namespace of its own


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    reason = why_not()
    if reason:
        pytest.skip(reason)
    if _stale():
        pytest.skip("no image of the code as it is: `make image` builds it (make test does)")
    work = tmp_path_factory.mktemp("real-node")
    cluster = LocalCluster(ClusterOptions(node_pools=(GANG_POOL,)), work / "cluster")
    cluster.start()
    node = RealNode(cluster, work / "node")
    second = RealNode(cluster, work / "second", own_netns=True)
    try:
        for real in (node, second):
            real.start()
            real.import_oci_layout(IMAGE_DIR / "oci", TAG, IMAGE)
        yield Setup(cluster, node, second)
    finally:
        second.stop()
        node.stop()
        cluster.stop()


def pods(setup: Setup, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = setup.cluster.rest.get(f"/api/v1/namespaces/{namespace}/pods")[
        "items"
    ]
    return items


def is_ready(obj: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


@pytest.mark.parametrize("which", ["node", "second"])
def test_each_kubelet_joins_as_a_ready_node_at_127_0_0_1_beside_the_kwok_nodes(
    setup: Setup, which: str
) -> None:
    real: RealNode = getattr(setup, which)
    node = setup.cluster.rest.get(f"/api/v1/nodes/{real.name}")
    assert is_ready(node)
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.0.0.1"}
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == testenv.versions()["K8S_VERSION"]
    assert info["containerRuntimeVersion"].startswith("containerd://1.6")
    assert node["metadata"]["labels"][REAL_NODE_LABEL] == "true"
    assert REAL_NODE_TAINT in node["spec"]["taints"]
    for kwok in GANG_POOL.node_names():
        assert setup.cluster.node_ready(kwok)


def test_a_host_network_pod_of_the_image_runs_as_its_nonroot_user(setup: Setup) -> None:
    rest = setup.cluster.rest
    pod = setup.node.host_network_pod("whoami", IMAGE, ["sh", "-c", "id && exec sleep 600"])
    rest.create("/api/v1/namespaces/default/pods", pod)
    try:
        path = "/api/v1/namespaces/default/pods/whoami"
        processes.wait_until("the pod Ready", lambda: is_ready(rest.get(path)), 60)
        assert rest.get(path)["spec"]["nodeName"] == setup.node.name
        processes.wait_until(
            "its output in the container's log",
            lambda: (
                "uid=65532(nonroot) gid=65532(nonroot)"
                in setup.node.container_log("default", "whoami", "main")
            ),
            10,
        )
    finally:
        rest.delete("/api/v1/namespaces/default/pods/whoami?gracePeriodSeconds=0")


@pytest.fixture(scope="module")
def release(setup: Setup) -> Iterator[Setup]:
    values = setup.node.chart_values(IMAGE, controller_replicas=2)
    installed = setup.node.helm_install(values, RELEASE, NAMESPACE)
    assert installed.returncode == 0, installed.stderr
    try:
        yield setup
    finally:
        # No webhook of this module may outlive it (the validating one fails closed).
        for kind in ("mutating", "validating"):
            setup.cluster.rest.delete(
                f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/{RELEASE}"
            )


def deployments_ready(setup: Setup) -> dict[str, int]:
    items = setup.cluster.rest.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments")["items"]
    return {d["metadata"]["name"]: d["status"].get("readyReplicas", 0) for d in items}


def test_helm_install_runs_both_deployments_ready_on_the_real_nodes(release: Setup) -> None:
    want = {f"{RELEASE}-controller": 2, f"{RELEASE}-webhook": 1}
    processes.wait_until("both Deployments ready", lambda: deployments_ready(release) == want, 120)
    running = pods(release, NAMESPACE)
    where = sorted(
        (p["metadata"]["name"].rsplit("-", 2)[0], p["spec"]["nodeName"]) for p in running
    )
    node, second = release.node.name, release.second.name
    controller, webhook = f"{RELEASE}-controller", f"{RELEASE}-webhook"
    assert where == sorted([(controller, node), (controller, second), (webhook, node)])
    for pod in running:
        assert pod["spec"]["hostNetwork"] is True
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"], status
        assert status["restartCount"] == 0, status


def test_the_webhooks_rotator_writes_the_charts_secret_and_ca_bundles(release: Setup) -> None:
    rest = release.cluster.rest
    secret = f"/api/v1/namespaces/{NAMESPACE}/secrets/{RELEASE}-webhook-tls"
    processes.wait_until(
        "the certificate Secret", lambda: "tls.crt" in rest.get(secret)["data"], 60
    )
    ca = rest.get(secret)["data"]["ca.crt"]
    for kind in ("mutating", "validating"):
        config = rest.get(
            f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/{RELEASE}"
        )
        for webhook in config["webhooks"]:
            assert webhook["clientConfig"]["caBundle"] == ca
            assert webhook["clientConfig"]["url"].startswith("https://127.0.0.1:")


def test_two_controller_replicas_elect_one_leader_and_the_other_stands_by(
    release: Setup,
) -> None:
    rest = release.cluster.rest
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{RELEASE}-controller"

    def holder() -> str:
        try:
            return str(rest.get(lease)["spec"].get("holderIdentity") or "")
        except ApiError as err:
            if err.status == 404:
                return ""
            raise

    processes.wait_until("a leader", lambda: bool(holder()), 60)
    controllers = {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods(release, NAMESPACE)
        if p["metadata"]["name"].startswith(f"{RELEASE}-controller-")
    }
    nodes = {release.node.name: release.node, release.second.name: release.second}

    def leaders() -> list[str]:
        """The controller pods whose log says they took the Lease that the leader holds.
        (On the host network a pod's hostname is its node's: the identity is that and a
        suffix.)"""
        took = f"{holder()} took leadership of {RELEASE}-controller"
        return [
            pod
            for pod, node in controllers.items()
            if took in nodes[node].container_log(NAMESPACE, pod, "controller")
        ]

    processes.wait_until("the leader's log of it", lambda: len(leaders()) == 1, 10)
    standby = [pod for pod in controllers if pod not in leaders()]
    (pod,) = standby
    assert is_ready(rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}"))
    assert "took leadership" not in nodes[controllers[pod]].container_log(
        NAMESPACE, pod, "controller"
    )


def test_a_gang_is_held_by_the_webhook_pod_then_admitted_onto_the_kwok_nodes(
    release: Setup,
) -> None:
    rest, namespace = release.cluster.rest, "real-node-gang"
    rest.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    rest.create(kohort("resourceflavors"), resource_flavor("default"), exist_ok=True)
    rest.create(kohort("clusterqueues"), cluster_queue("rn", {"cpu": "16", "memory": "64Gi"}))
    rest.create(kohort("localqueues", namespace=namespace), local_queue(namespace, "default", "rn"))
    created = rest.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        labelled_job("gang", 4, {"cpu": "3", "memory": "1Gi"}),
    )
    assert created["spec"]["suspend"] is True, "the webhook pod held the Job"

    def placed() -> list[str]:
        return sorted(p["spec"].get("nodeName") or "" for p in pods(release, namespace))

    processes.wait_until(
        "all 4 pods of the gang placed", lambda: all(placed()) and len(placed()) == 4, 120
    )
    assert set(placed()) <= set(GANG_POOL.node_names()), placed()
