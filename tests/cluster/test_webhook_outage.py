"""Every webhook replica down, on the real control plane: what is blocked, what goes on.

The webhooks are registered as the chart registers them (KohortStack): mutation fails open,
validation fails closed, and the controller's own requests, and the creation of a released
Job's pods, skip the workload webhooks (matchConditions). With the webhook server stopped:

(a) objects outside kohort's namespaces and labels are created and run;
(b) a workload labelled kohort.dev/queue-name is refused, and the API server's error names
    the validating webhook;
(c) an admitted gang keeps running, a held gang stays held (no pod bound, Job suspended), and
    when quota frees the controller still admits a held gang, whose pods are created and bound;
(d) once the webhook is back, creations work again and every Workload is still there.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.api import kinds, names
from controller.cluster.clients import ApiError, Client
from hack import processes
from hack.demo import KohortStack
from hack.localcluster import LocalCluster
from hack.objects import Probe, condition, pending_reason, reserved
from tests.cluster.test_controller_lifecycle import cpu_job, queue
from tests.conftest import TestNodes
from tests.support import eventually, holds_for

pytestmark = pytest.mark.volcano


def plain_job(namespace: str, name: str) -> dict[str, Any]:
    """A Job kohort has nothing to do with: no queue label."""
    job = cpu_job(namespace, name, 1)
    del job["metadata"]["labels"][names.QUEUE_LABEL]
    return job


@pytest.fixture
async def elsewhere(cluster: LocalCluster) -> AsyncIterator[str]:
    """A namespace that never opted in to kohort."""
    name = f"not-kohort-{uuid.uuid4().hex[:6]}"
    cluster.rest.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    cluster.rest.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{name}/jobs",
        query={"propagationPolicy": "Background"},
    )
    pods = f"/api/v1/namespaces/{name}/pods"

    def gone() -> bool:  # before the test's nodes go (see tests/conftest.py)
        if not cluster.rest.get(pods)["items"]:
            return True
        cluster.rest.request("DELETE", pods, query={"gracePeriodSeconds": "0"})
        return False

    processes.wait_until(f"the pods of {name} to be gone", gone, timeout=60, interval=0.5)
    cluster.rest.delete(f"/api/v1/namespaces/{name}")


async def running(probe: Probe, gang: str | None = None) -> int:
    return sum(
        1 for p in await probe.pods(gang) if (p.get("status") or {}).get("phase") == "Running"
    )


async def suspended(probe: Probe, name: str) -> bool:
    job = await probe.api.get(kinds.JOBS, name, probe.namespace)
    return bool(job["spec"].get("suspend"))


async def test_with_every_webhook_replica_down_nothing_escapes_and_nothing_is_lost(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: Client,
    test_nodes: TestNodes,
    elsewhere: str,
    drained: None,
) -> None:
    stack.enroll(namespace)
    test_nodes("worker", 2, cpu="8")
    queue(cluster, namespace, cpu="4")  # LocalQueue "work"
    team, other = Probe(admin, namespace), Probe(admin, elsewhere)

    # Before the outage: two gangs fill the quota (one of them finishes in a while), two wait.
    await team.create(kinds.JOBS, cpu_job(namespace, "steady", 2))
    await team.create(kinds.JOBS, cpu_job(namespace, "brief", 2, complete_after="25s"))
    await eventually(
        lambda: team.bound(),
        lambda bound: len(bound) == 4,
        within=90,
        what="steady and brief running (4 pods bound)",
    )
    await team.create(kinds.JOBS, cpu_job(namespace, "next", 2))
    await team.create(kinds.JOBS, cpu_job(namespace, "big", 4))
    for gang in ("job-next", "job-big"):
        await eventually(
            lambda gang=gang: team.workload(gang),  # type: ignore[misc]
            lambda wl: pending_reason(wl).startswith("Waiting for quota"),
            what=f"{gang} waiting for quota",
        )
    workloads_before = {w["metadata"]["name"] for w in await team.workloads()}
    assert workloads_before == {"job-steady", "job-brief", "job-next", "job-big"}

    assert stack.webhook is not None
    await stack.webhook.stop()  # every replica: the API server's calls are refused
    try:
        # (a) Outside kohort's namespaces, and without its labels inside them: never blocked.
        await other.create(kinds.JOBS, plain_job(namespace, "unrelated"))
        await team.create(kinds.JOBS, plain_job(namespace, "unlabelled"))
        await eventually(
            lambda: running(other), lambda n: n == 1, what="the unrelated Job's pod running"
        )
        await eventually(
            lambda: running(team, None),
            lambda n: n >= 5,
            what="the unlabelled Job's pod running beside the 4 gang pods",
        )

        # (b) A managed workload is refused, and the error names the webhook.
        with pytest.raises(ApiError) as refused:
            await team.create(kinds.JOBS, cpu_job(namespace, "during", 1))
        message = json.loads(refused.value.body)["message"]
        print(f"\nrefused during the outage: HTTP {refused.value.status}: {message}")
        assert refused.value.status == 500
        assert message.startswith(
            'Internal error occurred: failed calling webhook "workloads.validate.kohort.dev": '
            'failed to call webhook: Post "https://127.0.0.1:'
        )
        assert message.endswith("connect: connection refused")

        # (c) The admitted gang keeps running; when brief finishes, the controller admits
        # next (it fits in the 2 CPUs brief gave back) and its pods are created and bound;
        # big (4 CPUs) stays held: suspended, no pod.
        admitted = await eventually(
            lambda: team.workload("job-next"),
            reserved,
            within=90,
            what="next admitted during the outage, once brief has finished",
        )
        assert admitted is not None
        # brief counts as finished from its SuccessCriteriaMet condition: the Job controller
        # cannot yet take its tracking finalizer off the pods (a pod update, which validation
        # must see), so the Job is Complete only once the webhook is back.
        finished = await team.workload("job-brief")
        assert (condition(finished, "Finished") or {}).get("status") == "True"
        brief = await admin.get(kinds.JOBS, "brief", namespace)
        assert (condition(brief, "SuccessCriteriaMet") or {}).get("status") == "True"
        await eventually(
            lambda: team.bound("job-next"),
            lambda bound: len(bound) == 2,
            within=60,
            what="next's 2 pods created and bound while the webhook is down",
        )
        assert len(await team.bound("job-steady")) == 2
        await holds_for(
            lambda: team.pods("job-big"),
            lambda pods: pods == [],
            duration=3,
            what="big has no pod",
        )
        assert await suspended(team, "big")
        assert not reserved(await team.workload("job-big"))
    finally:
        await stack.webhook.start()

    # (d) Back: creations work again (held as usual), and nothing was lost.
    created = await eventually(
        lambda: _try_create(team, cpu_job(namespace, "after", 1)),
        lambda job: job is not None,
        within=30,
        what="a managed Job created once the webhook is back",
    )
    assert created is not None and created["spec"]["suspend"] is True
    await eventually(
        lambda: team.workloads(),
        lambda wls: {w["metadata"]["name"] for w in wls} == workloads_before | {"job-after"},
        what="every Workload there, and one for the new Job",
    )
    assert len(await team.bound("job-steady")) == 2
    assert len(await team.bound("job-next")) == 2
    assert await suspended(team, "big")
    await eventually(
        lambda: admin.get(kinds.JOBS, "brief", namespace),
        lambda job: (condition(job, "Complete") or {}).get("status") == "True",
        what="brief's completion recorded by the Job controller once the webhook is back",
    )


async def _try_create(probe: Probe, job: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return await probe.create(kinds.JOBS, job)
    except ApiError as err:
        if err.status == 409:  # an earlier try got through
            return await probe.api.get(kinds.JOBS, job["metadata"]["name"], probe.namespace)
        return None
