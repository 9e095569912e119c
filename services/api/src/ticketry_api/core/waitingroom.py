"""The waiting room's rules, without I/O: places, positions, the admission
rate and order permissions.

**Places.** Each buyer holds one place in an event's line, a score in a sorted
set (``streams.room_line``): a buyer who arrives before ``on_sale_at`` draws a
uniformly random score in [0, 1), so the early arrivals' order is a fair
lottery however early each came; a later arrival gets ``1 + n`` for the
*n*-th later arrival, behind every early one and in arrival order. Which of the
two a buyer is, is decided by Redis's clock in the same script that inserts the
place (one clock for every api process), and early places are final at
``on_sale_at``, when no more can be drawn.

**Positions** only move forward: admission takes the line in score order, so
``admitted`` (how many of the line have been admitted) only grows, a place's
rank never changes once drawn, and the position is ``rank - admitted + 1``.
Before ``on_sale_at`` an early place has no position yet (``None``): a new
early arrival may still draw ahead of it.

**Admission rate** (:func:`admission_rate`): what the api sustains, measured
and adjusted each tick, additive increase and multiplicative decrease around
the measured capacity (``middleware.shedding.CapacityMeter``): the api refused orders
(503) → admit less than went through; buyers hold many permissions they have
not used yet → admit only as fast as they use them (self-clocked); else probe
up, a step per tick, to a little over the measured capacity (so a faster api is
noticed). :func:`to_admit` turns a rate into whole buyers per tick, never more
than wait, and never more than the tickets left could serve.

**Permissions** (:func:`sign_permission` / :func:`verify_permission`): an
HMAC-SHA256 over the event, the buyer, the place and the expiry, with a key of
its own derived from ``TICKETRY_JWT_SECRET``: another buyer's permission never
verifies for the caller, and a permission expires after
``TICKETRY_ROOM_PERMISSION_TTL_S``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
from dataclasses import dataclass

EARLY_LIMIT = 1.0  # early scores are in [0, 1); later ones are 1 + n
_PERMISSION_KEY_LABEL = b"ticketry queue permission v1"
_PERMISSION_PREFIX = "QP1"


def early_score() -> float:
    """A fair draw for an early arrival: uniform in [0, 1) with 52 random bits
    (a double's mantissa holds them exactly)."""
    return secrets.randbits(52) / 2.0**52


def late_score(arrival: int) -> float:
    """The score of the ``arrival``-th (1, 2, …) buyer after ``on_sale_at``."""
    return EARLY_LIMIT + arrival


def is_early(score: float) -> bool:
    return score < EARLY_LIMIT


def position(rank: int, admitted: int, *, drawn: bool) -> int | None:
    """A place's position in line (1 = next), 0 once admitted, None while its
    early draw is not final (before ``on_sale_at``). ``rank`` is 0-based."""
    if not drawn:
        return None
    return max(rank - admitted + 1, 0)


def eta_s(pos: int | None, rate: float, *, until_on_sale_s: float = 0.0) -> float | None:
    """Estimated seconds until a place at ``pos`` is admitted at ``rate``
    buyers/s (plus the time left until the sale starts)."""
    if pos is None:
        return round(max(until_on_sale_s, 0.0), 1) if until_on_sale_s > 0 else None
    if pos == 0:
        return 0.0
    return round(max(until_on_sale_s, 0.0) + pos / max(rate, 1e-6), 1)


FULL_RETRY_MIN_S = 1
FULL_RETRY_MAX_S = 300
FULL_RETRY_UNKNOWN_S = 60  # no rate yet (before the sale, or its first tick)


def full_retry_after_s(max_queue: int, rate: float) -> int:
    """``Retry-After`` for a join refused because ``max_queue`` places wait: the
    seconds in which a tenth of them is admitted at the room's ``rate`` (so a
    retry has a fair chance of a free place, and a whole crowd of refused
    buyers does not come back in the same second), 1 to 300 s; 60 without a rate."""
    if rate <= 0:
        return FULL_RETRY_UNKNOWN_S
    return min(max(math.ceil(max(max_queue // 10, 1) / rate), FULL_RETRY_MIN_S), FULL_RETRY_MAX_S)


@dataclass(frozen=True)
class RateLimits:
    """Bounds of the admission rate (buyers per second)."""

    min_rate: float = 1.0  # never stall the line
    max_rate: float = 5000.0
    step: float = 10.0  # additive increase per tick
    backoff: float = 0.7  # multiplicative decrease when the api sheds
    probe: float = 1.2  # how far over the measured capacity to probe
    window_s: float = 5.0  # unused permissions allowed: this many seconds' worth
    window_min: int = 20  # … and at least this many


@dataclass(frozen=True)
class Signals:
    """What one tick observed (all summed over the api processes)."""

    capacity_per_s: float  # orders/s the api processes sustain (measured)
    used_per_s: float  # this room's permissions used (orders accepted) per second
    shed_per_s: float  # orders answered 503 (over the in-flight bound) per second
    outstanding: int  # permissions issued, neither used nor expired


def admission_rate(prev: float, s: Signals, lim: RateLimits = RateLimits()) -> float:
    """The buyers per second to admit next, from the last rate and what the
    api and the buyers did with it."""
    if s.shed_per_s > 0:
        rate = min(prev, max(s.used_per_s, lim.min_rate)) * lim.backoff
    elif s.outstanding > max(lim.window_min, prev * lim.window_s):
        rate = min(prev, max(s.used_per_s, lim.min_rate))
    else:
        rate = min(prev + lim.step, max(s.capacity_per_s * lim.probe, lim.min_rate))
    return min(max(rate, lim.min_rate), lim.max_rate)


def to_admit(
    rate: float, dt: float, carry: float, *, waiting: int, tickets_left: int, outstanding: int
) -> tuple[int, float]:
    """How many to admit now after ``dt`` seconds at ``rate`` (the fraction
    left over carries to the next tick): never more than wait, and never more
    buyers than tickets are left beyond the permissions still out (each order
    takes at least one ticket)."""
    due = rate * max(dt, 0.0) + carry
    n = min(math.floor(due), waiting, max(tickets_left - outstanding, 0))
    n = max(n, 0)
    left = due - n if n == math.floor(due) else 0.0  # capped: do not bank what could not be used
    return n, min(left, 1.0)


def permission_key(secret: str) -> bytes:
    """The permissions' HMAC key, derived from the services' shared secret (a
    key of its own: a permission is never a token, nor a token a permission)."""
    return hmac.new(secret.encode(), _PERMISSION_KEY_LABEL, hashlib.sha256).digest()


def _mac(key: bytes, event_id: str, buyer: str, queue_id: str, expires_ms: int) -> str:
    msg = "\x1f".join((_PERMISSION_PREFIX, event_id, buyer, queue_id, str(expires_ms))).encode()
    return base64.urlsafe_b64encode(hmac.new(key, msg, hashlib.sha256).digest()).rstrip(b"=").decode()


def sign_permission(key: bytes, event_id: str, buyer: str, queue_id: str, expires_ms: int) -> str:
    """``QP1.<queue id>.<expires ms>.<mac>``: lets ``buyer`` order for ``event_id``."""
    return f"{_PERMISSION_PREFIX}.{queue_id}.{expires_ms}.{_mac(key, event_id, buyer, queue_id, expires_ms)}"


@dataclass(frozen=True)
class Permission:
    queue_id: str
    expires_ms: int


class BadPermission(ValueError):
    """Missing, malformed, another buyer's or event's, or expired."""


def verify_permission(key: bytes, token: str | None, event_id: str, buyer: str, now_ms: int) -> Permission:
    """The permission ``token`` grants ``buyer`` for ``event_id``; :class:`BadPermission` otherwise."""
    if not token or len(token) > 200:
        raise BadPermission("a Queue-Permission is required for this event")
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != _PERMISSION_PREFIX or not parts[2].isdigit():
        raise BadPermission("not a queue permission")
    queue_id, expires_ms, mac = parts[1], int(parts[2]), parts[3]
    if not hmac.compare_digest(mac, _mac(key, event_id, buyer, queue_id, expires_ms)):
        raise BadPermission("this permission is not yours, or not for this event")
    if expires_ms <= now_ms:
        raise BadPermission("this permission has expired")
    return Permission(queue_id, expires_ms)
