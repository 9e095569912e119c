"""Wiring of the renderer: FastStream subscribers on both lanes, plus the claimer
and heartbeat tasks, and a drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from faststream import AckPolicy, FastStream
from faststream.redis import RedisBroker, StreamSub
from faststream.redis.annotations import RedisBatchStreamMessage
from prometheus_client import start_http_server
from ticketry import streams
from ticketry.db import connect_redis, ensure_groups
from ticketry.telemetry import setup_logging

from ticketry_renderer.config import RendererSettings
from ticketry_renderer.handlers import Worker, default_consumer

log = logging.getLogger(__name__)


def create_app(settings: RendererSettings) -> FastStream:
    consumer = settings.renderer_name or default_consumer()
    broker = RedisBroker(settings.redis_url, graceful_timeout=settings.drain_timeout_s, log_level=logging.WARNING)
    redis = connect_redis(settings.redis_url)
    worker = Worker(redis=redis, settings=settings, consumer=consumer)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    def lane_subscriber(lane: str, batch: int) -> None:
        @broker.subscriber(
            stream=StreamSub(
                lane, group=streams.RENDERERS_GROUP, consumer=consumer, batch=True,
                max_records=batch, polling_interval=settings.poll_ms,
            ),
            ack_policy=AckPolicy.MANUAL,  # the emit script acks, atomically with the event
        )  # fmt: skip
        async def handle(body: Any, msg: RedisBatchStreamMessage) -> None:
            raw = msg.raw_message
            await worker.process(lane, list(zip(raw["message_ids"], raw["data"], strict=True)))
            if settings.max_jobs and worker.rendered >= settings.max_jobs:
                log.info("max jobs reached; recycling", extra={"rendered": worker.rendered})
                asyncio.get_running_loop().call_soon(app.exit)

    lane_subscriber(streams.RENDER_VIP, settings.vip_batch)
    lane_subscriber(streams.RENDER_STD, settings.std_batch)

    app = FastStream(broker)

    @app.on_startup
    async def startup() -> None:
        settings.storage_dir.mkdir(parents=True, exist_ok=True)
        await ensure_groups(redis)
        if settings.metrics_port:
            start_http_server(settings.metrics_port, addr="127.0.0.1")
        tasks.append(asyncio.create_task(worker.claim_loop(stop)))
        tasks.append(asyncio.create_task(worker.heartbeat_loop(stop)))
        log.info("renderer started", extra={"consumer": consumer})

    @app.after_shutdown
    async def drained() -> None:
        # Subscribers have stopped reading and finished their batches. Anything
        # still pending under our name (e.g. a read cut short) is finished here
        # rather than left for a peer to claim after the idle timeout.
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            left = await asyncio.wait_for(worker.drain_own_pending(), settings.drain_timeout_s)
            log.info("renderer drained", extra={"consumer": consumer, "finished_at_exit": left})
            await worker.forget_consumer_if_idle()
        finally:
            await redis.aclose()

    return app


def run() -> None:
    settings = RendererSettings()
    setup_logging("renderer", settings.log_level)
    import uvloop

    uvloop.run(create_app(settings).run())
