"""An event's capacity as an append-only ledger (see ``documents.Reservation``).

Each change inserts the next ``seq``; the unique ``_id`` lets exactly one
concurrent writer win it, the losers look up the head (by ``_id``) and try
again. Across processes the unique key decides.

Within one process, the writes of an event go through one writer at a time
(``_Ledger``) with group commit: the reservations that arrive while an entry is
being written wait, and the next entry takes all of them that fit, in arrival
order. One store round trip then serves many orders, so an on-sale's orders
queue on the store's latency once per batch rather than once per order. A
release is an entry of its own (its tag keeps it once-only).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from ticketry.documents import Event, Reservation

from ticketry_api import writes
from ticketry_api.errors import Problem

_MAX_TRIES = 200


@dataclass(eq=False)  # compared by identity
class _Want:
    order_id: str
    delta: int  # > 0 reserves, < 0 releases
    # the writes that follow a taken want (None: not taken)
    done: asyncio.Future[writes.Chain | None]
    then: Sequence[writes.Step] = ()  # written right after the entry that takes it


@dataclass
class _Ledger:
    """One event's writer in this process: what waits, and the head it wrote last."""

    pending: list[_Want] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None
    # (seq, sold) of the entry this process appended last: a hint, not a read
    head: tuple[int, int] | None = None


_ledgers: dict[str, _Ledger] = {}


async def head(event_id: str, known: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """``(seq, sold)`` of the newest ledger entry (``(0, 0)`` for none), looking
    forward from ``known`` (an entry that exists, or the empty start).

    By ``_id`` alone: FerretDB v1 answers any other filter or sort by decoding
    the whole collection, which grows with every order. Entries are gap-free
    (seq n+1 is written only by one who read n), so the head is found by
    doubling the step until a miss, then bisecting: 2·log2(n) point reads,
    one for a new event."""
    col = Reservation.get_pymongo_collection()

    async def sold_at(seq: int) -> int | None:
        doc = await col.find_one({"_id": _entry_id(event_id, seq)}, {"sold_after": 1})
        return None if doc is None else int(doc["sold_after"])

    lo, step = known, 1
    while (got := await sold_at(lo[0] + step)) is not None:
        lo, step = (lo[0] + step, got), step * 2
    hi = lo[0] + step  # missing
    while hi - lo[0] > 1:
        mid = (lo[0] + hi) // 2
        if (got := await sold_at(mid)) is None:
            hi = mid
        else:
            lo = (mid, got)
    return lo


async def sold(event_id: str) -> int:
    hint = ledger.head if (ledger := _ledgers.get(event_id)) is not None else None
    return (await head(event_id, hint or (0, 0)))[1]


def _entry_id(event_id: str, seq: int) -> str:
    return f"{event_id}:{seq:012d}"


async def reserve(event: Event, order_id: str, quantity: int, then: Sequence[writes.Step] = ()) -> writes.Chain | None:
    """Take ``quantity`` tickets for ``order_id``; None when not enough are left.

    ``then`` (the order and its tickets) is written in the same round of the
    writer as the ledger entry, right after it and only if it went in: one
    wait for the store per order, not two. The chain returned tells how it went.
    """
    return await _submit(event, _Want(order_id, quantity, asyncio.get_running_loop().create_future(), then))


async def release(event: Event, order_id: str, quantity: int) -> None:
    """Give an order's tickets back (at most once per order)."""
    await _submit(event, _Want(order_id, -quantity, asyncio.get_running_loop().create_future()))


async def reserved(order_id: str) -> bool:
    """True if ``order_id`` ever took tickets (the outbox sweep asks, rarely)."""
    col = Reservation.get_pymongo_collection()
    return await col.find_one({"orders": order_id}, {"_id": 1}) is not None


async def _submit(event: Event, want: _Want) -> writes.Chain | None:
    ledger = _ledgers.setdefault(event.id, _Ledger())
    ledger.pending.append(want)
    if ledger.writer is None or ledger.writer.done():
        ledger.writer = asyncio.create_task(_write_pending(event, ledger))
    return await want.done


async def _write_pending(event: Event, ledger: _Ledger) -> None:
    """Write what waits, batch after batch, until nothing does."""
    try:
        while ledger.pending:
            batch, ledger.pending = ledger.pending, []
            groups = [[w] for w in batch if w.delta < 0]  # releases first: they make room
            if reserves := [w for w in batch if w.delta > 0]:
                groups.append(reserves)
            for group in groups:
                try:
                    await _append(event, ledger, group)
                except Exception as exc:  # the waiters answer for it, the writer goes on
                    for w in group:
                        writes.settle(w.done, exc)
    finally:
        ledger.writer = None


async def _append(event: Event, ledger: _Ledger, wants: Sequence[_Want]) -> None:
    """Append one entry for ``wants`` (reservations that fit, in order; or one
    release) and settle each want: with the chain of writes that follow it
    once taken or released, None when it did not fit."""
    col = Reservation.get_pymongo_collection()
    check = wants[0].delta > 0
    # The head this process wrote last is a hint, not a read: if another process
    # appended meanwhile, seq+1 is taken, the insert fails, and only then is the
    # head looked up (forward from the hint).
    fresh = ledger.head is None
    known = ledger.head or await head(event.id)
    for _ in range(_MAX_TRIES):
        seq, current = known
        taken, after = [], current
        for w in wants:
            if not check or after + w.delta <= event.capacity:
                taken.append(w)
                after += w.delta
        if len(taken) < len(wants) and not fresh:
            # The hint may predate a release elsewhere: find the head first.
            known, fresh = await head(event.id, known), True
            continue
        chains: dict[_Want, writes.Chain] = {}
        first = taken[0] if taken else None
        if first is not None:
            tag = f"{'reserve' if check else 'release'}:{first.order_id}"
            entry = Reservation(
                id=_entry_id(event.id, seq + 1), event_id=event.id, seq=seq + 1, delta=after - current,
                sold_after=after, tag=tag, orders=[w.order_id for w in taken] if check else [],
            )  # fmt: skip
            chains = {w: writes.Chain(w.then) for w in taken}
            if not await writes.insert(col, [entry.model_dump(by_alias=True)], list(chains.values())):
                ledger.head = (seq + 1, after)
            else:
                ledger.head = None
                # Another writer took seq+1 (retry from the head), or this tag is
                # in the ledger already (written before, e.g. by a retried insert,
                # or the sweep released first: idempotent success). Read by _id.
                nxt = await col.find_one({"_id": entry.id}, {"tag": 1, "sold_after": 1})
                if nxt is not None and nxt["tag"] != tag:
                    await asyncio.sleep(random.uniform(0, 0.002))  # noqa: S311 - jitter only
                    known, fresh = await head(event.id, (seq + 1, int(nxt["sold_after"]))), True
                    continue
                for c in chains.values():  # not written with the entry (it met a duplicate)
                    writes.start(c)
        for w in wants:
            writes.settle(w.done, chains.get(w))
        return
    raise Problem(503, "busy", "too much contention on this event; retry", {"Retry-After": "1"})
