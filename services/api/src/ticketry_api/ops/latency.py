"""First-ticket latency for the console: p50 and p99 of how long orders
waited for their first ticket over the last 15 minutes, from the entries the
emit script adds to ``streams.FIRST_TICKET`` (one per order).

Read incrementally: each poll reads only the entries after the last one it
saw (at most ``READ_MAX``; a backlog is caught up over several polls) and
drops those older than the window, so a poll costs what arrived since the
one before, not the window's worth."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import entries_of
from ticketry.replies import as_text

from ticketry_api.core.ops import WINDOW_S, percentile

READ_MAX = 5000


class FirstTicket:
    def __init__(self) -> None:
        self._seen: deque[tuple[int, float]] = deque()  # (ms of the entry, its latency ms)
        self._last: str | None = None
        self._summary: dict[str, Any] = {"p50_ms": None, "p99_ms": None, "orders": 0}

    async def summary(self, redis: Redis) -> dict[str, Any]:
        """``{p50_ms, p99_ms, orders}`` over the window (None: no order in it)."""
        since = int(time.time() * 1000) - WINDOW_S * 1000
        start = "(" + self._last if self._last is not None else f"{since}-0"
        found = entries_of(await redis.xrange(streams.FIRST_TICKET, min=start, count=READ_MAX))
        changed = bool(found)
        for entry_id, fields in found:
            f = {as_text(k): as_text(v) for k, v in fields.items()}
            try:
                self._seen.append((streams.stream_key(entry_id)[0], float(f[streams.FIRST_TICKET_MS])))
            except (KeyError, ValueError):
                continue
        if found:
            self._last = as_text(found[-1][0])
        while self._seen and self._seen[0][0] < since:
            self._seen.popleft()
            changed = True
        if changed:
            values = [v for _, v in self._seen]
            self._summary = {
                "p50_ms": percentile(values, 0.5),
                "p99_ms": percentile(values, 0.99),
                "orders": len(values),
            }
        return dict(self._summary)
