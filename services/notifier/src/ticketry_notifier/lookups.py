"""Handshake reads, coalesced: one Redis round trip for every socket waiting.

A socket's handshake needs its order's progress hash (owner, counters,
``completed`` / ``cancelled``) and the stream position the snapshot covers.
When 1,000 buyers open their sockets at once, 1,000 round trips, each on a
connection of its own, is what exhausted the pool before; here the sockets
that arrive while one round trip is in flight share the next one: a single
MULTI/EXEC of one HGETALL per order and one XREVRANGE, on one connection.
The transaction also makes each snapshot and its position one atomic read.
(The api's writer batches its inserts the same way.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import Counter
from redis.asyncio import Redis
from redis.exceptions import RedisError
from ticketry import streams
from ticketry.db import request_budget
from ticketry.replies import as_text

log = logging.getLogger(__name__)

Progress = dict[str, str]

READS = Counter("ticketry_websocket_handshake_reads_total", "Coalesced handshake reads (Redis round trips)")
HANDSHAKES = Counter("ticketry_websocket_handshakes_total", "Handshake reads asked for (sockets)")


class Unavailable(Exception):
    """Redis did not answer the handshake read (down, or no connection free in time)."""


class ProgressReads:
    """``await read(order_id)`` → ``(progress hash, stream id it covers)``."""

    def __init__(self, redis: Redis, max_batch: int = 1000) -> None:
        self._redis = redis
        self._max_batch = max_batch
        self._waiting: dict[str, list[asyncio.Future[tuple[Progress, str]]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def read(self, order_id: str) -> tuple[Progress, str]:
        HANDSHAKES.inc()
        fut: asyncio.Future[tuple[Progress, str]] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(order_id, []).append(fut)
        if self._task is None:
            self._task = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        batch: dict[str, list[asyncio.Future[tuple[Progress, str]]]] = {}
        try:
            while self._waiting:
                batch = dict(list(self._waiting.items())[: self._max_batch])
                for order_id in batch:
                    del self._waiting[order_id]
                try:
                    with request_budget():  # a handshake waits ~0.5 s for Redis, then 1013
                        results = await self._read(list(batch))
                except (RedisError, OSError) as exc:
                    log.warning("handshake read failed", extra={"orders": len(batch), "error": str(exc)[:200]})
                    _fail(batch, Unavailable(str(exc)[:200]))
                    continue
                for order_id, futs in batch.items():
                    for fut in futs:
                        if not fut.done():
                            fut.set_result(results[order_id])
        finally:
            self._task = None
            # Cancelled (shutdown): nobody may wait forever.
            _fail(batch, Unavailable("notifier stopping"))
            _fail(self._waiting, Unavailable("notifier stopping"))
            self._waiting = {}

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _read(self, order_ids: list[str]) -> dict[str, tuple[Progress, str]]:
        READS.inc()
        async with self._redis.pipeline(transaction=True) as pipe:
            for order_id in order_ids:
                pipe.hgetall(streams.order_progress(order_id))
            pipe.xrevrange(streams.TICKET_EVENTS, count=1)
            replies: list[Any] = await pipe.execute()
        last = replies[-1]
        upto = as_text(last[0][0]) if last else "0-0"
        return {
            order_id: ({as_text(k): as_text(v) for k, v in reply.items()}, upto)
            for order_id, reply in zip(order_ids, replies, strict=False)
        }


def _fail(waiting: dict[str, list[asyncio.Future[tuple[Progress, str]]]], exc: Exception) -> None:
    for futs in waiting.values():
        for fut in futs:
            if not fut.done():
                fut.set_exception(exc)
