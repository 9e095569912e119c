"""Orders in the store: what the domain reads and writes of them, each by
``_id`` where FerretDB v1 would otherwise scan (an order's ``idem`` is read by
its unique index, only after a lost race)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from ticketry.documents import ORDER_SUMMARY, Order, utcnow

from ticketry_api.store.reads import Reads, page_by_id
from ticketry_api.store.writer import Step, Writer

# What a webhook delivery reads of an order.
_SUMMARY_FIELDS = {"event_id": 1, "tier": 1, "quantity": 1}
# What a door's page reads of an order.
_DOOR_FIELDS = {"quantity": 1, "tier": 1, "holder_name": 1, "holders": 1, "status": 1}


def door_query(event_id: str, tiers: list[str], from_order: str | None) -> dict[str, Any]:
    """The orders a page of a check-in list reads (see :meth:`Orders.for_door`)."""
    query: dict[str, Any] = {"event_id": event_id, "status": {"$ne": "abandoned"}}
    if tiers:
        query["tier"] = {"$in": list(tiers)}
    if from_order is not None:
        query["_id"] = {"$gte": from_order}
    return query


class Orders:
    """The orders, written through the process's one writer."""

    def __init__(self, writer: Writer, reads: Reads) -> None:
        self._writer = writer
        self._reads = reads

    @staticmethod
    def steps(order: Order) -> list[Step]:
        """The writes that record ``order`` (after its ledger entry, in the same round)."""
        return [(Order.get_pymongo_collection(), [order.model_dump(by_alias=True)])]

    async def record(self, order: Order) -> bool:
        """Insert ``order``; False when its ``_id`` or ``idem`` was taken."""
        first_dup, _ = await self._writer.insert_chain(self.steps(order))
        return first_dup != 0

    async def get(self, order_id: str) -> Order | None:
        return await Order.get(order_id)

    async def summary(self, order_id: str) -> Order | None:
        """The order without its per-ticket lists (10,000 ids and holders in a
        big order): a ticket's id is its order's and its place."""
        doc = await Order.get_pymongo_collection().find_one({"_id": order_id}, ORDER_SUMMARY)
        return without_ticket_ids(doc) if doc is not None else None

    async def with_holders(self, order_id: str) -> Order | None:
        """The order with its holders' names but not its list of ticket ids."""
        doc = await Order.get_pymongo_collection().find_one({"_id": order_id}, {"ticket_ids": 0})
        return without_ticket_ids(doc) if doc is not None else None

    async def of_buyer(
        self, owner_id: str, event_id: str | None, cursor: str | None, limit: int
    ) -> tuple[list[Order], str | None]:
        """A page of a buyer's orders (of one event), summaries in id order; the next page's cursor."""
        query: dict[str, Any] = {"owner_id": owner_id}
        if event_id is not None:
            query["event_id"] = event_id
        return await self._page(query, cursor, limit)

    async def of_event(self, event_id: str, cursor: str | None, limit: int) -> tuple[list[Order], str | None]:
        """A page of an event's orders (not the sweep's tombstones), summaries in id order."""
        return await self._page({"event_id": event_id, "status": {"$ne": "abandoned"}}, cursor, limit)

    @staticmethod
    async def _page(query: dict[str, Any], cursor: str | None, limit: int) -> tuple[list[Order], str | None]:
        found, nxt = await page_by_id(Order.get_pymongo_collection(), query, cursor, limit, ORDER_SUMMARY)
        return [without_ticket_ids(d) for d in found], nxt

    @staticmethod
    async def for_door(
        event_id: str,
        tiers: list[str],
        from_order: str | None,
        room: int,
        takes: Callable[[Mapping[str, Any]], int],
        batch: int,
    ) -> list[dict[str, Any]]:
        """The orders a page of a check-in list reads, in id order: its event's
        placed orders (no abandoned tombstones), of the ``tiers`` it admits (all
        when empty: a door gets no names of guests it cannot admit), from
        ``from_order`` on; read in batches of at most ``batch`` only until they
        hold ``room`` tickets (``takes``: how many an order holds). Of each,
        what a door shows (not its ticket ids: the id and the place make them)."""
        docs: list[dict[str, Any]] = []
        found = (
            Order.get_pymongo_collection()
            .find(door_query(event_id, tiers, from_order), _DOOR_FIELDS)
            .sort("_id", 1)
            .batch_size(min(room, batch))
        )
        try:
            async for doc in found:
                docs.append(doc)
                room -= takes(doc)
                if room <= 0:
                    break
        finally:
            await found.close()
        return docs

    async def summaries(self, order_ids: list[str]) -> dict[str, dict[str, Any]]:
        """``_id`` → the event, tier and quantity of the orders of ``order_ids``
        that exist (``Reads.each``): what a webhook delivery tells of an order."""
        return await self._reads.each(Order.get_pymongo_collection(), order_ids, _SUMMARY_FIELDS)

    async def emails(self, order_ids: list[str]) -> dict[str, str]:
        """``_id`` → ``email`` of those of ``order_ids`` that carry one: the mailer's read."""
        found = await self._reads.each(Order.get_pymongo_collection(), order_ids, {"email": 1})
        return {i: d["email"] for i, d in found.items() if d.get("email")}

    @staticmethod
    async def cancelled_of(event_id: str) -> list[str]:
        """The ids of an event's cancelled orders, sorted (a scan on FerretDB)."""
        col = Order.get_pymongo_collection()
        return sorted(
            d["_id"] for d in await col.find({"event_id": event_id, "status": "cancelled"}, {"_id": 1}).to_list()
        )

    @staticmethod
    async def ids_of_event(event_id: str) -> AsyncIterator[str]:
        """The ids of an event's orders, as they come (a scan on FerretDB)."""
        async for doc in Order.get_pymongo_collection().find({"event_id": event_id}, {"_id": 1}):
            yield doc["_id"]

    async def by_idem(self, idem: str) -> Order | None:
        """The order of a buyer's Idempotency-Key scope (its unique ``idem``)."""
        return await Order.find_one({"idem": idem})

    async def status(self, order_id: str) -> str | None:
        """The order document's ``status``, read by ``_id`` alone (None: no document)."""
        raw = await Order.get_pymongo_collection().find_one({"_id": order_id}, {"status": 1})
        return None if raw is None else str(raw.get("status"))

    async def abandon(self, order_id: str, event_id: str, quantity: int) -> bool:
        """Claim ``order_id`` for the outbox sweep with an ``abandoned``
        tombstone; True if the sweep owns it (now, or from an earlier sweep
        that crashed before releasing), False if the order was recorded."""
        tombstone = Order(
            id=order_id, owner_id="", event_id=event_id, quantity=quantity, tier="standard",
            holder_name="", status="abandoned", ticket_ids=[], idem=f"abandoned:{order_id}", request_hash="",
        )  # fmt: skip
        if await self._writer.insert(Order.get_pymongo_collection(), [tombstone.model_dump(by_alias=True)]):
            return await self.status(order_id) == "abandoned"
        return True

    async def mark_cancelled(self, order_id: str) -> None:
        """What reads show once a cancel won the order's fate (``Fates``)."""
        await Order.get_pymongo_collection().update_one({"_id": order_id}, {"$set": {"status": "cancelled"}})


