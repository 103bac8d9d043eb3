"""The dashboard in a real browser (Debian's headless Chromium, driven by Selenium) against the
local control plane: it shows a scenario's queues with their numbers, and the page follows an
admission and a reclaim within seconds, with no reload.

The scenario: a cohort of two ClusterQueues, `<ns>` with 16 GPUs (which reclaims) and `<ns>-b`
with none; two nodes of 8 GPUs. A gang of 2 x 8 GPUs in `<ns>-b` borrows all 16; then a gang of
1 x 8 GPUs in `<ns>` takes its quota back, and the page lists the reclaim.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from certs.reload import CertificateReloader, server_context
from controller.api import kinds
from controller.cluster import clients
from controller.cluster.clients import ApiError
from dashboard.live import Live, Stores
from dashboard.main import self_signed
from dashboard.server import DashboardServer
from dashboard.watch import Watch
from hack.browser import MISSING, installed, start_chromium
from hack.demo import KohortStack, apply_queues
from hack.localcluster import LocalCluster
from hack.objects import Probe, cluster_queue, gang_job, local_queue, reserved
from tests.chart_support import VALUE_SETS, render
from tests.conftest import TestNodes
from tests.support import eventually, pod_isolation

pytestmark = pytest.mark.volcano

GPU = "nvidia.com/gpu"
# From the change in the API server to the page showing it: the watch, the 0.2 s debounce of
# the event stream, the redraw.
WITHIN = 20.0


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    pytest.importorskip("selenium.webdriver", reason="selenium is a dev extra")
    if not installed():
        pytest.skip(MISSING)
    profile = Path(tempfile.mkdtemp(prefix="kohort-chromium-"))
    driver = start_chromium(profile)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
async def dashboard(cluster: LocalCluster) -> AsyncIterator[str]:
    """`kohort dashboard` in-process, on a loopback port: its URL."""
    context = server_context()
    CertificateReloader(context).load_pem(*self_signed("127.0.0.1"))
    api = await clients.connect(str(cluster.kubeconfig))
    live = Live(Stores(), clock=time.time, interval=1.0)
    watch = Watch(api, live)
    watch.start()
    server = DashboardServer(live, context, host="127.0.0.1", port=0)
    await server.start()

    async def sample() -> None:
        while True:
            live.sample()
            await asyncio.sleep(live.interval)

    sampler = asyncio.create_task(sample())
    try:
        yield f"https://127.0.0.1:{server.port}/"
    finally:
        sampler.cancel()
        await server.stop()
        await watch.stop()
        await api.close()


async def on_page(driver: object, script: str) -> object:
    return await asyncio.to_thread(driver.execute_script, script)  # type: ignore[attr-defined]


def cell(queue: str, column: str) -> str:
    """A script that reads one column of a queue's GPU row on the page ('' while absent)."""
    row = f'#queue-{queue} tr[data-resource="{GPU}"] td.{column}'
    return f"const c = document.querySelector('{row}'); return c ? c.textContent : '';"


def text_of(selector: str) -> str:
    return f"const e = document.querySelector('{selector}'); return e ? e.textContent : '';"


async def page_shows(
    driver: object, script: str, check: Callable[[object], bool], what: str, within: float
) -> float:
    """Waits until the page shows it; how long that took."""
    started = time.monotonic()
    await eventually(lambda: on_page(driver, script), check, within, 0.1, what)
    return time.monotonic() - started


