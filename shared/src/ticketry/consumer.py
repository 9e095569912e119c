"""One consumer of a stream's group, in a loop that never dies: the api's
projector and its webhook dispatcher both read ``ticketry:ticket-events`` so.

Each turn: (re)make the group when needed (at start, Redis may be down; after
``NOGROUP``, Redis lost it), run the caller's chores, claim entries a dead
consumer left (once its own pending ones are done), read, hand the entries to
``handle``, and move the cursor (:func:`ticketry.db.next_cursor`): its own
pending entries first, then new ones, and its pending ones again after a
failed batch. Failures are ridden out with :class:`ticketry.retry.Retrying`.
``handle`` acks what it handled; entries it failed stay pending and come again.

:class:`Claimer` is the claim side of any consumer of a group: this loop's and
the renderer's (which also retries its own failures, keeps a slow batch's
entries from being claimed, and finishes its own pending entries at a drain).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from ticketry.db import ensure_group, entries_of, next_cursor
from ticketry.replies import Entry, as_text
from ticketry.retry import Retrying

READ_BLOCK_MS = 1000
# Entries pending this long under another consumer (one that was killed) are
# taken over; idle entries are looked for this often while there are none.
CLAIM_IDLE_MS = 10_000
CLAIM_INTERVAL_S = 2.0


@dataclass(frozen=True, slots=True)
class Claimer:
    """What one consumer (``consumer`` in ``group`` on ``stream``) takes from
    the group's pending entries list, and how it keeps what it holds.

    An entry idle ``idle_ms`` or more under another consumer is taken to be a
    dead one's (its name died with its process); handling is idempotent, so
    taking one from a live but slow consumer costs a repeat, never a wrong
    result. ``count``: entries per claim."""

    redis: Redis
    stream: str
    group: str
    consumer: str
    idle_ms: int
    count: int

    async def abandoned(self) -> list[Entry]:
        """Take over entries pending ``idle_ms`` or more: one XAUTOCLAIM from
        the start of the pending list. Entries deleted (trimmed) while pending
        come back as ids only (Redis 7+): they are acked, there is nothing left
        to do with them. Returns the live entries."""
        resp: Any = await self.redis.xautoclaim(
            self.stream, self.group, self.consumer, self.idle_ms, "0-0", count=self.count
        )
        deleted = resp[2] if len(resp) > 2 else []
        if deleted:
            await self.redis.xack(self.stream, self.group, *deleted)
        return [(e, f) for e, f in resp[1] if f]

    async def take(self, ids: Sequence[str]) -> list[Entry]:
        """Claim these entries to ourselves now (XCLAIM, min-idle 0), which
        counts one more delivery: a retry that is due. An entry acked or
        trimmed meanwhile is not among those returned."""
        claimed: Any = await self.redis.xclaim(self.stream, self.group, self.consumer, 0, list(ids))
        return [(e, f) for e, f in entries_of(claimed) if f]

    async def touch(self, ids: Sequence[Any], untouched_ms: int) -> None:
        """Reset the idle time of entries we hold, so no peer claims them while
        we still work on them. ``XCLAIM … JUSTID`` to ourselves does it without
        counting a delivery (https://redis.io/docs/latest/commands/xclaim/);
        its min-idle-time is ``untouched_ms`` (since our last touch, less a
        margin), so an entry a peer claimed meanwhile (idle reset by that
        claim) is left with the peer instead of being taken back."""
        await self.redis.xclaim(
            self.stream, self.group, self.consumer, max(untouched_ms - 50, 0), list(ids), justid=True
        )

    async def deliveries(self, ids: Sequence[str]) -> dict[str, int]:
        """Times each entry was delivered (XPENDING's counter)."""
        rows = await self.redis.xpending_range(
            self.stream, self.group, min=min(ids), max=max(ids), count=len(ids) + 100
        )
        wanted = set(ids)
        return {mid: int(r["times_delivered"]) for r in rows if (mid := as_text(r["message_id"])) in wanted}

    async def own_pending(self) -> list[Entry]:
        """Entries pending under our name, oldest first (``count`` at most)."""
        mine: Any = await self.redis.xreadgroup(self.group, self.consumer, {self.stream: "0"}, count=self.count)
        return [(e, f) for e, f in entries_of(mine) if f]

    async def leave_if_idle(self) -> None:
        """Remove our consumer from the group once nothing is pending under it.

        Never with pending entries: XGROUP DELCONSUMER drops them from the
        pending list, which would make them unclaimable (lost)."""
        rows = await self.redis.xpending_range(
            self.stream, self.group, min="-", max="+", count=1, consumername=self.consumer
        )
        if not rows:
            await self.redis.xgroup_delconsumer(self.stream, self.group, self.consumer)


@dataclass
class GroupConsumer:
    redis: Redis
    stream: str
    group: str
    consumer: str
    handle: Callable[[list[Entry]], Awaitable[None]]
    name: str  # in log lines
    log: logging.Logger
    batch: int
    claim_idle_ms: int
    claim_interval_s: float
    start: str = "0"  # where a group made here starts (ensure_group)
    chores: Callable[[], Awaitable[None]] | None = None  # before each read (must not raise)
    claimer: Claimer = field(init=False)

    def __post_init__(self) -> None:
        self.claimer = Claimer(self.redis, self.stream, self.group, self.consumer, self.claim_idle_ms, self.batch)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop``."""
        cursor, regroup, next_claim = "0", True, time.monotonic()
        retry = Retrying(self.name, self.log, stop)
        while not stop.is_set():
            try:
                if regroup:
                    await ensure_group(self.redis, self.stream, self.group, start=self.start)
                    regroup = False
                if self.chores is not None:
                    await self.chores()
                if cursor == ">" and time.monotonic() >= next_claim:
                    claimed = await self._claim()
                    next_claim = time.monotonic() + (0 if claimed else self.claim_interval_s)
                resp: Any = await self.redis.xreadgroup(
                    self.group, self.consumer, {self.stream: cursor}, count=self.batch, block=READ_BLOCK_MS
                )
                entries = entries_of(resp)
                if entries:
                    await self.handle(entries)
                cursor = next_cursor(cursor, entries)
                retry.ok()
            except Exception as exc:
                kind = await retry.failed(exc)
                regroup = kind == "nogroup"
                if kind == "other":
                    cursor = "0"  # the batch failed: our pending entries again

    async def _claim(self) -> int:
        """Take over and handle entries a dead consumer read but never acked."""
        claimed = await self.claimer.abandoned()
        if claimed:
            self.log.info(f"{self.name}: claimed abandoned entries", extra={"count": len(claimed)})
            await self.handle(claimed)
        return len(claimed)