def without_ticket_ids(doc: dict[str, Any]) -> Order:
    """An order read without its list of ticket ids (``ORDER_SUMMARY``, or
    ``{"ticket_ids": 0}``): a ticket's id is its order's and its place."""
    order: Order = Order.model_validate({**doc, "ticket_ids": []})
    return order


REVOCATIONS_TTL_S = 10.0
REVOCATIONS_EVENTS_MAX = 10_000


# The codes a re-issue of an event's tickets replaced, each with when.
RevokedCodes = list[tuple[str, datetime]]


class Revocations:
    """An event's cancelled orders and the codes its tickets' re-issues
    replaced, as its doors ask for them (every door, every minute): read
    from the store at most every ``ttl_s`` per event and process (FerretDB v1
    answers both queries with a scan)."""

    def __init__(
        self, orders: Orders, codes: Callable[[str], Awaitable[RevokedCodes]], ttl_s: float = REVOCATIONS_TTL_S
    ) -> None:
        self._orders, self._codes, self.ttl_s = orders, codes, ttl_s
        self._read: dict[str, tuple[float, list[str], RevokedCodes, datetime]] = {}

    async def of(self, event_id: str) -> tuple[list[str], RevokedCodes, datetime]:
        """The ids of the event's cancelled orders, sorted, the revoked codes
        (oldest first), and when they were read."""
        hit = self._read.get(event_id)
        if hit is not None and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1], hit[2], hit[3]
        as_of = utcnow()
        ids, codes = await self._orders.cancelled_of(event_id), await self._codes(event_id)
        if len(self._read) >= REVOCATIONS_EVENTS_MAX:
            self._read.clear()
        self._read[event_id] = (time.monotonic(), ids, codes, as_of)
        return ids, codes, as_of
