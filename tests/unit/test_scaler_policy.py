"""The scaler's pure policy: replica counts from backlog, rate and stabilisation."""

from __future__ import annotations

import math

import pytest
from ticketry_scaler.policy import (
    LaneBacklog,
    PolicyConfig,
    Stabiliser,
    decide,
    desired_replicas,
    drain_estimate_s,
    lane_lag,
    per_renderer_rate,
    recommend,
)

CFG = PolicyConfig(
    minimum=1,
    maximum=4,
    target_drain_s=30.0,
    default_rate=5.0,
    up_window_s=0.0,
    down_window_s=60.0,
    cooldown_s=15.0,
)


@pytest.mark.parametrize(
    ("lane", "expected"),
    [
        (LaneBacklog("s", lag=7, pending=3, length=100), 7),
        # NULL lag: the observer's counted entries win over the XLEN arithmetic.
        (LaneBacklog("s", lag=None, pending=3, undelivered=12, length=100), 12),
        # NULL lag, nothing counted: XLEN minus the PEL (an over-estimate, on purpose).
        (LaneBacklog("s", lag=None, pending=3, length=100), 97),
        (LaneBacklog("s", lag=None, pending=5, length=2), 0),
        (LaneBacklog("s", lag=-1, pending=0), 0),
    ],
    ids=["lag", "null-lag-scanned", "null-lag-length", "null-lag-never-negative", "clamped"],
)
def test_lane_lag(lane: LaneBacklog, expected: int) -> None:
    assert lane_lag(lane) == expected


@pytest.mark.parametrize(
    ("rates", "expected"),
    [
        ((), (5.0, False)),
        ((0.0, 0.01), (5.0, False)),  # idle renderers say nothing about speed
        ((10.0, 0.0, 20.0), (15.0, True)),
        ((8.0,), (8.0, True)),
        ((math.nan, 4.0), (4.0, True)),
    ],
)
def test_per_renderer_rate(rates: tuple[float, ...], expected: tuple[float, bool]) -> None:
    assert per_renderer_rate(rates, 5.0) == expected


@pytest.mark.parametrize(
    ("lag", "pending", "rate", "target", "minimum", "maximum", "expected"),
    [
        (0, 0, 5.0, 30, 1, 8, 1),  # idle: the floor
        (0, 0, 5.0, 30, 0, 8, 0),  # scale to zero allowed when min is 0
        (1, 0, 5.0, 30, 0, 8, 1),  # any work wakes one renderer from zero
        (0, 1, 5.0, 30, 0, 8, 1),  # pending alone is work (reclaimed entries)
        (150, 0, 5.0, 30, 1, 8, 1),  # exactly one renderer's 30 s worth
        (151, 0, 5.0, 30, 1, 8, 2),
        (100, 50, 5.0, 30, 1, 8, 1),  # lag and pending are summed
        (100, 51, 5.0, 30, 1, 8, 2),
        (3000, 0, 5.0, 30, 1, 4, 4),  # capped at max
        (3000, 0, 50.0, 30, 1, 8, 2),  # fast renderers need fewer
        (3000, 0, 5.0, 10, 1, 100, 60),  # tighter target needs more
        (10, 0, 0.0, 30, 1, 8, 8),  # a zero rate cannot drain: max
        (0, 0, 5.0, 30, 3, 8, 3),
    ],
)
def test_desired_replicas(
    lag: int, pending: int, rate: float, target: float, minimum: int, maximum: int, expected: int
) -> None:
    got = desired_replicas(lag, pending, rate, target_drain_s=target, minimum=minimum, maximum=maximum)
    assert got == expected


@pytest.mark.parametrize(
    ("work", "replicas", "rate", "expected"),
    [(0, 0, 5.0, 0.0), (100, 2, 5.0, 10.0), (100, 0, 5.0, math.inf), (100, 2, 0.0, math.inf)],
)
def test_drain_estimate(work: int, replicas: int, rate: float, expected: float) -> None:
    assert drain_estimate_s(work, replicas, rate) == expected


