"""Guarantee 5 (graceful drain on SIGTERM, bounded even while Redis is down) and
guarantee 1 across a Redis restart."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest
from ticketry import streams
from ticketry_devstack.procs import Stack, redis_proc, wait_port

from tests.chaos.support import (
    ProgressWatcher,
    completes_rendering_each_once,
    mongo_of,
    pending_total,
    redis_of,
    wait_until,
)
from tests.conftest import TokenFactory, make_stack
from tests.helpers import create_event, place_order

pytestmark = [pytest.mark.chaos]


# The renderer's own bound on a drain (the product's promise): FastStream's
# graceful timeout, then finishing what it holds, each TICKETRY_DRAIN_TIMEOUT_S
# (the default, 20 s). Measured: 0.5-0.8 s.
DRAIN_TIMEOUT_S = 20.0
DRAIN_BOUND_S = 2 * DRAIN_TIMEOUT_S
# The Redis outage of the restart test: its length is the scenario (the services
# lose their connections at once, and must ride out refused reconnects), not a
# wait for anything; nothing is asserted about what happens within it.
OUTAGE_S = 2.0


@pytest.mark.timeout(300)
async def test_sigterm_drains_in_flight_work_without_redelivery(tmp_path: Path, token: TokenFactory) -> None:
    env = {"TICKETRY_CLAIM_IDLE_MS": "3000", "TICKETRY_DRAIN_TIMEOUT_S": str(DRAIN_TIMEOUT_S)}
    stack = await asyncio.to_thread(make_stack, tmp_path, 1, env)
    redis, mongo = redis_of(stack), mongo_of(stack)
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            buyer = token("drain-buyer", "buyer")
            event = await create_event(api, token("drain-org", "organizer"), capacity=400)
            order = (await place_order(api, buyer, event["id"], 400)).json()
            (renderer,) = stack.renderers
            name = renderer.env["TICKETRY_RENDERER_NAME"]

            # Given the only renderer holding work mid-order
            async def holding() -> bool:
                rows = await redis.xpending_range(
                    streams.RENDER_STD, streams.RENDERERS_GROUP, min="-", max="+", count=100, consumername=name
                )
                return bool(rows)

            await wait_until(holding, 120, interval_s=0.01)
            # When it gets SIGTERM
            t0 = time.monotonic()
            renderer.signal(signal.SIGTERM)
            code = await asyncio.to_thread(renderer.popen.wait, DRAIN_BOUND_S + 30)  # type: ignore[union-attr]
            took = time.monotonic() - t0
            # Then it exits cleanly within its bound, leaving nothing pending to redeliver
            assert code == 0 and took < DRAIN_BOUND_S, took
            assert await pending_total(redis) == 0
            before = await redis.hgetall(streams.order_progress(order["id"]))
            assert 0 < int(before.get(b"rendered", 0)) < 400  # it rendered what it held, not more

            # And a fresh renderer finishes the rest; no ticket has two events
            stack.start_renderer()

            await completes_rendering_each_once(redis, mongo, order, 120)
            print(f"\nDRAIN exit after SIGTERM: {took:.2f}s")
    finally:
        await redis.aclose()
        await mongo.close()
        await asyncio.to_thread(stack.stop)


@pytest.mark.timeout(400)
async def test_redis_restart_mid_order_loses_nothing(tmp_path: Path, token: TokenFactory) -> None:
    stack = await asyncio.to_thread(make_stack, tmp_path, 2, {"TICKETRY_CLAIM_IDLE_MS": "3000"})
    redis, mongo = redis_of(stack), mongo_of(stack)
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=120) as api:
            # Given an order acknowledged by the api (202), partly rendered
            buyer = token("redis-buyer", "buyer")
            event = await create_event(api, token("redis-org", "organizer"), capacity=3000)
            first = (await place_order(api, buyer, event["id"], 1500)).json()
            await wait_until(lambda: _rendered_at_least(redis, first["id"], 1), 120, interval_s=0.01)
            pids = [p.pid for p in stack.renderers]

            # When Redis is stopped (SIGTERM: AOF flushed) and started again on its data
            await asyncio.to_thread(stack.procs["redis"].stop)
            await asyncio.sleep(OUTAGE_S)
            await _start_redis_again(stack)

            # Then every consumer carries on by itself: the same renderer processes,
            # the projector and the notifier; a new order is accepted and completes too
            second = (await place_order(api, buyer, event["id"], 5)).json()
            watcher = ProgressWatcher(second["progress_url"], buyer)
            await asyncio.wait_for(watcher.run(timeout_s=120), 150)
            for o in (first, second):
                await completes_rendering_each_once(redis, mongo, o, 180)
            assert [p.pid for p in stack.renderers] == pids and all(p.alive() for p in stack.renderers)
            assert len(watcher.of_type("ticket.rendered")) == 5
            await wait_until(lambda: _no_pending(redis), 60)
    finally:
        await redis.aclose()
        await mongo.close()
        await asyncio.to_thread(stack.stop)


@pytest.mark.timeout(300)
async def test_sigterm_during_a_redis_outage_exits_within_the_bound(tmp_path: Path, token: TokenFactory) -> None:
    drain_timeout_s = 5.0
    stack = await asyncio.to_thread(
        make_stack, tmp_path, 1, {"TICKETRY_CLAIM_IDLE_MS": "3000", "TICKETRY_DRAIN_TIMEOUT_S": str(drain_timeout_s)}
    )
    redis, mongo = redis_of(stack), mongo_of(stack)
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=120) as api:
            # Given the only renderer mid-order
            buyer = token("outage-buyer", "buyer")
            event = await create_event(api, token("outage-org", "organizer"), capacity=600)
            order = (await place_order(api, buyer, event["id"], 600)).json()
            await wait_until(lambda: _rendered_at_least(redis, order["id"], 1), 120, interval_s=0.01)
            (renderer,) = stack.renderers

            # When Redis goes away and then the renderer gets SIGTERM
            await asyncio.to_thread(stack.procs["redis"].stop)
            t0 = time.monotonic()
            renderer.signal(signal.SIGTERM)
            code = await asyncio.to_thread(renderer.popen.wait, 90)  # type: ignore[union-attr]
            took = time.monotonic() - t0
            # Then it exits within its bounds (the subscribers' grace, then the
            # drain's: 10 s; here with 20 s to spare for a loaded machine), not
            # after every Redis command has spent its retries (~35 s each)
            assert code == 0 and took < 2 * drain_timeout_s + 20, took
            print(f"\nDRAIN during a Redis outage: exit {took:.1f}s after SIGTERM")

            # And once Redis is back, a fresh renderer claims what it held: the order completes, once
            await _start_redis_again(stack)
            stack.start_renderer()

            await completes_rendering_each_once(redis, mongo, order, 180)
    finally:
        await redis.aclose()
        await mongo.close()
        await asyncio.to_thread(stack.stop)


async def _start_redis_again(stack: Stack) -> None:
    """Redis on its own data (AOF) and port, after ``stack.procs["redis"]`` stopped."""
    fresh = redis_proc(stack.data_dir / "redis", stack.redis_port).start()
    stack.procs["redis"] = fresh
    await asyncio.to_thread(wait_port, stack.redis_port, 30, fresh.popen)


async def _rendered_at_least(redis: object, order_id: str, n: int) -> bool:
    v = await redis.hget(streams.order_progress(order_id), "rendered")  # type: ignore[attr-defined]
    return int(v or 0) >= n


async def _no_pending(redis: object) -> bool:
    return await pending_total(redis) == 0  # type: ignore[arg-type]
