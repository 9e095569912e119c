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
sweep (``outbox.sweep_outbox``; every api runs it; each step is idempotent) re-enqueues a recorded
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
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from redis.asyncio import Redis
from ticketry import fonts, streams
from ticketry.auth import Principal
from ticketry.codes import Keyring
from ticketry.documents import Event, Order, Tier, is_placed
from ticketry.ids import is_valid_id, new_id, ticket_ids
from ticketry.replies import as_text

from ticketry_api.adapters import ratelimit
from ticketry_api.adapters.ratelimit import RateSettings
from ticketry_api.adapters.renders import ticket_request
from ticketry_api.adapters.replicas import ReplicaSettings, replicated
from ticketry_api.core import orders as rules
from ticketry_api.core.names import NAMES_INLINE, NameLimits, busy, check_count, check_names
from ticketry_api.core.pricing import unit_price_of
from ticketry_api.core.problem import Problem
from ticketry_api.http.schemas import OrderIn
from ticketry_api.store import Store

log = logging.getLogger(__name__)
# Shaping holds the GIL for most of its work, so more threads would not check
# names faster; two keep one big order from making every other wait, and
# leave the loop its share of the GIL.
_NAME_CHECKERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="names")


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


def member_of(order: Order, order_id: str | None = None) -> str:
    """``order``'s in-flight member (under ``order_id``: an earlier attempt's at the same tickets)."""
    return streams.in_flight_member(order_id or order.id, order.event_id, order.quantity, order.tier, order.owner_id)


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
    the on-sale's gate) does not. The rate limits, the outbox entry and the
    tickets the buyer holds in a tier with ``max_per_buyer`` are counted in
    one MULTI (one round trip); a refusal after it gives the entry and the
    held tickets back."""
    rules.check_quantity(body.quantity, max_quantity)
    digest = rules.request_hash(body.model_dump(mode="json"))
    if idempotency_key and (known := await _known_repeat(store, redis, principal, idempotency_key)) is not None:
        return await _replay(redis, known, digest, principal)
    event, tier = await _sellable(store, body, gate)
    order = _new_order(principal, body, event, tier, keyring.active_kid, idempotency_key, digest)
    await admit(redis, order, tier, rates)
    try:
        await check_names_within({body.holder_name, *(body.holders or ())}, names)
        # the outbox entry outlives the primary before the store depends on it
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
        await _unless_first_in_flight(redis, order)
        raise rules.sold_out(tier.id)
    first_dup, _ = await taken.written()
    return await record(redis, keyring, store, event, order, order_written=first_dup != 0)


async def _known_repeat(store: Store, redis: Redis, principal: Principal, idempotency_key: str) -> Order | None:
    """The order this buyer's Idempotency-Key already made, as far as Redis
    knows: it maps a key to its order once enqueued (by _id: no scan of the
    orders on FerretDB). A miss is not proof, the unique ``idem`` index is: a
    repeat the map does not know yet loses at the insert (``record``)."""
    known = await redis.get(streams.idempotency(principal.sub, idempotency_key))
    order = await store.orders.get(as_text(known)) if known is not None else None
    # The key is noted at step 1, so it may name an order the sweep gave up.
    return order if order is not None and is_placed(order.status) else None


async def _unless_first_in_flight(redis: Redis, order: Order) -> None:
    """409 "order in progress" (retry after the time given) instead of a
    refusal when the buyer's first request with this Idempotency-Key, for the
    same tickets, is still in flight: its api died or was cut off after step 1,
    so what it holds (the last tickets, the buyer's ``max_per_buyer``) is
    either its order's, which the sweep finishes, or given back by the sweep.
    Either way the retry's answer is the first order or a new one, not a
    refusal."""
    if order.idempotency_key is None:
        return
    first = await redis.get(streams.idempotency(order.owner_id, order.idempotency_key))
    if first is None or (first_id := as_text(first)) == order.id:
        return
    if await redis.zscore(streams.ORDERS_IN_FLIGHT, member_of(order, first_id)) is not None:
        raise rules.still_in_progress()


async def _sellable(store: Store, body: OrderIn, gate: Callable[[Event], Awaitable[None]] | None) -> tuple[Event, Tier]:
    """The event and tier ``body`` asks for, once its on-sale's rules let it
    through: 404 for no such event, 422 for no such tier."""
    event = await store.event(body.event_id) if is_valid_id(body.event_id, "ev") else None
    if event is None:
        raise rules.event_not_found()
    if gate is not None:  # the on-sale's rules (waitingroom.gate); not for a replay
        await gate(event)
    tier = event.tier(body.tier)
    if tier is None:
        raise rules.unknown_tier(t.id for t in event.tier_list())
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
        email=body.email,
        unit_price_minor=tier.price_minor,
        ticket_ids=ticket_ids(order_id, body.quantity),
        key_id=key_id,
        idempotency_key=idempotency_key,
        idem=streams.idempotency_scope(principal.sub, idempotency_key) if idempotency_key else f"auto:{order_id}",
        request_hash=digest,
    )


async def check_names_within(names: set[str], limits: NameLimits) -> None:
    """:func:`~ticketry_api.core.names.check_names` for an order's distinct ``names``: 422 past
    ``limits.max_distinct`` of them; more than :data:`NAMES_INLINE` are shaped
    on a checker thread, so the event loop (every other request of this
    process) goes on meanwhile. Past the time budget, counted from now (so a
    wait for a free checker counts, and a queue of big orders drains by
    itself), 503 with Retry-After: the names may be fine, the process is busy."""
    check_count(names, limits)
    if len(names) <= NAMES_INLINE:
        check_names(names, fonts.undrawable, fonts.fits)
        return
    deadline = time.monotonic() + limits.budget_s
    loop = asyncio.get_running_loop()
    if not await loop.run_in_executor(_NAME_CHECKERS, check_names, names, fonts.undrawable, fonts.fits, deadline):
        raise busy(len(names), limits)


async def admit(redis: Redis, order: Order, tier: Tier, rates: RateSettings) -> None:
    """Count the order against the buyer's rate limits (orders and tickets per
    window), note it in flight (step 1) and count its tickets against the
    buyer's ``max_per_buyer``, in one MULTI; 429 when over a rate limit, 409
    when over ``max_per_buyer``, either taking the entry and the held tickets
    back (the rate counts stay: a refused order spent its share of the window).
    With an Idempotency-Key, the key is noted for this order unless an earlier
    request noted it (:func:`_unless_first_in_flight`); step 4 then points it
    at the order that was recorded."""
    scopes: list[ratelimit.Scope] = [sc for sc in ("orders", "tickets") if rates.limit(sc) > 0]
    held = streams.held(order.event_id, tier.id, order.owner_id)
    async with redis.pipeline(transaction=True) as pipe:
        for scope in scopes:
            amount = order.quantity if scope == "tickets" else 1
            ratelimit.queue_hit(pipe, scope, order.owner_id, rates.rate_window_s, amount)
        pipe.zadd(streams.ORDERS_IN_FLIGHT, {member_of(order): now_ms()})
        if tier.max_per_buyer is not None:
            pipe.incrby(held, order.quantity)
            pipe.expire(held, streams.HELD_TTL_S)
        if order.idempotency_key is not None:  # a retry can tell its first request is still in flight
            key = streams.idempotency(order.owner_id, order.idempotency_key)
            pipe.set(key, order.id, nx=True, ex=streams.IDEMPOTENCY_TTL_S)
        replies = await pipe.execute()
    for i, scope in enumerate(scopes):
        v = ratelimit.verdict(replies[3 * i : 3 * i + 3], rates.limit(scope))
        if not v.allowed:
            await _give_back(redis, order, tier)
            raise ratelimit.refusal(v, rates.limit(scope), rates.rate_window_s, scope)
    if tier.max_per_buyer is None:
        return
    try:
        rules.check_per_buyer(int(replies[3 * len(scopes) + 1]), tier.max_per_buyer, tier.id)
    except Problem:
        await _give_back(redis, order, tier)
        await _unless_first_in_flight(redis, order)
        raise


async def _give_back(redis: Redis, order: Order, tier: Tier) -> None:
    """Undo :func:`admit` for an order that will not exist."""
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
            raise rules.abandoned()
        # Lost a race with the same Idempotency-Key.
        winner = await store.orders.by_idem(order.idem)
        if winner is None:  # pragma: no cover - the unique index says it exists
            raise rules.lost_race()
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
        pipe.incr(streams.ORDERS_ACCEPTED)  # the console's orders/s
        if order.idempotency_key is not None:
            key = streams.idempotency(order.owner_id, order.idempotency_key)
            pipe.set(key, order.id, ex=streams.IDEMPOTENCY_TTL_S)
        await pipe.execute()


async def _replay(redis: Redis, order: Order, digest: str, principal: Principal | None) -> Order:
    """Answer a repeated Idempotency-Key with the first order (or refuse a new
    body). Only ever the caller's own order: keys are per buyer."""
    rules.check_replay(order.owner_id, order.request_hash, principal.sub if principal is not None else None, digest)
    # The first request may still be writing its render requests; 2xx only once
    # durable. Wait a little for it, never long: one whose api died stays in
    # flight until the outbox sweep finishes it, and the client is better told
    # when to come back than held (no answer takes over a few seconds).
    for _ in range(REPLAY_WAITS):
        if await redis.zscore(streams.ORDERS_IN_FLIGHT, member_of(order)) is None:
            return order
        await asyncio.sleep(0.05)
    raise rules.still_in_progress()


REPLAY_WAITS = 40  # x 50 ms: a replayed key waits at most ~2 s for its first request
SWEEP_BATCH = 500  # in-flight members an outbox sweep (orders, re-issues) reads at a time


def now_ms() -> int:
    return int(time.time() * 1000)
