"""The scaler with the real renderer: forked from a server that imported it once,
each renders, a SIGKILLed one is replaced under its name, a SIGKILLed fork
server is replaced with its renderers, none outlives a SIGKILLed scaler, and a
SIGTERMed scaler drains them."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis
from ticketry_scaler import observe

from tests.chaos.support import completes_rendering_each_once, mongo_of, redis_of, wait_until
from tests.conftest import TokenFactory, make_stack
from tests.helpers import create_event, place_order

pytestmark = [pytest.mark.chaos]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def _renderers(redis: Redis) -> dict[str, int]:
    return {b.consumer: b.pid for b in await observe.heartbeats(redis)}


@pytest.mark.timeout(300)
async def test_scaler_forks_real_renderers_and_replaces_a_killed_one(tmp_path: Path, token: TokenFactory) -> None:
    stack = await asyncio.to_thread(make_stack, tmp_path, 0, {"TICKETRY_CLAIM_IDLE_MS": "3000"})
    redis, mongo = redis_of(stack), mongo_of(stack)
    try:
        scaler = stack.start_service(
            "scaler",
            {"TICKETRY_RENDERERS_MIN": "2", "TICKETRY_RENDERERS_MAX": "2", "TICKETRY_SCALER_METRICS_PORT": "0"},
        )
        # Given the scaler's two renderers, forked from its fork server (not exec'd by the scaler)
        await wait_until(lambda: _count_is(redis, 2), 120)
        renderers = await _renderers(redis)
        servers = {_parent(pid) for pid in renderers.values()}
        assert len(servers) == 1 and scaler.pid not in servers
        (server,) = servers
        assert _parent(server) == scaler.pid
        assert b"forkserver" in Path(f"/proc/{server}/cmdline").read_bytes()

        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            buyer = token("scaler-buyer", "buyer")
            event = await create_event(api, token("scaler-org", "organizer"), capacity=1000)

            async def rendered_once(quantity: int) -> None:
                order = (await place_order(api, buyer, event["id"], quantity)).json()
                await completes_rendering_each_once(redis, mongo, order, 120)

            # Then they render an order
            await rendered_once(200)
            # When one is SIGKILLed, then a fresh fork takes its name and the next order renders
            name, pid = sorted(renderers.items())[0]
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            await wait_until(lambda: _replaced(redis, name, pid), 60, interval_s=0.05)
            print(f"\nSCALER replaced a SIGKILLed renderer (fork → first heartbeat) in {time.monotonic() - t0:.2f}s")
            await rendered_once(100)

            # When the fork server itself is SIGKILLed, then its renderers drain and exit, and the
            # scaler starts a new server and new renderers, which render the next order
            before = await _renderers(redis)
            os.kill(server, signal.SIGKILL)
            await wait_until(lambda: _none_alive(list(before.values())), 60)
            await wait_until(lambda: _all_new(redis, before, 2), 120)
            (server,) = {_parent(pid) for pid in (await _renderers(redis)).values()}
            assert _parent(server) == scaler.pid
            await rendered_once(100)

        # When the scaler is SIGKILLed, then its fork server goes, and its renderers drain and exit
        renderers = await _renderers(redis)
        scaler.signal(signal.SIGKILL)
        assert await asyncio.to_thread(scaler.popen.wait, 10) == -signal.SIGKILL  # type: ignore[union-attr]
        await wait_until(lambda: _none_alive([server, *renderers.values()]), 60)

        # And a scaler stopped with SIGTERM drains its renderers and exits cleanly
        scaler = stack.start_service(
            "scaler",
            {"TICKETRY_RENDERERS_MIN": "1", "TICKETRY_RENDERERS_SPARE": "0", "TICKETRY_SCALER_METRICS_PORT": "0"},
        )
        await wait_until(lambda: _count_is(redis, 1), 120)
        renderers = await _renderers(redis)
        assert await asyncio.to_thread(scaler.stop, 60) == 0
        assert await _none_alive(list(renderers.values())) and await _count_is(redis, 0)
    finally:
        await redis.aclose()
        await mongo.close()
        await asyncio.to_thread(stack.stop)


async def _count_is(redis: Redis, n: int) -> bool:
    return len(await _renderers(redis)) == n


async def _replaced(redis: Redis, name: str, old_pid: int) -> bool:
    return (await _renderers(redis)).get(name, old_pid) != old_pid


async def _all_new(redis: Redis, before: dict[str, int], n: int) -> bool:
    now = await _renderers(redis)
    return len(now) == n and not set(now.values()) & set(before.values())


async def _none_alive(pids: list[int]) -> bool:
    return not any(_alive(p) for p in pids)
