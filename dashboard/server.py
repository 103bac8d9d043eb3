"""The dashboard's HTTP side: the page, its script and style, its JSON, and server-sent events.

Read-only: every route is a GET. The page follows `/events`: its first message (event
`snapshot`) is the whole view as JSON, and each next one (event `patch`) only what changed since
the message before, sent at most every `DEBOUNCE` seconds (changes come in bursts: one admission
changes a Workload, its ClusterQueue and its LocalQueue). A page that finds a patch not made
for the version it holds reconnects, and starts again from a snapshot. `/api/view` is the whole
view, for anything else that reads it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from importlib import resources

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dashboard.live import Follower, Live
from dashboard.metrics import DashboardMetrics

log = logging.getLogger("kohort.dashboard")

DEBOUNCE = 0.2
KEEPALIVE = 15.0
STATIC = {
    "/": ("index.html", "text/html"),
    "/static/dashboard.js": ("dashboard.js", "text/javascript"),
    "/static/dashboard.css": ("dashboard.css", "text/css"),
}
# The page loads nothing from anywhere else, and no page elsewhere may frame it.
HEADERS = {
    "Content-Security-Policy": (
        # Inline style attributes draw the bars; no inline script.
        "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _static(name: str) -> bytes:
    return resources.files("dashboard").joinpath("static", name).read_bytes()


def build_app(live: Live, metrics: DashboardMetrics | None = None) -> web.Application:
    app = web.Application()
    metrics = metrics or DashboardMetrics()
    for path, (name, content_type) in STATIC.items():
        body = _static(name)

        async def serve_file(
            _: web.Request, body: bytes = body, content_type: str = content_type
        ) -> web.Response:
            return web.Response(body=body, content_type=content_type, headers=HEADERS)

        app.router.add_get(path, serve_file)

    async def view(_: web.Request) -> web.Response:
        body = live.rendered()[1]
        return web.Response(body=body, content_type="application/json", headers=HEADERS)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app.router.add_get("/api/view", view)

    async def events(request: web.Request) -> web.StreamResponse:
        return await follow(live, request)

    app.router.add_get("/events", events)

    async def exported(_: web.Request) -> web.Response:
        metrics.report(live.history[-1] if live.history else live.sample())
        response = web.Response(body=generate_latest(metrics.registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", exported)
    return app


async def follow(live: Live, request: web.Request) -> web.StreamResponse:
    """Server-sent events: the view now, then what changed after every change."""
    response = web.StreamResponse(
        headers={**HEADERS, "Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    follower = Follower()
    try:
        while True:
            wake = live.wake  # before rendering: a change meanwhile sets it
            message = follower.next(live.render())
            if message is not None:
                event, body = message
                await response.write(b"event: " + event.encode() + b"\ndata: " + body + b"\n\n")
            if live.version == follower.sent_version:
                try:
                    async with asyncio.timeout(KEEPALIVE):
                        await wake.wait()
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
            await asyncio.sleep(DEBOUNCE)
    except ConnectionResetError:
        pass  # the page went away
    return response


class DashboardServer:
    def __init__(self, live: Live, context: ssl.SSLContext | None, *, host: str, port: int) -> None:
        self.app = build_app(live)
        self.context = context
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        # No graceful wait on stop: event streams never end by themselves.
        self._runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, shutdown_timeout=0.1
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.context)
        await site.start()
        if self.port == 0:
            server = site._server  # aiohttp has no public accessor for the bound socket
            self.port = int(getattr(server, "sockets", [])[0].getsockname()[1])
        log.info("dashboard serving on port %d", self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
