"""Wiring of the renderer: FastStream subscribers on both lanes feeding the
batch pipeline (``handlers``), the claim loop (``claims``) and the heartbeat
(``heartbeat``) as tasks, and a drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

from faststream import AckPolicy, FastStream
from faststream.message import StreamMessage
from faststream.redis import RedisBroker, RedisSentinelBroker, StreamSub
from prometheus_client import start_http_server
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from ticketry import designs, streams
from ticketry.db import connect_redis, ensure_groups
from ticketry.redis_ha import check_primary, primary_connection_class, sentinel_options
from ticketry.replies import Entry
from ticketry.runtime import freeze_startup_heap, metrics_dir
from ticketry.settings import load_settings
from ticketry.telemetry import setup_logging
from ticketry.tracing import setup_tracing

from ticketry_renderer.claims import ClaimLoop
from ticketry_renderer.config import RendererSettings
from ticketry_renderer.handlers import BatchPipeline
from ticketry_renderer.heartbeat import Heartbeat

log = logging.getLogger(__name__)


class MetricsServer:
    """This process's ``/metrics`` port, started by the first app that starts
    (Kubernetes probes it: up means started); it outlives an app rebuilt after a
    Redis outage (see ``run``), so a later app does not start it again."""

    def __init__(self, settings: RendererSettings) -> None:
        self.settings, self.started = settings, False

    def start_once(self) -> None:
        # Under the scaler our values go to its directory and it serves them
        # (forked renderers would all want one port); alone, a port of our own.
        if self.started or not self.settings.metrics_port or metrics_dir() is not None:
            return
        start_http_server(self.settings.metrics_port, addr=self.settings.metrics_host)
        self.started = True


async def _entries(msg: StreamMessage[Any]) -> list[Entry]:
    """The batch as ``(id, fields)`` pairs: the handler's one argument.

    A decoder, not a ``RedisBatchStreamMessage`` parameter: FastStream resolves
    such context parameters with a synchronous function, which fast_depends
    runs in a worker thread, one thread hop per batch (≈ 6 % of a renderer's
    CPU with one-ticket orders, measured with py-spy).

    Raw entries, not ``list[RenderRequest]``: FastStream would validate the
    batch before the handler runs, so one entry that does not decode (a newer
    major version, a malformed payload) would fail the whole batch, leave it
    pending under AckPolicy.MANUAL and come back until a peer claims it: it
    would block the group instead of going to the dead-letter stream with its
    reason. The handler needs the entry ids too (the ack, the dead letter's
    ``dlq_entry``), and the wire format (``v``, ``data``) is not FastStream's.
    So the handler decodes each entry itself (``ticketry.events.decode_render_request``);
    the subscribers are typed with what this decoder returns (fast_depends
    checks it against ``list[Entry]``: ~8 µs a 32-entry batch)."""
    raw = msg.raw_message
    return list(zip(raw["message_ids"], raw["data"], strict=True))


class _App(FastStream):
    """A FastStream app that remembers whether it was asked to stop (SIGTERM,
    SIGINT or the max-jobs recycle all end in ``exit``)."""

    stop_requested = False

    def exit(self) -> None:
        self.stop_requested = True
        super().exit()


def default_consumer() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


async def finish_own_work(claims: ClaimLoop, settings: RendererSettings, *tasks: asyncio.Task[None]) -> None:
    """Let ``tasks`` (the claimer, the heartbeat) end, finish whatever is still
    pending under our name (rather than leave it for a peer to claim after the
    idle timeout), then leave the group: all within ``drain_timeout_s``. Past
    it (Redis unreachable: each command retries for up to ~35 s), what we still
    hold stays pending and a peer claims it; the process exits all the same."""
    try:
        async with asyncio.timeout(settings.drain_timeout_s):
            await asyncio.gather(*tasks, return_exceptions=True)
            left = await claims.drain_own_pending()
            await claims.leave_if_idle()
    except (TimeoutError, RedisConnectionError, RedisTimeoutError) as exc:
        log.warning(
            "drain cut short; what is pending under our name is left for a peer to claim",
            extra={"consumer": claims.batches.consumer, "error": repr(exc)},
        )
        return
    log.info("renderer drained", extra={"consumer": claims.batches.consumer, "finished_at_exit": left})


def _broker(settings: RendererSettings) -> RedisBroker:
    """FastStream's broker of our Redis: through Sentinel when configured
    (FastStream's own ``RedisSentinelBroker``: redis-py's Sentinel pool under
    it, with our connection that asks the sentinels at every reconnect, so a
    read cut by a failover reconnects to the new primary; see ``run`` for a
    failover seen at a subscriber's restart).

    FastStream logs "Received"/"Processed" per batch at ``log_level``: DEBUG
    keeps them below the root's INFO (WARNING would print two lines a batch).
    Our logger, not the one FastStream builds: that one prints coloured text
    to stdout, between our JSON lines (``ticketry.telemetry``)."""
    target = settings.redis_target
    options: dict[str, Any] = {
        "graceful_timeout": settings.drain_timeout_s,
        "log_level": logging.DEBUG,
        "logger": logging.getLogger("faststream.access.redis"),
    }
    if not target.via_sentinel:
        return RedisBroker(target.url, **options)
    return RedisSentinelBroker(
        target.url, sentinels=target.sentinels, sentinel_master_name=target.master,
        sentinel_kwargs=sentinel_options(), connection_class=primary_connection_class(target.url),
        **options,
    )  # fmt: skip


def create_app(settings: RendererSettings, consumer: str, metrics_server: MetricsServer | None = None) -> _App:
    metrics_server = metrics_server or MetricsServer(settings)
    broker = _broker(settings)
    redis = connect_redis(settings.redis_target)
    batches = BatchPipeline(redis=redis, settings=settings, consumer=consumer)
    claims = ClaimLoop(batches)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    def lane_subscriber(lane: str, batch: int) -> None:
        @broker.subscriber(
            stream=StreamSub(
                lane, group=streams.RENDERERS_GROUP, consumer=consumer, batch=True,
                max_records=batch, polling_interval=settings.poll_ms,
            ),
            ack_policy=AckPolicy.MANUAL,  # the emit script acks, atomically with the event
            decoder=_entries,
        )  # fmt: skip
        async def handle(entries: list[Entry]) -> None:
            await batches.handle_read(lane, entries, batch)
            if len(entries) < batch and settings.linger_ms:
                # A short batch: let the next one gather (see RendererSettings.linger_ms).
                await asyncio.sleep(settings.linger_ms / 1000)
            if settings.max_jobs and batches.rendered >= settings.max_jobs:
                log.info("max jobs reached; recycling", extra={"rendered": batches.rendered})
                asyncio.get_running_loop().call_soon(app.exit)

    lane_subscriber(streams.RENDER_VIP, settings.vip_batch)
    lane_subscriber(streams.RENDER_STD, settings.std_batch)

    # Designs asked for ahead of an event's first ticket: one renderer builds each, all load it.
    # One request a read, so the tiers of a new event are built by as many renderers at once.
    @broker.subscriber(
        stream=StreamSub(
            streams.DESIGN_REQUESTS, group=streams.DESIGNERS_GROUP, consumer=consumer, batch=True,
            max_records=1, polling_interval=settings.poll_ms,
        ),
        ack_policy=AckPolicy.MANUAL,
        decoder=_entries,
    )  # fmt: skip
    async def designs_requested(entries: list[Entry]) -> None:
        await batches.build_designs(entries)

    app = _App(broker)

    @app.on_startup
    async def startup() -> None:
        if settings.storage_backend == "local":
            settings.storage_dir.mkdir(parents=True, exist_ok=True)
        await ensure_groups(redis)
        await designs.ensure_group(redis)
        metrics_server.start_once()
        tasks.append(asyncio.create_task(claims.run(stop)))
        tasks.append(asyncio.create_task(Heartbeat(batches).run(stop)))
        freeze_startup_heap()
        log.info("renderer started", extra={"consumer": consumer})

    @app.after_shutdown
    async def drained() -> None:
        # Subscribers have stopped reading and finished their batches. Anything
        # still pending under our name (e.g. a read cut short) is finished here
        # rather than left for a peer to claim after the idle timeout.
        stop.set()
        try:
            await finish_own_work(claims, settings, *tasks)
        finally:
            await batches.store.aclose()
            await redis.aclose()

    return app


def _redis_outage(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_redis_outage(e) for e in exc.exceptions)
    return isinstance(exc, (RedisConnectionError, RedisTimeoutError, ConnectionRefusedError))


def lower_priority(nice: int) -> None:
    """This process's niceness to at least ``nice`` (never raised back: an
    unprivileged process could not, and a renderer started nicer stays so)."""
    if os.getpriority(os.PRIO_PROCESS, 0) < nice:
        os.setpriority(os.PRIO_PROCESS, 0, nice)


def run() -> None:
    """Run until SIGTERM/SIGINT. FastStream 0.7 restarts a subscriber whose read
    failed by re-running its start (XGROUP CREATE); if Redis is still down at that
    moment the error escapes ``app.run()`` and would end the process. A Redis
    outage is routine (restart, failover), so the app is built again and resumes:
    its pending entries are still ours (same consumer name) and are finished by
    the claimer, nothing is lost.

    A stop that was asked for is never turned into a restart: FastStream's
    shutdown can itself end in a Redis connection error ("Connection closed
    by server." right after a SIGTERM), and a restart would swallow the
    SIGTERM. The work in hand is finished by a worker of
    its own instead, and the process exits."""
    setup_logging("renderer")  # first: a refused setting is logged as JSON too
    settings = load_settings(RendererSettings)
    lower_priority(settings.renderer_nice)
    setup_tracing("renderer", settings.trace_file)
    consumer = settings.renderer_name or default_consumer()
    check_primary(settings.redis_target)  # a wrong Sentinel setting stops the start in one line
    import uvloop

    metrics_server = MetricsServer(settings)
    while True:
        app = create_app(settings, consumer, metrics_server)
        try:
            uvloop.run(app.run())
            return
        except Exception as exc:
            if app.stop_requested:
                log.warning("shutdown failed; finishing the work in hand", extra={"error": str(exc)[:200]})
                uvloop.run(_finish_alone(settings, consumer))
                return
            if not _redis_outage(exc):
                raise
            log.warning("redis unavailable; restarting the renderer app", extra={"error": str(exc)[:200]})
            time.sleep(1.0)


async def _finish_alone(settings: RendererSettings, consumer: str) -> None:
    redis = connect_redis(settings.redis_target)
    batches = BatchPipeline(redis=redis, settings=settings, consumer=consumer)
    try:
        await finish_own_work(ClaimLoop(batches), settings)
    finally:
        await batches.store.aclose()
        await redis.aclose()
