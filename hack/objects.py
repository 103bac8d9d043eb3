"""Builders of the objects users create (queues, flavors, gang workloads) and read-only probes
of what they see, for the demo, the benches and the tests of the controller on a cluster.

Builders take keyword arguments with defaults and return plain dicts; probes read what a user
would look at (`kubectl get workloads`, `kubectl describe job`, the pods and their nodes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from controller.api import kinds, names
from controller.api.conditions import WorkloadCondition
from controller.cluster.clients import ApiError, Client, JSONDict
from controller.workloads.edits import lookup

GPU = "nvidia.com/gpu"
COMPLETE_AFTER = "kwok.kohort.dev/complete-after"


def cluster_queue(
    name: str,
    quotas: Mapping[str, str],
    *,
    cohort: str | None = None,
    weight: str | None = None,
    borrowing_limits: Mapping[str, str] | None = None,
    lending_limits: Mapping[str, str] | None = None,
    reclaim: str | None = None,
    within_queue: str | None = None,
    strategy: str | None = None,
    evict_after: int | None = 0,
    min_runtime: int | None = 0,
) -> JSONDict:
    """A ClusterQueue whose gangs may evict at once and be evicted at once (`evict_after`,
    `min_runtime` in seconds), since scenarios on the local control plane last seconds; None
    leaves a field to its measured default (half an hour, ten minutes)."""
    resources = []
    for resource, nominal in quotas.items():
        entry: JSONDict = {"name": resource, "nominalQuota": nominal}
        if borrowing_limits and resource in borrowing_limits:
            entry["borrowingLimit"] = borrowing_limits[resource]
        if lending_limits and resource in lending_limits:
            entry["lendingLimit"] = lending_limits[resource]
        resources.append(entry)
    spec: JSONDict = {
        "resourceGroups": [
            {
                "coveredResources": list(quotas),
                "flavors": [{"name": "default", "resources": resources}],
            }
        ]
    }
    if cohort:
        spec["cohort"] = cohort
    if weight:
        spec["fairSharing"] = {"weight": weight}
    preemption: JSONDict = {}
    if reclaim:
        preemption["reclaimWithinCohort"] = reclaim
    if within_queue:
        preemption["withinClusterQueue"] = within_queue
    if evict_after is not None:
        preemption["evictAfterSeconds"] = evict_after
    if min_runtime is not None:
        preemption["minimumRuntimeSeconds"] = min_runtime
    if preemption:
        spec["preemption"] = preemption
    if strategy:
        spec["queueingStrategy"] = strategy
    return {
        "apiVersion": names.API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def flavored_cluster_queue(
    name: str,
    flavors: Mapping[str, Mapping[str, str]],
    *,
    cohort: str | None = None,
    reclaim: str | None = None,
    checks: Mapping[str, Sequence[str]] | None = None,
) -> JSONDict:
    """A ClusterQueue of one resource group whose flavors (name -> resource -> nominal quota,
    in order of preference) all cover the same resources; its gangs may evict and be evicted
    at once; `checks`: the AdmissionChecks its gangs pass, each on its flavors."""
    covered = sorted({r for quotas in flavors.values() for r in quotas})
    spec: JSONDict = {
        "resourceGroups": [
            {
                "coveredResources": covered,
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": r, "nominalQuota": quotas.get(r, "0")} for r in covered
                        ],
                    }
                    for flavor, quotas in flavors.items()
                ],
            }
        ],
        "preemption": {"evictAfterSeconds": 0, "minimumRuntimeSeconds": 0},
    }
    if cohort:
        spec["cohort"] = cohort
    if reclaim:
        spec["preemption"]["reclaimWithinCohort"] = reclaim
    if checks:
        spec["admissionChecks"] = [
            {"name": name, "onFlavors": list(on)} for name, on in checks.items()
        ]
    return {
        "apiVersion": names.API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def cohort(
    name: str,
    *,
    parent: str | None = None,
    borrowing_limits: Mapping[str, str] | None = None,
    flavor: str = "default",
) -> JSONDict:
    """A Cohort under `parent` with no quota of its own, taking at most `borrowing_limits`
    (resource -> quantity, on `flavor`) from its parent."""
    spec: JSONDict = {"parent": parent} if parent else {}
    if borrowing_limits:
        resources = [
            {"name": r, "nominalQuota": "0", "borrowingLimit": limit}
            for r, limit in borrowing_limits.items()
        ]
        spec["resourceGroups"] = [
            {
                "coveredResources": list(borrowing_limits),
                "flavors": [{"name": flavor, "resources": resources}],
            }
        ]
    return {
        "apiVersion": names.API_VERSION,
        "kind": "Cohort",
        "metadata": {"name": name},
        "spec": spec,
    }


def resource_flavor(
    name: str,
    *,
    node_labels: Mapping[str, str] | None = None,
    node_taints: list[JSONDict] | None = None,
    tolerations: list[JSONDict] | None = None,
    topology: str | None = None,
    max_nodes: int | None = None,
    node_allocatable: Mapping[str, str] | None = None,
) -> JSONDict:
    """A ResourceFlavor: its nodes' labels and taints, the tolerations its pods get (none of
    them: every node), the Topology its nodes are arranged in, and (`max_nodes`) the autoscaled
    pool they come from, each new node offering `node_allocatable`."""
    spec: JSONDict = {}
    if node_labels:
        spec["nodeLabels"] = dict(node_labels)
    if node_taints:
        spec["nodeTaints"] = node_taints
    if tolerations:
        spec["tolerations"] = tolerations
    if topology:
        spec["topologyName"] = topology
    if max_nodes is not None:
        spec["autoscaling"] = {
            "maxNodes": max_nodes,
            "nodeAllocatable": dict(node_allocatable or {}),
        }
    return {
        "apiVersion": names.API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def provisioning_check(name: str, **settings: Any) -> JSONDict:
    """An AdmissionCheck that asks the autoscaler for a gang's new nodes (`settings`: its
    provisioningRequest's fields, e.g. retryStrategy)."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"provisioningRequest": settings},
    }


