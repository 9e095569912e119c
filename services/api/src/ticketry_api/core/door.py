"""A door's tickets, page by page: positions in a list of a check-in list's
tickets, expanding orders into one page, and a ticket's status at the door
(``ticketry_api.service_layer.door_tickets`` reads the orders and admissions); which
revoked codes an offline scanner's ``since`` asks for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ticketry.ids import MAX_TICKETS_PER_ORDER, is_valid_id, ticket_id

from ticketry_api.core.problem import Problem

DEFAULT_LIMIT = 1000
MAX_LIMIT = 2000

DoorStatus = Literal["valid", "cancelled", "checked_in"]

# A revoked code's time is stamped by the api that re-issued, before its store
# write: a code whose write lands after an answer was read, or whose api's
# clock runs behind the answering one's, has a time before that answer's
# ``as_of``. Codes this much older than ``since`` come again, so none is
# missed for good; the scanner keeps the union.
REVOKED_OVERLAP = timedelta(minutes=5)


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


def revoked_since(codes: Iterable[tuple[str, datetime]], since: datetime | None) -> list[tuple[str, datetime]]:
    """The ``(code, revoked_at)`` a scanner asking with ``since`` (an earlier
    answer's ``as_of``) gets: all without it, else those revoked from
    :data:`REVOKED_OVERLAP` before it on. The store's times are UTC without a zone."""
    if since is None:
        return list(codes)
    start = since - REVOKED_OVERLAP if since > datetime.min.replace(tzinfo=UTC) + REVOKED_OVERLAP else since
    return [(c, at) for c, at in codes if at.replace(tzinfo=UTC) >= start]
