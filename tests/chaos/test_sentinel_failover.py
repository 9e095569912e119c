"""The Redis primary dies (SIGKILL) under a stack that finds it through
Sentinel: Redis's own failover promotes the replica, and a client that finds
the primary through Sentinel (``ticketry.redis_ha``) moves to it by itself.

A real primary + replica + three ``redis-sentinel`` processes
(``tests.redis_ha``). The services under an on-sale through the same failover
(every 202 completes, each ticket rendered once, no 5xx but 503 with
Retry-After) are the HA topology's chaos test, tests/chaos/test_ha_topology.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from ticketry.db import connect_redis
from ticketry.redis_ha import RedisTarget, parse_sentinels

from tests.helpers import eventually
from tests.redis_ha import MASTER, RedisHA, redis_ha

pytestmark = [pytest.mark.chaos]


def target_of(ha: RedisHA) -> RedisTarget:
    return RedisTarget(ha.node_url(0), parse_sentinels(ha.sentinels_setting), MASTER)


@pytest.mark.timeout(400)
async def test_the_set_replaces_a_killed_primary_and_takes_it_back_as_a_replica(tmp_path: Path) -> None:
    with redis_ha(tmp_path / "redis") as ha:
        # Given a write the replica has acknowledged (WAIT 1)
        first = await ha.primary_node()
        client = redis.asyncio.Redis.from_url(ha.node_url(first))
        try:
            await client.set("before", "1")
            assert await client.execute_command("WAIT", 1, 10_000) == 1
        finally:
            await client.aclose()
        # When the primary is killed
        old = await ha.kill_primary()
        # Then the sentinels promote the replica, which holds the write and takes new ones
        new = await ha.wait_promoted(old)
        assert new != old
        promoted = redis.asyncio.Redis.from_url(ha.node_url(new))
        try:
            assert await promoted.get("before") == b"1"
            await promoted.set("after", "2")
        finally:
            await promoted.aclose()
        # And the old primary, started again on its data, comes back as the new one's replica
        ha.restart(old)
        await ha.wait_replica_of(old, new)
        rejoined = redis.asyncio.Redis.from_url(ha.node_url(old))
        try:
            assert await eventually(lambda: rejoined.get("after"), "the rejoined replica has the new write") == b"2"
            with pytest.raises(redis.ReadOnlyError):
                await rejoined.set("x", "1")
        finally:
            await rejoined.aclose()


@pytest.mark.timeout(300)
async def test_a_read_in_flight_at_the_kill_goes_on_on_the_new_primary(tmp_path: Path) -> None:
    with redis_ha(tmp_path / "redis") as ha:
        target = target_of(ha)
        # Given a patient reader (background work: no request budget) blocked in XREAD on the primary
        reader = connect_redis(target, timeout_s=60)
        writer = connect_redis(target)
        try:
            await writer.xadd("failover-stream", {"n": "0"})
            assert await writer.execute_command("WAIT", 1, 10_000) == 1
            reading = asyncio.create_task(reader.xread({"failover-stream": "$"}, block=50_000))
            await _wait_blocked_reader(ha, await ha.primary_node())
            # When the primary is killed and the replica promoted
            old = await ha.kill_primary()
            new = await ha.wait_promoted(old)
            # Then the same read, retried, blocks on the new primary (it does not keep
            # reconnecting to the dead one until its retries run out) and gets what is added there
            await _wait_blocked_reader(ha, new)
            added = await writer.xadd("failover-stream", {"n": "1"})
            got = await asyncio.wait_for(reading, 120)
            assert [(entry_id, fields) for _, entries in got for entry_id, fields in entries] == [(added, {b"n": b"1"})]
        finally:
            await reader.aclose()
            await writer.aclose()


async def _wait_blocked_reader(ha: RedisHA, node: int) -> None:
    """Wait until a client is blocked in XREAD on ``node``."""
    watch = redis.asyncio.Redis.from_url(ha.node_url(node))

    async def blocked() -> bool:
        clients: list[dict[str, Any]] = await watch.client_list()
        return any(c.get("cmd") == "xread" and "b" in str(c.get("flags")) for c in clients)

    try:
        await eventually(blocked, f"a reader blocked in XREAD on redis-{node}", timeout_s=60)
    finally:
        await watch.aclose()
