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

from hack import processes, realnode, testenv
from hack.localcluster import ClusterOptions, LocalCluster, NodePool
from hack.objects import cluster_queue, local_queue, resource_flavor
from hack.realnode import REAL_NODE_LABEL, REAL_NODE_TAINT, RealNode, why_not
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


# The chart leaves the controller's --lease-duration and --retry-period at their defaults.
LEASE_DURATION, RETRY_PERIOD = 15.0, 2.0


def lease_holder(setup: Setup) -> str:
    return realnode.lease_holder(setup.cluster, NAMESPACE, f"{RELEASE}-controller")


def controller_pods(setup: Setup) -> dict[str, str]:
    """The controller pods that are not being deleted, by name, and their nodes."""
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName") or ""
        for p in pods(setup, NAMESPACE)
        if p["metadata"]["name"].startswith(f"{RELEASE}-controller-")
        and not p["metadata"].get("deletionTimestamp")
    }


def pod_log(setup: Setup, pod: str, node: str) -> str:
    real = {setup.node.name: setup.node, setup.second.name: setup.second}[node]
    return real.container_log(NAMESPACE, pod, "controller")


def leaders(setup: Setup) -> list[str]:
    """The controller pods whose log says they took the Lease that the leader holds. (On the
    host network a pod's hostname is its node's: the identity is that and a suffix.)"""
    holder = lease_holder(setup)
    took = f"{holder} took leadership of {RELEASE}-controller"
    return [
        pod
        for pod, node in controller_pods(setup).items()
        if holder and node and took in pod_log(setup, pod, node)
    ]


def the_leader(setup: Setup, timeout: float = 60) -> str:
    processes.wait_until(
        "one leader, saying so in its log", lambda: len(leaders(setup)) == 1, timeout
    )
    (leader,) = leaders(setup)
    return leader


def stands_by(setup: Setup, pod: str) -> bool:
    """Ready, and never took the Lease."""
    node = controller_pods(setup)[pod]
    ready = is_ready(setup.cluster.rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}"))
    return ready and "took leadership" not in pod_log(setup, pod, node)


def test_two_controller_replicas_elect_one_leader_and_the_other_stands_by(
    release: Setup,
) -> None:
    leader = the_leader(release)
    (standby,) = [pod for pod in controller_pods(release) if pod != leader]
    assert stands_by(release, standby)


@pytest.fixture(scope="module")
def queue(release: Setup) -> str:
    """A namespace whose LocalQueue "default" feeds a ClusterQueue of the kwok nodes' size."""
    rest, namespace = release.cluster.rest, "real-node-gang"
    rest.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    rest.create(kohort("resourceflavors"), resource_flavor("default"), exist_ok=True)
    rest.create(kohort("clusterqueues"), cluster_queue("rn", {"cpu": "16", "memory": "64Gi"}))
    rest.create(kohort("localqueues", namespace=namespace), local_queue(namespace, "default", "rn"))
    return namespace


def submit(setup: Setup, namespace: str, name: str, size: int, cpu: str) -> dict[str, Any]:
    """A Job of `size` pods in the LocalQueue, as the webhook pod answered its creation."""
    job: dict[str, Any] = setup.cluster.rest.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        labelled_job(name, size, {"cpu": cpu, "memory": "256Mi"}),
    )
    return job


def job_pods(setup: Setup, namespace: str, job: str) -> list[dict[str, Any]]:
    return [
        p
        for p in pods(setup, namespace)
        if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == job
    ]


def wait_placed(setup: Setup, namespace: str, job: str, size: int, timeout: float = 120) -> None:
    """Until the Job's `size` pods are all bound, to kwok nodes only."""

    def nodes() -> list[str]:
        return [p["spec"].get("nodeName") or "" for p in job_pods(setup, namespace, job)]

    processes.wait_until(
        f"all {size} pods of {job} placed",
        lambda: len(nodes()) == size and all(nodes()),
        timeout,
    )
    assert set(nodes()) <= set(GANG_POOL.node_names()), nodes()


def test_a_gang_is_held_by_the_webhook_pod_then_admitted_onto_the_kwok_nodes(
    release: Setup, queue: str
) -> None:
    created = submit(release, queue, "gang", 4, "3")
    assert created["spec"]["suspend"] is True, "the webhook pod held the Job"
    wait_placed(release, queue, "gang", 4)


