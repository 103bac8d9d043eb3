"""Admitted means placed, end to end on every gang backend: gangs that must stay inside one rack
or block of a Topology, pods that keep one per node or apart by host port, each gang pinned to
the nodes it was admitted on and bound there; and gangs whose rules cannot hold (one worker per
node on too few nodes, a spread over zones too unequal for it, a node affinity to a zone no node
is in, one host port on too few nodes),
waiting with the rule named and holding nothing.

The test nodes: 2 blocks x 2 racks x 2 nodes of 8 GPUs, labelled with their block and rack (and,
as every kwok node, their hostname).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from controller.api import kinds, names
from controller.cluster.clients import Client
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import (
    Probe,
    cluster_queue,
    gang_job,
    local_queue,
    pending_reason,
    reserved,
    usage,
)
from tests.conftest import TestNodes
from tests.support import GANG_BACKENDS, GangSetup, eventually, holds_for, pod_isolation

pytestmark = pytest.mark.volcano

GPU = "nvidia.com/gpu"
BLOCK = "example.com/block"
RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
REQUIRED = f"{names.GROUP}/podset-required-topology"
PREFERRED = f"{names.GROUP}/podset-preferred-topology"
SLICE_LEVEL = f"{names.GROUP}/podset-slice-required-topology"
SLICE_SIZE = f"{names.GROUP}/podset-slice-size"


@pytest.fixture(scope="module", params=GANG_BACKENDS, ids=str)
def gang_setup(request: pytest.FixtureRequest) -> GangSetup:
    setup: GangSetup = request.param
    return setup


def racks(test_nodes: TestNodes) -> dict[str, str]:
    """The test's nodes: node name -> its rack."""
    rack_of: dict[str, str] = {}
    for block in ("b0", "b1"):
        for rack in ("r0", "r1"):
            name = f"{block}{rack}"
            labels = {BLOCK: block, RACK: name}
            for node in test_nodes(name, 2, gpus=8, cpu="16", labels=labels):
                rack_of[node] = name
    return rack_of


def queues(
    cluster: LocalCluster, namespace: str, *, gpus: int = 64, borrower: bool = False
) -> None:
    """A Topology, a ResourceFlavor on it, and a ClusterQueue of `gpus` GPUs on that flavor with
    its LocalQueue `team`; with `borrower`, both in a cohort with a queue of no quota of its
    own (LocalQueue `other`) whose gangs the first may reclaim from."""
    topology, flavor = f"{namespace}-fabric", f"{namespace}-gpu"
    cluster.rest.create(
        f"/apis/{names.API_VERSION}/topologies",
        {
            "apiVersion": names.API_VERSION,
            "kind": "Topology",
            "metadata": {"name": topology},
            "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]},
        },
    )
    cluster.rest.create(
        f"/apis/{names.API_VERSION}/resourceflavors",
        {
            "apiVersion": names.API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"topologyName": topology},
        },
    )
    cohort = f"{namespace}-org" if borrower else None
    cq = cluster_queue(
        namespace, {GPU: str(gpus), "cpu": str(gpus * 2)}, cohort=cohort, reclaim="Any"
    )
    objects = [cq, local_queue(namespace, "team", namespace)]
    if borrower:
        other = cluster_queue(f"{namespace}-b", {GPU: "0", "cpu": "0"}, cohort=cohort)
        objects += [other, local_queue(namespace, "other", f"{namespace}-b")]
    for obj in objects:
        for group in obj["spec"].get("resourceGroups", []):
            group["flavors"][0]["name"] = flavor
    apply_queues(cluster.rest, objects)


def job(namespace: str, name: str, pods: int, **annotations: str) -> dict[str, Any]:
    """A Job of `pods` pods of 8 GPUs each, its pod template annotated."""
    obj = gang_job(
        name,
        queue="team",
        pods=pods,
        requests={GPU: "8", "cpu": "1"},
        isolation=pod_isolation(namespace),
    )
    if annotations:
        obj["spec"]["template"].setdefault("metadata", {})["annotations"] = dict(annotations)
    return obj


