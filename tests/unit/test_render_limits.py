"""A render that runs too long is cut off (and counts as a failed attempt)."""

from __future__ import annotations

import signal
import time

import pytest
from ticketry_renderer.handlers import RenderTimeout, time_limit


def test_time_limit_interrupts_a_busy_render() -> None:
    # When a CPU-bound "render" that never ends by itself runs under a 0.2 s limit
    armed = 0.0
    t0 = time.monotonic()
    with pytest.raises(RenderTimeout), time_limit(0.2):
        armed = signal.getitimer(signal.ITIMER_REAL)[0]
        while True:
            sum(range(1000))
    # Then it was cut off (or it would spin until the test's own timeout), not
    # before the limit, by an alarm set to the limit itself (not a whole second).
    # How long after the limit the cut lands is the machine's business.
    assert time.monotonic() - t0 >= 0.2
    assert 0 < armed <= 0.2


def test_time_limit_leaves_a_quick_render_alone() -> None:
    before = signal.getsignal(signal.SIGALRM)
    with time_limit(5):
        total = sum(range(1000))
    assert total == 499500
    # No alarm is left armed, and the previous SIGALRM handler is back
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before
