"""The console's arithmetic (ticketry_api.core.ops) and the feed's annotation
of a snapshot (ticketry_api.ops.feed.annotate). Plain data, no server."""

from __future__ import annotations

import math
from typing import Any

import pytest
from ticketry import streams
from ticketry_api.core.ops import Sample, behind, drain_s, rates
from ticketry_api.ops.feed import annotate


def test_rates_are_per_second_between_two_samples() -> None:
    prev = Sample(10.0, {"tickets_rendered": 100, "tickets_ordered": 40})
    cur = Sample(12.0, {"tickets_rendered": 150, "tickets_ordered": 40})
    assert rates(prev, cur) == {"tickets_rendered": 25.0, "tickets_ordered": 0.0}


@pytest.mark.parametrize(
    ("prev", "cur"),
    [
        (None, Sample(1.0, {"tickets_rendered": 7})),  # the first sample: nothing to compare with
        (Sample(1.0, {"tickets_rendered": 7}), Sample(1.0, {"tickets_rendered": 9})),  # no time between
        (Sample(1.0, {"tickets_rendered": 90}), Sample(2.0, {"tickets_rendered": 3})),  # a renderer started over
    ],
)
def test_rates_are_never_negative_nor_infinite(prev: Sample | None, cur: Sample) -> None:
    assert rates(prev, cur) == {"tickets_rendered": 0.0}


@pytest.mark.parametrize(
    ("backlog", "capacity", "seconds", "late"),
    [(0, 0.0, 0.0, False), (100, 10.0, 10.0, False), (300, 10.0, 30.0, True), (1, 0.0, math.inf, True)],
)
def test_a_group_is_behind_past_its_drain_target(backlog: int, capacity: float, seconds: float, late: bool) -> None:
    assert drain_s(backlog, capacity) == seconds
    assert behind(backlog, capacity, 20.0) is late


def snapshot(lag: int | None, pending: int, rendered: int, rate: float) -> dict[str, Any]:
    group = {"consumers": 1, "pending": pending, "lag": lag, "last_delivered_id": "0-0"}
    return {
        "streams": {
            streams.RENDER_VIP: {"exists": True, "length": 5, "groups": {streams.RENDERERS_GROUP: group}},
            streams.RENDER_STD: {"exists": False, "length": 0, "groups": {}},
        },
        "renderers": [{"rate": rate, "rendered": rendered}],
        "counters": {"tickets_rendered": rendered, "tickets_ordered": 10},
    }


def test_the_feed_marks_the_render_group_behind_and_carries_the_rates() -> None:
    first = snapshot(lag=400, pending=0, rendered=0, rate=10.0)
    prev = annotate(first, None, 100.0, drain_target_s=20.0)
    group = first["streams"][streams.RENDER_VIP]["groups"][streams.RENDERERS_GROUP]
    assert group["behind"] is True and group["drain_s"] == 40.0 and first["capacity"] == 10.0
    second = snapshot(lag=None, pending=5, rendered=30, rate=10.0)  # lag unknown: counted as none
    annotate(second, prev, 102.0, drain_target_s=20.0)
    group = second["streams"][streams.RENDER_VIP]["groups"][streams.RENDERERS_GROUP]
    assert group["behind"] is False and group["drain_s"] == 0.5
    assert second["rates"] == {"tickets_rendered": 15.0, "tickets_ordered": 0.0}
    idle = snapshot(lag=3, pending=0, rendered=0, rate=0.0)  # a backlog and no renderer
    annotate(idle, None, 0.0, drain_target_s=20.0)
    group = idle["streams"][streams.RENDER_VIP]["groups"][streams.RENDERERS_GROUP]
    assert group["behind"] is True and group["drain_s"] is None