def topology(name: str, levels: Sequence[str]) -> JSONDict:
    """A Topology: the node labels of its levels, coarsest first."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in levels]},
    }


def borrower_and_lender(namespace: str, quotas: Mapping[str, str]) -> list[JSONDict]:
    """LocalQueues `team-a` and `team-b` of `namespace` on ClusterQueues of `quotas` each in one
    cohort: team-a may borrow team-b's idle quota, and team-b takes it back (reclaim Any)."""
    cohort = f"{namespace}-org"
    return [
        cluster_queue(f"{namespace}-a", quotas, cohort=cohort),
        cluster_queue(f"{namespace}-b", quotas, cohort=cohort, reclaim="Any"),
        local_queue(namespace, "team-a", f"{namespace}-a"),
        local_queue(namespace, "team-b", f"{namespace}-b"),
    ]


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> JSONDict:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def claim_template(
    name: str, device_class: str, count: int = 1, *, allocation_mode: str | None = None
) -> JSONDict:
    """A ResourceClaimTemplate (DRA) whose claims ask for `count` devices of `device_class`
    (every matching device of a node with allocation_mode "All")."""
    exactly: JSONDict = {"deviceClassName": device_class}
    if allocation_mode is None:
        exactly.update(allocationMode="ExactCount", count=count)
    else:
        exactly["allocationMode"] = allocation_mode
    return {
        "apiVersion": kinds.RESOURCE_CLAIM_TEMPLATES.api_version,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "devices", "exactly": exactly}]}}},
    }


def claims_from(*templates: str) -> JSONDict:
    """The part of a pod spec that gives each pod its own claim made from each template."""
    return {
        "resourceClaims": [
            {"name": f"claim-{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)
        ]
    }


def pod_template(
    requests: Mapping[str, str],
    *,
    isolation: Mapping[str, Any] | None = None,
    complete_after: str | None = None,
    priority_class: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> JSONDict:
    meta: JSONDict = {"labels": dict(labels or {})}
    if complete_after:
        meta["annotations"] = {COMPLETE_AFTER: complete_after}
    spec: JSONDict = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": dict(requests), "limits": dict(requests)},
            }
        ],
        **dict(isolation or {}),
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"metadata": meta, "spec": spec}


