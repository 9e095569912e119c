"""The webhook sender's and dead letters' Redis steps against a real redis-server:
a due retry moves back exactly once however many senders race for it, what
comes of an attempt is one MULTI with the entry's ack and delete, and a dead
letter is re-driven once."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import ensure_group
from ticketry_api.webhooks import deadletters
from ticketry_api.webhooks.config import WebhookSettings
from ticketry_api.webhooks.models import Delivery
from ticketry_api.webhooks.sender import Sender


@pytest.fixture
async def redis(redis: Redis) -> Redis:
    """The shared client (tests/unit/conftest.py), with this module's groups."""
    await ensure_group(redis, streams.WEBHOOK_DELIVERIES, streams.WEBHOOK_SENDERS_GROUP)
    return redis


def delivery(n: int, attempt: int = 2) -> Delivery:
    return Delivery(f"wh_{n}", f"msg_{n}", "order.completed", f"or_{n}", "ev_1", b'{"n": %d}' % n, attempt, ("a1",))


async def entries(redis: Redis) -> list[Delivery]:
    return [Delivery.from_fields(f) for _, f in await redis.xrange(streams.WEBHOOK_DELIVERIES)]


async def test_due_retries_move_back_once_however_many_senders_race(redis: Redis) -> None:
    # Given 50 retries that are due and one that is not
    now_ms = int(time.time() * 1000)
    due = {orjson.dumps(delivery(n).to_fields()).decode(): now_ms - 1000 for n in range(50)}
    later = orjson.dumps(delivery(99).to_fields()).decode()
    await redis.zadd(streams.WEBHOOK_RETRIES, {**due, later: now_ms + 3_600_000})
    senders = [Sender(redis, WebhookSettings(), f"s{i}") for i in range(4)]
    try:
        # When four senders move them at once
        moved = await asyncio.gather(*(s.move_due() for s in senders))
    finally:
        await asyncio.gather(*(s.aclose() for s in senders))
    # Then each due one is on the stream exactly once, the other still waits
    assert sum(moved) == 50
    assert sorted(d.msg_id for d in await entries(redis)) == sorted(f"msg_{n}" for n in range(50))
    assert await redis.zrange(streams.WEBHOOK_RETRIES, 0, -1) == [later.encode()]


async def test_an_attempts_outcome_is_recorded_with_the_ack_and_delete(redis: Redis) -> None:
    sender = Sender(redis, WebhookSettings(), "s")
    try:
        ids = [(await redis.xadd(streams.WEBHOOK_DELIVERIES, delivery(n).to_fields())).decode() for n in range(3)]
        await redis.xreadgroup(streams.WEBHOOK_SENDERS_GROUP, "s", {streams.WEBHOOK_DELIVERIES: ">"})
        nxt = delivery(1).next_attempt("attempt 2: HTTP 500")
        await sender._finish(ids[0])
        await sender._finish(ids[1], retry=(orjson.dumps(nxt.to_fields()).decode(), 123))
        await sender._finish(ids[2], dead=deadletters.dead_fields(delivery(2).to_fields(), "gave up", ids[2]))
    finally:
        await sender.aclose()
    # Nothing pending, nothing left on the stream
    assert (await redis.xpending(streams.WEBHOOK_DELIVERIES, streams.WEBHOOK_SENDERS_GROUP))["pending"] == 0
    assert await redis.xlen(streams.WEBHOOK_DELIVERIES) == 0
    # The retry waits with its next attempt number, the dead letter says why
    ((member, score),) = await redis.zrange(streams.WEBHOOK_RETRIES, 0, -1, withscores=True)
    assert score == 123 and Delivery.from_fields(orjson.loads(member)).attempt == 3
    (dead,) = await deadletters.list_dead(redis)
    assert (dead["webhook_id"], dead["reason"], dead["redrivable"]) == ("msg_2", "gave up", True)


async def test_a_dead_letter_is_redriven_once_as_a_fresh_run(redis: Redis) -> None:
    d = delivery(7, attempt=6)
    dead_id = (await redis.xadd(streams.WEBHOOK_DEAD, deadletters.dead_fields(d.to_fields(), "x", "1-0"))).decode()
    bad_id = (await redis.xadd(streams.WEBHOOK_DEAD, {"dlq_reason": "malformed"})).decode()
    # Twice at once: one re-drive
    first, second = await asyncio.gather(deadletters.redrive(redis, [dead_id]), deadletters.redrive(redis, [dead_id]))
    outcomes = sorted([first[dead_id], second[dead_id]])
    assert outcomes[0] == "not found (already re-driven?)" and outcomes[1].startswith("re-driven as ")
    (again,) = await entries(redis)
    assert (again.msg_id, again.body, again.attempt) == (d.msg_id, d.body, 1)
    assert again.history[-1].startswith("re-driven at ")
    assert (await deadletters.redrive(redis, [bad_id]))[bad_id].startswith("not re-drivable")
    assert await deadletters.delete(redis, [bad_id, bad_id]) == {bad_id: "not found"}
    assert await redis.xlen(streams.WEBHOOK_DEAD) == 0
