"""The story `kohort dev demo` tells on a fresh local control plane, printed as tables."""

from __future__ import annotations

from typing import Any

from hack import processes
from hack.localcluster import LocalCluster, NodePool
from hack.rest import RestClient
from hack.tables import format_table

NAMESPACE = "demo"
GANG = 4
GPUS_PER_POD = 8


def nodes_table(rest: RestClient) -> str:
    rows = []
    for node in rest.get("/api/v1/nodes")["items"]:
        status = node.get("status", {})
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
        )
        alloc = status.get("allocatable", {})
        taints = ",".join(t["key"] for t in node["spec"].get("taints", [])) or "-"
        rows.append(
            [
                node["metadata"]["name"],
                "Ready" if ready else "NotReady",
                alloc.get("cpu", "-"),
                alloc.get("memory", "-"),
                alloc.get("nvidia.com/gpu", "0"),
                taints,
            ]
        )
    return format_table(["NODE", "STATUS", "CPU", "MEMORY", "GPU", "TAINTS"], rows)


def pods_table(rest: RestClient, namespace: str) -> str:
    rows = [
        [
            p["metadata"]["name"],
            p["status"].get("phase", "-"),
            p["spec"].get("nodeName", "<none>"),
            p["spec"].get("schedulerName", "-"),
        ]
        for p in rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    ]
    return format_table(["POD", "PHASE", "NODE", "SCHEDULER"], rows)


def podgroups_table(rest: RestClient, namespace: str) -> str:
    rows = []
    for pg in rest.get(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups")[
        "items"
    ]:
        status = pg.get("status", {})
        reasons = [
            c.get("message", "")[:70]
            for c in status.get("conditions", [])
            if c.get("type") == "Unschedulable" and c.get("status") == "True"
        ]
        rows.append(
            [
                pg["metadata"]["name"],
                status.get("phase", "-"),
                str(pg["spec"].get("minMember", "-")),
                str(status.get("running", 0)),
                reasons[0] if reasons else "",
            ]
        )
    return format_table(["PODGROUP", "PHASE", "MINMEMBER", "RUNNING", "WHY"], rows)


def _gang_pod(i: int) -> dict[str, Any]:
    role = "leader" if i == 0 else f"worker-{i}"
    gpus = str(GPUS_PER_POD)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"trainer-{role}",
            "annotations": {"scheduling.k8s.io/group-name": "trainer"},
        },
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"nvidia.com/gpu": gpus},
                        "limits": {"nvidia.com/gpu": gpus},
                    },
                }
            ],
        },
    }


def _bound(rest: RestClient) -> int:
    pods = rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    return sum(1 for p in pods if p["spec"].get("nodeName"))


def _show(rest: RestClient, title: str) -> None:
    print(f"\n== {title}")
    print(podgroups_table(rest, NAMESPACE))
    print()
    print(pods_table(rest, NAMESPACE))


def run_story(cluster: LocalCluster) -> None:
    rest = cluster.rest
    print("\n== nodes")
    print(nodes_table(rest))
    gpus = sum(
        int(n["status"].get("allocatable", {}).get("nvidia.com/gpu", "0"))
        for n in rest.get("/api/v1/nodes")["items"]
    )
    rest.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        exist_ok=True,
    )
    rest.create(
        f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NAMESPACE}/podgroups",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "trainer"},
            "spec": {"minMember": GANG},
        },
    )
    for i in range(GANG):
        rest.create(f"/api/v1/namespaces/{NAMESPACE}/pods", _gang_pod(i))
    need = GANG * GPUS_PER_POD
    if gpus < need:
        processes.wait_until(
            "Volcano to mark the gang Unschedulable",
            lambda: (
                "Unschedulable" in podgroups_table(rest, NAMESPACE)
                or "Inqueue" in podgroups_table(rest, NAMESPACE)
            ),
            60,
            cluster.procs,
        )
        _show(
            rest,
            f"a gang of {GANG} pods x {GPUS_PER_POD} GPUs on {gpus} GPUs: "
            f"{_bound(rest)} pods bound, no GPU held",
        )
        missing = -(-(need - gpus) // GPUS_PER_POD)
        print(f"\n== adding {missing} node(s) of {GPUS_PER_POD} GPUs")
        cluster.add_nodes(
            NodePool("gpu-extra", missing, cpu="64", memory="512Gi", gpus=GPUS_PER_POD)
        )
    processes.wait_until(
        "the whole gang to be bound", lambda: _bound(rest) == GANG, 60, cluster.procs
    )
    _show(rest, f"all {GANG} pods of the gang bound together")
