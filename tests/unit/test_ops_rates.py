"""The console's arithmetic (ticketry_api.core.ops) and the feed's annotation
of a snapshot (ticketry_api.ops.feed.annotate). Plain data, no server."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import pytest
from ticketry import streams
from ticketry_api.core.ops import Sample, behind, drain_s, history, rates, recent_rates
from ticketry_api.ops.feed import RENDERER_WINDOW_S, annotate, per_renderer


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


def test_recent_rates_are_over_the_window_or_the_feeds_whole_life_if_shorter() -> None:
    history = [Sample(float(t), {"r1": 10 * t}) for t in range(0, 13)]  # 10 tickets/s for 12 s
    cur = Sample(13.0, {"r1": 130 + 5})  # … then 5 in the last second
    # against t=3 (the newest at least 10 s back): (135 - 30) / 10
    assert recent_rates(history, cur, 10.0) == {"r1": 10.5}
    # a feed 2 s old: against its oldest sample
    assert recent_rates(history[:2], Sample(2.0, {"r1": 30}), 10.0) == {"r1": 15.0}
    assert recent_rates([], cur, 10.0) == {"r1": 0.0}


def test_a_counter_first_seen_after_the_window_base_counts_from_zero_but_a_plain_rate_does_not() -> None:
    # a renderer that rendered its 2 tickets between two polls, never seen at 0
    history = [Sample(0.0, {}), Sample(1.0, {})]
    cur = Sample(2.0, {"r1": 2})
    assert recent_rates(history, cur, 10.0) == {"r1": 1.0}
    assert rates(history[-1], cur) == {"r1": 0.0}


def test_each_renderer_gets_its_own_recent_rate_and_the_history_stays_one_window_long() -> None:
    history: deque[Sample] = deque()
    for t in range(0, 31):
        renderers = [{"consumer": "a", "rendered": 20 * t}, {"consumer": "b", "rendered": 0}]
        if t >= 25:  # joined late, first seen having rendered 7, then none more
            renderers.append({"consumer": "new", "rendered": 7})
        snap: dict[str, Any] = {"renderers": renderers}
        per_renderer(snap, history, float(t))
    # "new" was not in the sample 10 s back (t=20): its 7 were all rendered within the window
    assert {r["consumer"]: r["recent"] for r in snap["renderers"]} == {"a": 20.0, "b": 0.0, "new": 0.7}
    assert history[-1].at - history[0].at <= RENDERER_WINDOW_S + 1


def test_the_kept_throughput_is_the_rate_between_each_two_samples_at_the_later_one() -> None:
    samples = [
        Sample(100.0, {"tickets_rendered": 0, "orders_accepted": 0}),
        Sample(110.0, {"tickets_rendered": 500, "orders_accepted": 40}),
        Sample(120.0, {"tickets_rendered": 500, "orders_accepted": 40}),
        Sample(130.0, {"tickets_rendered": 20, "orders_accepted": 41}),  # a renderer restarted: not negative
    ]
    assert history(samples) == [
        {"at": 110.0, "tickets_rendered": 50.0, "orders_accepted": 4.0},
        {"at": 120.0, "tickets_rendered": 0.0, "orders_accepted": 0.0},
        {"at": 130.0, "tickets_rendered": 0.0, "orders_accepted": 0.1},
    ]
    assert history(samples[:1]) == history([]) == []
