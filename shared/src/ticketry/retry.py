"""How a long-running Redis loop rides out a failed step: one helper for the
projector, the webhook dispatcher and sender, and the notifier's hub and room
watches.

Each of them reads in a loop and must never die of a Redis restart or a bad
batch. What a failure costs depends on its kind (:func:`kind_of`):

- **unavailable** (connection refused or lost, a timeout, Redis loading its
  AOF): an outage. Logged once, when it starts (and once when it ends), and
  waited out with a backoff that doubles from ``first_s`` up to ``cap_s``, so
  a long outage neither floods the log nor hammers a Redis coming back up.
- **nogroup** (the stream or its consumer group went, e.g. a Redis restart
  without its AOF): no wait; the loop makes its group again.
- **redis** (any other error reply): logged with its traceback, then
  ``redis_error_s``.
- **other** (a bug, a batch that failed in the store): logged with its
  traceback, then ``error_s``; the loop decides what to read next.

The decisions are plain data (:func:`decide`); :class:`Retrying` does the
logging and the waiting (cut short when the loop is asked to stop).

The waits come from the one backoff formula, :func:`ticketry.backoff.backoff_ceiling`:
the loops here, the renderer's and the webhook sender's retries and the
scaler's restarts each put their own jitter (or none) under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Literal

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ticketry.backoff import backoff_ceiling

Kind = Literal["unavailable", "nogroup", "redis", "other"]

# Redis cannot be reached (BusyLoadingError, a restart reading its AOF, is a ConnectionError).
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError)


def kind_of(exc: BaseException) -> Kind:
    """What a loop's failure is (see the module)."""
    if isinstance(exc, UNAVAILABLE):
        return "unavailable"
    if isinstance(exc, ResponseError):
        return "nogroup" if "NOGROUP" in str(exc) else "redis"
    return "other"


@dataclass(frozen=True)
class RetryPolicy:
    """How long a loop waits after a failed step."""

    first_s: float = 0.5  # after the first failure of an outage
    cap_s: float = 2.0  # at most, however long the outage
    factor: float = 2.0
    redis_error_s: float = 0.5  # after an error reply (not NOGROUP)
    error_s: float = 1.0  # after any other failure

    def backoff(self, failures: int) -> float:
        """The wait after the ``failures``-th failure in a row of an outage (1: the first)."""
        return backoff_ceiling(failures, self.first_s, self.cap_s, self.factor)


@dataclass(frozen=True)
class Decision:
    """What to do about one failure."""

    wait_s: float
    log: bool  # log it (an outage: only its first failure)
    failures: int  # failures in a row of the current outage, this one counted (0: none)


def decide(policy: RetryPolicy, kind: Kind, failures: int) -> Decision:
    """The wait and the log line for a failure of ``kind``, ``failures`` being
    the outage's failures in a row so far. Only ``unavailable`` counts towards
    (and backs off in) an outage; the others leave its count as it is."""
    if kind == "unavailable":
        n = failures + 1
        return Decision(policy.backoff(n), log=n == 1, failures=n)
    if kind == "nogroup":
        return Decision(0.0, log=False, failures=failures)
    return Decision(policy.redis_error_s if kind == "redis" else policy.error_s, log=True, failures=failures)


class Retrying:
    """One loop's failures: ``await failed(exc)`` in its ``except``, ``ok()``
    after each step that went through."""

    def __init__(
        self, name: str, log: logging.Logger, stop: asyncio.Event | None = None, policy: RetryPolicy | None = None
    ) -> None:
        self.name, self.log, self.stop = name, log, stop
        self.policy = policy or RetryPolicy()
        self.failures = 0  # of the current outage

    def ok(self) -> None:
        """A step went through: an outage, if there was one, is over."""
        if self.failures:
            self.log.info(f"{self.name}: redis is back", extra={"failures": self.failures})
            self.failures = 0

    async def failed(self, exc: Exception) -> Kind:
        """Log ``exc`` as its kind asks and wait (not for ``nogroup``: the caller
        makes its group again). Its kind, for the caller's own follow-up."""
        kind = kind_of(exc)
        d = decide(self.policy, kind, self.failures)
        self.failures = d.failures
        if d.log:
            if kind == "unavailable":
                self.log.warning(f"{self.name}: redis unavailable, retrying", extra={"error": str(exc)[:200]})
            elif kind == "redis":
                self.log.error(f"{self.name}: redis error", exc_info=exc)
            else:
                self.log.error(f"{self.name}: failed, will retry", exc_info=exc)
        if d.wait_s > 0:
            await self._wait(d.wait_s)
        return kind

    async def _wait(self, seconds: float) -> None:
        if self.stop is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
