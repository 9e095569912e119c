"""The read models in the store: each ticket's render outcome
(``TicketState``), each order's (``OrderState``), folded in by the projector,
and the check-ins that make a ticket ``checked_in``. Written as inserts
through the process's one writer (an update only for the rare transition a
duplicate brings); read by ``_id``, or by the ids of an order's tickets
(``Reads.by_ids``)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from ticketry.documents import Checkin, OrderState, TicketIssue, TicketState, TicketStatus

from ticketry_api.store.reads import Reads
from ticketry_api.store.writer import Writer


def issue_id(ticket_id: str, version: int) -> str:
    """The ``_id`` of a ticket's re-issue to ``version``."""
    return f"{ticket_id}/{version}"


class Tickets:
    """The tickets' and orders' read models."""

    def __init__(self, writer: Writer, reads: Reads) -> None:
        self._writer = writer
        self._reads = reads

    async def status(self, ticket_id: str) -> TicketStatus | None:
        """``checked_in`` once admitted (the ``Checkin`` is the authority), else
        the projector's outcome (None: none yet)."""
        admitted, state = await asyncio.gather(Checkin.get(ticket_id), TicketState.get(ticket_id))
        if admitted is not None:
            return "checked_in"
        return state.status if state is not None else None

    async def admitted(self, order_id: str, ids: list[str]) -> set[str]:
        """Those of the order's tickets ``ids`` that were admitted."""
        found = await self._reads.by_ids(Checkin.get_pymongo_collection(), ids, {"order_id": order_id}, {"_id": 1})
        return {d["_id"] for d in found}

    async def outcomes(self, order_id: str, ids: list[str]) -> dict[str, TicketStatus]:
        """The projector's outcome of those of the order's tickets ``ids`` that have one."""
        col = TicketState.get_pymongo_collection()
        found = await self._reads.by_ids(col, ids, {"order_id": order_id}, {"status": 1})
        return {d["_id"]: d["status"] for d in found}

    @staticmethod
    async def current_issue(ticket_id: str) -> TicketIssue | None:
        """The ticket's newest re-issue (None: never re-issued), by point reads
        of versions 1, 2, … until one is missing: one read for most tickets,
        and a ticket has at most ``max_reissues`` versions."""
        current: TicketIssue | None = None
        while (found := await TicketIssue.get(issue_id(ticket_id, current.version + 1 if current else 1))) is not None:
            current = found
        return current

    async def reissue(self, issue: TicketIssue) -> bool:
        """Insert ``issue``; False if another re-issue won its version first."""
        col = TicketIssue.get_pymongo_collection()
        return not await self._writer.insert(col, [issue.model_dump(by_alias=True)])

    @staticmethod
    async def revoked_codes(event_id: str) -> list[tuple[str, datetime]]:
        """Each code a re-issue of the event's tickets replaced, with when (a
        scan of the collection on FerretDB: it holds re-issues only)."""
        found = TicketIssue.get_pymongo_collection().find({"event_id": event_id}, {"revoked_code": 1, "at": 1})
        return sorted([(d["revoked_code"], d["at"]) async for d in found], key=lambda c: c[1])

    @staticmethod
    async def order_state(order_id: str) -> OrderState | None:
        return await OrderState.get(order_id)

    async def insert_states(self, docs: list[dict[str, Any]]) -> None:
        """Insert render outcomes (pieces of a few dozen, one transaction each on FerretDB).

        A duplicate means the ticket already has a state: a replay (nothing to do),
        or a re-driven dead letter that has now rendered (``failed → rendered``, the
        one transition that needs an update; rare).
        """
        col = TicketState.get_pymongo_collection()
        for doc in await self._insert_new(col, docs):
            if doc["status"] == "rendered":
                current = await col.find_one({"_id": doc["_id"]}, {"status": 1})
                if current is not None and current["status"] == "failed":
                    await col.update_one(
                        {"_id": doc["_id"]}, {"$set": {"status": "rendered", "reason": None, "at": doc["at"]}}
                    )

    async def insert_outcomes(self, docs: list[dict[str, Any]]) -> None:
        """Insert order outcomes in one batch. A duplicate is a replay (nothing to
        do) or a second completion after a re-drive (newer: replace the counters)."""
        col = OrderState.get_pymongo_collection()
        for doc in await self._insert_new(col, docs):
            current = await col.find_one({"_id": doc["_id"]}, {"last_event": 1})
            if current is not None and current["last_event"] < doc["last_event"]:
                await col.update_one({"_id": doc["_id"]}, {"$set": {k: v for k, v in doc.items() if k != "_id"}})

    async def _insert_new(self, col: Any, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Insert ``docs`` (background work of the writer: no order waits behind
        a batch of them); the ones whose ``_id`` already existed."""
        return [docs[i] for i in await self._writer.insert_background(col, docs)]