@dataclass
class Scene:
    """One test's enrolled namespace, its nodes and its queues, and what its user sees."""

    cluster: LocalCluster
    namespace: str
    team: Probe
    add_nodes: TestNodes

    def racks(self) -> dict[str, str]:
        """2 blocks x 2 racks x 2 nodes of 8 GPUs: node name -> its rack."""
        return racks(self.add_nodes)

    def queues(self, *, gpus: int = 64, borrower: bool = False) -> None:
        queues(self.cluster, self.namespace, gpus=gpus, borrower=borrower)


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
    return Scene(cluster, namespace, Probe(admin, namespace), test_nodes)


async def placed(team: Probe, gang: str) -> Counter[str]:
    """Node -> the gang's live pods bound there."""
    return Counter(
        p["spec"]["nodeName"] for p in await team.pods(gang) if p["spec"].get("nodeName")
    )


async def planned(team: Probe, gang: str) -> Counter[str]:
    """Node -> the gang's pods its admission placed there."""
    wl = await team.workload(gang)
    assignments = ((wl or {}).get("status") or {}).get("admission", {}).get("podSetAssignments", [])
    return Counter({n["node"]: n["count"] for a in assignments for n in a.get("nodes", [])})


async def bound_as_planned(team: Probe, gang: str, pods: int) -> Counter[str]:
    """Waits until all `pods` pods of the gang are bound; they must be where it was planned."""
    bound = await eventually(
        lambda: placed(team, gang),
        lambda b: sum(b.values()) == pods,
        within=90,
        what=f"all {pods} pods of {gang} bound",
    )
    assert bound == await planned(team, gang), "bound elsewhere than admitted"
    return bound


async def blockers(team: Probe, namespace: str, nodes: list[str]) -> None:
    """One 8-GPU pod on each of `nodes` (a Job each, in the same queue), running."""
    for node in nodes:
        blocker = job(namespace, f"block-{node[-6:]}", 1)
        spec = blocker["spec"]["template"]["spec"]
        spec["nodeSelector"] = {**spec["nodeSelector"], HOST: node}
        await team.create(kinds.JOBS, blocker)
    for node in nodes:
        await bound_as_planned(team, f"job-block-{node[-6:]}", 1)


async def test_a_gang_that_needs_one_rack_waits_for_a_free_rack_then_binds_inside_it(
    scene: Scene,
) -> None:
    namespace, team = scene.namespace, scene.team
    rack_of = scene.racks()
    scene.queues()
    first_of_each = [n for n in rack_of if n.endswith("-0")]
    await blockers(team, namespace, first_of_each)  # every rack keeps one free node

    await team.create(kinds.JOBS, job(namespace, "train", 2, **{REQUIRED: RACK}))

    waiting = await eventually(
        lambda: team.workload("job-train"),
        lambda wl: "its topology request (in one example.com/rack)" in pending_reason(wl),
        what="the gang waiting for a whole rack",
    )
    assert not reserved(waiting)
    await holds_for(lambda: placed(team, "job-train"), lambda b: not b, 3, what="nothing bound")

    freed = first_of_each[2]
    await team.api.delete(kinds.JOBS, f"block-{freed[-6:]}", namespace)

    bound = await bound_as_planned(team, "job-train", 2)
    assert {rack_of[n] for n in bound} == {rack_of[freed]}


async def test_a_preferred_rack_falls_back_to_one_block(scene: Scene) -> None:
    namespace, team = scene.namespace, scene.team
    rack_of = scene.racks()
    scene.queues()
    # Block b0 keeps one free node per rack; block b1 is free: no rack has 3 free nodes.
    await blockers(team, namespace, [n for n in rack_of if n.endswith("-0") and "b0" in rack_of[n]])

    await team.create(kinds.JOBS, job(namespace, "train", 3, **{PREFERRED: RACK}))

    bound = await bound_as_planned(team, "job-train", 3)
    assert {rack_of[n][:2] for n in bound} == {"b1"}  # one block
    assert len({rack_of[n] for n in bound}) == 2  # over its two racks


