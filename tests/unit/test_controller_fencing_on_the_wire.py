"""A paused leader's request that already passed its fence, and waits for a connection when
the replica resumes without the Lease, never reaches the API server (the fault the chaos runner
found: `create podgroups/...` sent by a resumed leader after the standby took over)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from controller.api import kinds
from controller.cluster.clients import Client, Fenced, from_endpoint
from controller.cluster.kubeconfig import Endpoint


@asynccontextmanager
async def api_server(
    received: list[str],
    *,
    before_answer: Callable[[web.Request], Awaitable[None]] | None = None,
    connections: int | None = None,
) -> AsyncIterator[Client]:
    """An HTTP server recording each request it receives ("METHOD path"), and a client of it
    built as `clients.connect` builds one (at most `connections` connections)."""

    async def handler(request: web.Request) -> web.Response:
        received.append(f"{request.method} {request.path}")
        if before_answer is not None:
            await before_answer(request)
        return web.json_response({"metadata": {"name": "x"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    endpoint = Endpoint(str(server.make_url("")).rstrip("/"))
    if connections is not None:
        endpoint.max_connections = connections
    api = from_endpoint(endpoint)
    try:
        yield api
    finally:
        await api.close()
        await server.close()


async def test_a_write_queued_for_a_connection_while_the_leader_was_paused_is_never_sent() -> None:
    received: list[str] = []
    first_arrived = asyncio.Event()
    release_first = asyncio.Event()

    async def hold_the_read(request: web.Request) -> None:
        if request.method == "GET":
            first_arrived.set()
            await release_first.wait()

    leading = [True]
    async with api_server(received, before_answer=hold_the_read, connections=1) as api:
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


async def test_a_leader_that_holds_its_lease_sends_its_writes_through_the_same_session() -> None:
    received: list[str] = []
    async with api_server(received) as api:
        await api.fenced(lambda: True).create(kinds.EVENTS, {"metadata": {"name": "a"}}, "ns")
        assert received == ["POST /api/v1/namespaces/ns/events"]


async def test_a_write_whose_body_waits_its_turn_while_the_leader_is_stopped_is_never_sent() -> (
    None
):
    received: list[str] = []
    asked: list[bool] = []

    def fence() -> bool:
        # Leading when the request starts and when its headers are ready; stopped before its
        # body (and the headers kept back with it) is written, and no longer leading after.
        answer = len(asked) < 2
        asked.append(answer)
        return answer

    async with api_server(received) as api:
        with pytest.raises(Fenced):
            await api.fenced(fence).create(kinds.EVENTS, {"metadata": {"name": "a"}}, "ns")
        assert received == []
