"""Placing orders: capacity, idempotency, and the outbox into the render stream.

Order of writes (no transactions on FerretDB, so each step is safe to crash after):

1. Reserve capacity in the event's ledger (``capacity.reserve``): an insert
   that only one concurrent writer can win, so concurrent orders cannot
   oversell. (Not a conditional ``$inc``: FerretDB v1 does not apply those
   atomically; see ``documents.Reservation``.)
2. Insert the order (``enqueued=False``) — the outbox record — and its tickets.
   A unique ``idem`` field (owner + Idempotency-Key) makes a duplicate POST lose
   here; the loser gives its reservation back and answers with the winner.
3. One MULTI/EXEC: the order's progress hash and one render request per ticket.
4. Mark the order ``enqueued``; only then answer 202.

A crash between 2 and 4 leaves ``enqueued=False``; the outbox sweep re-enqueues
such orders (renderers are idempotent per ticket, so a second copy is harmless).
A crash between 1 and 2 leaves a reservation without an order; the outbox
sweep releases it after the grace period (never oversold, and not lost). The
sweep and a merely *slow* request must not both win — releasing the tickets of
an order that is recorded a moment later would oversell — so the sweep first
inserts an ``abandoned`` tombstone under the order's id: the unique ``_id``
lets exactly one of the two inserts succeed. A request that loses to the
tombstone answers 503 (its tickets are back on sale), never 202.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TypeVar

import orjson
from pymongo.errors import DuplicateKeyError
from redis.asyncio import Redis
from ticketry import streams
from ticketry.auth import Principal
from ticketry.codes import Keyring
from ticketry.documents import Event, Order, Reservation, Ticket
from ticketry.events import RenderRequest
from ticketry.ids import is_valid_id, new_id

from ticketry_api import capacity
from ticketry_api.errors import Problem
from ticketry_api.schemas import OrderIn

log = logging.getLogger(__name__)
T = TypeVar("T")
SWEEP_BATCH = 500


def request_hash(body: OrderIn) -> str:
    return hashlib.sha256(orjson.dumps(body.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)).hexdigest()


def price_of(event: Event) -> Decimal:
    return Decimal(event.price_minor).scaleb(-2)


async def place_order(
    *,
    redis: Redis,
    keyring: Keyring,
    principal: Principal,
    body: OrderIn,
    idempotency_key: str | None,
    max_quantity: int,
) -> Order:
    """Reserve capacity, record the order and its tickets, enqueue the renders."""
    if body.quantity > max_quantity:
        raise Problem(422, "quantity too large", f"at most {max_quantity} tickets per order")
    digest = request_hash(body)
    idem = f"{principal.sub}:{idempotency_key}" if idempotency_key else None
    if idem is not None:
        existing = await Order.find_one({"idem": idem})
        if existing is not None:
            return await _replay(existing, digest)

    if not is_valid_id(body.event_id, "ev"):
        raise Problem(404, "event not found")
    event = await Event.get(body.event_id)
    if event is None:
        raise Problem(404, "event not found")

    order_id = new_id("or")
    if not await capacity.reserve(event, order_id, body.quantity):
        if idem is not None and (winner := await Order.find_one({"idem": idem})) is not None:
            return await _replay(winner, digest)
        raise Problem(409, "sold out", "the event has fewer tickets left than requested")

    ticket_ids = [new_id("tk") for _ in range(body.quantity)]
    order = Order(
        id=order_id,
        owner_id=principal.sub,
        event_id=event.id,
        quantity=body.quantity,
        tier=body.tier,
        holder_name=body.holder_name,
        ticket_ids=ticket_ids,
        idempotency_key=idempotency_key,
        idem=idem or f"auto:{order_id}",
        request_hash=digest,
    )
    return await record(redis, keyring, event, order)


async def record(redis: Redis, keyring: Keyring, event: Event, order: Order) -> Order:
    """Steps 2 to 4 for an order whose capacity is reserved: insert it (the outbox
    record) and its tickets, enqueue the renders. Answers the first order instead
    when the Idempotency-Key lost a race, and 503 when the sweep abandoned it."""
    try:
        await Order.get_pymongo_collection().insert_one(order.model_dump(by_alias=True))
    except DuplicateKeyError:
        if await _abandoned(order.id):
            # This request took longer than the outbox grace: the sweep has
            # given its tickets back already.
            log.warning("order abandoned by the outbox sweep before it was recorded", extra={"order_id": order.id})
            raise Problem(503, "busy", "the order took too long to record; retry", {"Retry-After": "1"}) from None
        # Lost a race with the same Idempotency-Key: give the reservation back.
        await capacity.release(event, order.id, order.quantity)
        winner = await Order.find_one({"idem": order.idem})
        if winner is None:  # pragma: no cover - the unique index says it exists
            raise Problem(409, "conflict", "retry the request") from None
        return await _replay(winner, order.request_hash)

    await insert_tickets(order, order.ticket_ids, keyring.active_kid)
    await enqueue(redis, keyring, order, event, order.ticket_ids)
    return order


async def insert_tickets(order: Order, ticket_ids: Sequence[str], key_id: str) -> None:
    """Insert the order's ticket documents (status ``queued``), 2,000 per insert."""
    docs = [
        Ticket(
            id=tid, order_id=order.id, event_id=order.event_id, owner_id=order.owner_id,
            holder_name=order.holder_name, tier=order.tier, key_id=key_id,
        ).model_dump(by_alias=True)
        for tid in ticket_ids
    ]  # fmt: skip
    for chunk in _chunks(docs, 2000):
        await Ticket.get_pymongo_collection().insert_many(chunk, ordered=False)


