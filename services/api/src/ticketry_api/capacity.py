"""An event's capacity as an append-only ledger (see ``documents.Reservation``).

Each change inserts the next ``seq``; the unique ``_id`` lets exactly one
concurrent writer win it, the losers re-read the head and try again. Within one
process, writers of the same event queue on a lock so they do not collide with
each other; across processes the unique key decides.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

from pymongo.errors import DuplicateKeyError
from ticketry.documents import Event, Reservation

from ticketry_api.errors import Problem

_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
# event id → (seq, sold) of the entry this process appended last
_heads: dict[str, tuple[int, int]] = {}
_MAX_TRIES = 200


async def head(event_id: str) -> tuple[int, int]:
    """``(seq, sold)`` of the newest ledger entry (``(0, 0)`` for none)."""
    raw = await Reservation.get_pymongo_collection().find_one(
        {"event_id": event_id}, {"seq": 1, "sold_after": 1}, sort=[("seq", -1)]
    )
    return (0, 0) if raw is None else (int(raw["seq"]), int(raw["sold_after"]))


async def sold(event_id: str) -> int:
    return (await head(event_id))[1]


async def _append(event: Event, delta: int, tag: str, *, check_capacity: bool) -> bool:
    col = Reservation.get_pymongo_collection()
    async with _locks[event.id]:
        # The head this process wrote last is a hint, not a read: if another
        # process appended meanwhile, seq+1 is taken and the insert fails, and
        # only then is the head read. (FerretDB v1 sorts in memory, so reading
        # the head costs more the longer the ledger.)
        cached = _heads.get(event.id)
        for _ in range(_MAX_TRIES):
            fresh = cached is None
            seq, current = await head(event.id) if cached is None else cached
            cached = None
            after = current + delta
            if check_capacity and after > event.capacity:
                if fresh:
                    return False
                continue  # the hint may predate a release elsewhere: read the head
            try:
                await col.insert_one(
                    Reservation(
                        id=f"{event.id}:{seq + 1:012d}", event_id=event.id, seq=seq + 1,
                        delta=delta, sold_after=after, tag=tag,
                    ).model_dump(by_alias=True)
                )  # fmt: skip
                _heads[event.id] = (seq + 1, after)
                return True
            except DuplicateKeyError:
                _heads.pop(event.id, None)
                # Either another writer took seq+1 (retry), or this tag is already
                # in the ledger (done before: idempotent success).
                if await col.find_one({"tag": tag}, {"_id": 1}) is not None:
                    return True
                await asyncio.sleep(random.uniform(0, 0.004))  # noqa: S311 - jitter only
    raise Problem(503, "busy", "too much contention on this event; retry", {"Retry-After": "1"})


async def reserve(event: Event, order_id: str, quantity: int) -> bool:
    """Take ``quantity`` tickets for ``order_id``; False when not enough are left."""
    return await _append(event, quantity, f"reserve:{order_id}", check_capacity=True)


async def release(event: Event, order_id: str, quantity: int) -> None:
    """Give an order's tickets back (at most once per order)."""
    await _append(event, -quantity, f"release:{order_id}", check_capacity=False)


async def reserved(order_id: str) -> bool:
    """True if ``order_id`` ever took tickets (the outbox sweep asks, rarely)."""
    col = Reservation.get_pymongo_collection()
    return await col.find_one({"tag": f"reserve:{order_id}"}, {"_id": 1}) is not None
