"""A LeaderWorkerSet group as one gang (issue 5, scenario 9).

The LWS controller is not built here: the test installs the LeaderWorkerSet CRD from the LWS Go
module and then plays the LWS controller's part for one group as LWS does it: a leader
StatefulSet named after the LeaderWorkerSet and a worker StatefulSet named after the leader pod,
made from the (kohort-mutated) templates with the labels LWS puts on their pods (name,
group-index, group-key; worker-index 0 on the leader). The StatefulSet controller creates the
pods; kohort releases only pods a StatefulSet made.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest
import yaml

from controller.api import kinds, names
from controller.cluster import clients
from controller.cluster.testing import Probe, cluster_queue, local_queue, pod_template, reserved
from hack import testenv
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from tests.conftest import TestNodes
from tests.support import eventually, pod_isolation

pytestmark = pytest.mark.volcano


LWS_MODULE = ("sigs.k8s.io/lws", "v0.7.0")
LWS = "leaderworkerset.sigs.k8s.io"


@pytest.fixture(scope="module")
def lws_crd(cluster: LocalCluster) -> None:
    module = testenv.go_module_dir(*LWS_MODULE)
    path = module / "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
    crd = yaml.safe_load(path.read_text())
    name = crd["metadata"]["name"]
    cluster.rest.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", crd)
    cluster.wait_crd_established(name)


def leader_worker_set(namespace: str, name: str, size: int) -> dict[str, Any]:
    isolation = pod_isolation(namespace)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {names.QUEUE_LABEL: "serving"}},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": pod_template({"cpu": "2"}, isolation=isolation),
                "workerTemplate": pod_template({"cpu": "4"}, isolation=isolation),
            },
        },
    }


def group_statefulsets(lws: dict[str, Any], group: int) -> list[dict[str, Any]]:
    """The leader and worker StatefulSets of one group, as the LWS controller makes them from
    the stored templates."""
    name = lws["metadata"]["name"]
    spec = lws["spec"]["leaderWorkerTemplate"]
    size = spec["size"]
    group_key = hashlib.sha1(f"{lws['metadata']['uid']}/{group}".encode()).hexdigest()
    leader = f"{name}-{group}"
    sets = []
    for set_name, key, replicas in (
        (name, "leaderTemplate", 1),
        (leader, "workerTemplate", size - 1),
    ):
        template = copy.deepcopy(spec[key])
        meta = template.setdefault("metadata", {})
        labels = {
            f"{LWS}/name": name,
            f"{LWS}/group-index": str(group),
            f"{LWS}/group-key": group_key,
        }
        if key == "leaderTemplate":
            labels[f"{LWS}/worker-index"] = "0"
        meta.setdefault("labels", {}).update(labels)
        annotations = meta.setdefault("annotations", {})
        annotations[f"{LWS}/size"] = str(size)
        if key == "workerTemplate":
            annotations[f"{LWS}/leader-name"] = leader
        template["spec"]["restartPolicy"] = "Always"
        selector = {f"{LWS}/name": name, f"{LWS}/group-key": group_key, "set": set_name}
        meta["labels"]["set"] = set_name
        sets.append(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": set_name},
                "spec": {
                    "replicas": replicas,
                    "serviceName": name,
                    "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": selector},
                    "template": template,
                },
            }
        )
    return sets


async def test_a_leader_worker_group_is_admitted_and_placed_as_one_gang(
    stack: KohortStack,
    lws_crd: None,
    cluster: LocalCluster,
    namespace: str,
    admin: clients.Client,
    test_nodes: TestNodes,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    cq = f"{namespace}-cq"
    apply_queues(
        cluster.rest, [cluster_queue(cq, {"cpu": "16"}), local_queue(namespace, "serving", cq)]
    )
    team = Probe(admin, namespace)
    stored = await team.create(kinds.LEADERWORKERSETS, leader_worker_set(namespace, "llm", 4))
    gang = "lws-llm-0"
    await eventually(
        lambda: team.workload(gang),
        lambda wl: wl is not None,
        within=60,
        what="a Workload for the group, from the LeaderWorkerSet alone",
    )

    for statefulset in group_statefulsets(stored, 0):
        await team.create(kinds.STATEFULSETS, statefulset)

    await eventually(
        lambda: team.bound(gang),
        lambda b: len(b) == 4,
        within=90,
        what="leader and three workers bound together",
    )
    workload = await team.workload(gang)
    assert reserved(workload)
    assert workload is not None
    pod_sets = {ps["name"]: ps["count"] for ps in workload["spec"]["podSets"]}
    assert pod_sets == {"leader": 1, "worker": 3}
    pg = await team.podgroup(gang)
    assert pg is not None
    assert pg["spec"]["minMember"] == 4
    assert pg["spec"]["minResources"]["cpu"] == "14"
