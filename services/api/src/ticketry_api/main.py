"""Wiring and lifespan of the API service (plus its projector and outbox sweep)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import uvicorn
from fastapi import FastAPI
from ticketry import fonts
from ticketry.codes import load_keyring
from ticketry.db import connect_mongo, create_indexes_for, ensure_groups, store_traits
from ticketry.redis_ha import check_primary
from ticketry.runtime import METRICS_DIR_ENV, freeze_startup_heap
from ticketry.settings import load_settings
from ticketry.tasks import pause
from ticketry.telemetry import setup_logging
from ticketry.tracing import setup_tracing

from ticketry_api import mail, waitingroom, webhooks
from ticketry_api.adapters import retention
from ticketry_api.adapters.baton import RedisBaton
from ticketry_api.adapters.ratelimit import RateSettings
from ticketry_api.config import ApiSettings
from ticketry_api.deps import AppState
from ticketry_api.http import errors
from ticketry_api.loops.outbox import sweep_outbox
from ticketry_api.loops.projector import run_projector
from ticketry_api.middleware.bodies import BodyDeadline, BodyLimit
from ticketry_api.middleware.budget import DependencyBudget
from ticketry_api.middleware.metrics import RequestMetrics, mark_process
from ticketry_api.middleware.security import CorsSettings, SecurityHeaders
from ticketry_api.middleware.shedding import OrderGate, OrderSlots, Shedding, bounded_redis
from ticketry_api.openapi import doc as openapi_doc
from ticketry_api.ops import throughput
from ticketry_api.routes import asyncapi as asyncapi_routes
from ticketry_api.routes import checkins, devices, downloads, events, health, orders, scanner, tickets
from ticketry_api.routes import ops as ops_routes
from ticketry_api.routes import pages as page_routes
from ticketry_api.routes import waitingroom as waitingroom_routes
from ticketry_api.routes import webhooks as webhook_routes
from ticketry_api.service_layer.checkins import forget_old_nonces
from ticketry_api.service_layer.reissue import sweep_reissues
from ticketry_api.store import Store
from ticketry_api.wallet import Wallet, WalletSettings
from ticketry_api.web.links import LinkSettings
from ticketry_api.webhooks.config import WebhookSettings

log = logging.getLogger(__name__)


async def _every(interval_s: float, stop: asyncio.Event, name: str, fn: Callable[[], Awaitable[object]]) -> None:
    while not stop.is_set():
        try:
            await fn()
        except Exception:
            log.exception("%s failed; will retry", name)
        await pause(stop, interval_s)


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    settings = settings or ApiSettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis = bounded_redis(
            settings.redis_target, max_connections=settings.api_redis_pool, wait_s=settings.api_redis_wait_s
        )
        mongo = await connect_mongo(settings.mongo_url, pool_size=settings.mongo_pool)
        traits = await store_traits(mongo)  # one buildInfo: the indexes and the store's reads
        log.info("store: %s", traits.server, extra={"indexed_queries": traits.indexed_queries})
        await create_indexes_for(traits)
        await ensure_groups(redis)
        keyring = load_keyring(settings.keys_dir, create=settings.dev_mode)
        # The fonts that judge holder names load here, not in the first order.
        await asyncio.to_thread(fonts.fits, "Ticketry")
        store = Store.create(traits, RedisBaton(redis))  # the ledgers take turns with other apis
        mail_settings = mail.MailSettings()  # a bad mail setting fails the start
        # A missing or bad wallet file fails the start, not the first pass.
        wallet = Wallet.from_settings(WalletSettings())
        app.state.ticketry = AppState(settings, redis, keyring, store, wallet=wallet)
        # Fail at start-up, not on every request, when the token keys are unusable.
        app.state.ticketry.token_verifier()
        stop = asyncio.Event()
        tasks = []
        if settings.run_projector:
            consumer = f"api-{socket.gethostname()}-{os.getpid()}"
            tasks.append(
                asyncio.create_task(run_projector(redis, store.tickets, consumer, settings.projector_batch, stop))
            )
        state = app.state.ticketry

        async def outbox() -> None:  # orders, then re-issues
            await sweep_outbox(redis, keyring, store, settings.outbox_grace_s)
            await sweep_reissues(state, settings.outbox_grace_s)

        tasks.append(asyncio.create_task(_every(settings.outbox_interval_s, stop, "outbox sweep", outbox)))
        tasks.append(
            asyncio.create_task(webhooks.run(redis, store, app.state.ticketry.webhooks, stop))
        )  # webhook dispatcher + sender
        tasks.append(
            asyncio.create_task(
                mail.run(redis, store, state.pdf_store(), mail_settings, state.links, settings.jwt_key, stop)
            )
        )  # the tickets by email, beside the webhooks
        tasks.append(
            asyncio.create_task(waitingroom.run(redis, store, app.state.shedding, settings, stop))
        )  # admission
        if settings.pdf_retention_days:  # PDFs of past events (adapters/retention.py)
            pdfs = app.state.ticketry.pdf_store()
            sweep = functools.partial(retention.sweep, redis, store, pdfs, settings.pdf_retention_days)
            tasks.append(asyncio.create_task(_every(settings.pdf_retention_interval_s, stop, "retention sweep", sweep)))
        forget = functools.partial(forget_old_nonces, store, settings.checkin_nonce_ttl_s)  # service_layer/checkins.py
        tasks.append(asyncio.create_task(_every(settings.checkin_nonce_sweep_s, stop, "nonce sweep", forget)))
        every = settings.ops_history_interval_s  # the console's throughput of the last 15 minutes
        keep = functools.partial(throughput.sample, redis, every)
        tasks.append(asyncio.create_task(_every(every, stop, "throughput sample", keep)))
        mark_process()
        freeze_startup_heap()
        try:
            yield
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await store.ledger.quiet(timeout_s=2)  # its last baton handed on before Redis closes
            if app.state.ticketry.pdfs is not None:
                await app.state.ticketry.pdfs.aclose()
            await redis.aclose()
            await mongo.close()

    app = FastAPI(
        title="Ticketry API",
        version="0.1.0",
        lifespan=lifespan,
        description="Events, orders, tickets, PDF download and check-in.",
        # operationId = the route function's name (create_order, get_ticket_pdf): what a generated
        # client names its calls, instead of FastAPI's default of name + path + method.
        generate_unique_id_function=lambda route: route.name,
    )
    errors.install(app)
    app.add_middleware(DependencyBudget)  # innermost: a request's dependencies give up within its budget
    app.state.shedding = Shedding(
        settings.max_inflight_orders, max_queued=settings.max_queued_orders, queue_s=settings.order_queue_s
    )
    app.add_middleware(OrderSlots, shedding=app.state.shedding)  # POST /v1/orders: bound, queue, 503
    # Every body whole (408 past the deadline, 429 past the per-address bound)
    # before an order takes a slot: a trickled body holds none.
    app.add_middleware(
        BodyDeadline, timeout_s=settings.body_read_timeout_s, per_client=settings.max_slow_bodies_per_client
    )
    # POST /v1/orders: 503 when it would be shed anyway, 401 without a valid token; the body not yet read.
    app.add_middleware(
        OrderGate, shedding=app.state.shedding, verify=lambda tok: app.state.ticketry.token_verifier().verify(tok)
    )
    app.add_middleware(SecurityHeaders)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestMetrics)  # outermost: counts every answer, 413s included
    for r in (events.router, orders.router, tickets.router, checkins.router, health.router):
        app.include_router(r)
    app.include_router(downloads.router)  # GET /v1/orders/{id}/pdf (download all)
    app.include_router(scanner.router)  # a door's list and revocations (offline scanning)
    app.include_router(devices.router)  # scanners paired as devices: /v1/events/{id}/devices, /v1/devices/*
    app.include_router(page_routes.router)  # the buyer's page /o/{id} and the scanner /scan
    app.include_router(webhook_routes.router)
    app.include_router(waitingroom_routes.router)  # POST /v1/events/{id}/queue
    app.include_router(asyncapi_routes.router)  # GET /asyncapi.json: every stream (ticketry.messages)
    app.include_router(ops_routes.router)  # the operator's console /ops and the admin JSON it reads
    openapi_doc.install(app)  # /openapi.json: ids, links, problem types and examples added
    return app


WORKER_PING_S = 120  # a worker that does not answer its supervisor's ping this long is replaced


def workers(settings: ApiSettings) -> int:
    """How many api processes serve the port: TICKETRY_API_WORKERS, else one per
    core this process may run on."""
    return settings.api_workers or len(os.sched_getaffinity(0))


def worker_app() -> FastAPI:
    """The app of one of several api processes (uvicorn's workers, spawned: each
    sets up its own logging and tracing, and reads its settings again)."""
    setup_logging("api")
    settings = load_settings(ApiSettings)
    setup_tracing("api", settings.trace_file)
    return create_app(settings)


def run() -> None:
    setup_logging("api")  # first: a refused setting is logged as JSON too
    settings = load_settings(ApiSettings)
    for part in (RateSettings, LinkSettings, WebhookSettings, CorsSettings, WalletSettings):
        load_settings(part)  # the app state reads them again; checked here, so a bad value stops the start too
    check_primary(settings.redis_target)  # a wrong Sentinel setting stops the start in one line
    n = workers(settings)
    if n == 1:
        setup_tracing("api", settings.trace_file)
        _serve(settings, create_app(settings))
        return
    # A dev stack's first key is made here, once: workers making it at once race on its files.
    load_keyring(settings.keys_dir, create=settings.dev_mode)
    # One listening socket, n processes accepting on it; this one supervises
    # (a worker that dies is started again; SIGTERM stops them all, each gracefully).
    log.info("api: %d worker processes", n, extra={"workers": n})
    with _shared_metrics():
        _serve(settings, "ticketry_api.main:worker_app", factory=True, processes=n)


@contextlib.contextmanager
def _shared_metrics() -> Iterator[None]:
    """A directory the workers keep their metric values in, so a scrape answered
    by any of them sums them all (``middleware.metrics.exposition``); set before
    the first worker is spawned, removed after the last exits. One the operator
    set (``PROMETHEUS_MULTIPROC_DIR``) is used as is, and kept."""
    if os.environ.get(METRICS_DIR_ENV):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="ticketry-api-metrics-") as path:
        os.environ[METRICS_DIR_ENV] = path
        try:
            yield
        finally:
            del os.environ[METRICS_DIR_ENV]


def _serve(settings: ApiSettings, app: FastAPI | str, *, factory: bool = False, processes: int | None = None) -> None:
    uvicorn.run(
        app,
        host=settings.api_host,
        port=settings.api_port,
        loop="uvloop",
        http="httptools",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
        factory=factory,
        workers=processes,
        # A spawned worker answers the supervisor's ping only once it has imported
        # the api (~6 s of CPU, far longer on a busy host); 5 s (uvicorn's) killed
        # every worker before it started.
        timeout_worker_healthcheck=WORKER_PING_S,
    )
