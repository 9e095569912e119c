"""The claim side of a group consumer (``ticketry.consumer.Claimer``, under the
projector, the webhook dispatcher and the renderer), against a real
redis-server. Idle times are set with ``XCLAIM … IDLE`` rather than waited for."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis
from ticketry.consumer import Claimer
from ticketry.db import ensure_group

STREAM, GROUP = "test:claims", "claimers"
IDLE_MS = 30_000


@pytest.fixture
async def redis(redis: Redis) -> Redis:
    await ensure_group(redis, STREAM, GROUP)
    return redis


def claimer(redis: Redis, consumer: str) -> Claimer:
    return Claimer(redis, STREAM, GROUP, consumer, IDLE_MS, 10)


async def held_by(redis: Redis, consumer: str, n: int) -> list[bytes]:
    """``n`` new entries read by ``consumer`` and left idle past the claim threshold."""
    for i in range(n):
        await redis.xadd(STREAM, {"n": str(i)})
    got: Any = await redis.xreadgroup(GROUP, consumer, {STREAM: ">"}, count=n)
    ids = [e for e, _ in got[0][1]]
    await redis.xclaim(STREAM, GROUP, consumer, 0, ids, idle=2 * IDLE_MS, justid=True)
    return ids


async def owners(redis: Redis) -> dict[str, str]:
    rows: Any = await redis.xpending_range(STREAM, GROUP, min="-", max="+", count=100)
    return {r["message_id"].decode(): r["consumer"].decode() for r in rows}


async def test_a_dead_consumers_entries_are_taken_and_trimmed_ones_acked(redis: Redis) -> None:
    # Given a consumer that died holding three entries, one of them trimmed since
    ids = await held_by(redis, "dead", 3)
    await redis.xdel(STREAM, ids[1])
    # When a live one claims abandoned entries
    taken = await claimer(redis, "live").abandoned()
    # Then it holds the two that exist, and the trimmed one is acked
    assert [e for e, _ in taken] == [ids[0], ids[2]]
    assert await owners(redis) == {ids[0].decode(): "live", ids[2].decode(): "live"}


async def test_a_touched_entry_stays_with_its_holder_and_a_peers_claim_is_not_taken_back(redis: Redis) -> None:
    # Given a slow consumer holding two entries idle past the threshold
    kept, lost = await held_by(redis, "slow", 2)
    # When a peer claims one of them before the slow one touches both
    await redis.xclaim(STREAM, GROUP, "peer", IDLE_MS, [lost], justid=True)
    await claimer(redis, "slow").touch([kept, lost], 2 * IDLE_MS)
    # Then the touched one is not abandoned any more, and the peer keeps its claim
    assert await claimer(redis, "peer").abandoned() == []
    assert await owners(redis) == {kept.decode(): "slow", lost.decode(): "peer"}


async def test_a_due_retry_counts_a_delivery_and_a_consumer_leaves_only_when_idle(redis: Redis) -> None:
    # Given a consumer holding one entry, delivered once
    (entry,) = await held_by(redis, "c1", 1)
    c1 = claimer(redis, "c1")
    assert await c1.deliveries([entry.decode()]) == {entry.decode(): 1}
    # When it takes it again for a retry
    assert [e for e, _ in await c1.take([entry.decode()])] == [entry]
    # Then that is a second delivery, and the entry is still its own
    assert await c1.deliveries([entry.decode()]) == {entry.decode(): 2}
    assert [e for e, _ in await c1.own_pending()] == [entry]
    # And it stays in the group while it holds the entry, and leaves once it is acked
    await c1.leave_if_idle()
    assert [c["name"] for c in await redis.xinfo_consumers(STREAM, GROUP)] == [b"c1"]
    await redis.xack(STREAM, GROUP, entry)
    await c1.leave_if_idle()
    assert await redis.xinfo_consumers(STREAM, GROUP) == []
