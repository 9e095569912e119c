"""A check-in list's tickets for a door scanner that judges codes offline
(``GET /v1/checkin-lists/{id}/tickets``): each ticket's holder, tier and
status, so the scanner can name the guest when the network is gone, as
pretixSCAN does with its downloaded ticket data.

A ticket has no document of its own: its order holds its holder and tier
(``documents.Order``). So the list is read by the event's orders, in ``_id``
order, and each order expanded into its tickets; a ticket id is its order's
hex plus its place, so tickets come out in ticket-id order too. A page holds
at most ``limit`` tickets and may end inside an order (10,000 tickets in a big
one): the cursor names the first ticket of the next page, ``<order id>/<place>``.

There is no ``since`` (changes only): order ids are random, so a new order
lands anywhere in the list, and cancels and admissions leave no change log by
event that FerretDB v1 could find without the same scan. A scanner downloads
every page again when it picks a list and when it is back online.

The pure part (positions, expanding orders into one page) is separate from the
reads (:func:`read_page`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ticketry.documents import CheckinList, Event
from ticketry.ids import MAX_TICKETS_PER_ORDER, is_valid_id, ticket_id

from ticketry_api import pages
from ticketry_api.core.problem import Problem
from ticketry_api.store import Store

DEFAULT_LIMIT = 1000
MAX_LIMIT = 2000
# What a page reads of an order: not its ticket ids (the id and the place make them).
ORDER_FIELDS: dict[str, Any] = {"quantity": 1, "tier": 1, "holder_name": 1, "holders": 1, "status": 1}
# Orders come from the store in batches of at most this many while a page fills.
ORDER_BATCH = 100

DoorStatus = Literal["valid", "cancelled", "checked_in"]


@dataclass(frozen=True)
class Position:
    """Where a page starts: this order, from this place (its first ticket: 0)."""

    order_id: str
    place: int = 0

    def text(self) -> str:
        return f"{self.order_id}/{self.place}"


def parse_position(raw: str | None) -> Position | None:
    """The position a decoded cursor names (None: from the start); 422 for one we did not make."""
    if raw is None:
        return None
    order_id, _, place = raw.partition("/")
    if not is_valid_id(order_id, "or") or not place.isdigit() or not 0 <= int(place) < MAX_TICKETS_PER_ORDER:
        raise Problem(422, "invalid cursor", "use the `next` of the previous page")
    return Position(order_id, int(place))


@dataclass(frozen=True)
class DoorTicket:
    """One ticket as a door sees it, before its admission is looked up."""

    id: str
    holder_name: str
    tier: str
    cancelled: bool


def expand(
    orders: Iterable[Mapping[str, Any]], start: Position | None, limit: int
) -> tuple[list[DoorTicket], Position | None]:
    """The tickets of ``orders`` (in ``_id`` order, none before ``start``'s
    order) from ``start`` on, at most ``limit`` of them; and where the next
    page starts (None: these orders hold no more tickets)."""
    out: list[DoorTicket] = []
    for doc in orders:
        first = start.place if start is not None and doc["_id"] == start.order_id else 0
        holders = doc.get("holders")
        for n in range(first, int(doc["quantity"])):
            if len(out) == limit:
                return out, Position(doc["_id"], n)
            out.append(
                DoorTicket(
                    id=ticket_id(doc["_id"], n), holder_name=holders[n] if holders else doc["holder_name"],
                    tier=doc["tier"], cancelled=doc["status"] == "cancelled",
                )
            )  # fmt: skip
    return out, None


def tickets_left(doc: Mapping[str, Any], start: Position | None) -> int:
    """How many of an order's tickets a page starting at ``start`` can hold."""
    first = start.place if start is not None and doc["_id"] == start.order_id else 0
    return max(int(doc["quantity"]) - first, 0)


def door_status(ticket: DoorTicket, admitted_at: datetime | None) -> DoorStatus:
    """A ticket's status at a door: a cancelled order's tickets never admit;
    else admitted on this list already, or valid."""
    if ticket.cancelled:
        return "cancelled"
    return "checked_in" if admitted_at is not None else "valid"


def orders_query(event_id: str, tiers: list[str], start: Position | None) -> dict[str, Any]:
    """The orders a page of a list reads: its event's placed orders (no
    abandoned tombstones), of the ``tiers`` it admits (all when empty: a door
    gets no names of guests it cannot admit), from ``start``'s order on."""
    query: dict[str, Any] = {"event_id": event_id, "status": {"$ne": "abandoned"}}
    if tiers:
        query["tier"] = {"$in": list(tiers)}
    if start is not None:
        query["_id"] = {"$gte": start.order_id}
    return query


# --- reads --------------------------------------------------------------------


@dataclass(frozen=True)
class DoorPage:
    tickets: list[tuple[DoorTicket, DoorStatus, datetime | None]]
    next: str | None


async def read_page(store: Store, lst: CheckinList, cursor: str | None, limit: int) -> DoorPage:
    """One page of ``lst``'s tickets with their status on it.

    Orders are read in batches only until the page is full (a big order's
    holders are long), then the admissions of the page's tickets on this
    list: their ``_id``s (``<list>/<ticket>``) are one range, as the page's
    ticket ids are. No filter but ``_id`` is pushed down by FerretDB v1, so
    each page scans the event's orders once, as ``GET /v1/events/{id}/orders``
    does; the limit keeps the number of pages (and scans) small."""
    start = parse_position(pages.decode(cursor))
    query = orders_query(lst.event_id, lst.tiers, start)
    # One ticket more than the page: whether there is a next page.
    docs = await store.orders.for_door(query, ORDER_FIELDS, limit + 1, lambda d: tickets_left(d, start), ORDER_BATCH)
    tickets, nxt = expand(docs, start, limit)
    admitted = await store.checkins.admissions_between(lst.id, tickets[0].id, tickets[-1].id) if tickets else {}
    rows = [(t, door_status(t, admitted.get(t.id)), admitted.get(t.id)) for t in tickets]
    return DoorPage(rows, pages.encode(nxt.text()) if nxt is not None else None)


def tier_names(event: Event) -> dict[str, str]:
    return {t.id: t.name for t in event.tier_list()}