def gang_job(
    name: str,
    *,
    queue: str,
    pods: int,
    requests: Mapping[str, str],
    isolation: Mapping[str, Any] | None = None,
    complete_after: str | None = None,
    priority_class: str | None = None,
) -> JSONDict:
    """A Job of `pods` pods that must start together, in LocalQueue `queue`."""
    return {
        "apiVersion": kinds.JOBS.api_version,
        "kind": "Job",
        "metadata": {"name": name, "labels": {names.QUEUE_LABEL: queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": pod_template(
                requests,
                isolation=isolation,
                complete_after=complete_after,
                priority_class=priority_class,
            ),
        },
    }


def gang_statefulset(
    name: str,
    *,
    queue: str,
    replicas: int,
    requests: Mapping[str, str],
    isolation: Mapping[str, Any] | None = None,
) -> JSONDict:
    template = pod_template(requests, isolation=isolation, labels={"app": name})
    template["spec"]["restartPolicy"] = "Always"
    return {
        "apiVersion": kinds.STATEFULSETS.api_version,
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": {names.QUEUE_LABEL: queue}},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


def gang_leader_worker_set(
    name: str,
    *,
    queue: str,
    replicas: int,
    size: int,
    requests: Mapping[str, str],
    leader_requests: Mapping[str, str] | None = None,
    isolation: Mapping[str, Any] | None = None,
) -> JSONDict:
    """A LeaderWorkerSet of `replicas` groups of `size` pods (a leader and size-1 workers), each
    group one gang, in LocalQueue `queue`."""
    templates = {}
    for key, amounts in (
        ("workerTemplate", requests),
        ("leaderTemplate", leader_requests or requests),
    ):
        template = pod_template(amounts, isolation=isolation)
        template["spec"]["restartPolicy"] = "Always"
        templates[key] = template
    return {
        "apiVersion": kinds.LEADERWORKERSETS.api_version,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {names.QUEUE_LABEL: queue}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, **templates}},
    }


def gang_jobset(
    name: str,
    *,
    queue: str,
    workers: int,
    requests: Mapping[str, str],
    isolation: Mapping[str, Any] | None = None,
) -> JSONDict:
    """A JobSet of a one-pod `leader` Job and a `workers` Job of `workers` pods, in `queue`."""

    def replicated(job: str, pods: int) -> JSONDict:
        template = pod_template(requests, isolation=isolation)
        spec = {"parallelism": pods, "completions": pods, "template": template}
        return {"name": job, "replicas": 1, "template": {"spec": spec}}

    return {
        "apiVersion": kinds.JOBSETS.api_version,
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {names.QUEUE_LABEL: queue}},
        "spec": {"replicatedJobs": [replicated("leader", 1), replicated("workers", workers)]},
    }


def gang_pytorchjob(
    name: str,
    *,
    queue: str,
    workers: int,
    requests: Mapping[str, str],
    isolation: Mapping[str, Any] | None = None,
) -> JSONDict:
    """A PyTorchJob of one Master and `workers` Workers, in `queue`."""

    def replica(count: int) -> JSONDict:
        template = pod_template(requests, isolation=isolation)
        template["spec"]["restartPolicy"] = "OnFailure"
        template["spec"]["containers"][0]["name"] = "pytorch"
        return {"replicas": count, "restartPolicy": "OnFailure", "template": template}

    return {
        "apiVersion": kinds.PYTORCHJOBS.api_version,
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {names.QUEUE_LABEL: queue}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }


def gang_raycluster(
    name: str,
    *,
    queue: str,
    workers: int,
    requests: Mapping[str, str],
    isolation: Mapping[str, Any] | None = None,
) -> JSONDict:
    """A RayCluster of a head and one worker group of `workers` pods, in `queue`."""

    def template(container: str) -> JSONDict:
        made = pod_template(requests, isolation=isolation)
        made["spec"]["restartPolicy"] = "Always"
        made["spec"]["containers"][0]["name"] = container
        return made

    return {
        "apiVersion": kinds.RAYCLUSTERS.api_version,
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": {names.QUEUE_LABEL: queue}},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": template("ray-worker"),
                }
            ],
        },
    }


