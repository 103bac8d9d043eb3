"""A paused leader's request that already passed its fence, and waits for a connection when
the replica resumes without the Lease, never reaches the API server (the fault the chaos runner
found: `create podgroups/...` sent by a resumed leader after the standby took over)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client

from controller.api import kinds
from controller.cluster.clients import Fenced, from_configuration


async def test_a_write_queued_for_a_connection_while_the_leader_was_paused_is_never_sent() -> None:
    received: list[str] = []
    first_arrived = asyncio.Event()
    release_first = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        received.append(f"{request.method} {request.path}")
        if request.method == "GET":
            first_arrived.set()
            await release_first.wait()
        return web.json_response({"metadata": {"name": "x"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    configuration = client.Configuration(host=str(server.make_url("")).rstrip("/"))
    configuration.connection_pool_maxsize = 1
    api = from_configuration(configuration)
    leading = [True]
    try:
        # The only connection is busy: the write passes its fence, then waits for it.
        busy = asyncio.create_task(api.get(kinds.EVENTS, "busy", "ns"))
        await first_arrived.wait()
        write = asyncio.create_task(
            api.fenced(lambda: leading[0]).create(kinds.VOLCANO_PODGROUPS, {"metadata": {}}, "ns")
        )
        await asyncio.sleep(0.1)
        assert not write.done()
        # Meanwhile the replica was stopped and lost its Lease; it resumes and the connection
        # frees up.
        leading[0] = False
        release_first.set()
        await busy
        with pytest.raises(Fenced):
            await write
        assert received == ["GET /api/v1/namespaces/ns/events/busy"]
    finally:
        await api.close()
        await server.close()


async def test_a_leader_that_holds_its_lease_sends_its_writes_through_the_same_session() -> None:
    received: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        received.append(f"{request.method} {request.path}")
        return web.json_response({"metadata": {"name": "x"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    api = from_configuration(client.Configuration(host=str(server.make_url("")).rstrip("/")))
    try:
        await api.fenced(lambda: True).create(kinds.EVENTS, {"metadata": {"name": "a"}}, "ns")
        assert received == ["POST /api/v1/namespaces/ns/events"]
    finally:
        await api.close()
        await server.close()


async def test_a_write_whose_body_waits_its_turn_while_the_leader_is_stopped_is_never_sent() -> (
    None
):
    received: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        received.append(f"{request.method} {request.path}")
        return web.json_response({"metadata": {"name": "x"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    api = from_configuration(client.Configuration(host=str(server.make_url("")).rstrip("/")))
    asked: list[bool] = []

    def fence() -> bool:
        # Leading when the request starts and when its headers are ready; stopped before its
        # body (and the headers kept back with it) is written, and no longer leading after.
        answer = len(asked) < 2
        asked.append(answer)
        return answer

    try:
        with pytest.raises(Fenced):
            await api.fenced(fence).create(kinds.EVENTS, {"metadata": {"name": "a"}}, "ns")
        assert received == []
    finally:
        await api.close()
        await server.close()