async def test_slices_land_each_in_its_own_rack_of_one_block(scene: Scene) -> None:
    namespace, team = scene.namespace, scene.team
    rack_of = scene.racks()
    scene.queues()
    annotations = {REQUIRED: BLOCK, SLICE_LEVEL: RACK, SLICE_SIZE: "2"}

    await team.create(kinds.JOBS, job(namespace, "train", 4, **annotations))

    bound = await bound_as_planned(team, "job-train", 4)
    per_rack = Counter(rack_of[n] for n, count in bound.items() for _ in range(count))
    assert sorted(per_rack.values()) == [2, 2]
    assert len({rack[:2] for rack in per_rack}) == 1


def anti_affine(namespace: str, name: str, pods: int) -> dict[str, Any]:
    """A Job whose pods must be one per node (required pod anti-affinity on the hostname)."""
    obj = job(namespace, name, pods)
    template = obj["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("labels", {})["app"] = name
    template["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": HOST}
            ]
        }
    }
    return obj


async def test_one_worker_per_node_that_cannot_hold_waits_naming_it_and_holds_nothing(
    scene: Scene,
) -> None:
    namespace, team = scene.namespace, scene.team
    scene.add_nodes("pair", 2, gpus=16, cpu="32")  # room for 4 pods, on 2 nodes
    apply_queues(
        scene.cluster.rest,
        [
            cluster_queue(namespace, {GPU: "64", "cpu": "128"}),
            local_queue(namespace, "team", namespace),
        ],
    )

    await team.create(kinds.JOBS, anti_affine(namespace, "spread", 3))

    wl = await eventually(
        lambda: team.workload("job-spread"),
        lambda wl: "pod anti-affinity (one per kubernetes.io/hostname)" in pending_reason(wl),
        what="the gang inadmissible, naming its anti-affinity",
    )
    assert not reserved(wl)
    assert pending_reason(wl).startswith("Inadmissible")
    assert usage(await team.cluster_queue(namespace), GPU) == "0"
    await holds_for(lambda: placed(team, "job-spread"), lambda b: not b, 3, what="nothing bound")

    await team.create(kinds.JOBS, anti_affine(namespace, "pair", 2))
    bound = await bound_as_planned(team, "job-pair", 2)
    assert sorted(bound.values()) == [1, 1]


async def test_reclaim_for_a_gang_that_needs_one_rack_frees_one_rack(scene: Scene) -> None:
    namespace, team = scene.namespace, scene.team
    rack_of = {}
    for rack in ("r0", "r1"):
        labels = {BLOCK: "b0", RACK: rack}
        for node in scene.add_nodes(rack, 2, gpus=8, cpu="16", labels=labels):
            rack_of[node] = rack
    scene.queues(gpus=32, borrower=True)
    for node in rack_of:
        borrowed = job(namespace, f"b-{node[-6:]}", 1)
        borrowed["metadata"]["labels"][names.QUEUE_LABEL] = "other"
        spec = borrowed["spec"]["template"]["spec"]
        spec["nodeSelector"] = {**spec["nodeSelector"], HOST: node}
        await team.create(kinds.JOBS, borrowed)
    for node in rack_of:
        await bound_as_planned(team, f"job-b-{node[-6:]}", 1)

    await team.create(kinds.JOBS, job(namespace, "urgent", 2, **{REQUIRED: RACK}))

    bound = await bound_as_planned(team, "job-urgent", 2)
    rack = {rack_of[n] for n in bound}
    assert len(rack) == 1
    evicted = [node for node in rack_of if not reserved(await team.workload(f"job-b-{node[-6:]}"))]
    assert {rack_of[n] for n in evicted} == rack and len(evicted) == 2


