"""An event's capacity as an append-only ledger (see ``documents.Reservation``).

Each change inserts the next ``seq``; the unique ``_id`` lets exactly one
concurrent writer win it, the losers look up the head (by ``_id``) and try
again. Across processes the unique key decides.

Within one process (one :class:`Ledger`, made at start-up), the writes of an
event go through one writer at a time (``_EventLedger``) with group commit:
the reservations that arrive while an entry is being written wait, and the
next entry takes all of them that fit, in arrival order. One store round
trip then serves many orders, so an on-sale's orders queue on the store's
latency once per batch rather than once per order. A release is an entry of
its own (its tag keeps it once-only).

Each entry also carries what each tier has sold after it, so a reservation is
checked against the event's capacity and its tier's in the same insert.

Across processes (several api workers, or api hosts, selling one event) the
race costs each entry a failed insert and a read: ~1.2 ms of api CPU per order
with two processes on one on-sale (docs/performance-notes.md). So once this
process has seen another append to an event (an entry lost to it, or a baton
newer than its own head), it takes turns: a :class:`Baton` (``adapters.baton``)
hands the event's head from writer to writer, and a writer appends after the
head it was handed. The baton is a hint like the process's own: the unique
``_id`` still decides, and a baton that does not come within
``BATON_WAIT_S`` (its holder killed, none made yet) is not waited for.

The head (the newest entry) is found by point reads on FerretDB (:func:`head`)
and by one indexed query on MongoDB (:func:`newest`), as the store's traits
say. The ledger itself is the same on both: see ``docs/decisions.md``
("Capacity is a ledger on MongoDB too").
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter
from ticketry.db import StoreTraits
from ticketry.documents import Event, Reservation

from ticketry_api.core.ledger import Head, batches, find_head, fit
from ticketry_api.core.problem import Problem
from ticketry_api.store.writer import Chain, Step, Writer, settle

__all__ = ["Baton", "Head", "Ledger", "head", "newest"]

log = logging.getLogger(__name__)
_MAX_TRIES = 200
BATON_WAIT_S = 0.05  # a baton held longer than this is not waited for
CONTENDED_S = 10.0  # turns are taken this long after another process was last seen appending
LOST = Counter("ticketry_ledger_entries_lost", "Ledger entries this api process lost to another's write")


class Baton(Protocol):
    """Turns at an event's ledger across processes: :meth:`take` waits up to
    ``wait_s`` for the baton and answers the head its last holder appended
    (None: none came); :meth:`give` hands it on with the head appended since."""

    async def take(self, event_id: str, wait_s: float) -> Head | None: ...

    async def give(self, event_id: str, head: Head) -> None: ...


@dataclass(eq=False)  # compared by identity
class _Want:
    order_id: str
    tier: str
    delta: int  # > 0 reserves, < 0 releases
    # the writes that follow a taken want (None: not taken)
    done: asyncio.Future[Chain | None]
    then: Sequence[Step] = ()  # written right after the entry that takes it


@dataclass
class _EventLedger:
    """One event's writer in this process: what waits, and the head it wrote last."""

    pending: list[_Want] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None
    # the entry this process appended last: a hint, not a read
    head: Head | None = None
    # when another process was last seen appending to this event (monotonic)
    contended_at: float = float("-inf")


def _entry_id(event_id: str, seq: int) -> str:
    return f"{event_id}:{seq:012d}"


async def head(event_id: str, known: Head | None = None) -> Head:
    """The newest ledger entry (``Head()`` for none), looking forward from
    ``known`` (an entry that exists, or the empty start).

    By ``_id`` alone: FerretDB v1 answers any other filter or sort by decoding
    the whole collection, which grows with every order. Entries are gap-free
    (seq n+1 is written only by one who read n), so the head is found by
    doubling the step until a miss, then bisecting: 2·log2(n) point reads,
    one for a new event."""
    col = Reservation.get_pymongo_collection()

    async def entry_at(seq: int) -> Head | None:
        doc = await col.find_one({"_id": _entry_id(event_id, seq)}, _HEAD_FIELDS)
        return None if doc is None else _head_of(doc)

    return await find_head(entry_at, known)


async def newest(event_id: str) -> Head:
    """The newest ledger entry (``Head()`` for none) by one query: the event's
    entries by ``seq`` descending, on the ``(event_id, seq)`` index."""
    col = Reservation.get_pymongo_collection()
    found = await col.find({"event_id": event_id}, _HEAD_FIELDS).sort("seq", -1).limit(1).to_list()
    return _head_of(found[0]) if found else Head()


_HEAD_FIELDS = {"seq": 1, "sold_after": 1, "tier_sold": 1}


def _head_of(doc: Mapping[str, Any]) -> Head:
    return Head(int(doc["seq"]), int(doc["sold_after"]), dict(doc.get("tier_sold") or {}))


