"""The heartbeat's rate is capacity (tickets per busy second), not tickets per wall-clock second."""

from __future__ import annotations

import pytest
from ticketry_renderer.rate import ALPHA, MIN_BUSY_S, RateMeter, utilisation

# Each row: cumulative (rendered, busy seconds) seen at successive heartbeats, one
# second apart, and the rate the meter must report after the last one.
CASES = [
    ("never busy: not measured yet", [(0, 0.0), (0, 0.0)], 0.0),
    ("first measurement taken as is", [(650, 1.0)], 650.0),
    # A burst of 0.5 s busy in a 1 s interval is 650/s of capacity; the wall-clock
    # rate would have said 325/s.
    ("busy half the interval: capacity, not half", [(325, 0.5)], 650.0),
    # Idle heartbeats change nothing: the wall-clock EWMA decayed towards 0 here.
    ("idle afterwards keeps the rate", [(650, 1.0), (650, 1.0), (650, 1.0), (650, 1.0)], 650.0),
    ("EWMA of busy heartbeats", [(100, 1.0), (700, 2.0)], (1 - ALPHA) * 100 + ALPHA * 600),
    # Too little busy time to measure: keep accumulating until there is enough.
    ("a tiny batch waits for more busy time", [(10, 0.04)], 0.0),
    ("tiny batches add up", [(10, 0.03), (20, 0.06)], 20 / 0.06),
    ("busy without a render measures zero capacity", [(0, 1.0)], 0.0),
    ("busy without a render lowers the rate", [(600, 1.0), (600, 2.0)], (1 - ALPHA) * 600),
]


@pytest.mark.parametrize(("beats", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rate_meter(beats: list[tuple[int, float]], expected: float) -> None:
    meter = RateMeter()
    for rendered, busy in beats:
        meter = meter.update(rendered, busy)
    assert meter.rate == pytest.approx(expected)


def test_meter_measures_from_its_last_measurement() -> None:
    meter = RateMeter().update(650, 1.0)
    assert (meter.rendered, meter.busy_s) == (650, 1.0)
    below = meter.update(651, 1.0 + MIN_BUSY_S / 2)
    assert below is meter, "unchanged until enough busy time has passed"


@pytest.mark.parametrize(
    ("busy", "wall", "expected"),
    [(0.0, 1.0, 0.0), (0.25, 1.0, 0.25), (1.2, 1.0, 1.0), (0.5, 0.0, 0.0), (-0.1, 1.0, 0.0)],
)
def test_utilisation(busy: float, wall: float, expected: float) -> None:
    assert utilisation(busy, wall) == pytest.approx(expected)
