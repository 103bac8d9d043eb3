"""Builders of workload objects for tests, with defaults: keyword arguments, plain dicts."""

from __future__ import annotations

from typing import Any

from controller.api import kinds, names
from controller.api.kinds import Kind

JSONDict = dict[str, Any]


def pod_spec(
    *,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    gpus: int = 0,
    scheduler_name: str | None = None,
    gates: tuple[str, ...] = (),
) -> JSONDict:
    requests: JSONDict = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    resources: JSONDict = {"requests": requests}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    spec: JSONDict = {
        "containers": [
            {"name": "main", "image": "registry.example/train:1", "resources": resources}
        ],
        "restartPolicy": "Never",
    }
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return spec


def metadata(
    name: str, namespace: str, queue: str | None, extra_labels: dict[str, str] | None = None
) -> JSONDict:
    labels = dict(extra_labels or {})
    if queue is not None:
        labels[names.QUEUE_LABEL] = queue
    meta: JSONDict = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return meta


def manifest(kind: Kind, meta: JSONDict, spec: JSONDict) -> JSONDict:
    """An object of `kind` as its user writes it."""
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta, "spec": spec}


def make_job(
    name: str = "train",
    *,
    namespace: str = "team-a",
    queue: str | None = "research",
    parallelism: int | None = 4,
    completions: int | None = 4,
    suspend: bool | None = None,
    labels: dict[str, str] | None = None,
    **pod: Any,
) -> JSONDict:
    spec: JSONDict = {"template": {"spec": pod_spec(**pod)}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    if suspend is not None:
        spec["suspend"] = suspend
    return manifest(kinds.JOBS, metadata(name, namespace, queue, labels), spec)


def make_statefulset(
    name: str = "serve",
    *,
    namespace: str = "team-a",
    queue: str | None = "research",
    replicas: int | None = 3,
    policy: str | None = None,
    labels: dict[str, str] | None = None,
    **pod: Any,
) -> JSONDict:
    spec: JSONDict = {
        "serviceName": name,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(**pod)},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    if policy is not None:
        spec["podManagementPolicy"] = policy
    return manifest(kinds.STATEFULSETS, metadata(name, namespace, queue, labels), spec)


def make_lws(
    name: str = "llm",
    *,
    namespace: str = "team-a",
    queue: str | None = "research",
    replicas: int = 2,
    size: int = 4,
    leader: bool = True,
    **pod: Any,
) -> JSONDict:
    group: JSONDict = {"size": size, "workerTemplate": {"spec": pod_spec(**pod)}}
    if leader:
        group["leaderTemplate"] = {"spec": pod_spec(cpu="2", memory="4Gi")}
    spec = {"replicas": replicas, "leaderWorkerTemplate": group}
    return manifest(kinds.LEADERWORKERSETS, metadata(name, namespace, queue), spec)


def make_jobset(
    name: str = "trainer",
    *,
    namespace: str = "team-a",
    queue: str | None = "research",
    jobs: dict[str, tuple[int, int]] | None = None,
    suspend: bool | None = None,
    **pod: Any,
) -> JSONDict:
    """A JobSet whose replicated jobs (name -> (replicas, parallelism), completions equal to
    parallelism) share one pod spec."""
    replicated = [
        {
            "name": job,
            "replicas": replicas,
            "template": {
                "spec": {
                    "parallelism": parallelism,
                    "completions": parallelism,
                    "template": {"spec": pod_spec(**pod)},
                }
            },
        }
        for job, (replicas, parallelism) in (jobs or {"driver": (1, 1), "workers": (2, 4)}).items()
    ]
    spec: JSONDict = {"replicatedJobs": replicated}
    if suspend is not None:
        spec["suspend"] = suspend
    return manifest(kinds.JOBSETS, metadata(name, namespace, queue), spec)


def make_pytorchjob(
    name: str = "mnist",
    *,
    namespace: str = "team-a",
    queue: str | None = "research",
    workers: int | None = 3,
    **pod: Any,
) -> JSONDict:
    """A PyTorchJob of one master and `workers` workers (the replicas unset when None)."""
    worker: JSONDict = {"template": {"spec": pod_spec(**pod)}}
    if workers is not None:
        worker["replicas"] = workers
    spec = {
        "runPolicy": {"cleanPodPolicy": "None"},
        "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": pod_spec(**pod)}},
            "Worker": worker,
        },
    }
    return manifest(kinds.PYTORCHJOBS, metadata(name, namespace, queue), spec)


def make_raycluster(
    name: str = "ray",
    *,
    namespace: str = "team-a",
    queue: str | None = "research",
    groups: dict[str, int] | None = None,
    hosts: int = 1,
    autoscaling: bool | None = None,
    **pod: Any,
) -> JSONDict:
    """A RayCluster of a head and worker groups (name -> replicas) of `hosts` hosts each."""
    workers = [
        {
            "groupName": group,
            "replicas": replicas,
            "minReplicas": 0,
            "maxReplicas": 10,
            "numOfHosts": hosts,
            "rayStartParams": {},
            "template": {"spec": pod_spec(**pod)},
        }
        for group, replicas in (groups or {"cpu": 2}).items()
    ]
    spec: JSONDict = {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": pod_spec(**{**pod, "cpu": "2"})},
        },
        "workerGroupSpecs": workers,
    }
    if autoscaling is not None:
        spec["enableInTreeAutoscaling"] = autoscaling
    return manifest(kinds.RAYCLUSTERS, metadata(name, namespace, queue), spec)


def make_rayjob(
    name: str = "ray",
    *,
    namespace: str = "team-a",
    queue: str | None = "research",
    groups: dict[str, int] | None = None,
    mode: str | None = None,
    submitter: bool = False,
    **pod: Any,
) -> JSONDict:
    """A RayJob whose cluster is `make_raycluster`'s, in submission `mode` (unset: KubeRay's
    K8sJobMode), with a submitter pod template of its own when `submitter`."""
    cluster = make_raycluster(groups=groups, **pod)["spec"]
    spec: JSONDict = {"entrypoint": "python /home/ray/train.py", "rayClusterSpec": cluster}
    if mode is not None:
        spec["submissionMode"] = mode
    if submitter:
        spec["submitterPodTemplate"] = {"spec": pod_spec(cpu="250m", memory="128Mi")}
    return manifest(kinds.RAYJOBS, metadata(name, namespace, queue), spec)


def make_pod(
    name: str = "worker-0",
    *,
    namespace: str = "team-a",
    queue: str | None = "research",
    labels: dict[str, str] | None = None,
    owner_kind: str | None = None,
    **pod: Any,
) -> JSONDict:
    meta = metadata(name, namespace, queue, labels)
    if owner_kind is not None:
        owners = {
            k.kind: k.api_version
            for k in (kinds.JOBS, kinds.STATEFULSETS, kinds.PYTORCHJOBS, kinds.RAYCLUSTERS)
        }
        api_version = owners.get(owner_kind, "v1")
        meta["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": owner_kind,
                "name": "owner",
                "uid": "0f0e0d0c-0000-4000-8000-000000000001",
                "controller": True,
            }
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec(**pod)}
