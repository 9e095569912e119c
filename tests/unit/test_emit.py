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


def _pairs(fields: dict[bytes, bytes]) -> list[str]:
    return [x.decode() for kv in fields.items() for x in kv]


async def test_the_scripts_write_every_event_as_event_fields_spells_it(redis: Redis) -> None:
    # Given a 1-ticket order
    order_id, ticket_id = "or_" + "3" * 20, "tk_" + "3" * 20 + "_00000"
    await redis.hset(streams.order_progress(order_id), mapping={"total": 1, "order_id": order_id})
    sent = event_fields(
        type="ticket.rendered", event_uuid=f"rendered:{ticket_id}", order_id=order_id, ticket_id=ticket_id,
        correlation_id="c-1", traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )  # fmt: skip
    # When its ticket's final event is emitted (which completes the order), then the order is cancelled
    async with redis.pipeline(transaction=True) as pipe:
        queue_final(pipe, order_id=order_id, ticket_id=ticket_id, outcome="rendered", fields=sent)
        await pipe.execute()
    await redis.delete(streams.order_progress(order_id))  # a cancel after completion, to see its event too
    await announce_cancelled(redis, order_id, 1)
    # Then each event is event_fields' list for the same event, then the counters
    ticket, completed, cancelled = [f for _, f in await redis.xrange(streams.TICKET_EVENTS)]
    assert _pairs(ticket) == [*sent, "total", "1", "rendered", "1", "failed", "0"]
    at = completed[b"occurred_at"].decode()
    assert at == sent[sent.index("occurred_at") + 1]
    order_event = event_fields(
        type="order.completed", event_uuid=f"completed:{order_id}", order_id=order_id, ticket_id="", occurred_at=at
    )
    assert _pairs(completed) == [*order_event, "total", "1", "rendered", "1", "failed", "0"]
    at = cancelled[b"occurred_at"].decode()
    order_event = event_fields(
        type="order.cancelled", event_uuid=f"cancelled:{order_id}", order_id=order_id, ticket_id="", occurred_at=at
    )
    assert _pairs(cancelled) == [*order_event, "total", "1", "rendered", "0", "failed", "0"]


async def _render(redis: Redis, order_id: str, ticket_id: str, entry: str, version: int = 0) -> None:
    fields = event_fields(type="ticket.rendered", event_uuid=f"r:{ticket_id}", order_id=order_id, ticket_id=ticket_id)
    async with redis.pipeline(transaction=True) as pipe:
        queue_final(
            pipe, order_id=order_id, ticket_id=ticket_id, outcome="rendered", fields=fields,
            source_stream=streams.RENDER_VIP, entry_id=entry, ticket_version=version,
        )  # fmt: skip
        await pipe.execute()


async def test_an_orders_first_ticket_rendered_adds_its_latency_once(redis: Redis) -> None:
    # Given a 2-ticket order whose render requests were added 5 s ago (by Redis's clock)
    order_id = "or_" + "4" * 20
    first, second = (f"tk_{'4' * 20}_0000{n}" for n in range(2))
    await redis.hset(streams.order_progress(order_id), mapping={"total": 2, "order_id": order_id})
    secs, micros = await redis.time()
    accepted = f"{secs * 1000 + micros // 1000 - 5000}-0"
    # When both tickets render, the first again (a redelivery), and the first is re-issued
    await _render(redis, order_id, first, accepted)
    await _render(redis, order_id, first, accepted)
    await _render(redis, order_id, second, accepted)
    await _render(redis, order_id, first, accepted, version=1)
    # Then one latency, of the first ticket: about the 5 s since its request
    [(_, fields)] = await redis.xrange(streams.FIRST_TICKET)
    assert 5000 <= int(fields[streams.FIRST_TICKET_MS.encode()]) < 5000 + 60_000
