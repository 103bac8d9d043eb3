"""The dashboard's HTTP side, over a loopback socket: the page, its JSON, its live stream."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from certs.reload import CertificateReloader, server_context
from controller.api import kinds
from dashboard.live import Live, Stores
from dashboard.main import self_signed
from dashboard.server import DashboardServer
from tests.unit.test_dashboard_view import cq, lq, workload


@pytest.fixture
async def served() -> AsyncIterator[tuple[Live, str]]:
    context = server_context()
    CertificateReloader(context).load_pem(*self_signed("127.0.0.1"))
    stores = Stores(cluster_queues={("", "research"): cq("research", {"cpu": "4"})})
    live = Live(stores, clock=time.time)
    server = DashboardServer(live, context, host="127.0.0.1", port=0)
    await server.start()
    yield live, f"https://127.0.0.1:{server.port}"
    await server.stop()


def _client() -> aiohttp.ClientSession:
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # the certificate the dashboard made for itself
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=insecure))


async def test_the_page_is_served_over_https_and_loads_nothing_from_elsewhere(
    served: tuple[Live, str],
) -> None:
    _, url = served
    async with _client() as http, http.get(url + "/") as page:
        assert page.status == 200
        assert "default-src 'self'" in page.headers["Content-Security-Policy"]
        html = await page.text()
    assert '<script src="/static/dashboard.js"' in html
    assert "http" not in html.replace("https", "")


async def test_every_route_is_read_only(served: tuple[Live, str]) -> None:
    _, url = served
    async with _client() as http:
        for path in ("/", "/api/view", "/events"):
            async with http.post(url + path) as answer:
                assert answer.status == 405


async def next_event(stream: aiohttp.ClientResponse) -> tuple[str, dict[str, Any]]:
    """The next server-sent event: its name and its JSON."""
    fields = dict(
        line.split(": ", 1)
        for line in (await stream.content.readuntil(b"\n\n")).decode().split("\n")
        if ": " in line
    )
    return fields["event"], json.loads(fields["data"])


async def test_the_event_stream_sends_the_view_then_what_changed_when_a_gang_arrives(
    served: tuple[Live, str],
) -> None:
    live, url = served
    stores = live.stores
    stores.local_queues = local_queues = {}
    stores.workloads = workloads = {}
    async with _client() as http, http.get(url + "/events") as stream:
        event, first = await next_event(stream)
        assert event == "snapshot"
        assert first["queues"]["research"]["pending"] == 0
        local_queues["ns", "team"] = lq("ns", "team", "research")
        workloads["ns", "w"] = workload("w")
        live.changed(kinds.WORKLOADS, None, workloads["ns", "w"])
        async with asyncio.timeout(30):  # pushed, not polled: no page reload asks for it
            event, patch = await next_event(stream)
        assert event == "patch"
        assert patch["base"] == first["version"]
        assert patch["queues"]["research"]["pending"] == 1
        assert patch["queues"]["research"]["pending_gangs"][0]["name"] == "w"
