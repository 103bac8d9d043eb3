"""The thin aiohttp layer: HTTPS admission endpoints, probes, and plain-HTTP metrics.

Each handler reads the body (at most 3 MiB), decodes JSON, calls the pure decision function and
encodes its answer. Bad input is a 400 with a plain-text reason, never a 500.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from cryptography import x509
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from certs.reload import CertificateReloader
from controller.workloads.registry import REGISTRY, Registry
from webhook import pruned_reviews, reviews
from webhook.metrics import WebhookMetrics
from webhook.mutation import mutate
from webhook.settings import Settings
from webhook.validation import MODELS, PODGROUP_KINDS, validate

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
LINGER_SECONDS = 0.5
MUTATE_PATH = "/mutate"
# The MutatingWebhookConfiguration sends namespaces labelled kohort.dev/managed=true here:
# the webhook cannot read namespace labels itself, so the path says "this namespace opted in".
MUTATE_DEFAULT_QUEUE_PATH = "/mutate-default-queue"
VALIDATE_PATH = "/validate"
VALIDATE_DEFAULT_QUEUE_PATH = "/validate-default-queue"

Decision = Callable[[Any], dict[str, Any]]
Decoder = Callable[[bytes], Any]


def decode_for_mutation(body: bytes) -> Any:
    """The request of a Job's or Pod's review, pruned to what mutation reads; else the whole
    review."""
    review = pruned_reviews.decode(body)
    return orjson.loads(body) if review is None else review


@dataclass
class Readiness:
    certificate_loaded: bool = False
    listening: bool = False

    @property
    def ready(self) -> bool:
        return self.certificate_loaded and self.listening


def _kind_of(review: Any) -> str:
    if type(review) is pruned_reviews.PrunedRequest:
        return review.kind
    try:
        return str(review["request"]["kind"]["kind"])
    except (KeyError, TypeError):
        return ""


def counted_kinds(registry: Registry) -> frozenset[str]:
    """The kinds the webhook answers for, which label its metrics; any other kind a request
    names is counted as OTHER_KIND, so that requests naming made-up kinds cannot grow the
    metrics without bound."""
    return frozenset(
        {k.kind for k in registry.kinds} | set(MODELS) | {kind for _, kind in PODGROUP_KINDS}
    )


OTHER_KIND = "other"


def _uid_of(review: Any) -> Any:
    if type(review) is pruned_reviews.PrunedRequest:
        return review.uid
    return review.get("request", {}).get("uid") if isinstance(review, dict) else None


def _bad_request(reason: str) -> web.Response:
    return web.Response(status=400, text=reason + "\n")


def _too_large() -> web.Response:
    response = _bad_request(f"request body exceeds the {MAX_BODY // 2**20} MiB limit")
    response.force_close()  # the unread rest of the body must not be taken for a request
    return response


class AdmissionApp:
    """The routes and their decision functions; no TLS, no sockets (tests use it directly)."""

    def __init__(
        self,
        settings: Settings,
        metrics: WebhookMetrics,
        readiness: Readiness,
        registry: Registry = REGISTRY,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.readiness = readiness
        self.registry = registry
        self._counted = counted_kinds(registry)
        self._patches: dict[str, Any] = {}

    def build(self) -> web.Application:
        # The 3 MiB limit is checked here; aiohttp's own limit would answer 413 with HTML.
        app = web.Application(client_max_size=MAX_BODY + 1024)
        app.router.add_post(MUTATE_PATH, self._handler("mutate", self._mutate, decode_for_mutation))
        app.router.add_post(
            MUTATE_DEFAULT_QUEUE_PATH,
            self._handler("mutate-default-queue", self._mutate_default, decode_for_mutation),
        )
        app.router.add_post(VALIDATE_PATH, self._handler("validate", self._validate))
        app.router.add_post(
            VALIDATE_DEFAULT_QUEUE_PATH,
            self._handler("validate-default-queue", self._validate_default),
        )
        add_probes(app, self.readiness)
        return app

    # The review was decoded from the request body for this call alone: edited in place.
    def _mutate(self, review: Any) -> dict[str, Any]:
        return mutate(review, self.settings, owned=True, registry=self.registry)

    def _mutate_default(self, review: Any) -> dict[str, Any]:
        return mutate(
            review, self.settings, default_queue="default", owned=True, registry=self.registry
        )

    def _validate(self, review: Any) -> dict[str, Any]:
        return validate(review, self.settings, registry=self.registry)

    def _validate_default(self, review: Any) -> dict[str, Any]:
        return validate(review, self.settings, default_queue="default", registry=self.registry)

    def _handler(
        self, webhook: str, decide: Decision, decode: Decoder = orjson.loads
    ) -> Callable[[web.Request], Any]:
        answered = self.metrics.answered.path(webhook)

        async def handle(request: web.Request) -> web.Response:
            start = time.perf_counter()
            length = request.content_length
            try:
                body = None if length is not None and length > MAX_BODY else await request.read()
            except web.HTTPRequestEntityTooLarge:
                body = None
            if body is None or len(body) > MAX_BODY:  # declared, or found once read
                response = _too_large()
            else:
                response = self._answer(webhook, decide, decode, body)
            answered.observe(time.perf_counter() - start, response.status)
            return response

        return handle

    def _answer(self, webhook: str, decide: Decision, decode: Decoder, body: bytes) -> web.Response:
        try:
            review = decode(body)
        except ValueError as err:
            return _bad_request(f"request body is not JSON: {err}")
        try:
            answer = decide(review)
        except reviews.BadReview as err:
            return _bad_request(f"not an AdmissionReview: {err}")
        except Exception:  # never a 500: deny and keep serving
            log.exception("admission decision failed", extra={"webhook": webhook})
            uid = _uid_of(review)
            if not isinstance(uid, str) or not uid:
                return _bad_request("the request could not be decided")
            answer = reviews.deny(uid, "kohort's webhook could not decide this request", code=400)
        self._count(webhook, review, answer)
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    def _counted_kind(self, review: Any) -> str:
        kind = _kind_of(review)
        return kind if kind in self._counted else OTHER_KIND

    def _count(self, webhook: str, review: Any, answer: dict[str, Any]) -> None:
        response = answer["response"]
        if not response["allowed"]:
            self.metrics.denials.labels(webhook, self._counted_kind(review)).inc()
        elif "patch" in response:
            kind = self._counted_kind(review)
            counter = self._patches.get(kind)
            if counter is None:  # labels() takes a lock and builds a key: once per kind
                counter = self._patches[kind] = self.metrics.patches.labels(kind)
            counter.inc()


def add_probes(app: web.Application, readiness: Readiness) -> None:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if readiness.ready:
            return web.Response(text="ok\n")
        missing = "certificate" if not readiness.certificate_loaded else "listener"
        return web.Response(status=503, text=f"not ready: no {missing} yet\n")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


def metrics_app(metrics: WebhookMetrics, readiness: Readiness) -> web.Application:
    async def serve_metrics(_: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        response = web.Response(body=body)
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/metrics", serve_metrics)
    add_probes(app, readiness)
    return app


class WebhookServer:
    """The HTTPS admission server and its metrics listener, started and stopped together."""

    def __init__(
        self,
        settings: Settings,
        context: ssl.SSLContext,
        *,
        host: str = "0.0.0.0",
        port: int = 9443,
        metrics_host: str = "0.0.0.0",
        metrics_port: int | None = 8080,
        reuse_port: bool = False,
        registry: Registry = REGISTRY,
    ) -> None:
        self.metrics = WebhookMetrics()
        self.reuse_port = reuse_port
        self.readiness = Readiness()
        self.context = context
        self.host, self.port = host, port
        self.metrics_host, self.metrics_port = metrics_host, metrics_port
        self.app = AdmissionApp(settings, self.metrics, self.readiness, registry).build()
        self._runners: list[web.AppRunner] = []

    def certificate_loaded(self, certificate: x509.Certificate) -> None:
        """Hook for CertificateReloader.on_reload."""
        self.readiness.certificate_loaded = True
        self.metrics.certificate_reloads.inc()
        self.metrics.certificate_expiry.set(certificate.not_valid_after_utc.timestamp())

    def reloader(self, cert_dir: Any = None) -> CertificateReloader:
        return CertificateReloader(self.context, cert_dir, on_reload=self.certificate_loaded)

    async def start(self) -> None:
        # lingering_time: how long to drain an unread (rejected, oversized) body.
        runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, lingering_time=LINGER_SECONDS
        )
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(
            runner,
            self.host,
            self.port,
            ssl_context=self.context,
            backlog=1024,
            reuse_port=self.reuse_port or None,
        )
        await site.start()
        if self.port == 0:
            self.port = _bound_port(site)
        if self.metrics_port is not None:
            metrics_runner = web.AppRunner(
                metrics_app(self.metrics, self.readiness), access_log=None, handle_signals=False
            )
            await metrics_runner.setup()
            self._runners.append(metrics_runner)
            metrics_site = web.TCPSite(metrics_runner, self.metrics_host, self.metrics_port)
            await metrics_site.start()
            if self.metrics_port == 0:
                self.metrics_port = _bound_port(metrics_site)
        self.readiness.listening = True
        log.info("webhook serving", extra={"port": self.port, "metricsPort": self.metrics_port})

    def activity(self) -> tuple[int, int]:
        """Requests received and connections open on the admission port so far: changes
        whenever the server was busy."""
        server = self._runners[0].server if self._runners else None
        return (server.requests_count, len(server.connections)) if server else (0, 0)

    async def stop(self) -> None:
        self.readiness.listening = False
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()


def _bound_port(site: web.TCPSite) -> int:
    server = site._server  # aiohttp exposes no public accessor for the bound socket
    sockets = getattr(server, "sockets", None) or []
    return int(sockets[0].getsockname()[1])
