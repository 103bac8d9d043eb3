"""How each kind puts a released gang's pods on the nodes of their flavors, and how an
admission names the flavors it gave."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from controller import quota
from controller.api import kube, names
from controller.quota.outcomes import Admission
from controller.workloads.base import Patch, PodSetFlavors
from controller.workloads.job import TEMPLATE_BEFORE_FLAVORS, JobAdapter
from controller.workloads.leaderworkerset import LeaderWorkerSetAdapter
from controller.workloads.pod import PodAdapter
from controller.workloads.registry import REGISTRY
from tests.fakes.workloads import make_job, make_lws, make_pod

H100 = quota.FlavorSpec(
    "h100",
    node_labels={"gpu": "h100"},
    tolerations=(quota.Toleration("gpu", "Exists", "", "NoSchedule"),),
)
SPOT = quota.FlavorSpec("spot", node_labels={"lifecycle": "spot"})


def gated(name: str, labels: dict[str, str] | None = None, **extra: Any) -> kube.Pod:
    pod = make_pod(name, gates=(names.ADMISSION_GATE,), labels=labels, **extra)
    pod["metadata"]["resourceVersion"] = "7"
    return msgspec.convert(pod, kube.Pod)


def test_a_gated_pod_gets_its_flavors_fields_in_the_patch_that_removes_its_gate() -> None:
    pod = gated("p0")

    [release] = REGISTRY.instance(PodAdapter).release(pod, [pod], {"main": PodSetFlavors((H100,))})

    assert isinstance(release, Patch)
    assert release.body == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/spec/nodeSelector", "value": {"gpu": "h100"}},
        {
            "op": "add",
            "path": "/spec/tolerations",
            "value": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        {"op": "remove", "path": "/spec/schedulingGates/0"},
    ]


def test_a_pod_with_a_node_selector_of_its_own_gets_the_flavors_labels_added_to_it() -> None:
    raw = make_pod("p0", gates=(names.ADMISSION_GATE,))
    raw["spec"]["nodeSelector"] = {"zone": "a"}
    pod = msgspec.convert(raw, kube.Pod)

    [release] = REGISTRY.instance(PodAdapter).release(pod, [pod], {"main": PodSetFlavors((SPOT,))})

    assert isinstance(release, Patch)
    assert {"op": "add", "path": "/spec/nodeSelector/lifecycle", "value": "spot"} in release.body


def test_a_pod_whose_node_selector_contradicts_its_flavor_stays_gated() -> None:
    raw = make_pod("p0", gates=(names.ADMISSION_GATE,))
    raw["spec"]["nodeSelector"] = {"gpu": "a100"}
    pod = msgspec.convert(raw, kube.Pod)

    assert REGISTRY.instance(PodAdapter).release(pod, [pod], {"main": PodSetFlavors((H100,))}) == []


def test_pods_of_a_plain_group_given_their_flavor_are_alike_those_not_given_it_yet() -> None:
    group = {names.POD_GROUP_LABEL: "ring", names.POD_GROUP_TOTAL_COUNT_LABEL: "2"}
    first = make_pod("p0", labels=group)  # released already, on h100
    first["spec"]["nodeSelector"] = {"gpu": "h100"}
    first["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pods = [msgspec.convert(first, kube.Pod), gated("p1", group)]

    writes = REGISTRY.instance(PodAdapter).release(pods[0], pods, {"main": PodSetFlavors((H100,))})

    assert [w.name for w in writes] == ["p1"]


def test_a_leaderworkerset_groups_leader_and_workers_get_their_own_pod_sets_flavors() -> None:
    lws = msgspec.convert(make_lws(), kube.LeaderWorkerSet)
    name = lws.metadata.name
    pods = [
        gated(
            f"{name}-0{suffix}",
            {
                names.LWS_NAME_LABEL: name,
                names.LWS_GROUP_INDEX_LABEL: "0",
                names.LWS_WORKER_INDEX_LABEL: index,
            },
            owner_kind="StatefulSet",
        )
        for suffix, index in (("", "0"), ("-1", "1"))
    ]
    flavors = {"leader": PodSetFlavors((SPOT,)), "worker": PodSetFlavors((H100,))}

    writes = LeaderWorkerSetAdapter().release(lws, pods, flavors)

    selectors = {
        w.name: next(op["value"] for op in w.body if op["path"] == "/spec/nodeSelector")
        for w in writes
        if isinstance(w, Patch)
    }
    assert selectors == {f"{name}-0": {"lifecycle": "spot"}, f"{name}-0-1": {"gpu": "h100"}}


def held_job() -> kube.Job:
    raw = make_job(parallelism=2, completions=2, suspend=True)
    raw["spec"]["template"]["metadata"] = {"labels": {names.POD_GROUP_LABEL: "job-train"}}
    raw["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "a"}
    return msgspec.convert(raw, kube.Job)


def test_a_job_keeps_its_own_scheduling_fields_in_an_annotation_while_released_on_flavors() -> None:
    job = held_job()

    [release] = REGISTRY.instance(JobAdapter).release(job, [], {"main": PodSetFlavors((H100,))})

    assert isinstance(release, Patch)
    body = release.body
    assert body["spec"]["suspend"] is False
    assert body["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "h100"}
    kept = json.loads(body["metadata"]["annotations"][TEMPLATE_BEFORE_FLAVORS])
    assert kept == {"nodeSelector": {"zone": "a"}}


def test_a_released_jobs_gang_is_the_one_its_user_asked_for_not_its_flavors() -> None:
    raw = msgspec.to_builtins(held_job())
    raw["metadata"]["annotations"] = {TEMPLATE_BEFORE_FLAVORS: '{"nodeSelector":{"zone":"a"}}'}
    raw["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "a", "gpu": "h100"}
    raw["spec"]["suspend"] = False

    [gang] = REGISTRY.instance(JobAdapter).gangs(msgspec.convert(raw, kube.Job))

    assert dict(gang.pod_sets[0].node_selector) == {"zone": "a"}


def test_an_admission_names_its_flavors() -> None:
    one = Admission("ns/a", "cq", (), flavors={"main": {"cpu": "h100", "nvidia.com/gpu": "h100"}})
    two = Admission("ns/b", "cq", (), flavors={"main": {"cpu": "spot", "nvidia.com/gpu": "h100"}})
    none = Admission("ns/c", "cq", ())

    assert one.describe().endswith("(within nominal quota) on flavor h100")
    assert two.describe().endswith("on flavors (main: cpu spot, nvidia.com/gpu h100)")
    assert "flavor" not in none.describe()


def test_a_flavors_toleration_keeps_its_toleration_seconds_on_the_pod() -> None:
    pod = gated("p0")
    evictable = quota.FlavorSpec(
        "spot",
        tolerations=(quota.Toleration("reclaim", "Exists", "", "NoExecute", seconds=300),),
    )

    [release] = REGISTRY.instance(PodAdapter).release(
        pod, [pod], {"main": PodSetFlavors((evictable,))}
    )

    assert isinstance(release, Patch)
    assert {
        "op": "add",
        "path": "/spec/tolerations",
        "value": [
            {
                "key": "reclaim",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
    } in release.body


def test_a_resource_flavors_toleration_seconds_reach_the_core() -> None:
    from controller.api.queues import ResourceFlavor
    from controller.state.cohorts import flavor_spec

    flavor = ResourceFlavor.model_validate(
        {
            "metadata": {"name": "spot"},
            "spec": {
                "tolerations": [
                    {
                        "key": "reclaim",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    }
                ]
            },
        }
    )
    [toleration] = flavor_spec(flavor).tolerations
    assert toleration.seconds == 300