async def test_the_page_shows_the_queues_and_follows_an_admission_and_a_reclaim(
    stack: KohortStack,
    cluster: LocalCluster,
    namespace: str,
    admin: clients.Client,
    test_nodes: TestNodes,
    drained: None,
    browser: object,
    dashboard: str,
) -> None:
    stack.enroll(namespace)
    team = Probe(admin, namespace)
    test_nodes("gpu", 2, gpus=8, cpu="16")
    cohort = f"{namespace}-org"
    lender, borrower = namespace, f"{namespace}-b"
    apply_queues(
        cluster.rest,
        [
            cluster_queue(lender, {GPU: "16", "cpu": "32"}, cohort=cohort, reclaim="Any"),
            cluster_queue(borrower, {GPU: "0", "cpu": "0"}, cohort=cohort),
            local_queue(namespace, "team", lender),
            local_queue(namespace, "other", borrower),
        ],
    )
    await asyncio.to_thread(browser.get, dashboard)  # type: ignore[attr-defined]

    # The scenario's queues, with their quota.
    await page_shows(browser, cell(lender, "nominal"), lambda t: t == "16", "nominal 16", 30)
    assert await on_page(browser, cell(borrower, "nominal")) == "0"
    heading = await on_page(browser, text_of(f"#cohort-{cohort} > .head > .name"))
    assert heading == f"cohort {cohort}"
    assert await on_page(browser, text_of("#status")) == "live"

    # A gang that borrows all of the lender's GPUs: admitted, and the page follows.
    isolation = pod_isolation(namespace)
    big = gang_job("big", queue="other", pods=2, requests={GPU: "8"}, isolation=isolation)
    await team.create(kinds.JOBS, big)
    await eventually(
        lambda: team.workload("job-big"), lambda w: w is not None and reserved(w), what="admitted"
    )
    took = await page_shows(
        browser, cell(borrower, "usage"), lambda t: t == "16", "the borrower using 16", WITHIN
    )
    assert await on_page(browser, cell(borrower, "borrowed")) == "16"
    assert await on_page(browser, text_of(f"#queue-{borrower} .admitted")) == "1"
    print(f"admission shown {took:.2f}s after the API server had it")
    # The controller counts its 16 GPUs too (held until kwok runs its pods, allocated after),
    # so the held-GPUs alert needs no dashboard scraped.
    registry = stack.controller.metrics.registry if stack.controller else None
    assert registry is not None

    async def admitted_gpus() -> float:
        states = ("held", "allocated")
        return sum(registry.get_sample_value("kohort_gpus", {"state": s}) or 0 for s in states)

    await eventually(admitted_gpus, lambda n: n >= 16, 30, 0.2, "the controller counting 16")

    # A gang of the lender's own: it reclaims, and the page lists the reclaim.
    small = gang_job("small", queue="team", pods=1, requests={GPU: "8"}, isolation=isolation)
    await team.create(kinds.JOBS, small)
    await eventually(
        lambda: team.workload("job-big"),
        lambda w: w is not None and not reserved(w),
        within=60,
        what="the borrower's gang evicted",
    )
    took = await page_shows(
        browser,
        text_of("#eviction-rows tr"),
        lambda t: isinstance(t, str) and f"{namespace}/job-big" in t and "reclaim" in t,
        "the reclaim listed",
        WITHIN,
    )
    print(f"reclaim shown {took:.2f}s after the API server had it")
    await page_shows(browser, cell(lender, "usage"), lambda t: t == "8", "the lender using 8", 60)

    shot = cluster.work_dir / "artifacts" / "dashboard.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert await asyncio.to_thread(browser.save_screenshot, str(shot))  # type: ignore[attr-defined]
    print(f"screenshot: {shot}")


# Where the chart's dashboard objects live in the API.
PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


def token_kubeconfig(cluster: LocalCluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig of a TokenRequest token of ServiceAccount `account`."""
    review = cluster.rest.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    user = {"name": account, "user": {"token": review["status"]["token"]}}
    server = {"server": cluster.server, "certificate-authority": str(cluster.pki_dir / "ca.crt")}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [user],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": account}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def test_the_charts_read_only_role_is_all_the_dashboard_needs(
    stack: KohortStack, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """The dashboard, with a token of the chart's dashboard ServiceAccount, lists and watches
    every kind it shows; that token can change nothing."""
    release = f"dash-{namespace[-6:]}"
    manifest = render(VALUE_SETS["dashboard-and-monitoring"], release=release, namespace=namespace)
    objects: list[dict[str, Any]] = [
        obj
        for obj in manifest
        if obj["kind"] in PATHS and obj["metadata"]["name"].endswith("-dashboard")
    ]
    assert sorted(obj["kind"] for obj in objects) == sorted(PATHS)
    created = []
    for obj in objects:
        path = PATHS[obj["kind"]].format(namespace=namespace)
        cluster.rest.create(path, obj)
        created.append(f"{path}/{obj['metadata']['name']}")
    apply_queues(cluster.rest, [cluster_queue(namespace, {GPU: "8"})])
    config = token_kubeconfig(cluster, namespace, f"{release}-kohort-dashboard", tmp_path / "kc")
    api = await clients.connect(str(config))
    live = Live(Stores(), clock=time.time)
    watch = Watch(api, live)
    watch.start()
    try:
        async with asyncio.timeout(30):
            for informer in watch.informers:
                await informer.synced.wait()
        assert ("", namespace) in watch.cluster_queues.store
        with pytest.raises(ApiError) as refused:
            await api.create(
                kinds.LOCAL_QUEUES, local_queue(namespace, "mine", namespace), namespace
            )
        assert refused.value.status == 403
        assert "cannot create resource" in refused.value.body  # RBAC's refusal, no webhook's
    finally:
        await watch.stop()
        await api.close()
        for path in reversed(created):
            if "/namespaces/" not in path:
                cluster.rest.request("DELETE", path)