async def test_a_job_planned_over_two_nodes_has_each_pod_pinned_to_its_own_planned_node(
    scene: Scene,
) -> None:
    # A pod set spread over nodes is pinned pod by pod (gated, then ungated onto one node
    # each), so that no scheduler packs more of it onto a node than planned.
    namespace, team = scene.namespace, scene.team
    rack_of = scene.racks()
    scene.queues()
    half = gang_job(
        "half",
        queue="team",
        pods=1,
        requests={GPU: "4", "cpu": "1"},
        isolation=pod_isolation(namespace),
    )
    first = sorted(rack_of)[0]
    spec = half["spec"]["template"]["spec"]
    spec["nodeSelector"] = {**spec["nodeSelector"], HOST: first}
    await team.create(kinds.JOBS, half)
    await bound_as_planned(team, "job-half", 1)

    train = gang_job(
        "train",
        queue="team",
        pods=3,
        requests={GPU: "4", "cpu": "1"},
        isolation=pod_isolation(namespace),
    )
    train["spec"]["template"]["metadata"] = {"annotations": {REQUIRED: RACK}}
    await team.create(kinds.JOBS, train)

    bound = await bound_as_planned(team, "job-train", 3)
    assert len(bound) == 2
    for pod in await team.pods("job-train"):
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        pins = [r["values"] for t in terms for r in t["matchExpressions"] if r["key"] == HOST]
        assert [pod["spec"]["nodeName"]] in pins, "each pod pinned to its own node"


async def inadmissible(team: Probe, gang: str, rule: str) -> None:
    """The gang waits, Inadmissible with `rule` named, holding no quota and no node."""
    wl = await eventually(
        lambda: team.workload(gang),
        lambda wl: rule in pending_reason(wl),
        what=f"{gang} waiting, naming {rule}",
    )
    assert not reserved(wl)
    assert pending_reason(wl).startswith("Inadmissible")
    await holds_for(lambda: placed(team, gang), lambda b: not b, 3, what="nothing bound")


async def test_a_node_affinity_to_a_zone_no_node_is_in_is_inadmissible_and_says_so(
    scene: Scene,
) -> None:
    namespace, team = scene.namespace, scene.team
    scene.add_nodes("zoned", 2, gpus=8, cpu="16", labels={"topology.kubernetes.io/zone": "zone-a"})
    scene.queues()
    elsewhere = job(namespace, "elsewhere", 3)
    elsewhere["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "topology.kubernetes.io/zone",
                                "operator": "In",
                                "values": ["zone-z"],
                            }
                        ]
                    }
                ]
            }
        }
    }

    await team.create(kinds.JOBS, elsewhere)

    await inadmissible(team, "job-elsewhere", "no node matches its node selector, node affinity")


async def test_pods_that_ask_for_the_same_host_port_never_share_a_node(scene: Scene) -> None:
    namespace, team = scene.namespace, scene.team
    scene.add_nodes("ports", 2, gpus=32, cpu="64")
    scene.queues()

    def with_port(name: str, pods: int) -> dict[str, Any]:
        obj = job(namespace, name, pods)
        container = obj["spec"]["template"]["spec"]["containers"][0]
        container["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
        return obj

    await team.create(kinds.JOBS, with_port("three", 3))
    await inadmissible(team, "job-three", "host port 8080/TCP")

    await team.create(kinds.JOBS, with_port("two", 2))
    bound = await bound_as_planned(team, "job-two", 2)
    assert sorted(bound.values()) == [1, 1]


async def test_a_spread_over_zones_that_cannot_hold_waits_naming_it(scene: Scene) -> None:
    namespace, team = scene.namespace, scene.team
    zone = "topology.kubernetes.io/zone"
    scene.add_nodes("za", 1, gpus=24, cpu="48", labels={zone: "zone-a"})  # 3 pods' room
    scene.add_nodes("zb", 1, gpus=8, cpu="16", labels={zone: "zone-b"})  # 1 pod's room
    scene.queues()

    def spread(name: str, pods: int) -> dict[str, Any]:
        obj = job(namespace, name, pods)
        template = obj["spec"]["template"]
        template.setdefault("metadata", {}).setdefault("labels", {})["app"] = name
        template["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": zone,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": name}},
            }
        ]
        return obj

    await team.create(kinds.JOBS, spread("even", 4))  # 2 + 2 cannot hold: zone-b takes 1
    await inadmissible(team, "job-even", "topology spread (maxSkew 1 over")

    await team.create(kinds.JOBS, spread("fits", 2))
    bound = await bound_as_planned(team, "job-fits", 2)
    assert len(bound) == 2  # one pod in each zone