async def enqueue(redis: Redis, keyring: Keyring, order: Order, event: Event, ticket_ids: Sequence[str]) -> None:
    """Write the progress hash and the render requests in one MULTI/EXEC, then
    mark the order enqueued. Safe to repeat (the outbox sweep does)."""
    lane = streams.render_lane(order.tier, order.quantity)
    price = str(price_of(event))
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(
            streams.order_progress(order.id),
            mapping={"total": order.quantity, "owner": order.owner_id, "order_id": order.id},
        )
        pipe.expire(streams.order_progress(order.id), streams.PROGRESS_TTL_S)
        for tid in ticket_ids:
            req = RenderRequest(
                ticket_id=tid,
                order_id=order.id,
                event_id=event.id,
                event_name=event.name,
                venue=event.venue,
                starts_at=event.starts_at,
                holder_name=order.holder_name,
                tier=order.tier,
                price=Decimal(price),
                currency=event.currency,
                code=keyring.sign(tid),
                total=order.quantity,
                correlation_id=order.id,
            )
            pipe.xadd(lane, req.to_fields())  # type: ignore[arg-type]
        await pipe.execute()
    await Order.get_pymongo_collection().update_one({"_id": order.id}, {"$set": {"enqueued": True}})
    order.enqueued = True


async def _replay(order: Order, digest: str) -> Order:
    """Answer a repeated Idempotency-Key with the first order (or refuse a new body)."""
    if order.request_hash != digest:
        raise Problem(422, "idempotency key reused", "this Idempotency-Key was used with another body")
    # The first request may still be writing its render requests; 2xx only once durable.
    for _ in range(100):
        if order.enqueued:
            return order
        await asyncio.sleep(0.05)
        fresh = await Order.get(order.id)
        order = fresh if fresh is not None else order
    raise Problem(409, "order in progress", "the first request with this key is still running")


async def sweep_outbox(redis: Redis, keyring: Keyring, grace_s: float) -> int:
    """Re-enqueue orders recorded but never enqueued (their api crashed), and
    release reservations whose order was never recorded."""
    cutoff = datetime.now(UTC) - timedelta(seconds=grace_s)
    count = 0
    # Materialise each query before writing: on FerretDB's SQLite backend a write
    # issued while a cursor of ours is still open waits for that cursor's
    # transaction, which never ends — every later write then hangs.
    stale = (
        await Reservation.find({"at": {"$lt": cutoff}, "delta": {"$gt": 0}, "swept": {"$ne": True}})
        .limit(SWEEP_BATCH)
        .to_list()
    )
    for res in stale:
        order_id = res.tag.removeprefix("reserve:")
        if await _abandon(order_id, res):
            event = await Event.get(res.event_id)
            if event is not None:
                await capacity.release(event, order_id, res.delta)
                log.warning("outbox: released orphan reservation", extra={"order_id": order_id})
        await Reservation.get_pymongo_collection().update_one({"_id": res.id}, {"$set": {"swept": True}})
    stranded = await Order.find({"enqueued": False, "created_at": {"$lt": cutoff}}).limit(SWEEP_BATCH).to_list()
    for order in stranded:
        event = await Event.get(order.event_id)
        if event is None:
            continue
        rows = await Ticket.get_pymongo_collection().find({"order_id": order.id}, {"_id": 1}).to_list()
        existing = {t["_id"] for t in rows}
        await insert_tickets(order, [tid for tid in order.ticket_ids if tid not in existing], keyring.active_kid)
        await enqueue(redis, keyring, order, event, order.ticket_ids)
        log.warning("outbox: re-enqueued order", extra={"order_id": order.id})
        count += 1
    return count


async def _abandon(order_id: str, res: Reservation) -> bool:
    """Claim ``order_id`` for the sweep with a tombstone; True if the sweep owns it
    (now, or from an earlier sweep that crashed before releasing)."""
    tombstone = Order(
        id=order_id, owner_id="", event_id=res.event_id, quantity=res.delta, tier="standard",
        holder_name="", status="abandoned", ticket_ids=[], enqueued=True,
        idem=f"abandoned:{order_id}", request_hash="",
    )  # fmt: skip
    try:
        await Order.get_pymongo_collection().insert_one(tombstone.model_dump(by_alias=True))
    except DuplicateKeyError:
        return await _abandoned(order_id)
    return True


async def _abandoned(order_id: str) -> bool:
    raw = await Order.get_pymongo_collection().find_one({"_id": order_id}, {"status": 1})
    return raw is not None and raw.get("status") == "abandoned"


def _chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
