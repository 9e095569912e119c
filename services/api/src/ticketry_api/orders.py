"""Placing orders: capacity, idempotency, and the outbox into the render stream.

Order of steps (no transactions on FerretDB, so each step is safe to crash after):

1. Note the order in Redis's in-flight set (``streams.ORDERS_IN_FLIGHT``): the
   outbox entry, one ZADD.
2. Reserve capacity in the event's ledger (``store.ledger``): an insert
   that only one concurrent writer can win, so concurrent orders cannot
   oversell. (Not a conditional ``$inc``: FerretDB v1 does not apply those
   atomically; see ``documents.Reservation``.)
3. Insert the order (its tickets are its own, not documents: see
   ``documents.Order``). A unique ``idem`` field (owner + Idempotency-Key)
   makes a duplicate POST lose here; the loser gives its reservation back and
   answers with the winner.
4. One MULTI/EXEC: the order's progress hash, one render request per ticket,
   and the ZREM of its in-flight entry. Only then 202.

With ``TICKETRY_REDIS_MIN_REPLICAS`` set, step 1 is on a replica before step 2
begins (``replicas.replicated``; else 503 and nothing was reserved), so a
failover never loses the outbox entry of an order the store holds: the sweep
on the new primary finishes it. Step 4 is on a replica before 202 (the route
waits, for a replayed Idempotency-Key too), else 503: the order stands on the
primary, and a retry with the same key answers it once a replica has it.

Two writes to the store per order, neither an update (each FerretDB update
is a transaction of its own, and the store is the bottleneck of
``POST /v1/orders``), both through the process's one writer (``store.writer``): the
orders that arrive together share each insert, and an order's ledger entry
and the order go in one round of it, the order only if the entry went in.
The outbox lives beside the render stream it guards, so step 4 closes it
atomically.

An in-flight entry older than the grace means its api crashed or stalled. The
sweep (every api runs it; each step is idempotent) re-enqueues a recorded
order (renderers are idempotent per ticket, so a second copy is harmless), or,
when there is no order, gives its reservation back (never oversold, and not
lost). The sweep and a merely *slow* request must not both win — releasing the
tickets of an order that is recorded a moment later would oversell — so the
sweep first inserts an ``abandoned`` tombstone under the order's id: the unique
``_id`` lets exactly one of the two inserts succeed. A request that loses to
the tombstone gives its reservation back and answers 503, never 202.

Before step 1, once the event and tier are known, the order counts against
the buyer's rate limits (orders and tickets per window), and only then are its
holder names checked against the ticket's fonts: shaping thousands of names is
the most CPU an order can ask for, so every order that gets that far counts,
whatever its answer, and the check runs off the event loop (a few names on
it), under a cap on distinct names and a time budget (``check_names_within``).

An order that will not exist also gives back what it counted in the buyer's
``max_per_buyer`` count (``streams.held``; the entry names its owner). One
script removes the entry and, only if it was still there, takes the order off
the count: whoever removes it (the request giving up, a sweep) does, so the
count goes down once however many of them try. The sweep removes it last, so
a sweep that crashes before is followed by one that releases again (once-only
by the ledger) and then gives the count back.

Durability is Redis's (``appendfsync``): the in-flight entry is as durable as
the render requests themselves.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal

import orjson
from redis.asyncio import Redis
from ticketry import designs, fonts, streams
from ticketry.auth import Principal
from ticketry.codes import Keyring
from ticketry.documents import Event, Order, Tier, is_placed, utcnow
from ticketry.events import RenderRequest
from ticketry.ids import is_valid_id, new_id, ticket_id, ticket_ids
from ticketry.replies import as_text
from ticketry.tracing import current_traceparent

from ticketry_api import ratelimit
from ticketry_api.core.problem import Problem
from ticketry_api.ratelimit import RateSettings
from ticketry_api.replicas import ReplicaSettings, replicated
from ticketry_api.schemas import OrderIn
from ticketry_api.store import Store
from ticketry_api.waitingroom import store as rooms

log = logging.getLogger(__name__)
SWEEP_BATCH = 500

# Up to this many distinct names (most orders have one) are checked on the
# event loop: a few shapes cost less than the hop to a thread.
NAMES_INLINE = 8
# Shaping holds the GIL for most of its work, so more threads would not check
# names faster; two keep one big order from making every other wait, and
# leave the loop its share of the GIL.
_NAME_CHECKERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="names")


@dataclass(frozen=True, slots=True)
class NameLimits:
    """The bounds of an order's name check (``ApiSettings.max_distinct_names``,
    ``name_check_budget_s``)."""

    max_distinct: int
    budget_s: float


# KEYS: the in-flight set, and the buyer's held count when the tier has a
# max_per_buyer; ARGV: the order's member, its quantity. The ZREM is the
# once-only decision; a held count that expired is not brought back negative.
_GIVE_BACK_LUA = """
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if removed == 1 and #KEYS > 1 and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('DECRBY', KEYS[2], ARGV[2])
end
return removed
"""


def request_hash(body: OrderIn) -> str:
    return hashlib.sha256(orjson.dumps(body.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)).hexdigest()


def minor_to_decimal(minor: int) -> Decimal:
    return Decimal(minor).scaleb(-2)


def unit_price_of(order: Order, event: Event) -> Decimal:
    """What each ticket of ``order`` was sold at."""
    if order.unit_price_minor is not None:
        return minor_to_decimal(order.unit_price_minor)
    tier = event.tier(order.tier)
    return minor_to_decimal(tier.price_minor if tier is not None else event.price_minor)


def member_of(order: Order) -> str:
    return streams.in_flight_member(order.id, order.event_id, order.quantity, order.tier, order.owner_id)


def held_of(event_id: str, tier: Tier, owner: str | None) -> str | None:
    """The held-count key an order of ``owner`` in ``tier`` counts in (None: no limit to count for)."""
    return streams.held(event_id, tier.id, owner) if tier.max_per_buyer is not None and owner is not None else None


async def place_order(
    *,
    store: Store,
    redis: Redis,
    keyring: Keyring,
    principal: Principal,
    body: OrderIn,
    idempotency_key: str | None,
    max_quantity: int,
    rates: RateSettings,
    names: NameLimits,
    replicas: ReplicaSettings,
    gate: Callable[[Event], Awaitable[None]] | None = None,
) -> Order:
    """Reserve capacity, record the order and its tickets, enqueue the renders.

    The buyer's rate limits (orders and tickets per window) are counted once
    the event and tier are known, before the names are checked: an order that
    gets that far counts whatever its answer (422 for a name included); a
    replayed Idempotency-Key, or an order refused before (404, unknown tier,
    the on-sale's gate) does not. The tickets the buyer holds in a tier with
    ``max_per_buyer`` are counted in the same MULTI as the outbox entry."""
    if body.quantity > max_quantity:
        raise Problem(422, "quantity too large", f"at most {max_quantity} tickets per order")
    digest = request_hash(body)
    if idempotency_key and (known := await _known_repeat(store, redis, principal, idempotency_key)) is not None:
        return await _replay(redis, known, digest, principal)
    event, tier = await _sellable(store, body, gate)
    await _count(redis, principal, body.quantity, rates)
    await check_names_within({body.holder_name, *(body.holders or ())}, names)
    order = _new_order(principal, body, event, tier, keyring.active_kid, idempotency_key, digest)
    await _admit(redis, order, tier)
    try:  # the outbox entry outlives the primary before the store depends on it
        await replicated(redis, replicas)
    except Problem:
        await _give_back(redis, order, tier)
        raise
    # The order follows the ledger entry in the same round (step 3).
    taken = await store.ledger.reserve(event, order.id, tier.id, body.quantity, then=store.orders.steps(order))
    if taken is None:
        await _give_back(redis, order, tier)
        if idempotency_key and (winner := await store.orders.by_idem(order.idem)) is not None:
            return await _replay(redis, winner, digest, principal)
        raise Problem(409, "sold out", f"the event or its tier {tier.id!r} has fewer tickets left than requested")
    first_dup, _ = await taken.written()
    return await record(redis, keyring, store, event, order, order_written=first_dup != 0)


async def _known_repeat(store: Store, redis: Redis, principal: Principal, idempotency_key: str) -> Order | None:
    """The order this buyer's Idempotency-Key already made, as far as Redis
    knows: it maps a key to its order once enqueued (by _id: no scan of the
    orders on FerretDB). A miss is not proof, the unique ``idem`` index is: a
    repeat the map does not know yet loses at the insert (``record``)."""
    known = await redis.get(streams.idempotency(principal.sub, idempotency_key))
    return await store.orders.get(as_text(known)) if known is not None else None


async def _sellable(store: Store, body: OrderIn, gate: Callable[[Event], Awaitable[None]] | None) -> tuple[Event, Tier]:
    """The event and tier ``body`` asks for, once its on-sale's rules let it
    through: 404 for no such event, 422 for no such tier."""
    if not is_valid_id(body.event_id, "ev"):
        raise Problem(404, "event not found")
    event = await store.event(body.event_id)
    if event is None:
        raise Problem(404, "event not found")
    if gate is not None:  # the on-sale's rules (waitingroom.gate); not for a replay
        await gate(event)
    tier = event.tier(body.tier)
    if tier is None:
        raise Problem(422, "unknown tier", f"this event sells the tiers {', '.join(t.id for t in event.tier_list())}")
    return event, tier


def _new_order(
    principal: Principal, body: OrderIn, event: Event, tier: Tier, key_id: str, idempotency_key: str | None, digest: str
) -> Order:
    """The order ``body`` asks for, under a new id (not recorded yet)."""
    order_id = new_id("or")
    return Order(
        id=order_id,
        owner_id=principal.sub,
        event_id=event.id,
        quantity=body.quantity,
        tier=tier.id,
        holder_name=body.holder_name,
        holders=body.holders,
        unit_price_minor=tier.price_minor,
        ticket_ids=ticket_ids(order_id, body.quantity),
        key_id=key_id,
        idempotency_key=idempotency_key,
        idem=streams.idempotency_scope(principal.sub, idempotency_key) if idempotency_key else f"auto:{order_id}",
        request_hash=digest,
    )


async def check_names_within(names: set[str], limits: NameLimits) -> None:
    """:func:`check_names` for an order's distinct ``names``: 422 past
    ``limits.max_distinct`` of them; more than :data:`NAMES_INLINE` are shaped
    on a checker thread, so the event loop (every other request of this
    process) goes on meanwhile. Past the time budget, counted from now (so a
    wait for a free checker counts, and a queue of big orders drains by
    itself), 503 with Retry-After: the names may be fine, the process is busy."""
    if len(names) > limits.max_distinct:
        raise Problem(
            422,
            "too many names",
            f"at most {limits.max_distinct} distinct holder names per order (the same name may be on any number of "
            f"tickets); this order has {len(names)}",
        )
    if len(names) <= NAMES_INLINE:
        check_names(names)
        return
    deadline = time.monotonic() + limits.budget_s
    if not await asyncio.get_running_loop().run_in_executor(_NAME_CHECKERS, check_names, names, deadline):
        raise Problem(
            503,
            "busy",
            f"the order's {len(names)} holder names could not be checked within {limits.budget_s:g} s; retry",
            {"Retry-After": str(max(1, math.ceil(limits.budget_s)))},
        )


def check_names(names: set[str], deadline: float = math.inf) -> bool:
    """422 for a name the ticket cannot print: a character no font of the
    design's chain draws (never boxes), or too long for its line even at the
    smallest size (never wrapped). False, having stopped, once
    ``time.monotonic()`` passes ``deadline``; True when every name prints.

    Every name's characters are looked up first (set look-ups, cheap), then
    each is shaped and measured (the costly part)."""
    for name in names:
        if time.monotonic() > deadline:
            return False
        if (why := fonts.undrawable(name)) is not None:
            raise Problem(422, "name cannot be printed", why)
    for name in names:
        if time.monotonic() > deadline:
            return False
        if not fonts.fits(name):
            raise Problem(422, "name too long", f"{name[:40]!r}… does not fit on one line of the ticket")
    return True


def ticket_request(
    keyring: Keyring, event: Event, tier_id: str, order_id: str, n: int, total: int, holder: str, price: Decimal
) -> RenderRequest:
    """The render request of the ``n``-th ticket of an order of ``tier_id``."""
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
        code=keyring.sign(tid, event.id, tier_id),
        total=total,
        correlation_id=order_id,
        traceparent=current_traceparent(),
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


async def _count(redis: Redis, principal: Principal, quantity: int, rates: RateSettings) -> None:
    """Count an order of ``quantity`` tickets against the buyer's rate limits
    (orders and tickets per window), in one MULTI; 429 when over either."""
    scopes: list[ratelimit.Scope] = [sc for sc in ("orders", "tickets") if rates.limit(sc) > 0]
    if not scopes:
        return
    async with redis.pipeline(transaction=True) as pipe:
        for scope in scopes:
            ratelimit.queue_hit(pipe, scope, principal.sub, rates.rate_window_s, quantity if scope == "tickets" else 1)
        replies = await pipe.execute()
    for i, scope in enumerate(scopes):
        v = ratelimit.verdict(replies[3 * i : 3 * i + 3], rates.limit(scope))
        if not v.allowed:
            raise ratelimit.refusal(v, rates.limit(scope), rates.rate_window_s, scope)


async def _admit(redis: Redis, order: Order, tier: Tier) -> None:
    """Note the order in flight (step 1) and count its tickets against the
    buyer's ``max_per_buyer``, in one MULTI; refuse it (409) and take it all
    back when over."""
    held = streams.held(order.event_id, tier.id, order.owner_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.zadd(streams.ORDERS_IN_FLIGHT, {member_of(order): _now_ms()})
        if tier.max_per_buyer is not None:
            pipe.incrby(held, order.quantity)
            pipe.expire(held, streams.HELD_TTL_S)
        replies = await pipe.execute()
    if tier.max_per_buyer is not None and int(replies[1]) > tier.max_per_buyer:
        await _give_back(redis, order, tier)
        raise Problem(
            409, "limit per buyer", f"at most {tier.max_per_buyer} tickets of {tier.id!r} per buyer for this event"
        )


async def _give_back(redis: Redis, order: Order, tier: Tier) -> None:
    """Undo :func:`_admit` for an order that will not exist."""
    await give_back(redis, member_of(order), held_of(order.event_id, tier, order.owner_id), order.quantity)


async def give_back(redis: Redis, member: str, held: str | None, quantity: int) -> bool:
    """Remove an in-flight ``member`` of an order that will not exist and, if
    this call removed it, take its ``quantity`` off the buyer's ``held`` count:
    of all who give the same order up (the request, sweeps), one does. True
    for that one."""
    keys = [streams.ORDERS_IN_FLIGHT, *([held] if held is not None else [])]
    return bool(await redis.register_script(_GIVE_BACK_LUA)(keys, [member, quantity]))


async def record(
    redis: Redis, keyring: Keyring, store: Store, event: Event, order: Order, *, order_written: bool | None = None
) -> Order:
    """Steps 3 and 4 for an order whose capacity is reserved: insert it
    (unless ``order_written`` says how that went already), enqueue the
    renders. Answers the first order instead when the Idempotency-Key lost a
    race, and 503 when the sweep abandoned it."""
    if order_written is None:
        order_written = await store.orders.record(order)
    if not order_written:
        # Either way this order will not exist: give its tickets back (once-only
        # by the ledger's unique tag, so the sweep may have done it already).
        await store.ledger.release(event, order.id, order.tier, order.quantity)
        tier = event.tier(order.tier)
        if tier is not None:
            await _give_back(redis, order, tier)
        if await store.orders.status(order.id) == "abandoned":
            # This request took longer than the outbox grace.
            log.warning("order abandoned by the outbox sweep before it was recorded", extra={"order_id": order.id})
            raise Problem(503, "busy", "the order took too long to record; retry", {"Retry-After": "1"})
        # Lost a race with the same Idempotency-Key.
        winner = await store.orders.by_idem(order.idem)
        if winner is None:  # pragma: no cover - the unique index says it exists
            raise Problem(409, "conflict", "retry the request")
        return await _replay(redis, winner, order.request_hash, None)

    await enqueue(redis, keyring, order, event)
    return order


async def enqueue(redis: Redis, keyring: Keyring, order: Order, event: Event) -> None:
    """Write the progress hash and the render requests, and close the order's
    in-flight entry, in one MULTI/EXEC. Safe to repeat (the outbox sweep does)."""
    tier = event.tier(order.tier)
    lane = tier.lane if tier is not None else "standard"
    price = unit_price_of(order, event)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(
            streams.order_progress(order.id),
            # event_id: the webhook dispatcher tells an order's event without a store read.
            mapping={
                streams.PROGRESS_TOTAL: order.quantity,
                streams.PROGRESS_OWNER: order.owner_id,
                streams.PROGRESS_ORDER_ID: order.id,
                streams.PROGRESS_EVENT_ID: order.event_id,
            },
        )
        pipe.expire(streams.order_progress(order.id), streams.PROGRESS_TTL_S)
        stream = streams.render_lane(lane, order.quantity)
        for n in range(order.quantity):
            req = ticket_request(keyring, event, order.tier, order.id, n, order.quantity, order.holder_of(n), price)
            pipe.xadd(stream, req.to_fields())  # type: ignore[arg-type]
        pipe.zrem(streams.ORDERS_IN_FLIGHT, member_of(order))
        if order.idempotency_key is not None:
            key = streams.idempotency(order.owner_id, order.idempotency_key)
            pipe.set(key, order.id, ex=streams.IDEMPOTENCY_TTL_S)
        await pipe.execute()


async def _replay(redis: Redis, order: Order, digest: str, principal: Principal | None) -> Order:
    """Answer a repeated Idempotency-Key with the first order (or refuse a new
    body). Only ever the caller's own order: keys are per buyer."""
    if principal is not None and order.owner_id != principal.sub:
        raise Problem(409, "idempotency key conflict", "retry with another Idempotency-Key")
    if order.request_hash != digest:
        raise Problem(422, "idempotency key reused", "this Idempotency-Key was used with another body")
    # The first request may still be writing its render requests; 2xx only once
    # durable. Wait a little for it, never long: one whose api died stays in
    # flight until the outbox sweep finishes it, and the client is better told
    # when to come back than held (no answer takes over a few seconds).
    for _ in range(REPLAY_WAITS):
        if await redis.zscore(streams.ORDERS_IN_FLIGHT, member_of(order)) is None:
            return order
        await asyncio.sleep(0.05)
    raise Problem(
        409, "order in progress", "the first request with this key is still running; retry after the time given",
        {"Retry-After": "1"},
    )  # fmt: skip


REPLAY_WAITS = 40  # x 50 ms: a replayed key waits at most ~2 s for its first request


async def sweep_outbox(redis: Redis, keyring: Keyring, store: Store, grace_s: float) -> int:
    """Finish or undo the orders that stayed in flight longer than ``grace_s``
    (their api crashed or stalled); returns how many were handled."""
    cutoff = _now_ms() - int(grace_s * 1000)
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


def _now_ms() -> int:
    return int(time.time() * 1000)
