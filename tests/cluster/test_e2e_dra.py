"""GPUs as DRA devices, end to end: kwok nodes publish their GPUs in ResourceSlices (DeviceClass
gpu.kohort.dev, hack/dra.py), the controller charges DeviceClass gpu.kohort.dev as
nvidia.com/gpu, kube-controller-manager makes each pod's claims from its template, and the gang
backend's scheduler allocates them as it binds the pods: every test runs on the kubernetes
backend (kube-scheduler) and on Volcano (its predicates plugin with DRA on, hack/localcluster.py).

The test nodes: 2 nodes of 4 DRA GPUs each (8 in all); for the shared-quota test, 1 more node
of 4 extended-resource GPUs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from controller.api import kinds
from controller.cluster.clients import Client
from controller.state.objects import PodGroupSettings
from controller.workloads.base import Backend
from hack import dra
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import (
    GPU,
    Probe,
    claim_template,
    claims_from,
    cluster_queue,
    gang_job,
    local_queue,
    pending_reason,
    reserved,
    usage,
)
from tests.cluster.conftest import SETTINGS
from tests.conftest import TestNodes
from tests.support import GangSetup, eventually, holds_for, pod_isolation

CLASSES = {dra.DEVICE_CLASS: GPU}
TWO_GPUS = "two-gpus"
ALL_GPUS = "all-gpus"
RESOURCES = "/apis/resource.k8s.io/v1"


@pytest.fixture(
    scope="module",
    params=(GangSetup(Backend.KUBERNETES, "v1alpha1"), GangSetup(Backend.VOLCANO)),
    ids=str,
)
def gang_setup(request: pytest.FixtureRequest) -> GangSetup:
    setup: GangSetup = request.param
    return setup


@pytest.fixture(scope="module")
async def stack(cluster: LocalCluster, gang_backend: Backend) -> AsyncIterator[KohortStack]:
    settings = replace(SETTINGS, device_classes=CLASSES)
    podgroups = PodGroupSettings(gang_backend)
    running = await KohortStack(cluster, settings=settings, podgroups=podgroups).start()
    yield running
    await running.stop()


@dataclass
class Scene:
    cluster: LocalCluster
    namespace: str
    admin: Client
    add_nodes: TestNodes

    def probe(self) -> Probe:
        return Probe(self.admin, self.namespace)

    def teams(self, **gpus: int) -> None:
        """A ClusterQueue `<namespace>-<team>` of that many GPUs per team, and its LocalQueue
        `<team>`, on the one default flavor."""
        objects = []
        for team, count in gpus.items():
            name = f"{self.namespace}-{team}"
            objects += [
                cluster_queue(name, {GPU: str(count), "cpu": "64"}),
                local_queue(self.namespace, team, name),
            ]
        apply_queues(self.cluster.rest, objects)

    def template(self, name: str, gpus: int | None) -> None:
        """A ResourceClaimTemplate whose claims ask for `gpus` GPUs (None: all of a node's)."""
        path = f"{RESOURCES}/namespaces/{self.namespace}/resourceclaimtemplates"
        mode = "All" if gpus is None else None
        obj = claim_template(name, dra.DEVICE_CLASS, gpus or 1, allocation_mode=mode)
        self.cluster.rest.create(path, obj)

    def dra_job(self, name: str, team: str, pods: int, template: str = TWO_GPUS) -> Any:
        isolation = {**pod_isolation(self.namespace), **claims_from(template)}
        return gang_job(name, queue=team, pods=pods, requests={"cpu": "1"}, isolation=isolation)

    async def claims(self) -> dict[str, list[str]]:
        """Each allocated claim of the namespace: the devices it holds, `node/device`."""
        items = self.cluster.rest.get(f"{RESOURCES}/namespaces/{self.namespace}/resourceclaims")
        out = {}
        for claim in items["items"]:
            results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {})
            devices = [f"{r['pool']}/{r['device']}" for r in results.get("results", [])]
            if devices:
                out[claim["metadata"]["name"]] = devices
        return out


@pytest.fixture
def scene(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    drained: None,
) -> Scene:
    stack.enroll(namespace)
    return Scene(cluster, namespace, admin, test_nodes)


async def all_bound(team: Probe, gang: str, pods: int) -> list[str]:
    return await eventually(
        lambda: team.bound(gang),
        lambda bound: len(bound) == pods,
        within=90,
        what=f"all {pods} pods of {gang} bound",
    )


async def test_a_gang_of_4_pods_claiming_2_gpus_each_is_admitted_on_8_and_binds_with_its_claims(
    scene: Scene,
) -> None:
    nodes = scene.add_nodes("dra", 2, cpu="16", dra_gpus=4)
    scene.teams(a=8, b=4)
    scene.template(TWO_GPUS, 2)
    team = scene.probe()

    await team.create(kinds.JOBS, scene.dra_job("train", "a", 4))
    await all_bound(team, "job-train", 4)

    wl = await team.workload("job-train")
    assert reserved(wl)
    [assigned] = (wl or {})["status"]["admission"]["podSetAssignments"]
    assert assigned["resourceUsage"][GPU] == "8"
    claims = await eventually(
        scene.claims, lambda c: len(c) == 4, within=30, what="4 claims allocated"
    )
    devices = sorted(d for held in claims.values() for d in held)
    assert len(devices) == 8 and len(set(devices)) == 8
    assert {d.split("/")[0] for d in devices} == set(nodes)
    queue = await team.cluster_queue(f"{scene.namespace}-a")
    assert usage(queue, GPU) == "8"

    # Team a's quota is used up through claims: one more pod claiming 2 GPUs waits.
    await team.create(kinds.JOBS, scene.dra_job("more", "a", 1))
    waiting = await eventually(
        lambda: team.workload("job-more"),
        lambda w: f"needs 2 {GPU}, queue can take 0 more" in pending_reason(w),
        what="the second gang of team a waiting for quota",
    )
    assert not reserved(waiting)
    # Team b's quota of 4 can never hold a gang of 8 claimed GPUs.
    await team.create(kinds.JOBS, scene.dra_job("big", "b", 4))
    await eventually(
        lambda: team.workload("job-big"),
        lambda w: f"needs 8 {GPU}, more than ClusterQueue" in pending_reason(w),
        what="team b's gang told it never fits",
    )
    await holds_for(
        lambda: team.bound(),
        lambda bound: len(bound) == 4,
        duration=3,
        what="only team a's first gang bound",
    )


