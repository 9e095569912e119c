"""The projector's pure fold: which documents a batch of ticket events becomes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from ticketry.events import TicketEvent
from ticketry.streams import sortable_stream_id as event_key
from ticketry_api.adapters.readmodel import completed_status
from ticketry_api.loops.projector import Fold

AT = datetime(2027, 6, 1, 19, 30, tzinfo=UTC)


def ev(entry_id: str, kind: str, ticket: str | None, rendered: int, failed: int, total: int = 3) -> TicketEvent:
    return TicketEvent(
        id=entry_id, type=kind, event_uuid=f"{kind}:{ticket or 'o'}", order_id="or_1", ticket_id=ticket,  # type: ignore[arg-type]
        total=total, rendered=rendered, failed=failed, occurred_at=AT,
    )  # fmt: skip


def fold(*events: TicketEvent) -> Fold:
    f = Fold()
    for e in events:
        f.add(e)
    return f


def test_ticket_events_become_states_and_only_completion_an_outcome() -> None:
    f = fold(
        ev("1-0", "ticket.rendered", "tk_a", 1, 0),
        ev("2-0", "ticket.failed", "tk_b", 1, 1),
        ev("3-0", "ticket.rendered", "tk_c", 2, 1),
        ev("3-1", "order.completed", None, 2, 1),
    )
    assert {k: v["status"] for k, v in f.states.items()} == {"tk_a": "rendered", "tk_b": "failed", "tk_c": "rendered"}
    (outcome,) = f.outcomes.values()
    assert (outcome["_id"], outcome["status"], outcome["rendered"], outcome["failed"]) == (
        "or_1", "partially_failed", 2, 1,
    )  # fmt: skip
    assert outcome["last_event"] == event_key("3-1")


def test_in_progress_events_write_no_outcome() -> None:
    assert fold(ev("1-0", "ticket.rendered", "tk_a", 1, 0)).outcomes == {}


def test_newest_completion_wins_in_any_order() -> None:
    # A re-drive completes the order again with newer counters; a replayed batch
    # may hold both completions, in either order.
    first = ev("5-0", "order.completed", None, 2, 1)
    again = ev("12-0", "order.completed", None, 3, 0)
    for events in ((first, again), (again, first)):
        (outcome,) = fold(*events).outcomes.values()
        assert (outcome["status"], outcome["rendered"], outcome["failed"]) == ("completed", 3, 0)


def test_event_keys_sort_like_stream_ids() -> None:
    ids = ["9-0", "10-0", "10-2", "10-10", "100-1"]
    assert sorted(ids, key=event_key) == ids
    assert sorted(event_key(i) for i in ids) == [event_key(i) for i in ids]


@pytest.mark.parametrize(
    ("rendered", "failed", "status"),
    [(3, 0, "completed"), (2, 1, "partially_failed"), (0, 3, "failed")],
)
def test_completed_status(rendered: int, failed: int, status: Any) -> None:
    assert completed_status(rendered, failed) == status