def test_recommend_sums_lanes_and_explains() -> None:
    lanes = [
        LaneBacklog("vip", lag=10, pending=2),
        LaneBacklog("std", lag=None, pending=8, undelivered=2980, length=3000),
    ]
    rec = recommend(lanes, [0.0], current=1, cfg=CFG)
    assert (rec.lag, rec.pending, rec.replicas) == (2990, 10, 4)
    assert (rec.rate, rec.rate_measured) == (5.0, False)
    assert rec.drain_s == pytest.approx(3000 / 5.0)
    assert "backlog 3000" in rec.reason and "needs 20" in rec.reason
    assert "capped at max 4" in rec.reason


def test_recommend_uses_measured_rate() -> None:
    rec = recommend([LaneBacklog("std", lag=600, pending=0)], [10.0, 10.0], current=2, cfg=CFG)
    assert (rec.replicas, rec.rate_measured) == (2, True)
    assert "measured" in rec.reason


# Each step: (seconds since start, raw recommendation, current replicas, expected replicas).
Step = tuple[float, int, int, int]


@pytest.mark.parametrize(
    ("cfg", "steps"),
    [
        pytest.param(CFG, [(0, 4, 1, 4)], id="up-at-once"),
        pytest.param(CFG, [(0, 1, 1, 1), (1, 1, 1, 1)], id="steady"),
        pytest.param(
            CFG,
            # backlog gone at t=20: the 4 recommended at t=0..10 hold it until t>70.
            [(0, 4, 1, 4), (10, 4, 4, 4), (20, 1, 4, 4), (69, 1, 4, 4), (71, 1, 4, 1)],
            id="down-after-window",
        ),
        pytest.param(
            CFG,
            # the down-window takes the *highest* recent recommendation: 3, then (after
            # the cooldown of that change) 2.
            [(0, 4, 1, 4), (10, 3, 4, 4), (30, 2, 4, 4), (61, 1, 4, 3), (71, 1, 3, 3), (77, 1, 3, 2)],
            id="down-in-steps",
        ),
        pytest.param(
            PolicyConfig(1, 4, 30, 5, up_window_s=0, down_window_s=0, cooldown_s=15),
            # no window, but the cooldown after the change at t=0 holds the scale-down.
            [(0, 4, 1, 4), (5, 1, 4, 4), (14, 1, 4, 4), (16, 1, 4, 1)],
            id="cooldown",
        ),
        pytest.param(
            PolicyConfig(1, 8, 30, 5, up_window_s=10, down_window_s=0, cooldown_s=0),
            # a 10 s up-window takes the *lowest*: a one-tick spike does not scale up.
            [(0, 1, 1, 1), (1, 8, 1, 1), (5, 8, 1, 1), (11.5, 8, 1, 8)],
            id="up-window",
        ),
        pytest.param(
            CFG,
            # below min (e.g. someone scaled the Deployment by hand): back up at once.
            [(0, 1, 0, 1)],
            id="restore-floor",
        ),
        pytest.param(
            CFG,
            # above max (e.g. max lowered): down to the bounded recommendation.
            [(0, 4, 9, 4)],
            id="restore-ceiling",
        ),
    ],
)
def test_stabiliser(cfg: PolicyConfig, steps: list[Step]) -> None:
    stab = Stabiliser.from_config(cfg)
    for t, raw, current, expected in steps:
        # lag = raw x one renderer's 30 s at the default 5/s, so the raw recommendation is `raw`.
        rec = recommend([LaneBacklog("s", lag=raw * 150, pending=0)], [], current=current, cfg=cfg)
        decision = decide(stab, t, rec, current)
        assert decision.replicas == expected, (t, decision.reason)
        assert decision.changed == (expected != current)


def test_decision_reason_names_the_hold() -> None:
    stab = Stabiliser.from_config(CFG)
    up = recommend([LaneBacklog("s", lag=600, pending=0)], [], current=1, cfg=CFG)
    idle = recommend([LaneBacklog("s", lag=0, pending=0)], [], current=4, cfg=CFG)
    assert decide(stab, 0, up, 1).reason.startswith("scale-up")
    held = decide(stab, 30, idle, 4)
    assert not held.changed and "down-window" in held.reason
    down = decide(stab, 61, idle, 4)
    assert down.changed and down.reason.startswith("scale-down") and "backlog 0" in down.reason
