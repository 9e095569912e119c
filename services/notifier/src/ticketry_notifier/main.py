"""Wiring and lifespan of the notifier."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import resource
from collections.abc import AsyncIterator

import uvicorn
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from ticketry.auth import TokenVerifier
from ticketry.db import connect_mongo, connect_redis
from ticketry.redis_ha import check_primary
from ticketry.runtime import freeze_startup_heap
from ticketry.settings import load_settings
from ticketry.telemetry import setup_logging
from ticketry.tracing import setup_tracing

from ticketry_notifier import queue, routes
from ticketry_notifier.config import NotifierSettings
from ticketry_notifier.hub import Hub
from ticketry_notifier.lookups import ProgressReads


def connect_notifier_redis(settings: NotifierSettings) -> Redis:
    """``ticketry.db.connect_redis`` (reconnects by itself, through Sentinel
    when configured) on a pool that makes a caller wait for a free
    connection, up to ``notifier_redis_wait_s``, instead of failing at once: a
    crowd of handshakes queues for the pool rather than being dropped
    (redis-py's default pool raises ``MaxConnectionsError`` at its 100th
    connection)."""
    return connect_redis(
        settings.redis_target,
        max_connections=settings.notifier_redis_pool,
        wait_s=settings.notifier_redis_wait_s,
        timeout_s=30.0,
    )


log = logging.getLogger(__name__)

PROGRESS_PATH = "/v1/orders/{order_id}/progress"
# Files the process needs besides its sockets (Redis and store pools, logs, libraries).
FILES_RESERVED = 256
_PROGRESS_RE = re.compile(r"/v1/orders/([^/]+)/progress")


class ProgressFirst:
    """Progress sockets go straight to their handler; everything else (health,
    metrics, the lifespan) through Starlette.

    A socket lives for minutes, and every frame of the call chain that leads to
    its handler lives with it: Starlette's error and exception middleware and
    its router kept ~5 KB per socket (tracemalloc, a fifth of an idle socket's
    cost), 50 MB at 10,000 sockets. The route stays declared on the Starlette
    app too (same handler), so it is documented and reachable either way."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.state = app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            path: str = scope["path"]
            root: str = scope.get("root_path", "")
            m = _PROGRESS_RE.fullmatch(path[len(root) :] if root and path.startswith(root) else path)
            if m is not None:
                scope["app"] = self.app
                scope["path_params"] = {"order_id": m.group(1)}
                await routes.progress(WebSocket(scope, receive, send))
                return
        await self.app(scope, receive, send)


def create_app(settings: NotifierSettings | None = None) -> Starlette:
    settings = settings or NotifierSettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Built here, so a bad key setting fails the start, not the first socket.
        verifier = TokenVerifier.from_env(fallback_secret=settings.jwt_key)
        redis = connect_notifier_redis(settings)
        mongo = await connect_mongo(settings.mongo_url, pool_size=settings.mongo_pool)
        hub = Hub(redis, max_sockets=settings.notifier_max_sockets, max_per_user=settings.notifier_max_sockets_per_user)
        reads = ProgressReads(redis, settings.notifier_handshake_batch)
        app.state.notifier = routes.Notifier(settings, hub, reads, verifier)
        app.state.rooms = queue.Rooms(redis)  # waiting-room places' sockets
        stop = asyncio.Event()
        task = asyncio.create_task(hub.run(stop))
        freeze_startup_heap()
        try:
            yield
        finally:
            stop.set()
            await asyncio.gather(task, return_exceptions=True)
            await app.state.rooms.close()
            await reads.close()
            await redis.aclose()
            await mongo.close()

    return Starlette(
        routes=[
            WebSocketRoute(PROGRESS_PATH, routes.progress),
            WebSocketRoute("/v1/queue/{queue_id}/progress", queue.queue_progress),
            Route("/healthz", routes.healthz),
            Route("/readyz", routes.readyz),
            Route("/metrics", routes.metrics),
        ],
        lifespan=lifespan,
    )


def raise_open_files_limit() -> int:
    """Lift the soft limit on open files to the hard one (each socket is a
    file; a soft limit of 1,024 would cap the process far below its bound);
    the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):  # above fs.nr_open: keep what we have
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft if soft != resource.RLIM_INFINITY else 1 << 30


def run() -> None:
    setup_logging("notifier")  # first: a refused setting is logged as JSON too
    settings = load_settings(NotifierSettings)
    setup_tracing("notifier", settings.trace_file)
    check_primary(settings.redis_target)  # a wrong Sentinel setting stops the start in one line
    files = raise_open_files_limit()
    # Past the open-files limit, accept() fails and uvicorn drops connections
    # without a word; below it, the bound answers 1013.
    fit = files - FILES_RESERVED
    if settings.notifier_max_sockets == 0 or settings.notifier_max_sockets > fit:
        if settings.notifier_max_sockets:
            log.warning("socket bound lowered to the open-files limit", extra={"max_sockets": fit, "nofile": files})
        settings = settings.model_copy(update={"notifier_max_sockets": max(fit, 1)})
    uvicorn.run(
        ProgressFirst(create_app(settings)),
        host=settings.notifier_host,
        port=settings.notifier_port,
        loop="uvloop",
        log_config=None,
        access_log=False,
        # The sans-I/O protocol keeps no task per connection (the legacy one keeps
        # several); no per-message deflate: a zlib context pair per socket costs
        # ~40 KB to save a few bytes of ~150-byte JSON messages.
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        ws_max_size=4096,  # clients send nothing we read
        backlog=settings.notifier_backlog,
        timeout_graceful_shutdown=5,
    )
