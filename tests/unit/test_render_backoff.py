"""The renderer's retry delay (ticketry_renderer.decision.backoff_s): full
jitter under an exponential ceiling with a cap. Plain data, no server."""

from __future__ import annotations

import random

import pytest
from ticketry_renderer.decision import backoff_s


@pytest.mark.parametrize(
    ("attempt", "ceiling"), [(0, 0.1), (1, 0.1), (2, 0.2), (3, 0.4), (5, 1.6), (6, 2.0), (60, 2.0)]
)
def test_a_delay_is_within_its_attempts_ceiling(attempt: int, ceiling: float) -> None:
    rng = random.Random(attempt)
    delays = [backoff_s(attempt, 0.1, 2.0, rng) for _ in range(2000)]
    assert all(0 <= d <= ceiling for d in delays)
    # full jitter: spread over the whole range, not bunched at the ceiling
    assert min(delays) < ceiling * 0.05 and max(delays) > ceiling * 0.95


def test_the_same_seed_gives_the_same_delays() -> None:
    a, b = random.Random(7), random.Random(7)
    assert [backoff_s(n, 0.5, 30.0, a) for n in range(10)] == [backoff_s(n, 0.5, 30.0, b) for n in range(10)]


def test_a_zero_cap_means_no_wait() -> None:
    assert backoff_s(4, 0.5, 0.0, random.Random(1)) == 0.0
