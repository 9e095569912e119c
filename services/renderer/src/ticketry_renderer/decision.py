"""What becomes of a render request that did not succeed: a pure function of
plain data (no Redis, no clock, no random source of its own).

``decide(attempt, kind, reason, policy, jitter)`` answers, in the shape of
Dramatiq's ``compute_backoff``:

* :class:`DeadLetter` for an error retrying cannot cure (an entry that does
  not decode, ids we never issue), or once ``attempt`` (the delivery count,
  XPENDING's ``times_delivered``) reaches ``policy.max_attempts``; except that
  the PDF store being down is not the ticket's fault: a ``storage`` error is
  retried whatever the count while the request is younger (``age_s``, from
  its stream id) than ``policy.storage_patience_s``, so an outage of the store
  is waited out instead of failing every ticket rendered meanwhile;
* :class:`RetryAfter` otherwise: a full-jitter exponential delay,
  ``jitter · min(cap, base · 2^(attempt-1))`` with ``jitter`` drawn by the
  caller from U[0, 1) (AWS architecture blog, "Exponential Backoff And Jitter");
* :class:`RetryNow` when that delay comes out as zero (nothing to wait for).

The batch pipeline (``ticketry_renderer.handlers``, ``…outcomes``) does the
I/O each answer asks for: a retry stays pending, noted in :class:`Retries`, and
is claimed back by the same renderer when due (``ticketry_renderer.claims``); a
dead letter is parked with its reason and history, ``ticket.failed`` emitted
and the entry acked, all in one MULTI/EXEC.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ticketry.backoff import backoff_ceiling

# What went wrong, as far as retrying is concerned.
#   undecodable  the entry is not a render request this reader knows (permanent)
#   invalid_ids  ticket/order ids the api never issues (permanent)
#   render       the render raised or ran past its time limit (may pass)
#   storage      the PDF store did not take the PDF (may pass)
ErrorKind = Literal["undecodable", "invalid_ids", "render", "storage"]
PERMANENT: frozenset[ErrorKind] = frozenset({"undecodable", "invalid_ids"})


class _RetrySettings(Protocol):
    @property
    def render_max_attempts(self) -> int: ...
    @property
    def retry_base_s(self) -> float: ...
    @property
    def retry_cap_s(self) -> float: ...
    @property
    def storage_patience_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class RenderRetryPolicy:
    """How often and how patiently a request is retried."""

    max_attempts: int
    base_s: float
    cap_s: float
    storage_patience_s: float = 0.0

    @classmethod
    def of(cls, settings: _RetrySettings) -> RenderRetryPolicy:
        """The renderer's policy (``TICKETRY_RENDER_MAX_ATTEMPTS``, ``TICKETRY_RETRY_BASE_S``,
        ``…_CAP_S``, ``TICKETRY_STORAGE_PATIENCE_S``)."""
        return cls(
            settings.render_max_attempts, settings.retry_base_s, settings.retry_cap_s, settings.storage_patience_s
        )


@dataclass(frozen=True, slots=True)
class RetryNow:
    """Leave the entry pending; it is due at once."""


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """Leave the entry pending; retry it after ``delay_s``."""

    delay_s: float


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Park the entry in the dead-letter stream with ``reason``; ``exhausted``:
    it used its last attempt (else the error was permanent)."""

    reason: str
    exhausted: bool


Decision = RetryNow | RetryAfter | DeadLetter


def decide(
    attempt: int, kind: ErrorKind, reason: str, policy: RenderRetryPolicy, jitter: float, age_s: float = 0.0
) -> Decision:
    """What to do with a request whose delivery ``attempt`` (1 = the first)
    failed with ``kind``; ``reason`` is what the dead letter will say;
    ``jitter`` in [0, 1) picks the delay under the backoff ceiling; ``age_s``:
    how long ago the request was enqueued."""
    if kind in PERMANENT:
        return DeadLetter(reason, exhausted=False)
    store_down = kind == "storage" and age_s < policy.storage_patience_s
    if attempt >= policy.max_attempts and not store_down:
        return DeadLetter(reason, exhausted=True)
    delay = jitter * backoff_ceiling(attempt, policy.base_s, policy.cap_s)
    return RetryNow() if delay <= 0 else RetryAfter(delay)


def backoff_s(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full-jitter exponential backoff: U(0, min(cap, base·2^(n-1)))."""
    return rng.random() * backoff_ceiling(attempt, base, cap)


@dataclass
class Retries:
    """The failed entries this renderer holds pending for a retry: when each
    is due (monotonic seconds) and its attempt history (what its dead letter
    will list). Times are passed in."""

    due_at: dict[tuple[str, str], float] = field(default_factory=dict)  # (lane, entry id) → due
    history: dict[str, list[str]] = field(default_factory=dict)  # entry id → "attempt n: reason"

    def failed(self, entry_id: str, attempt: int, reason: str) -> list[str]:
        """Note a failed attempt; the entry's history so far."""
        history = self.history.setdefault(entry_id, [])
        history.append(f"attempt {attempt}: {reason}")
        return history

    def retry_at(self, lane: str, entry_id: str, at: float) -> None:
        self.due_at[(lane, entry_id)] = at

    def due(self, lane: str, now: float) -> list[str]:
        """The entries of ``lane`` whose retry is due at ``now``."""
        return [eid for (ln, eid), t in self.due_at.items() if ln == lane and t <= now]

    def waiting(self, lane: str, entry_id: str) -> bool:
        """Whether the entry waits for its retry (not for a drain to take it)."""
        return (lane, entry_id) in self.due_at

    def forget(self, lane: str, entry_id: str) -> None:
        """End an entry's bookkeeping: it was acked, or is gone."""
        self.due_at.pop((lane, entry_id), None)
        self.history.pop(entry_id, None)


def touch_due(untouched_ms: int, claim_idle_ms: int) -> bool:
    """Whether a batch's remaining entries need their idle time reset: once a
    third of ``claim_idle_ms`` has passed since the last touch, so a live but
    slow batch is never claimed by a peer (the idle threshold bounds one
    render, not a whole batch)."""
    return untouched_ms >= claim_idle_ms // 3


# A batch read by a lane that was idle is handled in parts from this size up,
# each part announced as soon as it is stored: a new order's first tickets
# are out after a small part, not after a whole batch.
FIRST_PART = 16


def parts(count: int, busy: bool) -> list[int]:
    """The sizes of the parts a batch of ``count`` entries is handled in:
    whole when its lane was ``busy`` (the read before it was full: a backlog,
    where the per-part cost is shared by the most tickets); else growing from
    :data:`FIRST_PART`, doubling (16, 32, 64, then what is left)."""
    if busy:
        return [count] if count else []
    out, size = [], FIRST_PART
    while count > 0:
        out.append(min(size, count))
        count -= out[-1]
        size *= 2
    return out