def gang_rayjob(
    name: str,
    *,
    queue: str,
    workers: int,
    requests: Mapping[str, str],
    isolation: Mapping[str, Any] | None = None,
    mode: str = "HTTPMode",
    submitter: Mapping[str, str] | None = None,
) -> JSONDict:
    """A RayJob whose cluster is `gang_raycluster`'s, in `queue`, submitted in `mode` (HTTPMode:
    KubeRay submits the job itself, with no submitter pod), by a submitter pod of `submitter`
    requests when given."""
    cluster = gang_raycluster(
        name, queue=queue, workers=workers, requests=requests, isolation=isolation
    )
    spec: JSONDict = {
        "entrypoint": "python -c 'import ray; ray.init()'",
        "submissionMode": mode,
        "rayClusterSpec": cluster["spec"],
    }
    if submitter is not None:
        spec["submitterPodTemplate"] = pod_template(submitter, isolation=isolation)
    return {
        "apiVersion": kinds.RAYJOBS.api_version,
        "kind": "RayJob",
        "metadata": {"name": name, "labels": {names.QUEUE_LABEL: queue}},
        "spec": spec,
    }


class Probe:
    """What a user sees, read through `api` (an admin client)."""

    def __init__(self, api: Client, namespace: str) -> None:
        self.api = api
        self.namespace = namespace

    async def create(self, kind: kinds.Kind, obj: JSONDict) -> JSONDict:
        return await self.api.create(kind, obj, self.namespace if kind.namespaced else None)

    async def workload(self, name: str) -> JSONDict | None:
        try:
            return await self.api.get(kinds.WORKLOADS, name, self.namespace)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    async def workloads(self) -> list[JSONDict]:
        items, _ = await self.api.list(kinds.WORKLOADS, self.namespace)
        return items

    async def podgroup(
        self, name: str, kind: kinds.Kind = kinds.VOLCANO_PODGROUPS
    ) -> JSONDict | None:
        """The gang's object of backend `kind` (a PodGroup, a scheduling.k8s.io Workload)."""
        try:
            return await self.api.get(kind, name, self.namespace)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    async def pods(self, gang: str | None = None) -> list[JSONDict]:
        selector = f"{names.POD_GROUP_LABEL}={gang}" if gang else None
        items, _ = await self.api.list(kinds.PODS, self.namespace, label_selector=selector)
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    async def bound(self, gang: str | None = None) -> list[str]:
        """Names of the gang's live pods that are bound to a node."""
        return sorted(
            p["metadata"]["name"]
            for p in await self.pods(gang)
            if lookup(p, ["spec", "nodeName"])
            and lookup(p, ["status", "phase"]) not in ("Succeeded", "Failed")
        )

    async def held(self, gang: str, resource: str) -> int:
        """How much of `resource` (whole units) the gang's bound pods hold."""
        total = 0
        for pod in await self.pods(gang):
            if not lookup(pod, ["spec", "nodeName"]):
                continue
            for c in lookup(pod, ["spec", "containers"]) or []:
                total += int(lookup(c, ["resources", "requests", resource]) or 0)
        return total

    async def events(self, kind: str, name: str) -> list[JSONDict]:
        items, _ = await self.api.list(kinds.EVENTS, self.namespace)
        return [
            e
            for e in items
            if lookup(e, ["involvedObject", "kind"]) == kind
            and lookup(e, ["involvedObject", "name"]) == name
        ]

    async def event_messages(self, kind: str, name: str) -> list[str]:
        return [f"{e.get('reason')}: {e.get('message')}" for e in await self.events(kind, name)]

    async def cluster_queue(self, name: str) -> JSONDict:
        return await self.api.get(kinds.CLUSTER_QUEUES, name)


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    """The condition of type `kind` of an object as the API server sends it."""
    for cond in lookup(obj, ["status", "conditions"]) or []:
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return None


def usage(queue: Mapping[str, Any], resource: str, field: str = "total") -> str | None:
    """A queue's or cohort's status figure (`total`, `borrowed`) of `resource`, on the first
    flavor that lists it."""
    for flavor in lookup(queue, ["status", "flavorsUsage"]) or []:
        for listed in flavor.get("resources", []):
            if listed.get("name") == resource:
                return str(listed.get(field))
    return None


def reserved(workload: Mapping[str, Any] | None) -> bool:
    found = condition(workload, WorkloadCondition.QUOTA_RESERVED)
    return found is not None and found.get("status") == "True"


def pending_reason(workload: Mapping[str, Any] | None) -> str:
    return str(lookup(workload, ["status", "pendingReason"]) or "")
