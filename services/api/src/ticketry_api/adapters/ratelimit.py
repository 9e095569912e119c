"""Per-user fixed-window rate limits in Redis (``streams.rate_limit`` keys).

A fixed window is coarse (a burst of twice the limit is possible across a window
edge) but needs one round trip and no scripts, and the window key expires by
itself. Limits are per minute and per user (the token's ``sub``), so one noisy
buyer or a stuck scanner cannot starve the others; they are far above what a
person does, and low only where a test sets them on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from ticketry import streams

from ticketry_api.core.problem import Problem

Scope = Literal["orders", "tickets", "checkins", "cancels", "reads", "events", "designs"]


class RateSettings(BaseSettings):
    """``TICKETRY_RATE_<SCOPE>_PER_MIN`` per user (0 = off): orders placed,
    tickets in them, check-ins, cancels, reads (the GETs of events, orders,
    tickets, check-in lists and revocations), events created and the designs
    (tiers) in them."""

    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    rate_orders_per_min: int = Field(
        default=6000, ge=0, json_schema_extra={"unit": "orders / window"},
        description="orders one buyer may place per window (0: off), else 429",
    )  # fmt: skip
    # With 10,000 tickets an order, the order limit alone would let one account
    # keep every renderer busy.
    rate_tickets_per_min: int = Field(
        default=20_000, ge=0, json_schema_extra={"unit": "tickets / window"},
        description="tickets in the orders one buyer places per window (0: off), else 429",
    )  # fmt: skip
    rate_checkins_per_min: int = Field(
        default=6000, ge=0, json_schema_extra={"unit": "check-ins / window"},
        description="check-ins one staff account may make per window (0: off), else 429",
    )  # fmt: skip
    rate_cancels_per_min: int = Field(
        default=600, ge=0, json_schema_extra={"unit": "cancels / window"},
        description="cancels one user may ask for per window (0: off), else 429",
    )  # fmt: skip
    rate_reads_per_min: int = Field(
        default=6000, ge=0, json_schema_extra={"unit": "requests / window"},
        description="GETs of events, orders, tickets, check-in lists and revocations per user and window (0: off)",
    )  # fmt: skip
    # Each tier of a new event is a design the renderers build at once (~0.4 s of
    # renderer CPU each), ahead of every buyer's tickets: designs are what cost,
    # so they are counted too (a request may carry up to 20 tiers). 60 designs a
    # minute is at most ~24 s of one renderer's CPU per organiser per minute.
    rate_events_per_min: int = Field(
        default=30,
        ge=0,
        json_schema_extra={"unit": "events / window"},
        description="Events (0 = off, else >= 1) one organiser may create per window, else 429",
    )
    rate_designs_per_min: int = Field(
        default=60, ge=0, json_schema_extra={"unit": "designs / window"},
        description="Tiers (designs; 0 = off) in the events one organiser creates per window, else 429",
    )  # fmt: skip
    rate_window_s: int = Field(
        default=60, ge=1, le=86_400,
        description="the window every TICKETRY_RATE_*_PER_MIN limit counts in (fixed windows; a minute by default)",
    )  # fmt: skip

    def limit(self, scope: Scope) -> int:
        """The limit of ``scope`` per window (0 = off)."""
        limit: int = getattr(self, f"rate_{scope}_per_min")
        return limit


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    count: int
    retry_after_s: int


def queue_hit(pipe: Pipeline, scope: Scope, user_id: str, window_s: int, amount: int = 1) -> None:
    """Queue the count of ``amount`` (one request, or its tickets) of ``user_id``
    in the current window of ``scope`` on a MULTI pipeline (three replies;
    :func:`verdict` reads them).

    The first hit of a window starts it: ``EXPIRE … NX`` sets the TTL only when
    the key has none (https://redis.io/docs/latest/commands/expire/, Redis ≥ 7),
    so the window cannot be extended by later hits; its TTL is the Retry-After.
    """
    key = streams.rate_limit(scope, user_id)
    pipe.incrby(key, amount)
    pipe.expire(key, window_s, nx=True)
    pipe.ttl(key)


def verdict(replies: Sequence[Any], limit: int) -> Verdict:
    count, _, ttl = replies
    return Verdict(int(count) <= limit, int(count), max(1, int(ttl)))


def refusal(v: Verdict, limit: int, window_s: int, what: str = "requests") -> Problem:
    return Problem(
        429,
        "too many requests",
        f"at most {limit} {what} per {window_s} s; retry later",
        {"Retry-After": str(v.retry_after_s)},
    )


async def enforce_many(redis: Redis, user_id: str, hits: Sequence[tuple[Scope, int, str]], rates: RateSettings) -> None:
    """Count each ``(scope, amount, what)`` of ``user_id`` in one MULTI; 429 with
    Retry-After when any is over its limit (the counts stay: a refused request
    spent its share of the window too)."""
    live = [(scope, amount, what) for scope, amount, what in hits if rates.limit(scope) > 0]
    if not live:
        return
    async with redis.pipeline(transaction=True) as pipe:
        for scope, amount, _ in live:
            queue_hit(pipe, scope, user_id, rates.rate_window_s, amount)
        replies = await pipe.execute()
    for i, (scope, _, what) in enumerate(live):
        if not (v := verdict(replies[3 * i : 3 * i + 3], rates.limit(scope))).allowed:
            raise refusal(v, rates.limit(scope), rates.rate_window_s, what)


async def hit(redis: Redis, scope: Scope, user_id: str, limit: int, window_s: int) -> Verdict:
    """Count one request of ``user_id`` in the current window of ``scope``."""
    async with redis.pipeline(transaction=True) as pipe:
        queue_hit(pipe, scope, user_id, window_s)
        return verdict(await pipe.execute(), limit)


async def enforce(redis: Redis, scope: Scope, user_id: str, limit: int, window_s: int) -> None:
    """Raise 429 with ``Retry-After`` when ``user_id`` is over ``limit`` in this window."""
    if limit <= 0:
        return
    if not (v := await hit(redis, scope, user_id, limit, window_s)).allowed:
        raise refusal(v, limit, window_s)
