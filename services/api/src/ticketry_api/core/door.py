"""A door's tickets, page by page: positions in a list of a check-in list's
tickets, expanding orders into one page, and a ticket's status at the door
(``ticketry_api.door_tickets`` reads the orders and admissions)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ticketry.ids import MAX_TICKETS_PER_ORDER, is_valid_id, ticket_id

from ticketry_api.core.problem import Problem

DEFAULT_LIMIT = 1000
MAX_LIMIT = 2000

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
