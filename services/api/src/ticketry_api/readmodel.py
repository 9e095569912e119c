"""A ticket's and an order's status as buyers see them, from the read models.

The ``tickets`` document carries what the API itself decided (``revoked`` by a
cancel, ``checked_in`` by a scan); ``ticket_states`` carries what the projector
folded in from the render events. The API's decisions win. An order's counters
come live from Redis while it renders, and from its ``OrderState`` after.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import as_text
from ticketry.documents import Checkin, Order, OrderState, PublicOrderStatus, Ticket, TicketState, TicketStatus


def effective(own: TicketStatus, rendered: TicketStatus | None) -> TicketStatus:
    if own in ("revoked", "checked_in"):
        return own
    return rendered or own


async def ticket_status(ticket: Ticket) -> TicketStatus:
    if ticket.status not in ("revoked", "checked_in") and await Checkin.get(ticket.id) is not None:
        return "checked_in"  # the Checkin record is the authority
    state = await TicketState.get(ticket.id)
    return effective(ticket.status, state.status if state else None)


# Up to this many tickets, an order's statuses are read ticket by ticket by _id.
POINT_READS_UP_TO = 64


async def order_ticket_statuses(order: Order, *, all_rendered: bool = False) -> dict[str, TicketStatus]:
    """Every ticket of an order → its status. ``all_rendered``: the order is
    ``completed`` (every ticket rendered, none failed), so the render outcomes
    need no reading, only what the API decided per ticket (a check-in).

    FerretDB v1 answers a filter on ``order_id`` by decoding every ticket ever
    sold (measured at 20,000 tickets: 0.55 s a query), while a read by ``_id``
    searches the index our FerretDB build adds (1.0 ms; see
    ``infra/ferretdb/idindex.go``). So an order of up to ``POINT_READS_UP_TO``
    tickets is read by ``_id``, a point read or two a ticket, side by side; a
    bigger order takes the scans (on MongoDB both are indexed)."""
    tickets = Ticket.get_pymongo_collection()
    if all_rendered:
        return {t["_id"]: effective(t["status"], "rendered") for t in await _statuses_in(tickets, order)}
    own, done = await asyncio.gather(
        _statuses_in(tickets, order), _statuses_in(TicketState.get_pymongo_collection(), order)
    )
    rendered = {s["_id"]: s["status"] for s in done}
    return {t["_id"]: effective(t["status"], rendered.get(t["_id"])) for t in own}


async def _statuses_in(col: AsyncCollection[dict[str, Any]], order: Order) -> list[dict[str, Any]]:
    """``{_id, status}`` of the order's tickets found in ``col``."""
    return await find_by_ids(col, order.ticket_ids, {"order_id": order.id}, {"status": 1})


async def find_by_ids(
    col: AsyncCollection[dict[str, Any]], ids: list[str], otherwise: dict[str, Any], projection: dict[str, int]
) -> list[dict[str, Any]]:
    """The documents of ``col`` with these ``_id``s: point reads, side by side,
    for up to ``POINT_READS_UP_TO`` of them; else one query by ``otherwise``
    (a scan on FerretDB v1, cheaper than that many point reads)."""
    if len(ids) <= POINT_READS_UP_TO:
        got = await asyncio.gather(*(col.find_one({"_id": i}, projection) for i in ids))
        return [d for d in got if d is not None]
    return await col.find(otherwise, projection).to_list()


async def order_outcome(redis: Redis, order: Order) -> tuple[PublicOrderStatus, int, int]:
    """``(status, rendered, failed)`` of an order: its own status once cancelled
    (or still processing), the live Redis counters while its progress hash
    lives, else the projector's ``OrderState``."""
    live = {as_text(k): as_text(v) for k, v in (await redis.hgetall(streams.order_progress(order.id))).items()}
    if live:
        rendered, failed = int(live.get("rendered", 0)), int(live.get("failed", 0))
        status: PublicOrderStatus = "processing"
        if "completed" in live:
            state = await OrderState.get(order.id)
            status = state.status if state is not None else completed_status(rendered, failed)
    else:
        state = await OrderState.get(order.id)
        status, rendered, failed = (state.status, state.rendered, state.failed) if state else ("processing", 0, 0)
    return ("cancelled" if order.status == "cancelled" else status), rendered, failed


def completed_status(rendered: int, failed: int) -> PublicOrderStatus:
    """An order with every ticket final: its status from the counters."""
    if failed == 0:
        return "completed"
    return "failed" if rendered == 0 else "partially_failed"
