"""A render that runs too long is cut off (and counts as a failed attempt)."""

from __future__ import annotations

import time

import pytest
from ticketry_renderer.handlers import RenderTimeout, time_limit


def test_time_limit_interrupts_a_busy_render() -> None:
    t0 = time.monotonic()
    with pytest.raises(RenderTimeout), time_limit(0.2):
        while True:  # a CPU-bound "render" that never ends
            sum(range(1000))
    assert time.monotonic() - t0 < 2


def test_time_limit_leaves_a_quick_render_alone() -> None:
    with time_limit(5):
        total = sum(range(1000))
    assert total == 499500
    time.sleep(0.05)  # no alarm left armed
