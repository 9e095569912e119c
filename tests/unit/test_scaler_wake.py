"""The controller against a real Redis. An idle scaler waits for work, not for
its interval: after a tick that saw no work it blocks on the lanes from where
their group stood, so a request appended at any moment after that tick, even
before the wait began, ends the wait. And what it counts as finished (the
throughput policy's measure) is known on every lane, read or not."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import ensure_groups
from ticketry_devstack.procs import free_port, redis_proc, wait_port
from ticketry_scaler import observe
from ticketry_scaler.backends.dryrun import DryRunBackend
from ticketry_scaler.controller import Controller
from ticketry_scaler.leader import Leader
from ticketry_scaler.policy import PolicyConfig, finished

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


async def test_finished_counts_acked_entries_on_every_lane_read_or_not(redis: Redis) -> None:
    await ensure_groups(redis)
    # Given lanes nobody has read yet (Redis reports their entries-read as NULL): none finished
    assert finished(await observe.backlogs(redis)) == 0
    # When a renderer reads 20 of 50 on one lane and acks 15 (the other lane untouched)
    for i in range(50):
        await redis.xadd(streams.RENDER_STD, {"n": i})
    got: Any = await redis.xreadgroup(streams.RENDERERS_GROUP, "r", {streams.RENDER_STD: ">"}, count=20)
    await redis.xack(streams.RENDER_STD, streams.RENDERERS_GROUP, *[entry for entry, _ in got[0][1]][:15])
    # Then 15 are finished, 5 pending, 30 lag
    lanes = await observe.backlogs(redis)
    assert finished(lanes) == 15
    std = next(lane for lane in lanes if lane.stream == streams.RENDER_STD)
    assert (std.lag, std.pending, std.entries_read) == (30, 5, 20)
