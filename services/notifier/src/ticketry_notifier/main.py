"""Wiring and lifespan of the notifier."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute
from ticketry.db import connect_mongo, connect_redis
from ticketry.runtime import freeze_startup_heap
from ticketry.telemetry import setup_logging
from ticketry.tracing import setup_tracing

from ticketry_notifier import routes
from ticketry_notifier.config import NotifierSettings
from ticketry_notifier.hub import Hub


def create_app(settings: NotifierSettings | None = None) -> Starlette:
    settings = settings or NotifierSettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        redis = connect_redis(settings.redis_url, timeout_s=30)
        mongo = await connect_mongo(settings.mongo_url, pool_size=settings.mongo_pool)
        hub = Hub(redis, settings.socket_queue)
        app.state.settings, app.state.hub = settings, hub
        stop = asyncio.Event()
        task = asyncio.create_task(hub.run(stop))
        freeze_startup_heap()
        try:
            yield
        finally:
            stop.set()
            await asyncio.gather(task, return_exceptions=True)
            await redis.aclose()
            await mongo.close()

    return Starlette(
        routes=[
            WebSocketRoute("/v1/orders/{order_id}/progress", routes.progress),
            Route("/healthz", routes.healthz),
            Route("/readyz", routes.readyz),
            Route("/metrics", routes.metrics),
        ],
        lifespan=lifespan,
    )


def run() -> None:
    settings = NotifierSettings()
    setup_logging("notifier", settings.log_level)
    setup_tracing("notifier", settings.trace_file)
    uvicorn.run(
        create_app(settings),
        host=settings.notifier_host,
        port=settings.notifier_port,
        loop="uvloop",
        log_config=None,
        access_log=False,
        ws_max_size=64 * 1024,
        timeout_graceful_shutdown=5,
    )
