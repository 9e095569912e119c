"""One consumer of a stream's group, in a loop that never dies: the api's
projector and its webhook dispatcher both read ``ticketry:ticket-events`` so.

Each turn: (re)make the group when needed (at start, Redis may be down; after
``NOGROUP``, Redis lost it), run the caller's chores, claim entries a dead
consumer left (once its own pending ones are done), read, hand the entries to
``handle``, and move the cursor (:func:`ticketry.db.next_cursor`): its own
pending entries first, then new ones, and its pending ones again after a
failed batch. Failures are ridden out with :class:`ticketry.retry.Retrying`.
``handle`` acks what it handled; entries it failed stay pending and come again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from ticketry.db import claim_idle, ensure_group, entries_of, next_cursor
from ticketry.replies import Entry
from ticketry.retry import Retrying

READ_BLOCK_MS = 1000
# Entries pending this long under another consumer (one that was killed) are
# taken over; idle entries are looked for this often while there are none.
CLAIM_IDLE_MS = 10_000
CLAIM_INTERVAL_S = 2.0


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
        """Take over entries a dead consumer read but never acked (its name died
        with its process); handling is idempotent, so taking one from a live but
        slow consumer costs a repeat, never a wrong result."""
        claimed = await claim_idle(self.redis, self.stream, self.group, self.consumer, self.claim_idle_ms, self.batch)
        if claimed:
            self.log.info(f"{self.name}: claimed abandoned entries", extra={"count": len(claimed)})
            await self.handle(claimed)
        return len(claimed)
