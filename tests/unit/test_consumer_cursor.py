"""A consumer's way from its own pending entries to new ones (``db.next_cursor``,
``consumer.GroupConsumer``), against a real redis-server: after a failed batch it
re-reads what it holds, in batches, and then reads new entries again; a lost
group is made again. (The projector once stayed on the id
of its last pending entry after a store outage: empty reads, never a new event.)"""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.asyncio import Redis
from ticketry.consumer import GroupConsumer
from ticketry.db import ensure_group, entries_of, next_cursor
from ticketry.replies import Entry

from tests.helpers import until

STREAM, GROUP, CONSUMER = "test:cursor", "folders", "c1"


@pytest.fixture
async def redis(redis: Redis) -> Redis:
    """The shared client (tests/unit/conftest.py), with this module's groups."""
    await ensure_group(redis, STREAM, GROUP)
    return redis


async def read(redis: Redis, cursor: str) -> list[Entry]:
    resp = await redis.xreadgroup(GROUP, CONSUMER, {STREAM: cursor}, count=2, block=100)
    return entries_of(resp)


def test_pending_batches_then_new_entries() -> None:
    e = [(b"1-0", {}), (b"2-0", {})]
    assert next_cursor("0", e) == "2-0"  # more of our own pending, after the last read
    assert next_cursor("2-0", []) == ">"  # none left: new ones from now on
    assert next_cursor("0", []) == ">"
    assert next_cursor(">", e) == ">" and next_cursor(">", []) == ">"


async def test_a_consumer_that_failed_a_batch_reads_its_pending_then_new_entries(redis: Redis) -> None:
    # Given a consumer holding 5 delivered, unacked entries (its batch failed)
    held = [await redis.xadd(STREAM, {"n": str(i)}) for i in range(5)]
    assert [e[0] for e in await read(redis, ">")] + [e[0] for e in await read(redis, ">")] + [
        e[0] for e in await read(redis, ">")
    ] == held
    # And a new entry that arrived meanwhile
    new = await redis.xadd(STREAM, {"n": "new"})

    # When it starts over at "0" and follows next_cursor, acking what it folds
    cursor, seen = "0", []
    for _ in range(10):
        entries = await read(redis, cursor)
        if entries:
            seen += [e[0] for e in entries]
            await redis.xack(STREAM, GROUP, *[e[0] for e in entries])
        cursor = next_cursor(cursor, entries)
        if new in seen:
            break

    # Then it re-read each held entry once, in order, and then got the new one
    assert seen == [*held, new]
    assert cursor == ">"
    assert (await redis.xpending(STREAM, GROUP))["pending"] == 0


async def test_a_group_consumer_rides_out_a_failed_batch_and_a_lost_group(redis: Redis) -> None:
    # Given a consumer whose handler fails its first batch, and a group that
    # Redis loses while the consumer runs
    handled: list[bytes] = []
    failures = 0

    async def handle(entries: list[Entry]) -> None:
        nonlocal failures
        if failures == 0:
            failures += 1
            raise RuntimeError("the store is down")
        handled.extend(e[0] for e in entries)
        await redis.xack(STREAM, GROUP, *[e[0] for e in entries])

    stop = asyncio.Event()
    consumer = GroupConsumer(
        redis, STREAM, GROUP, CONSUMER, handle, "test", logging.getLogger("test"),
        batch=2, claim_idle_ms=60_000, claim_interval_s=60.0,
    )  # fmt: skip
    first = [await redis.xadd(STREAM, {"n": str(i)}) for i in range(3)]
    task = asyncio.create_task(consumer.run(stop))
    try:
        # Then the failed batch comes again, each entry handled once, in order
        await until(lambda: handled == first)
        # When the group is lost (NOGROUP on the next read) and new entries come
        await redis.xgroup_destroy(STREAM, GROUP)
        later = [await redis.xadd(STREAM, {"n": "later"})]
        # Then the consumer makes its group again (from the start: every entry
        # is new to it) and goes on; nothing is left pending
        await until(lambda: handled[len(first) :] == [*first, *later])
        assert (await redis.xpending(STREAM, GROUP))["pending"] == 0
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
