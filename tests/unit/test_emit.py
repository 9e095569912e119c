"""The emit script against a real redis-server: a ticket's final event, its
counters and its dead letter happen once, however often they are queued; a
cancelled order gets no further event."""

from __future__ import annotations

from pathlib import Path

from redis.asyncio import Redis
from ticketry import streams
from ticketry.emit import announce_cancelled, queue_final
from ticketry.events import event_fields


async def _fail_for_good(redis: Redis, order_id: str, ticket_id: str, entry: str, consumer: str) -> None:
    async with redis.pipeline(transaction=True) as pipe:
        queue_final(
            pipe, order_id=order_id, ticket_id=ticket_id, outcome="failed",
            fields=event_fields(type="ticket.failed", event_uuid=f"failed:{ticket_id}", order_id=order_id,
                                ticket_id=ticket_id, reason="boom"),
            source_stream=streams.RENDER_STD, entry_id=entry,
            dead_letter={"data": b"{}", "dlq_reason": "boom", "dlq_consumer": consumer},
        )  # fmt: skip
        await pipe.execute()


async def test_two_renderers_out_of_attempts_on_one_request_park_it_once(redis: Redis, tmp_path: Path) -> None:
    # Given a 2-ticket order whose first request two renderers both ran out of attempts on (a claim race)
    order_id, ticket_id = "or_" + "1" * 20, "tk_" + "1" * 20 + "_00000"
    await redis.hset(streams.order_progress(order_id), mapping={"total": 2, "order_id": order_id})
    await _fail_for_good(redis, order_id, ticket_id, "1-0", "renderer-a")
    await _fail_for_good(redis, order_id, ticket_id, "1-0", "renderer-b")
    # Then one ticket.failed, counted once, and one dead letter, the first renderer's
    events = await redis.xrange(streams.TICKET_EVENTS)
    assert [f[b"type"] for _, f in events] == [b"ticket.failed"]
    assert await redis.hget(streams.order_progress(order_id), "failed") == b"1"
    parked = await redis.xrange(streams.DEAD_LETTERS)
    assert [(f[b"dlq_consumer"], f[b"dlq_reason"]) for _, f in parked] == [(b"renderer-a", b"boom")]


async def test_a_cancelled_order_gets_no_further_event_and_no_dead_letter(redis: Redis) -> None:
    order_id, ticket_id = "or_" + "2" * 20, "tk_" + "2" * 20 + "_00001"
    await redis.hset(streams.order_progress(order_id), mapping={"total": 2, "order_id": order_id})
    first = await announce_cancelled(redis, order_id, 2)
    assert await announce_cancelled(redis, order_id, 2) == first  # once
    await _fail_for_good(redis, order_id, ticket_id, "2-0", "renderer-a")
    events = await redis.xrange(streams.TICKET_EVENTS)
    assert [f[b"type"] for _, f in events] == [b"order.cancelled"]
    assert await redis.xlen(streams.DEAD_LETTERS) == 0
