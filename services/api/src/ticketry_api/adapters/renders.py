"""Render requests: one per ticket of an order, and a sample ticket of each
tier of an event to have its designs built before its first order."""

from __future__ import annotations

from decimal import Decimal

from redis.asyncio import Redis
from ticketry import designs
from ticketry.codes import Keyring
from ticketry.documents import Event, utcnow
from ticketry.events import RenderRequest
from ticketry.ids import new_id, ticket_id
from ticketry.tracing import current_traceparent

from ticketry_api.core.pricing import minor_to_decimal
from ticketry_api.store import Store


def ticket_request(
    keyring: Keyring,
    event: Event,
    tier_id: str,
    order_id: str,
    n: int,
    total: int,
    holder: str,
    price: Decimal,
    *,
    kid: str | None = None,
    version: int = 0,
) -> RenderRequest:
    """The render request of the ``n``-th ticket of an order of ``tier_id``
    (re-issued: its ``version``, its code signed with its order's ``kid``)."""
    tier = event.tier(tier_id)
    tid = ticket_id(order_id, n)
    return RenderRequest(
        ticket_id=tid,
        order_id=order_id,
        event_id=event.id,
        event_name=event.name,
        venue=event.venue,
        starts_at=event.starts_at,
        timezone=event.timezone,
        doors_at=event.doors_at,
        holder_name=holder,
        tier=tier_id,
        tier_name=tier.name if tier is not None else tier_id.capitalize(),
        lane=tier.lane if tier is not None else "standard",
        price=price,
        currency=event.currency,
        code=keyring.sign(tid, event.id, tier_id, kid=kid, version=version),
        total=total,
        correlation_id=order_id,
        traceparent=current_traceparent(),
        ticket_version=version,
    )


async def request_designs(redis: Redis, keyring: Keyring, event: Event) -> list[str]:
    """Ask the renderers to build the event's designs (one per tier) before its
    first ticket: a sample ticket of each tier. Returns the requests' ids."""
    sample = new_id("or")
    return await designs.request_designs(
        redis,
        [
            ticket_request(keyring, event, t.id, sample, 0, 1, "Sample", minor_to_decimal(t.price_minor))
            for t in event.tier_list()
        ],
    )


# After a key rotation, the designs of at most this many upcoming events are asked for again.
UPCOMING_DESIGNS_MAX = 1000


async def request_upcoming_designs(store: Store, redis: Redis, keyring: Keyring) -> int:
    """After a key rotation: ask for the designs of the events still to come
    with the new key (a design prints its key id), so their next tickets do not
    wait for one. Returns how many events were asked for."""
    upcoming = await store.events.upcoming(utcnow(), UPCOMING_DESIGNS_MAX)
    for event in upcoming:
        await request_designs(redis, keyring, event)
    return len(upcoming)
