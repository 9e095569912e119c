"""The rules of a re-entry list's door (``ticketry_api.core.checkins``): which
way a ticket may go from its last move, how a move is named, how the inside
count follows from the moves, and the refusals' answers. Plain values, no server."""

from __future__ import annotations

from ticketry_api.core.checkins import (
    already_inside,
    inside_now,
    may_move,
    no_exits,
    not_inside,
    passage_id,
    refused,
)

ADMISSION = "cl_" + "1" * 20 + "/tk_" + "2" * 20 + "_00001"


def test_a_ticket_goes_in_while_outside_and_out_while_inside() -> None:
    # 0: never admitted; 1: its admission; then exits even, entries odd
    assert [may_move(last, "entry") for last in range(5)] == [True, False, True, False, True]
    assert [may_move(last, "exit") for last in range(5)] == [False, True, False, True, False]


def test_a_tickets_moves_sort_in_move_order_under_its_admission() -> None:
    ids = [passage_id(ADMISSION, n) for n in (2, 9, 10, 123)]
    assert ids == sorted(ids)
    assert all(i.startswith(ADMISSION + "/") for i in ids)


def test_inside_is_admissions_plus_reentries_minus_exits() -> None:
    # three tickets: one in (admitted), one out (admitted, left), one back in (admitted, left, came back)
    assert inside_now(admitted=3, entries=1, exits=2) == 2
    assert inside_now(admitted=0, entries=0, exits=0) == 0


def test_refusals_at_a_reentry_door_are_told_apart() -> None:
    inside = refused(already_inside("tk_1", "Ada", "vip"))
    assert (inside.status, inside.outcome) == (409, "already")
    assert inside.body["type"].endswith("/already") and inside.body["holder_name"] == "Ada"
    out = refused(not_inside("tk_1", "Ada", "vip"))
    assert (out.status, out.outcome) == (409, "not_inside")
    assert out.body["type"].endswith("/not-inside") and out.body["ticket_id"] == "tk_1"
    plain = refused(no_exits("Main door"))
    assert plain.status == 409 and plain.body["type"].endswith("/no-reentry")
