"""The outbox sweep: what stayed in flight past its grace is finished or
given back (the steps are in ``ticketry_api.service_layer.orders``'s docstring)."""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from ticketry import streams
from ticketry.codes import Keyring
from ticketry.documents import is_placed
from ticketry.replies import as_text

from ticketry_api.service_layer.orders import SWEEP_BATCH, enqueue, give_back, held_of, now_ms
from ticketry_api.store import Store
from ticketry_api.waitingroom import rooms

log = logging.getLogger(__name__)


async def sweep_outbox(redis: Redis, keyring: Keyring, store: Store, grace_s: float) -> int:
    """Finish or undo the orders that stayed in flight longer than ``grace_s``
    (their api crashed or stalled); returns how many were handled."""
    cutoff = now_ms() - int(grace_s * 1000)
    stale = await redis.zrangebyscore(streams.ORDERS_IN_FLIGHT, "-inf", cutoff, start=0, num=SWEEP_BATCH)
    for raw in stale:
        member = as_text(raw)
        order_id, event_id, quantity, tier_id, owner = streams.parse_in_flight_member(member)
        event = await store.event(event_id)
        order = await store.orders.get(order_id)
        if event is not None and order is not None and is_placed(order.status):
            await enqueue(redis, keyring, order, event)
            log.warning("outbox: re-enqueued order", extra={"order_id": order_id})
        elif event is not None and await store.orders.abandon(order_id, event_id, quantity):
            if await store.ledger.reserved(order_id):
                await store.ledger.release(event, order_id, tier_id, quantity)
                if event.waiting_room:
                    await rooms.tickets_back(redis, event.id)
                log.warning("outbox: released orphan reservation", extra={"order_id": order_id})
            # Last: while the member is there, a later sweep does the release again (once-only).
            tier = event.tier(tier_id)
            await give_back(redis, member, held_of(event_id, tier, owner) if tier else None, quantity)
            continue
        await redis.zrem(streams.ORDERS_IN_FLIGHT, member)
    return len(stale)
