"""Ticket ids are their order's: one spelling each, all of one length, nothing else passes."""

from __future__ import annotations

import pytest
from ticketry.ids import MAX_TICKETS_PER_ORDER, is_valid_id, new_id, order_of_ticket, ticket_id, ticket_ids


def test_ticket_ids_lead_back_to_their_order() -> None:
    order_id = new_id("or")
    tickets = ticket_ids(order_id, 12)
    assert len(set(tickets)) == 12
    assert [order_of_ticket(t) for t in tickets] == [(order_id, n) for n in range(12)]
    assert all(is_valid_id(t, "tk") and not is_valid_id(t, "or") for t in tickets)
    assert len({len(t) for t in [*tickets, ticket_id(order_id, MAX_TICKETS_PER_ORDER - 1)]}) == 1
    with pytest.raises(ValueError):
        ticket_id(order_id, MAX_TICKETS_PER_ORDER)


@pytest.mark.parametrize(
    "value",
    [
        "tk_0123456789abcdef0123",  # no place
        "tk_0123456789abcdef0123_1",  # a second spelling of place 1
        "tk_0123456789abcdef0123_000001",  # and another
        "tk_0123456789abcdef0123_-0001",
        "tk_0123456789ABCDEF0123_00001",
        "tk_0123456789abcdef012_00001",
        "tk_0123456789abcdef0123_00001/../x",
        "or_0123456789abcdef0123",
    ],
)
def test_anything_else_is_not_a_ticket(value: str) -> None:
    assert order_of_ticket(value) is None
    assert not is_valid_id(value, "tk")


def test_ticket_ids_are_never_random() -> None:
    with pytest.raises(ValueError, match="ticket_ids"):
        new_id("tk")
