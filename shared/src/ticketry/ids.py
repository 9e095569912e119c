"""Identifiers. Every id that reaches a file path or a Redis key passes ``is_valid_id``.

Events, orders and check-in lists have random ids (``ev_…``, ``or_…``, ``cl_…``). A ticket's id is its
order's plus its place in the order (``tk_<order>_<nnnnn>``), so a ticket needs no
document of its own to be found: its order holds everything a ticket is (see
``ticketry_api.adapters.readmodel``). Ticket ids are not secrets (a QR code carries a
signed code, never derived from the id), and only the order's owner can see one.
"""

from __future__ import annotations

import re
import secrets

_ID_RE = re.compile(r"^(ev|or|cl|qu)_([0-9a-f]{20})$")
# The place has a fixed width: one spelling per ticket (the id names its PDF and
# its code), and every ticket id of every order is as long as any other, so the
# renderer's stamping template (which depends on the id's length) is one per event.
PLACE_DIGITS = 5  # 29 characters in all: what the ticket design's id cells hold unwrapped
MAX_TICKETS_PER_ORDER = 10**PLACE_DIGITS
_TICKET_RE = re.compile(rf"^tk_([0-9a-f]{{20}})_([0-9]{{{PLACE_DIGITS}}})$")


def new_id(prefix: str) -> str:
    """A random id such as ``or_9f2c…`` (80 bits of randomness)."""
    if prefix == "tk":
        raise ValueError("ticket ids come from their order: ticket_ids()")
    return f"{prefix}_{secrets.token_hex(10)}"


def ticket_id(order_id: str, n: int) -> str:
    """The id of the ``n``-th ticket (from 0) of an order."""
    if not 0 <= n < MAX_TICKETS_PER_ORDER:
        raise ValueError(f"a ticket's place is 0..{MAX_TICKETS_PER_ORDER - 1}")
    return f"tk_{order_id.removeprefix('or_')}_{n:0{PLACE_DIGITS}d}"


def ticket_ids(order_id: str, quantity: int) -> list[str]:
    """The ids of an order's tickets, in order."""
    return [ticket_id(order_id, n) for n in range(quantity)]


def order_of_ticket(ticket_id: str) -> tuple[str, int] | None:
    """``(order id, place in the order)`` of a valid ticket id, else None."""
    m = _TICKET_RE.match(ticket_id)
    return None if m is None else (f"or_{m.group(1)}", int(m.group(2)))


def is_valid_id(value: str, prefix: str | None = None) -> bool:
    """True for ids made here (optionally of the given kind: ``ev``, ``or``, ``cl``, ``qu``, ``tk``)."""
    if value.startswith("tk_"):
        return prefix in (None, "tk") and _TICKET_RE.match(value) is not None
    m = _ID_RE.match(value)
    return m is not None and (prefix is None or m.group(1) == prefix)
