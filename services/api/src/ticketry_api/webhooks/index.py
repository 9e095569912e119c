"""Which events have webhook endpoints, in Redis, so the dispatcher need not ask
the store for the events that have none (nearly all of them).

``streams.WEBHOOK_EVENTS`` is a set of event ids plus a marker member
(``streams.WEBHOOK_EVENTS_BUILT``) that says the set was built from the store.
The routes keep it: an endpoint's event is added before its insert (a crash
after the insert leaves it in) and again after it, and removed after the
event's last endpoint is deleted, then added back if a recount finds one (an
endpoint registered meanwhile). Whatever the interleaving, an event with an
endpoint ends up in the set; an event without one may stay in it (it costs a
store read per order, as before this set existed), never the other way round.

Without the marker (a first deploy, a Redis that lost its data) the dispatcher
rebuilds it from the store before it trusts it: adding only, so a concurrent
route's write is never undone.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis
from ticketry import streams
from ticketry.replies import as_text

from ticketry_api.store.endpoints import Endpoints


async def adding(redis: Redis, event_id: str) -> None:
    """Before and after an endpoint of ``event_id`` is inserted."""
    await redis.sadd(streams.WEBHOOK_EVENTS, event_id)


async def removed(redis: Redis, endpoints: Endpoints, event_id: str) -> None:
    """After an endpoint of ``event_id`` was deleted."""
    if await endpoints.count(event_id, limit=1):
        return
    await redis.srem(streams.WEBHOOK_EVENTS, event_id)
    if await endpoints.count(event_id, limit=1):  # registered meanwhile
        await redis.sadd(streams.WEBHOOK_EVENTS, event_id)


async def rebuild(redis: Redis, endpoints: Endpoints) -> set[str]:
    """Every event with an endpoint in the store, added to the set with the marker."""
    found = await endpoints.events()
    await redis.sadd(streams.WEBHOOK_EVENTS, streams.WEBHOOK_EVENTS_BUILT, *found)
    return found


async def events_with_endpoints(redis: Redis, endpoints: Endpoints) -> set[str]:
    """The events that have (or may have) endpoints: one SMEMBERS, or a rebuild
    from the store when the set was never built."""
    members = {as_text(m) for m in await redis.smembers(streams.WEBHOOK_EVENTS)}
    if streams.WEBHOOK_EVENTS_BUILT not in members:
        return members | await rebuild(redis, endpoints)
    members.discard(streams.WEBHOOK_EVENTS_BUILT)
    return members


async def events_of(redis: Redis, order_ids: Sequence[str]) -> dict[str, str | None]:
    """Each order's event as its progress hash names it (one pipeline); None
    where it does not (an order placed before the hash held it, or an expired
    hash): the dispatcher reads those from the store."""
    async with redis.pipeline(transaction=False) as pipe:
        for order_id in order_ids:
            pipe.hget(streams.order_progress(order_id), streams.PROGRESS_EVENT_ID)
        got = await pipe.execute()
    return {o: as_text(e) if e else None for o, e in zip(order_ids, got, strict=True)}
