"""The retry / dead-letter decision of one webhook attempt, as a table."""

from __future__ import annotations

import pytest
from ticketry_api.core.deliveries import DeadLetter, Decision, Done, Failure, Retry, backoff, decide

TIMEOUT = Failure("timed out after 10 s")
REFUSED = Failure("ConnectError: connection refused")
PRIVATE = Failure("10.0.0.7 is not public", "permanent")
GONE = Failure("endpoint deleted", "gone")


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "outcome", "jitter", "expected"),
    [
        # success on any attempt, even the last
        (1, 8, 200, 0.0, Done()),
        (8, 8, 204, 0.0, Done()),
        (3, 8, 299, 0.5, Done()),
        # failures before the last attempt: retry after base·2^(n-1), half fixed, half jittered
        (1, 8, 500, 0.0, Retry(5.0)),
        (1, 8, 500, 0.999, Retry(5.0 + 5.0 * 0.999)),
        (2, 8, 503, 0.0, Retry(10.0)),
        (3, 8, TIMEOUT, 0.5, Retry(20.0 + 10.0)),
        (4, 8, REFUSED, 0.0, Retry(40.0)),
        (1, 8, 301, 0.0, Retry(5.0)),  # redirects are not followed: not a success
        (1, 8, 400, 0.0, Retry(5.0)),  # a shop may fix its side; the last attempt decides
        (1, 8, 429, 0.0, Retry(5.0)),
        # the cap bounds the step
        (7, 50, 500, 0.0, Retry(300.0)),
        (20, 50, 500, 1.0, Retry(600.0)),
        # the last attempt failing is a dead letter naming the last outcome
        (8, 8, 500, 0.0, DeadLetter("gave up after 8 attempt(s); last: HTTP 500")),
        (3, 3, TIMEOUT, 0.0, DeadLetter("gave up after 3 attempt(s); last: timed out after 10 s")),
        (9, 8, 404, 0.0, DeadLetter("gave up after 9 attempt(s); last: HTTP 404")),
        (1, 1, 500, 0.0, DeadLetter("gave up after 1 attempt(s); last: HTTP 500")),
        # refused destinations die at once; a deleted endpoint is done
        (1, 8, PRIVATE, 0.0, DeadLetter("refused: 10.0.0.7 is not public")),
        (1, 8, GONE, 0.0, Done()),
        (8, 8, GONE, 0.0, Done()),
    ],
)
def test_decide(attempt: int, max_attempts: int, outcome: int | Failure, jitter: float, expected: Decision) -> None:
    got = decide(attempt, max_attempts, outcome, base_s=10.0, cap_s=600.0, jitter=jitter)
    if isinstance(expected, Retry):
        assert isinstance(got, Retry)
        assert got.delay_s == pytest.approx(expected.delay_s)
    else:
        assert got == expected


def test_backoff_grows_and_stays_within_its_step() -> None:
    lows = [backoff(n, 1.0, 1000.0, 0.0) for n in range(1, 8)]
    highs = [backoff(n, 1.0, 1000.0, 0.999999) for n in range(1, 8)]
    assert lows == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert all(lo < hi <= 2 * lo for lo, hi in zip(lows, highs, strict=True))


def test_jitter_defaults_to_random_within_bounds() -> None:
    delays = {decide(2, 5, 500, base_s=4.0, cap_s=100.0) for _ in range(50)}
    assert all(isinstance(d, Retry) and 4.0 <= d.delay_s < 8.0 for d in delays)
    assert len(delays) > 1
