"""A door's tickets, page by page (``ticketry_api.core.door``, ``store.orders.door_query``), and the
revoked codes a ``since`` asks for: plain data, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ticketry.ids import ticket_id
from ticketry_api.core import cursors
from ticketry_api.core.door import REVOKED_OVERLAP, Position, door_status, expand, parse_position, revoked_since
from ticketry_api.core.problem import Problem
from ticketry_api.store.orders import door_query

A, B, C = "or_" + "a" * 20, "or_" + "b" * 20, "or_" + "c" * 20


def order(oid: str, quantity: int, *, holders: list[str] | None = None, status: str = "processing") -> dict[str, Any]:
    return {
        "_id": oid,
        "quantity": quantity,
        "tier": "vip",
        "holder_name": "Buyer",
        "holders": holders,
        "status": status,
    }


ORDERS = [order(A, 3, holders=["x", "y", "z"]), order(B, 1, status="cancelled"), order(C, 2)]


def every_page(limit: int) -> list[list[str]]:
    """Each page's ticket ids, following the positions as a client follows ``next``."""
    out: list[list[str]] = []
    start: Position | None = None
    while True:
        rest = [d for d in ORDERS if start is None or d["_id"] >= start.order_id]
        page, start = expand(rest, start, limit)
        out.append([t.id for t in page])
        if start is None:
            return out


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 6, 7])
def test_pages_hold_every_ticket_once_in_order_and_may_end_inside_an_order(limit: int) -> None:
    got = every_page(limit)
    assert [t for p in got for t in p] == [ticket_id(A, n) for n in range(3)] + [ticket_id(B, 0)] + [
        ticket_id(C, n) for n in range(2)
    ]
    assert all(len(p) == limit for p in got[:-1]) and 0 < len(got[-1]) <= limit


def test_a_ticket_has_its_own_holder_else_the_orders_and_a_cancelled_orders_are_cancelled() -> None:
    page, nxt = expand(ORDERS, Position(A, 1), 10)
    assert nxt is None
    assert [(t.holder_name, t.cancelled) for t in page] == [
        ("y", False), ("z", False), ("Buyer", True), ("Buyer", False), ("Buyer", False),
    ]  # fmt: skip
    assert [door_status(t, None) for t in page[1:3]] == ["valid", "cancelled"]
    assert door_status(page[0], datetime.now(UTC)) == "checked_in"


def test_positions_round_trip_through_cursors_and_foreign_ones_are_422() -> None:
    pos = Position(C, 17)
    assert parse_position(cursors.decode(cursors.encode(pos.text()))) == pos
    assert parse_position(None) is None
    for raw in ("or_x/1", f"{A}/", f"{A}/-1", f"{A}/100000", f"cl_{'a' * 20}/0", A):
        with pytest.raises(Problem) as err:
            parse_position(raw)
        assert err.value.status == 422


def test_a_list_reads_its_events_placed_orders_of_its_tiers_from_the_position_on() -> None:
    event = "ev_" + "2" * 20
    assert door_query(event, [], None) == {"event_id": event, "status": {"$ne": "abandoned"}}
    assert door_query(event, ["vip"], B) == {
        "event_id": event, "status": {"$ne": "abandoned"}, "tier": {"$in": ["vip"]}, "_id": {"$gte": B},
    }  # fmt: skip


def test_a_code_stamped_before_the_last_answer_but_written_after_it_comes_with_the_next() -> None:
    # Given the last answer read at as_of, and codes stamped (naive UTC, as the store keeps them)
    as_of = datetime(2027, 6, 1, 20, 0, tzinfo=UTC)
    naive = as_of.replace(tzinfo=None)
    late = ("late", naive - timedelta(seconds=2))  # stamped before as_of, written after that read
    skewed = ("skewed", naive - REVOKED_OVERLAP + timedelta(seconds=1))  # a host whose clock runs behind
    old = ("old", naive - REVOKED_OVERLAP - timedelta(seconds=1))  # long in every answer since
    new = ("new", naive + timedelta(seconds=5))
    codes = [old, skewed, late, new]
    # Then asking with as_of gives every code of the overlap before it and all after it, not the old one
    assert revoked_since(codes, as_of) == [skewed, late, new]
    # without since all of them; with a cursor at datetime's ends all or none (no overflow)
    assert revoked_since(codes, None) == codes
    assert revoked_since(codes, datetime.min.replace(tzinfo=UTC)) == codes
    assert revoked_since(codes, datetime.max.replace(tzinfo=UTC)) == []