async def test_a_gang_whose_claim_template_is_missing_waits_then_runs_once_it_exists(
    scene: Scene,
) -> None:
    scene.add_nodes("dra", 2, cpu="16", dra_gpus=4)
    scene.teams(a=8)
    team = scene.probe()

    await team.create(kinds.JOBS, scene.dra_job("early", "a", 2))
    await eventually(
        lambda: team.workload("job-early"),
        lambda w: f"ResourceClaimTemplate {TWO_GPUS} (pod set main) not found" in pending_reason(w),
        what="the gang waiting for its template",
    )
    assert await team.bound() == []

    scene.template(TWO_GPUS, 2)
    await all_bound(team, "job-early", 2)
    queue = await team.cluster_queue(f"{scene.namespace}-a")
    assert usage(queue, GPU) == "4"


async def test_an_extended_resource_gang_and_a_dra_gang_share_one_queues_gpus(
    scene: Scene,
) -> None:
    scene.add_nodes("dra", 2, cpu="16", dra_gpus=4)
    scene.add_nodes("ext", 1, cpu="16", gpus=4)
    scene.teams(a=8)
    scene.template(TWO_GPUS, 2)
    team = scene.probe()

    extended = gang_job(
        "ext",
        queue="a",
        pods=4,
        requests={"cpu": "1", GPU: "1"},
        isolation=pod_isolation(scene.namespace),
    )
    await team.create(kinds.JOBS, extended)
    await team.create(kinds.JOBS, scene.dra_job("dra", "a", 2))
    await all_bound(team, "job-ext", 4)
    await all_bound(team, "job-dra", 2)
    queue = await team.cluster_queue(f"{scene.namespace}-a")
    assert usage(queue, GPU) == "8"

    await team.create(kinds.JOBS, scene.dra_job("third", "a", 1))
    await eventually(
        lambda: team.workload("job-third"),
        lambda w: f"needs 2 {GPU}, queue can take 0 more" in pending_reason(w),
        what="a third gang waiting for the shared GPU quota",
    )
    assert sorted(await team.bound("job-third")) == []


async def test_a_gang_the_quota_allows_waits_for_free_devices_and_binds_once_they_are_freed(
    scene: Scene,
) -> None:
    scene.add_nodes("dra", 2, cpu="16", dra_gpus=4)
    scene.teams(a=16)
    scene.template(TWO_GPUS, 2)
    team = scene.probe()

    await team.create(kinds.JOBS, scene.dra_job("first", "a", 3))
    await all_bound(team, "job-first", 3)
    await team.create(kinds.JOBS, scene.dra_job("second", "a", 2))
    waiting = await eventually(
        lambda: team.workload("job-second"),
        lambda w: pending_reason(w).startswith("Quota ok but no node fits"),
        what="the second gang waiting for free devices",
    )
    assert f"devices.kohort.dev/{dra.DEVICE_CLASS}" in pending_reason(waiting)
    assert await team.bound("job-second") == []

    await scene.admin.delete(kinds.JOBS, "first", scene.namespace, propagation="Foreground")
    await all_bound(team, "job-second", 2)
    claims = await eventually(
        scene.claims, lambda c: len(c) == 2, within=30, what="the second gang's 2 claims"
    )
    assert len({d for held in claims.values() for d in held}) == 4


async def test_a_gang_claiming_all_gpus_of_its_nodes_is_charged_their_count_and_gets_every_one(
    scene: Scene,
) -> None:
    nodes = scene.add_nodes("dra", 2, cpu="16", dra_gpus=4)
    scene.teams(a=8)
    scene.template(ALL_GPUS, None)
    team = scene.probe()

    await team.create(kinds.JOBS, scene.dra_job("whole", "a", 2, ALL_GPUS))
    await all_bound(team, "job-whole", 2)

    wl = await team.workload("job-whole")
    [assigned] = (wl or {})["status"]["admission"]["podSetAssignments"]
    assert assigned["resourceUsage"][GPU] == "8"
    claims = await eventually(
        scene.claims, lambda c: len(c) == 2, within=30, what="2 claims allocated"
    )
    # Each pod's claim holds every GPU of one node, and the two pods are on different nodes.
    pools = [{d.split("/")[0] for d in held} for held in claims.values()]
    assert all(len(held) == 4 for held in claims.values())
    assert all(len(pool) == 1 for pool in pools)
    assert set().union(*pools) == set(nodes)
    queue = await team.cluster_queue(f"{scene.namespace}-a")
    assert usage(queue, GPU) == "8"

    await team.create(kinds.JOBS, scene.dra_job("more", "a", 1, ALL_GPUS))
    await eventually(
        lambda: team.workload("job-more"),
        lambda w: f"needs 4 {GPU}, queue can take 0 more" in pending_reason(w),
        what="one more pod claiming a whole node's GPUs waiting for quota",
    )
    assert await team.bound("job-more") == []
