"""The console's sales arithmetic (ticketry_api.core.ops): what a ticket event
tells of its order's status, and the latency percentiles. Plain data."""

from __future__ import annotations

import pytest
from ticketry_api.core.ops import order_status, percentile


@pytest.mark.parametrize(
    ("event_type", "counters", "want"),
    [
        ("ticket.rendered", (3, 1, 0), ("processing", 0)),
        ("ticket.failed", (3, 1, 1), ("processing", 0)),
        ("ticket.rendered", (3, 3, 0), ("completed", 1)),  # its last ticket: done, whichever comes first
        ("order.completed", (3, 3, 0), ("completed", 1)),
        ("order.completed", (3, 2, 1), ("partially_failed", 1)),
        ("order.completed", (3, 0, 3), ("failed", 1)),
        ("order.cancelled", (0, 0, 0), ("cancelled", 2)),
        ("ticket.reissued", (3, 3, 0), None),  # tells nothing new of its order
        ("order.completed", (0, 0, 0), ("processing", 0)),  # no counters: not an outcome
    ],
)
def test_a_ticket_event_tells_its_orders_status_and_rank(
    event_type: str, counters: tuple[int, int, int], want: tuple[str, int] | None
) -> None:
    assert order_status(event_type, *counters) == want


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0 and percentile(values, 0.99) == 99.0
    assert percentile([7.0], 0.99) == 7.0 and percentile([], 0.5) is None