class Ledger:
    """Every event's ledger writer in this process; its entries go through ``writer``."""

    def __init__(self, writer: Writer, traits: StoreTraits, baton: Baton | None = None) -> None:
        self.writer = writer
        self._baton = baton
        self._indexed = traits.indexed_queries
        self._events: dict[str, _EventLedger] = {}

    async def quiet(self, timeout_s: float | None = None) -> bool:
        """Wait until no event's writer is at work (the waiters are answered
        before the baton is handed on, so an append may still be ending), for
        ``timeout_s`` at most; True if none is."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while busy := [w for ledger in self._events.values() if (w := ledger.writer) is not None and not w.done()]:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            await asyncio.wait(busy, timeout=left)
        return True

    async def sold(self, event_id: str) -> Head:
        """What the event has sold, in all and per tier."""
        hint = ledger.head if (ledger := self._events.get(event_id)) is not None else None
        return await self._head(event_id, hint)

    async def _head(self, event_id: str, known: Head | None = None) -> Head:
        """The newest entry, as the store finds it cheapest (``known``: an
        entry that exists, where point reads start)."""
        return await newest(event_id) if self._indexed else await head(event_id, known)

    async def reserve(
        self, event: Event, order_id: str, tier: str, quantity: int, then: Sequence[Step] = ()
    ) -> Chain | None:
        """Take ``quantity`` tickets of ``tier`` for ``order_id``; None when the
        event or the tier has not enough left.

        ``then`` (the order and its tickets) is written in the same round of the
        writer as the ledger entry, right after it and only if it went in: one
        wait for the store per order, not two. The chain returned tells how it went.
        """
        return await self._submit(
            event, _Want(order_id, tier, quantity, asyncio.get_running_loop().create_future(), then)
        )

    async def release(self, event: Event, order_id: str, tier: str, quantity: int) -> None:
        """Give an order's tickets back (at most once per order)."""
        await self._submit(event, _Want(order_id, tier, -quantity, asyncio.get_running_loop().create_future()))

    @staticmethod
    async def reserved(order_id: str) -> bool:
        """True if ``order_id`` ever took tickets (the outbox sweep asks, rarely)."""
        col = Reservation.get_pymongo_collection()
        return await col.find_one({"orders": order_id}, {"_id": 1}) is not None

    async def _submit(self, event: Event, want: _Want) -> Chain | None:
        ledger = self._events.setdefault(event.id, _EventLedger())
        ledger.pending.append(want)
        if ledger.writer is None or ledger.writer.done():
            ledger.writer = asyncio.create_task(self._write_pending(event, ledger))
        return await want.done

    async def _write_pending(self, event: Event, ledger: _EventLedger) -> None:
        """Write what waits, batch after batch, until nothing does."""
        try:
            while ledger.pending:
                batch, ledger.pending = ledger.pending, []
                for group in batches(batch):  # releases first: they make room
                    try:
                        await self._append(event, ledger, group)
                    except Exception as exc:  # the waiters answer for it, the writer goes on
                        for w in group:
                            settle(w.done, exc)
        finally:
            ledger.writer = None

    async def _append(self, event: Event, ledger: _EventLedger, wants: Sequence[_Want]) -> None:
        """:meth:`_append_now`, holding the event's baton while another process appends to it too."""
        baton = self._baton
        if baton is None or time.monotonic() - ledger.contended_at > CONTENDED_S:
            await self._append_now(event, ledger, wants)
            return
        try:
            handed = await baton.take(event.id, BATON_WAIT_S)
        except Exception:  # no baton: the race decides, as without one
            log.warning("ledger baton not taken", exc_info=True, extra={"event_id": event.id})
            handed = None
        if handed is not None and (ledger.head is None or handed.seq > ledger.head.seq):
            ledger.head, ledger.contended_at = handed, time.monotonic()  # another process appended since
        try:
            await self._append_now(event, ledger, wants)
        finally:
            if ledger.head is not None:
                try:
                    await baton.give(event.id, ledger.head)
                except Exception:  # the next writer waits BATON_WAIT_S once, then makes one
                    log.warning("ledger baton not given back", exc_info=True, extra={"event_id": event.id})

    async def _append_now(self, event: Event, ledger: _EventLedger, wants: Sequence[_Want]) -> None:
        """Append one entry for ``wants`` (reservations that fit, in order; or one
        release) and settle each want: with the chain of writes that follow it
        once taken or released, None when it did not fit."""
        col = Reservation.get_pymongo_collection()
        check = wants[0].delta > 0
        # The head this process wrote last is a hint, not a read: if another process
        # appended meanwhile, seq+1 is taken, the insert fails, and only then is the
        # head looked up (forward from the hint).
        fresh = ledger.head is None
        known = ledger.head or await self._head(event.id)
        caps = {t.id: t.capacity for t in event.tier_list()}
        for _ in range(_MAX_TRIES):
            took = fit(wants, known, event.capacity, caps, check=check)
            taken, after, tier_after = took.taken, took.sold, took.tier_sold
            if len(taken) < len(wants) and not fresh:
                # The hint may predate a release elsewhere: find the head first.
                known, fresh = await self._head(event.id, known), True
                continue
            chains: dict[_Want, Chain] = {}
            first = taken[0] if taken else None
            if first is not None:
                tag = f"{'reserve' if check else 'release'}:{first.order_id}"
                seq = known.seq + 1
                entry = Reservation(
                    id=_entry_id(event.id, seq), event_id=event.id, seq=seq, delta=after - known.sold,
                    sold_after=after, tier_sold=tier_after, tag=tag,
                    orders=[w.order_id for w in taken] if check else [],
                )  # fmt: skip
                chains = {w: Chain(w.then) for w in taken}
                if not await self.writer.insert(col, [entry.model_dump(by_alias=True)], list(chains.values())):
                    ledger.head = Head(seq, after, tier_after)
                else:
                    ledger.head = None
                    # Another writer took seq+1 (retry from the head), or this tag is
                    # in the ledger already (written before, e.g. by a retried insert,
                    # or the sweep released first: idempotent success). Read by _id.
                    nxt = await col.find_one({"_id": entry.id}, {"tag": 1})
                    if nxt is not None and nxt["tag"] != tag:
                        ledger.contended_at = time.monotonic()
                        LOST.inc()
                        await asyncio.sleep(random.uniform(0, 0.002))  # noqa: S311 - jitter only
                        known, fresh = await self._head(event.id, known), True
                        continue
                    for c in chains.values():  # not written with the entry (it met a duplicate)
                        self.writer.start(c)
            for w in wants:
                settle(w.done, chains.get(w))
            return
        raise Problem(503, "busy", "too much contention on this event; retry", {"Retry-After": "1"})
