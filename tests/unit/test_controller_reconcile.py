"""One reconcile pass over a hand-filled cache, with the API's writes recorded.

These cover what a controller killed at any point leaves behind: the next pass completes a half
done admission, takes back a release that has no quota behind it, and never admits beyond quota.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller import quota
from controller.api import names
from controller.cluster import clients
from controller.cluster.cache import Cache
from controller.cluster.clients import ApiError, Kind
from controller.cluster.writers import PodGroupSettings, Writers, set_condition
from controller.metrics import ControllerMetrics
from controller.reconciler import LostLeadership, Reconciler, Settings
from controller.workloads.base import Admission
from controller.workloads.edits import Editor
from controller.workloads.job import JobAdapter
from controller.workloads.testing import make_job

JSON = dict[str, Any]
NOW = 1_800_000_000.0


class FakeApi:
    """Answers writes like the API server (stamping resourceVersions) and records them."""

    def __init__(self) -> None:
        self.version = 1000
        self.writes: list[tuple[str, str, str]] = []
        # Namespaces being deleted: the API server refuses new objects there.
        self.terminating: set[str] = set()

    def _stamp(self, obj: JSON) -> JSON:
        self.version += 1
        out = copy.deepcopy(obj)
        meta = out.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.version)
        meta.setdefault("uid", f"uid-{meta.get('name')}")
        meta.setdefault("creationTimestamp", "2027-01-15T08:00:00Z")
        return out

    async def create(self, kind: Kind, obj: JSON, namespace: str | None = None) -> JSON:
        if namespace in self.terminating:
            raise ApiError(403, "POST", kind.plural, '{"reason": "Forbidden"}')
        self.writes.append(("create", kind.plural, obj["metadata"].get("name", "")))
        return self._stamp(obj)

    async def patch(
        self,
        kind: Kind,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        content_type: str = "",
        subresource: str | None = None,
    ) -> JSON:
        self.writes.append(
            ("patch", kind.plural + (f"/{subresource}" if subresource else ""), name)
        )
        current = copy.deepcopy(self.cache.informers[kind].get(namespace or "", name) or {})
        if isinstance(patch, dict):
            for key, value in patch.items():
                if isinstance(value, dict) and isinstance(current.get(key), dict):
                    current[key] = {**current[key], **value}
                    current[key] = {k: v for k, v in current[key].items() if v is not None}
                else:
                    current[key] = value
        return self._stamp(current)

    async def delete(self, kind: Kind, name: str, namespace: str | None = None, **_: Any) -> bool:
        self.writes.append(("delete", kind.plural, name))
        self.cache.informers[kind].forget(namespace or "", name)
        return True

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON:
        found = self.cache.informers[kind].get(namespace or "", name)
        if found is None:
            raise ApiError(404, "GET", name, "{}")
        return found

    cache: Cache


def held_job(name: str, pods: int, cpu: str = "1", namespace: str = "ns") -> JSON:
    job = make_job(
        name,
        namespace=namespace,
        queue="lq",
        parallelism=pods,
        completions=pods,
        cpu=cpu,
        memory=None,
    )
    editor = Editor(job)
    JobAdapter().default(editor, Admission("lq"))
    doc = editor.doc
    doc["metadata"].update(
        uid=f"uid-{name}", resourceVersion="1", creationTimestamp="2027-01-15T07:00:00Z"
    )
    return doc


def workload(job: JSON, *, reserved: bool) -> JSON:
    name = f"job-{job['metadata']['name']}"
    pods = job["spec"]["parallelism"]
    conditions: list[JSON] = []
    status: JSON = {}
    if reserved:
        conditions = set_condition([], "QuotaReserved", "True", "QuotaReserved", "ok", NOW - 60)
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [],
            "admittedAt": "2027-01-15T07:59:00Z",
        }
    status["conditions"] = conditions
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "2",
            "creationTimestamp": "2027-01-15T07:00:00Z",
            "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE},
        },
        "spec": {
            "queueName": "lq",
            "podSets": [{"name": "main", "count": pods, "requests": {"cpu": "1"}}],
        },
        "status": status,
    }


def world(*objects: tuple[Kind, JSON], cpu_quota: str = "4") -> tuple[Reconciler, FakeApi]:
    api = FakeApi()
    cache = Cache(api, podgroup_kind=clients.VOLCANO_PODGROUPS)  # type: ignore[arg-type]
    api.cache = cache
    base: list[tuple[Kind, JSON]] = [
        (
            clients.CLUSTER_QUEUES,
            {
                "metadata": {"name": "cq", "resourceVersion": "1"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {
                                    "name": "default",
                                    "resources": [{"name": "cpu", "nominalQuota": cpu_quota}],
                                }
                            ],
                        }
                    ]
                },
            },
        ),
        (
            clients.LOCAL_QUEUES,
            {
                "metadata": {"namespace": "ns", "name": "lq", "resourceVersion": "1"},
                "spec": {"clusterQueue": "cq"},
            },
        ),
    ]
    for kind, obj in [*base, *objects]:
        cache.informers[kind].put(obj)
    for informer in cache.informers.values():
        informer.synced.set()
    writers = Writers(api, cache.stores, PodGroupSettings())  # type: ignore[arg-type]
    settings = Settings(pods_ready_timeout=None, core=quota.Config(placement=False))
    reconciler = Reconciler(cache, writers, settings, ControllerMetrics(), clock=lambda: NOW)
    return reconciler, api


def job_state(api: FakeApi, name: str) -> bool | None:
    job = api.cache.informers[clients.JOBS].get("ns", name)
    return None if job is None else job["spec"].get("suspend")


async def test_a_new_held_job_gets_a_workload_and_is_admitted_in_one_pass() -> None:
    reconciler, api = world((clients.JOBS, held_job("train", 2)))

    stats = await reconciler.reconcile_once()

    assert stats.admitted == 1
    kinds = [(op, kind) for op, kind, _ in api.writes]
    # The quota reservation comes before the PodGroup, which comes before the release.
    reserve = kinds.index(("patch", "workloads/status"))
    assert reserve < kinds.index(("create", "podgroups")) < kinds.index(("patch", "jobs"))
    assert job_state(api, "train") is False


async def test_an_admission_cut_short_after_the_reservation_is_completed_on_restart() -> None:
    job = held_job("train", 2)
    reconciler, api = world((clients.JOBS, job), (clients.WORKLOADS, workload(job, reserved=True)))

    await reconciler.reconcile_once()

    assert ("create", "podgroups", "job-train") in api.writes
    assert job_state(api, "train") is False


async def test_a_running_job_without_quota_is_held_again() -> None:
    job = held_job("rogue", 2)
    job["spec"]["suspend"] = False
    reconciler, api = world(
        (clients.JOBS, job),
        (clients.WORKLOADS, workload(job, reserved=False)),
        cpu_quota="1",  # too little to admit it again in the same pass
    )

    await reconciler.reconcile_once()

    assert job_state(api, "rogue") is True


async def test_reservations_already_recorded_count_against_quota_after_a_restart() -> None:
    first, second = held_job("first", 3), held_job("second", 3)
    reconciler, api = world(
        (clients.JOBS, first),
        (clients.JOBS, second),
        (clients.WORKLOADS, workload(first, reserved=True)),
        (clients.WORKLOADS, workload(second, reserved=False)),
        cpu_quota="4",
    )

    stats = await reconciler.reconcile_once()

    assert stats.admitted == 0
    assert job_state(api, "second") is True
    reason = api.cache.informers[clients.WORKLOADS].get("ns", "job-second")
    assert reason is not None
    assert reason["status"]["pendingReason"].startswith("Waiting for quota: needs 3 cpu")


async def test_a_gang_whose_writes_fail_does_not_hold_up_the_others() -> None:
    reconciler, api = world(
        (clients.JOBS, held_job("doomed", 1, namespace="dying")),
        (clients.JOBS, held_job("train", 2)),
        (
            clients.LOCAL_QUEUES,
            {"metadata": {"namespace": "dying", "name": "lq"}, "spec": {"clusterQueue": "cq"}},
        ),
    )
    api.terminating.add("dying")

    stats = await reconciler.reconcile_once()

    assert stats.admitted == 1
    assert job_state(api, "train") is False
    assert reconciler.failures == 1


async def test_a_replica_that_lost_the_lease_mid_pass_admits_nothing() -> None:
    reconciler, api = world((clients.JOBS, held_job("train", 2)))
    reconciler._leading = lambda: False

    with pytest.raises(LostLeadership):
        await reconciler.reconcile_once()

    assert not [w for w in api.writes if w[1] in ("workloads/status", "podgroups", "jobs")]
    assert job_state(api, "train") is True
