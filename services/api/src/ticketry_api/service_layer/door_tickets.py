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

The pure part (positions, expanding orders into one page) is
``ticketry_api.core.door``; the query is ``store.orders.for_door``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ticketry.documents import CheckinList, Event

from ticketry_api.core import cursors
from ticketry_api.core.door import DoorStatus, DoorTicket, door_status, expand, parse_position, tickets_left
from ticketry_api.store import Store

# Orders come from the store in batches of at most this many while a page fills.
ORDER_BATCH = 100


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
    start = parse_position(cursors.decode(cursor))
    # One ticket more than the page: whether there is a next page.
    docs = await store.orders.for_door(
        lst.event_id, lst.tiers, start.order_id if start is not None else None,
        limit + 1, lambda d: tickets_left(d, start), ORDER_BATCH,
    )  # fmt: skip
    tickets, nxt = expand(docs, start, limit)
    admitted = await store.checkins.admissions_between(lst.id, tickets[0].id, tickets[-1].id) if tickets else {}
    rows = [(t, door_status(t, admitted.get(t.id)), admitted.get(t.id)) for t in tickets]
    return DoorPage(rows, cursors.encode(nxt.text()) if nxt is not None else None)


def tier_names(event: Event) -> dict[str, str]:
    return {t.id: t.name for t in event.tier_list()}
