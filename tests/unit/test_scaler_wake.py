"""An idle scaler waits for work, not for its interval: after a tick that saw no
work it blocks on the lanes from where their group stood (real Redis), so a
request appended at any moment after that tick, even before the wait began,
ends the wait."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import ensure_groups
from ticketry_devstack.procs import free_port, redis_proc, wait_port
from ticketry_scaler.backends.dryrun import DryRunBackend
from ticketry_scaler.controller import Controller
from ticketry_scaler.leader import Leader
from ticketry_scaler.policy import PolicyConfig

CFG = PolicyConfig(minimum=1, maximum=4, target_drain_s=30, default_rate=5.0)
NEVER_S = 3600.0  # a wait this long only ends because work came (the test's deadline is far shorter)


@pytest.fixture
async def redis(tmp_path: Path) -> AsyncIterator[Redis]:
    port = free_port()
    proc = redis_proc(tmp_path / "redis", port).start()
    client = Redis.from_url(f"redis://127.0.0.1:{port}/0")
    try:
        wait_port(port, 60, proc.popen)
        yield client
    finally:
        await client.aclose()
        proc.stop()
        shutil.rmtree(tmp_path / "redis", ignore_errors=True)


async def _controller(redis: Redis) -> Controller:
    await ensure_groups(redis)
    return Controller(redis, DryRunBackend(initial=1), Leader(redis, "wake"), CFG)


async def test_an_idle_tick_waits_for_the_first_request(redis: Redis) -> None:
    ctl = await _controller(redis)
    stop = asyncio.Event()
    # Given a tick that saw no work: it remembers where each lane's group stood
    assert await ctl.tick() is not None
    after = ctl._idle_at
    assert after is not None and set(after) == set(streams.RENDER_LANES)
    # When a request is appended while the scaler waits (far longer than this test may run)
    waiting = asyncio.create_task(ctl._work_or(stop, after, NEVER_S))
    await asyncio.sleep(0)
    assert not waiting.done()
    await redis.xadd(streams.RENDER_VIP, {"n": 1})
    # Then the wait ends
    await asyncio.wait_for(waiting, 120)


async def test_a_request_appended_before_the_wait_is_not_missed(redis: Redis) -> None:
    ctl = await _controller(redis)
    stop = asyncio.Event()
    assert await ctl.tick() is not None
    after = ctl._idle_at
    assert after is not None
    # Given a request appended between the idle tick and the wait
    await redis.xadd(streams.RENDER_STD, {"n": 1})
    # Then the wait ends at once ("$" would have waited for the next one)
    await asyncio.wait_for(ctl._work_or(stop, after, NEVER_S), 120)


async def test_a_tick_with_work_does_not_wait_for_more(redis: Redis) -> None:
    ctl = await _controller(redis)
    await redis.xadd(streams.RENDER_STD, {"n": 1})
    assert await ctl.tick() is not None
    assert ctl._idle_at is None  # the loop then paces itself by the interval
