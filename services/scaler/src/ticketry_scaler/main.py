"""``ticketry-scaler``: wiring and lifespan only."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys

from prometheus_client import start_http_server
from redis.asyncio import Redis
from redis.exceptions import RedisError
from ticketry.db import connect_redis, ensure_groups
from ticketry.tasks import pause
from ticketry.telemetry import setup_logging

from ticketry_scaler.backends import make_backend
from ticketry_scaler.config import ScalerSettings
from ticketry_scaler.controller import Controller
from ticketry_scaler.leader import Leader
from ticketry_scaler.policy import PolicyConfig

log = logging.getLogger("ticketry_scaler")


def policy_config(s: ScalerSettings) -> PolicyConfig:
    return PolicyConfig(
        minimum=s.renderers_min,
        maximum=s.renderers_max,
        target_drain_s=s.scaler_target_drain_s,
        default_rate=s.scaler_default_rate,
        up_window_s=s.scaler_up_window_s,
        down_window_s=s.scaler_down_window_s,
        cooldown_s=s.scaler_cooldown_s,
    )


async def _ensure_groups(redis: Redis, stop: asyncio.Event) -> bool:
    """Create the consumer groups, retrying until Redis answers or we are stopped."""
    while not stop.is_set():
        try:
            await ensure_groups(redis)
            return True
        except RedisError as exc:
            log.warning("redis not ready; retrying", extra={"error": repr(exc)})
            await pause(stop, 1.0)
    return False


async def serve(settings: ScalerSettings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set, then drain every renderer this instance started."""
    redis = connect_redis(settings.redis_url)
    backend = make_backend(settings)
    leader = Leader(redis, settings.scaler_instance)
    controller = Controller(
        redis,
        backend,
        leader,
        policy_config(settings),
        standby_replicas=settings.renderers_min if backend.name == "local" else None,
        lag_scan_cap=settings.scaler_lag_scan_cap,
    )
    try:
        if not await _ensure_groups(redis, stop):
            return
        await backend.start()
        log.info(
            "scaler started",
            extra={
                "backend": backend.name,
                "instance": settings.scaler_instance,
                "min": settings.renderers_min,
                "max": settings.renderers_max,
            },
        )
        await controller.run(stop, settings.scaler_interval_s)
    finally:
        log.info("scaler stopping: draining")
        await backend.aclose()
        with contextlib.suppress(RedisError):
            await leader.release()
        await redis.aclose()
        log.info("scaler stopped")


async def _main(settings: ScalerSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)


def run() -> None:
    """Console-script entry point; exits 0 after a clean drain on SIGTERM/SIGINT."""
    settings = ScalerSettings()
    setup_logging("scaler", settings.log_level)
    server = None
    if settings.scaler_metrics_port:
        server, _ = start_http_server(settings.scaler_metrics_port, settings.scaler_metrics_host)
    try:
        asyncio.run(_main(settings))
    finally:
        if server is not None:
            server.shutdown()
    sys.exit(0)


if __name__ == "__main__":
    run()
