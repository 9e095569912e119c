"""Cancelling an order, and what a cancel and a scan agree on.

An order's fate is decided once, by whichever comes first of its cancel and
the first admission of one of its tickets: each inserts an ``OrderFate`` under
the order's id, the unique ``_id`` lets exactly one insert win (on any
MongoDB-wire store; FerretDB v1 applies no conditional update atomically), and
the loser reads the winner. Nothing ever writes a fate back: there is no
"put the order back" step that a second cancel or a scan could interleave with.

A cancel that won then, in this order (each step safe to repeat, so a retried
cancel finishes what a crashed one began):

1. sets the order's ``status`` to ``cancelled`` (what reads show; the fate is
   the authority);
2. marks the order cancelled in Redis and appends ``order.cancelled`` once
   (``ticketry.emit.announce_cancelled``): renderers skip its pending
   requests and announce no more of its tickets, the buyer's socket hears it,
   and the buyer's count for a tier with ``max_per_buyer`` goes down once;
3. gives its tickets back to the event (once-only by the ledger's tag), and
   has its waiting room, if any, ticked again: buyers told it was sold out
   move on;
4. deletes the PDFs already rendered (they are no longer served: 410).
"""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from ticketry import streams
from ticketry.auth import Principal
from ticketry.documents import Event, Order
from ticketry.emit import announce_cancelled
from ticketry.storage import PdfStore

from ticketry_api.core.cancel import check_cancel_won
from ticketry_api.store import Store
from ticketry_api.waitingroom import rooms

log = logging.getLogger(__name__)


async def cancel(redis: Redis, store: Store, order: Order, event: Event, who: Principal, pdfs: PdfStore) -> None:
    """Cancel ``order`` (see the module's steps); 409 once a ticket of it was admitted."""
    check_cancel_won(await store.fates.decide(order.id, "cancelled", who.sub))
    await store.orders.mark_cancelled(order.id)
    tier = event.tier(order.tier)
    held = streams.held(order.event_id, order.tier, order.owner_id) if tier and tier.max_per_buyer else None
    await announce_cancelled(redis, order.id, order.quantity, held)
    await store.ledger.release(event, order.id, order.tier, order.quantity)
    if event.waiting_room:
        await rooms.tickets_back(redis, event.id)
    # A render that was under way may still store one; it is never served.
    await pdfs.delete_order(order.id)
    log.info("cancel: PDFs deleted", extra={"order_id": order.id})
