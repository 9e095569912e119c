"""The console's sales panel: per event and tier, sold / capacity; the event's
orders by status; its waiting room (waiting, admitted, rate, paused, closed).

Which events: every waiting room the admitters tick (``streams.ROOMS``) and
the events with the newest ticket events or a room just closed
(``streams.OPS_SALES_EVENTS``: a closed room leaves ``ROOMS``, and stays in
view as closed), at most ``streams.OPS_SALES_EVENTS_MAX`` of those. Orders by status are counters
folded from the ticket events by the console's poll (:func:`fold`): at most
``FOLD_MAX`` entries a poll from a cursor kept in Redis, one script per order
that moves its status only up, so two apis folding the same entries count an
order once. Nothing here scans the orders: sold comes from each event's
capacity ledger (point reads forward from the head read last), the event from
the process's event cache.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import entries_of
from ticketry.ids import is_valid_id
from ticketry.replies import as_text

from ticketry_api.core.ops import ORDER_STATUSES, order_status
from ticketry_api.store import Store
from ticketry_api.store.ledger import Head, head

FOLD_MAX = 2000  # ticket events folded per poll (a backlog is caught up over several)
FIRST_FOLD_S = 15 * 60  # with no cursor yet, the fold starts this far back
MAX_EVENTS = 20  # rooms and recent events shown, in all

# KEYS: 1 the event's orders hash, 2 its counts hash, 3 OPS_SALES_EVENTS
# ARGV: 1 order id, 2 status, 3 rank, 4 ms of the entry, 5 ttl s, 6 events kept, 7 event id
_FOLD_LUA = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local rank = tonumber(ARGV[3])
local moved = 0
if not old or tonumber(string.sub(old, 1, 1)) < rank then
  if old then redis.call('HINCRBY', KEYS[2], string.sub(old, 3), -1) end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. ':' .. ARGV[2])
  redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
  moved = 1
end
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('ZADD', KEYS[3], 'GT', ARGV[4], ARGV[7])
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -1 - tonumber(ARGV[6]))
return moved
"""


def _int(raw: Any) -> int:
    try:
        return int(as_text(raw))
    except (TypeError, ValueError):
        return 0


async def fold(redis: Redis, limit: int = FOLD_MAX) -> int:
    """Fold the ticket events after the cursor into the orders-by-status
    counters; returns how many entries were read."""
    cursor = await redis.get(streams.OPS_SALES_CURSOR)
    start = "(" + as_text(cursor) if cursor else f"{int(time.time() * 1000) - FIRST_FOLD_S * 1000}-0"
    found = entries_of(await redis.xrange(streams.TICKET_EVENTS, min=start, count=limit))
    if not found:
        return 0
    # Each order's highest status among these entries, and the ms of its newest.
    orders: dict[str, tuple[str, int, int]] = {}
    for entry_id, fields in found:
        f = {as_text(k): as_text(v) for k, v in fields.items()}
        told = order_status(f.get("type", ""), _int(f.get("total")), _int(f.get("rendered")), _int(f.get("failed")))
        order_id = f.get("order_id", "")
        if told is None or not is_valid_id(order_id, "or"):
            continue
        ms = streams.stream_key(entry_id)[0]
        had = orders.get(order_id)
        if had is None or had[1] < told[1]:
            orders[order_id] = (told[0], told[1], ms)
        else:
            orders[order_id] = (had[0], had[1], ms)
    ids = list(orders)
    async with redis.pipeline(transaction=False) as pipe:
        for order_id in ids:
            pipe.hget(streams.order_progress(order_id), streams.PROGRESS_EVENT_ID)
        event_ids = await pipe.execute()
    async with redis.pipeline(transaction=False) as pipe:
        for order_id, raw in zip(ids, event_ids, strict=True):
            event_id = as_text(raw) if raw else ""
            if not is_valid_id(event_id, "ev"):  # an order from before progress named its event
                continue
            status, rank, ms = orders[order_id]
            keys = [streams.ops_sales_orders(event_id), streams.ops_sales_counts(event_id), streams.OPS_SALES_EVENTS]
            args: list[str | int] = [
                order_id,
                status,
                rank,
                ms,
                streams.PROGRESS_TTL_S,
                streams.OPS_SALES_EVENTS_MAX,
                event_id,
            ]
            pipe.eval(_FOLD_LUA, len(keys), *keys, *args)
        await pipe.execute()
    await redis.set(streams.OPS_SALES_CURSOR, as_text(found[-1][0]))
    return len(found)


async def keep_in_view(redis: Redis, event_id: str) -> None:
    """Show ``event_id`` among the recent events (its room was just closed: the
    admitters' list no longer names it)."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.zadd(streams.OPS_SALES_EVENTS, {event_id: int(time.time() * 1000)}, gt=True)
        pipe.zremrangebyrank(streams.OPS_SALES_EVENTS, 0, -1 - streams.OPS_SALES_EVENTS_MAX)
        await pipe.execute()


class Sales:
    """The panel's rows; remembers each event's ledger head, so the next read
    starts there (one point read for an event that sold nothing since)."""

    def __init__(self) -> None:
        self._heads: dict[str, Head] = {}

    async def rows(self, redis: Redis, store: Store, rooms: Sequence[str] = ()) -> list[dict[str, Any]]:
        await fold(redis)
        recent = [as_text(e) for e in await redis.zrevrange(streams.OPS_SALES_EVENTS, 0, MAX_EVENTS - 1)]
        wanted = list(dict.fromkeys([*rooms, *recent]))[:MAX_EVENTS]
        out = []
        for event_id in wanted:
            event = await store.event(event_id) if is_valid_id(event_id, "ev") else None
            if event is None:
                continue
            sold = await head(event_id, self._heads.get(event_id))
            self._heads[event_id] = sold
            async with redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(streams.ops_sales_counts(event_id))
                pipe.hmget(
                    streams.room_state(event_id),
                    [streams.ROOM_ADMITTED, streams.ROOM_RATE, streams.ROOM_PAUSED, streams.ROOM_CLOSED,
                     streams.ROOM_SOLD_OUT],
                )  # fmt: skip
                pipe.zcard(streams.room_line(event_id))
                counts_raw, (admitted_raw, rate, paused, closed, sold_out), line = await pipe.execute()
            counts = {as_text(k): _int(v) for k, v in counts_raw.items()}
            room = None
            if event.waiting_room:
                admitted = _int(admitted_raw)
                room = {
                    "waiting": max(int(line) - admitted, 0), "admitted": admitted,
                    "rate": float(as_text(rate)) if rate else 0.0, "paused": as_text(paused or b"") == "1",
                    "closed": as_text(closed or b"") == "1", "sold_out": as_text(sold_out or b"") == "1",
                }  # fmt: skip
            out.append({
                "event_id": event.id, "name": event.name, "capacity": event.capacity, "sold": sold.sold,
                "tiers": [
                    {"id": t.id, "name": t.name, "capacity": t.capacity if t.capacity is not None else event.capacity,
                     "sold": sold.tier_sold.get(t.id, 0 if event.tiers else sold.sold)}
                    for t in event.tier_list()
                ],
                "orders": {s: max(counts.get(s, 0), 0) for s in ORDER_STATUSES},
                "room": room,
            })  # fmt: skip
        return out