def test_deleting_the_leading_controller_pod_hands_the_lease_to_the_other_replica(
    release: Setup, queue: str
) -> None:
    """The standby takes the Lease within the lease duration and a retry (the leader gives it
    up on SIGTERM, so sooner) and admits a gang submitted after the deletion; the deleted pod's
    replacement comes back Ready and stands by. The leader's node is cordoned first, as a
    drain does: otherwise the replacement, started there within a second or two, may take
    the Lease the leader gave up before the standby's next retry (it did in 1 of 5 runs)."""
    rest = release.cluster.rest
    leader = the_leader(release)
    (standby,) = [pod for pod in controller_pods(release) if pod != leader]
    leader_node, held_by = controller_pods(release)[leader], lease_holder(release)
    real = {release.node.name: release.node, release.second.name: release.second}[leader_node]
    real.cordon()
    try:
        rest.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{leader}")
        created = submit(release, queue, "after-failover", 2, "500m")
        assert created["spec"]["suspend"] is True, "the webhook pod held the Job"
        processes.wait_until(
            "another holder of the Lease",
            lambda: lease_holder(release) not in ("", held_by),
            LEASE_DURATION + RETRY_PERIOD + 5,
        )
        assert the_leader(release, timeout=10) == standby
        wait_placed(release, queue, "after-failover", 2)
    finally:
        real.cordon(False)

    def replacement() -> str:
        others = [pod for pod in controller_pods(release) if pod not in (leader, standby)]
        return others[0] if len(others) == 1 else ""

    processes.wait_until(
        "the deleted pod's replacement Ready",
        lambda: bool(replacement()) and stands_by(release, replacement()),
        120,
    )
    # its ports are free only where the deleted pod ran
    assert controller_pods(release)[replacement()] == leader_node
    assert the_leader(release, timeout=10) == standby


def replica_sets(setup: Setup, deployment: str) -> set[str]:
    """The ReplicaSets of the Deployment that have pods (or are meant to)."""
    items = setup.cluster.rest.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets")["items"]
    return {
        rs["metadata"]["name"]
        for rs in items
        if rs["metadata"]["name"].startswith(f"{deployment}-") and rs["spec"]["replicas"] > 0
    }


def rolled_out(setup: Setup) -> bool:
    return realnode.rolled_out(setup.cluster, NAMESPACE)


def workload_of(setup: Setup, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    items = setup.cluster.rest.get(kohort("workloads", namespace=namespace))["items"]
    (workload,) = [
        w
        for w in items
        if any(o["uid"] == job["metadata"]["uid"] for o in w["metadata"].get("ownerReferences", []))
    ]
    return workload


def admitted(workload: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Admitted" and c["status"] == "True"
        for c in workload.get("status", {}).get("conditions", [])
    )


def test_helm_upgrade_of_a_controller_flag_rolls_both_deployments_and_no_running_gang_is_lost(
    release: Setup, queue: str
) -> None:
    """`controller.waitForPodsReadySeconds` 300 -> 600 (`--wait-for-pods-ready`). On the host
    network a surge pod needs ports of its own beside the pod it replaces (the chart's
    strategy keeps every old pod until its replacement is ready), so the upgrade's values,
    like the install's, give every listener a free port."""
    rest = release.cluster.rest
    processes.wait_until("a settled release", lambda: rolled_out(release), 120)
    job = submit(release, queue, "before-upgrade", 2, "500m")
    wait_placed(release, queue, "before-upgrade", 2)
    processes.wait_until(
        "its pods running",
        lambda: all(
            p["status"].get("phase") == "Running"
            for p in job_pods(release, queue, "before-upgrade")
        ),
        60,
    )
    running = {p["metadata"]["uid"] for p in job_pods(release, queue, "before-upgrade")}
    assert admitted(workload_of(release, queue, job))
    deployments = (f"{RELEASE}-controller", f"{RELEASE}-webhook")
    old_sets = {d: replica_sets(release, d) for d in deployments}
    old_pods = {p["metadata"]["uid"] for p in pods(release, NAMESPACE)}

    values = release.node.chart_values(IMAGE, controller_replicas=2)
    values["controller"]["waitForPodsReadySeconds"] = 600
    upgraded = release.node.helm_upgrade(values, RELEASE, NAMESPACE)
    assert upgraded.returncode == 0, upgraded.stderr
    processes.wait_until("both Deployments rolled out", lambda: rolled_out(release), 180)

    for deployment in deployments:
        new_sets = replica_sets(release, deployment)
        assert len(new_sets) == 1 and new_sets.isdisjoint(old_sets[deployment]), new_sets
    now = pods(release, NAMESPACE)
    assert old_pods.isdisjoint(p["metadata"]["uid"] for p in now)
    for pod in now:
        assert is_ready(pod), pod["metadata"]["name"]
        if pod["metadata"]["name"].startswith(f"{RELEASE}-controller-"):
            (container,) = pod["spec"]["containers"]
            assert "--wait-for-pods-ready=600" in container["args"]
    assert the_leader(release) in controller_pods(release)

    after = job_pods(release, queue, "before-upgrade")
    assert {p["metadata"]["uid"] for p in after} == running
    assert all(
        p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        for p in after
    )
    assert admitted(workload_of(release, queue, job))
    created = submit(release, queue, "after-upgrade", 2, "500m")
    assert created["spec"]["suspend"] is True, "the new webhook pod held the Job"
    wait_placed(release, queue, "after-upgrade", 2)
    assert (
        rest.get(f"/apis/batch/v1/namespaces/{queue}/jobs/before-upgrade")["spec"]["suspend"]
        is False
    )
