"""``ticketry-scaler``: wiring and lifespan only."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

from redis.asyncio import Redis
from redis.exceptions import RedisError
from ticketry.db import connect_redis, ensure_groups
from ticketry.redis_ha import check_primary
from ticketry.settings import load_settings
from ticketry.tasks import pause
from ticketry.telemetry import setup_logging

from ticketry_scaler import metrics
from ticketry_scaler.backends import make_backend
from ticketry_scaler.config import ScalerSettings
from ticketry_scaler.controller import Controller
from ticketry_scaler.leader import Leader
from ticketry_scaler.policy import PolicyConfig, ThroughputMeter

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
        burst_s=s.scaler_burst_s,
        min_gain=s.scaler_min_gain,
        spare=s.renderers_spare,
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


async def export_cluster(redis: Redis, leader: Leader, stop: asyncio.Event, settings: ScalerSettings) -> None:
    """The cluster-wide gauges, while this instance leads (``metrics.ClusterGauges``);
    none while it does not, or while Redis cannot be read (no stale numbers)."""
    while not stop.is_set():
        if leader.is_leader:
            try:
                metrics.CLUSTER.show(await metrics.observe_cluster(redis, scan_cap=settings.scaler_lag_scan_cap))
            except Exception as exc:
                metrics.CLUSTER.hide()
                if not isinstance(exc, RedisError):
                    log.exception("cluster metrics failed")
        else:
            metrics.CLUSTER.hide()
        await pause(stop, settings.scaler_interval_s)
    metrics.CLUSTER.hide()


async def serve(settings: ScalerSettings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set, then drain every renderer this instance started."""
    redis = connect_redis(settings.redis_target)
    backend = make_backend(settings)
    leader = Leader(redis, settings.scaler_instance)
    controller = Controller(
        redis,
        backend,
        leader,
        policy_config(settings),
        standby_replicas=settings.renderers_min if backend.name == "local" else None,
        lag_scan_cap=settings.scaler_lag_scan_cap,
        meter=ThroughputMeter(window_s=settings.scaler_rate_window_s) if settings.throughput_policy else None,
    )
    exporting = asyncio.create_task(export_cluster(redis, leader, stop, settings))
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
                "policy": "throughput" if settings.throughput_policy else "drain",
                "cpu_cap": getattr(backend, "cpu_cap", None),
            },
        )
        await controller.run(stop, settings.scaler_interval_s)
    finally:
        exporting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await exporting
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
    setup_logging("scaler")  # first: a refused setting is logged as JSON too
    settings = load_settings(ScalerSettings)
    check_primary(settings.redis_target)  # a wrong Sentinel setting stops the start in one line
    server = None
    # Before the backend exists: the renderers it starts inherit the directory.
    renderers: Path | None = metrics.renderers_dir() if settings.scaler_backend == "local" else None
    try:
        if settings.scaler_metrics_port:
            server = metrics.serve(settings.scaler_metrics_port, settings.scaler_metrics_host, renderers)
        asyncio.run(_main(settings))
    finally:
        if server is not None:
            server.shutdown()
        if renderers is not None:
            metrics.remove_renderers_dir(renderers)
    sys.exit(0)


if __name__ == "__main__":
    run()
