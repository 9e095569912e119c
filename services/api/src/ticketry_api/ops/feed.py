"""The console's live feed: ONE poll of Redis per api process, however many
consoles are open. The poll runs while somebody listens (started by the
first, ended after the last leaves); every listener gets the same encoded
snapshot, so a console costs its socket and a copy of bytes, not a poll."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from redis.asyncio import Redis
from ticketry import streams

from ticketry_api.core.ops import Sample, behind, drain_s, rates, recent_rates
from ticketry_api.ops.latency import FirstTicket
from ticketry_api.ops.sales import Sales
from ticketry_api.ops.status import console
from ticketry_api.store import Store

log = logging.getLogger(__name__)


def annotate(snap: dict[str, Any], prev: Sample | None, now: float, drain_target_s: float) -> Sample:
    """Rates from the counters and, per render group, its drain time and
    whether it is behind; returns this sample for the next call."""
    cur = Sample(now, snap["counters"])
    snap["rates"] = rates(prev, cur)
    capacity = sum(r["rate"] for r in snap["renderers"])
    snap["capacity"] = capacity
    for lane in streams.RENDER_LANES:
        g = snap["streams"][lane]["groups"].get(streams.RENDERERS_GROUP)
        if g is not None:
            backlog = (g["lag"] or 0) + g["pending"]
            seconds = drain_s(backlog, capacity)
            g["drain_s"] = None if seconds == float("inf") else round(seconds, 1)
            g["behind"] = behind(backlog, capacity, drain_target_s)
    return cur


RENDERER_WINDOW_S = 10.0  # each renderer's tickets/s is over this long


def per_renderer(snap: dict[str, Any], history: deque[Sample], now: float) -> None:
    """Each renderer's tickets/s over the last :data:`RENDERER_WINDOW_S`
    (``recent``), from its ``rendered`` count in this poll and the earlier
    ones ``history`` keeps (oldest first, trimmed here)."""
    cur = Sample(now, {r["consumer"]: r["rendered"] for r in snap["renderers"]})
    recent = recent_rates(history, cur, RENDERER_WINDOW_S)
    for r in snap["renderers"]:
        r["recent"] = recent.get(r["consumer"], 0.0)
    history.append(cur)
    while len(history) > 1 and now - history[1].at >= RENDERER_WINDOW_S:
        history.popleft()


async def snapshot(redis: Redis, store: Store, sales: Sales, first: FirstTicket) -> dict[str, Any]:
    """``status.console``, the first-ticket latency and the sales panel's rows
    (None when the store cannot be read: the rest of the console goes on)."""
    snap = await console(redis)
    snap["first_ticket"] = await first.summary(redis)
    try:
        snap["sales"] = await sales.rows(redis, store, [r["event_id"] for r in snap["rooms"]])
    except Exception:
        log.exception("ops feed: sales could not be read")
        snap["sales"] = None
    return snap


class Feed:
    def __init__(self, redis: Redis, store: Store, interval_s: float, drain_target_s: float) -> None:
        self.redis, self.store, self.interval_s, self.drain_target_s = redis, store, interval_s, drain_target_s
        self.sales, self.first_ticket = Sales(), FirstTicket()
        self.listeners = 0
        self.polls = 0  # how many snapshots were built (one per interval, whatever the listeners)
        self._latest = b""
        self._version = 0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def frames(self) -> AsyncGenerator[bytes]:
        """Each new snapshot (JSON), the latest first if there is one."""
        self.listeners += 1
        if self._task is None or self._task.done():
            # A fresh context: not the first listener's request budget (ticketry.db.request_budget).
            self._task = asyncio.get_running_loop().create_task(self._poll(), context=contextvars.Context())
        seen = 0
        try:
            while True:
                async with self._changed:
                    while self._version == seen:
                        await self._changed.wait()
                    seen, data = self._version, self._latest
                yield data
        finally:
            self.listeners -= 1

    async def _poll(self) -> None:
        prev: Sample | None = None
        rendered: deque[Sample] = deque()  # each renderer's count, per poll of the last RENDERER_WINDOW_S
        while self.listeners > 0:
            try:
                snap = await snapshot(self.redis, self.store, self.sales, self.first_ticket)
                now = time.monotonic()
                prev = annotate(snap, prev, now, self.drain_target_s)
                per_renderer(snap, rendered, now)
                data = orjson.dumps(snap)
            except Exception:
                log.exception("ops feed: poll failed; will retry")
                data = orjson.dumps({"error": "the stack's state could not be read; retrying"})
            self.polls += 1
            async with self._changed:
                self._latest, self._version = data, self._version + 1
                self._changed.notify_all()
            await asyncio.sleep(self.interval_s)
