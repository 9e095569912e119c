"""What comes of one delivery attempt: done, retry later, or dead letter.

Pure, so it is tested with a table (``tests/unit/test_webhook_decide.py``); the
sender only carries the decision out. Every answer but a 2xx, and every
transport error (refused, reset, timeout), is retried with exponential backoff
and "equal jitter" (half the step fixed, half random: never two retries at
once, never one straight after the failure), until ``max_attempts``. A
:class:`Failure` marked ``permanent`` (the destination is refused) goes to the
dead letters at once: retrying cannot help, an operator can re-drive it later.
A delivery whose endpoint was deleted is done: there is nobody to tell.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from ticketry.backoff import backoff_ceiling


@dataclass(frozen=True)
class Retry:
    delay_s: float


@dataclass(frozen=True)
class DeadLetter:
    reason: str


@dataclass(frozen=True)
class Done:
    pass


Decision = Retry | DeadLetter | Done


@dataclass(frozen=True)
class Failure:
    """An attempt that got no HTTP answer, or was not made."""

    reason: str
    kind: Literal["retryable", "permanent", "gone"] = "retryable"


def describe(outcome: int | Failure) -> str:
    return f"HTTP {outcome}" if isinstance(outcome, int) else outcome.reason


def backoff(attempt: int, base_s: float, cap_s: float, jitter: float) -> float:
    """Delay after failed attempt ``attempt`` (1-based): half of
    ``min(cap, base·2^(attempt-1))`` plus ``jitter`` (in [0, 1)) of the other half."""
    step = backoff_ceiling(attempt, base_s, cap_s)
    return step / 2 + step / 2 * jitter


def decide(
    attempt: int,
    max_attempts: int,
    status_or_error: int | Failure,
    *,
    base_s: float = 10.0,
    cap_s: float = 3600.0,
    jitter: float | None = None,
) -> Decision:
    """The decision after attempt number ``attempt`` (1-based) ended in
    ``status_or_error`` (an HTTP status or a :class:`Failure`)."""
    if isinstance(status_or_error, int) and 200 <= status_or_error < 300:
        return Done()
    if isinstance(status_or_error, Failure):
        if status_or_error.kind == "gone":
            return Done()
        if status_or_error.kind == "permanent":
            return DeadLetter(f"refused: {status_or_error.reason}")
    if attempt >= max_attempts:
        return DeadLetter(f"gave up after {attempt} attempt(s); last: {describe(status_or_error)}")
    return Retry(backoff(attempt, base_s, cap_s, random.random() if jitter is None else jitter))  # noqa: S311
