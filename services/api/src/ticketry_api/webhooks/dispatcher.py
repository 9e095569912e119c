"""Ticket events → webhook deliveries (group ``webhooks`` on the ticket events).

Each api runs one dispatcher (a consumer of the group, like the projector): it
reads the ticket events, and for every ``order.completed``,
``order.cancelled`` and ``ticket.reissued`` (that one also reads the ticket's
re-issue, for its holder and version) of an event that has endpoints reads the order (by
``_id``) and that event's endpoints, then appends one delivery per endpoint
that subscribed to the message's type and acks the events, in one MULTI.
Which events have endpoints is a Redis set (``index``), and the order's event
is in its progress hash: an order of an event without endpoints (nearly all)
costs no store read, only its share of one SMEMBERS and one pipelined HGET per
batch; none at all while no event has an endpoint. An order whose progress
hash does not name its event (placed before it did, or expired) is read. It never sends anything
itself, so a slow shop cannot hold the events up: the sender does that from
the deliveries stream. A crash between reading and the MULTI makes the events
come again (our own pending entries first, or a peer claims them): the same
deliveries with the same ``webhook-id`` are appended again, which is the
at-least-once the shops dedupe.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import Counter
from redis.asyncio import Redis
from ticketry import streams
from ticketry.consumer import CLAIM_IDLE_MS, CLAIM_INTERVAL_S, GroupConsumer
from ticketry.events import DecodeError, TicketEvent, decode_ticket_event
from ticketry.replies import Entry

from ticketry_api.store import Store
from ticketry_api.store.endpoints import Endpoints
from ticketry_api.webhooks import index
from ticketry_api.webhooks.models import Delivery, fact_of, message_id, payload, webhook_type

log = logging.getLogger(__name__)

BATCH = 500
_ORDER_EVENTS = (b"order.completed", b"order.cancelled", b"ticket.reissued")

ORDER_READS = Counter("ticketry_webhook_order_reads", "Orders the webhook dispatcher read from the store")
ORDERS_SKIPPED = Counter(
    "ticketry_webhook_orders_skipped", "Order events the webhook dispatcher skipped: their event has no endpoint"
)


async def orders_to_read(redis: Redis, endpoints: Endpoints, order_ids: list[str]) -> list[str]:
    """Those of ``order_ids`` whose event has (or may have) endpoints."""
    hooked = await index.events_with_endpoints(redis, endpoints)
    if not hooked:
        return []
    events = await index.events_of(redis, order_ids)
    return [o for o in order_ids if (e := events[o]) is None or e in hooked]


async def deliveries_for(redis: Redis, store: Store, events: list[TicketEvent]) -> list[Delivery]:
    """The deliveries a batch of ticket events asks for."""
    wanted = [(ev, t) for ev in events if (t := webhook_type(ev)) is not None]
    if not wanted:
        return []
    every = sorted({ev.order_id for ev, _ in wanted})
    order_ids = await orders_to_read(redis, store.endpoints, every)
    ORDERS_SKIPPED.inc(len(every) - len(order_ids))
    if not order_ids:
        return []
    ORDER_READS.inc(len(order_ids))
    readable = set(order_ids)
    orders = await store.orders.summaries(order_ids)
    by_event = await store.endpoints.types_by_event(sorted({d["event_id"] for d in orders.values()}))
    out: list[Delivery] = []
    for ev, type_ in wanted:
        if ev.order_id not in readable:
            continue  # its event has no endpoint
        order = orders.get(ev.order_id)
        if order is None:
            log.warning("webhooks: no order for an order event", extra={"order_id": ev.order_id})
            continue
        hooks = [h for h in by_event.get(order["event_id"], []) if type_ in h.get("types", ())]
        if not hooks:
            continue
        issue = None
        if type_ == "ticket.reissued" and ev.ticket_id is not None:
            found = await store.tickets.current_issue(ev.ticket_id)
            issue = found.model_dump() if found is not None else None
        body = payload(ev, type_, order, issue)
        msg = message_id(order["event_id"], ev.order_id, type_, fact_of(ev))
        for hook in hooks:
            out.append(Delivery(hook["_id"], msg, type_, ev.order_id, order["event_id"], body))
    return out


async def dispatch(redis: Redis, store: Store, entries: list[Entry]) -> int:
    """Turn a batch of ticket-event entries into deliveries and ack them; how
    many deliveries were appended."""
    events: list[TicketEvent] = []
    for entry_id, fields in entries:
        if fields.get(b"type") not in _ORDER_EVENTS:
            continue  # a ticket's event (nearly all of them): not decoded, only acked
        try:
            events.append(decode_ticket_event(entry_id, fields))
        except DecodeError:
            log.error("webhooks: undecodable ticket event skipped", extra={"entry": entry_id})
    deliveries = await deliveries_for(redis, store, events)
    async with redis.pipeline(transaction=True) as pipe:
        for d in deliveries:
            pipe.xadd(streams.WEBHOOK_DELIVERIES, d.to_fields())  # type: ignore[arg-type]
        if entries:
            pipe.xack(streams.TICKET_EVENTS, streams.WEBHOOKS_GROUP, *(e for e, _ in entries))
        await pipe.execute()
    if deliveries:
        log.info("webhooks: deliveries queued", extra={"count": len(deliveries)})
    return len(deliveries)


async def run_dispatcher(
    redis: Redis, store: Store, consumer: str, stop: asyncio.Event, *, claim_idle_ms: int = CLAIM_IDLE_MS
) -> None:
    """Dispatch until ``stop``; never dies on a bad entry or a Redis restart
    (``ticketry.consumer``). The group starts at the stream's end (``$``): when
    webhooks are first deployed there are no endpoints for the events already there."""

    async def handle(entries: list[Entry]) -> None:
        await dispatch(redis, store, entries)

    await GroupConsumer(
        redis, streams.TICKET_EVENTS, streams.WEBHOOKS_GROUP, consumer, handle, "webhooks dispatcher", log,
        batch=BATCH, claim_idle_ms=claim_idle_ms, claim_interval_s=CLAIM_INTERVAL_S, start="$",
    ).run(stop)  # fmt: skip
