"""Bounds on "download all" (an order's part joined into one PDF).

A join reads up to ``PART_SIZE`` PDFs (~6 MB for 250 fast-path tickets) and
writes one PDF (~0.5 MB when they share their template, else about their
sum), and PDFium joins one at a time per process. Unbounded, every
request reads its PDFs at once and then waits for PDFium holding them: 60
requests for one 250-ticket order grew an api by ~800 MB. So:

* identical requests share one join: a joined part is kept, bounded in bytes,
  under its order, part and the exact set of tickets in it, and a request for a
  part being joined waits for that join instead of starting its own;
* at most ``slots`` joins run (read their PDFs, join) and at most ``queue``
  more wait for a slot, holding nothing yet; past that, or past ``per_order``
  running or waiting joins of one order, a request is refused before it reads
  anything (:class:`JoinsBusy`, answered 503 with ``Retry-After``);
* single-ticket downloads never touch any of this.

:class:`JoinGate` and :class:`PartCache` are plain bookkeeping, no I/O;
:class:`Joins` runs the joins.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field


class JoinsBusy(Exception):
    """No join slot now (the message says why); try again after ``retry_after_s``."""

    def __init__(self, why: str, retry_after_s: int) -> None:
        super().__init__(why)
        self.retry_after_s = retry_after_s


@dataclass
class JoinGate:
    """Counts the joins running or waiting, in all and per order."""

    slots: int
    queue: int
    per_order: int
    entered: int = 0
    of_order: dict[str, int] = field(default_factory=dict)

    def enter(self, order_id: str) -> str | None:
        """Count one join of ``order_id`` in; ``None`` if it may be, else why not."""
        if self.of_order.get(order_id, 0) >= self.per_order:
            return "this order's downloads already take their share of join slots"
        if self.entered >= self.slots + self.queue:
            return "every join slot is taken"
        self.entered += 1
        self.of_order[order_id] = self.of_order.get(order_id, 0) + 1
        return None

    def leave(self, order_id: str) -> None:
        self.entered -= 1
        left = self.of_order[order_id] - 1
        if left:
            self.of_order[order_id] = left
        else:
            del self.of_order[order_id]


@dataclass
class PartCache:
    """Joined parts, least recently used out first, at most ``max_bytes`` in all
    (a part bigger than that is not kept)."""

    max_bytes: int
    size: int = 0
    parts: OrderedDict[str, bytes] = field(default_factory=OrderedDict)

    def get(self, key: str) -> bytes | None:
        body = self.parts.get(key)
        if body is not None:
            self.parts.move_to_end(key)
        return body

    def put(self, key: str, body: bytes) -> None:
        if len(body) > self.max_bytes:
            return
        if (old := self.parts.pop(key, None)) is not None:
            self.size -= len(old)
        self.parts[key] = body
        self.size += len(body)
        while self.size > self.max_bytes:
            _, dropped = self.parts.popitem(last=False)
            self.size -= len(dropped)


def part_key(order_id: str, part: int, ticket_ids: Collection[str]) -> str:
    """What a joined part is kept under: its order, its number and the very
    tickets joined (a ticket rendered since makes it another part)."""
    digest = hashlib.blake2b("\n".join(sorted(ticket_ids)).encode(), digest_size=16).hexdigest()
    return f"{order_id}/{part}/{digest}"


# Seconds a refused download is told to wait: about one join of a full part.
RETRY_AFTER_S = 2


def _retrieve(task: asyncio.Task[bytes]) -> None:
    if not task.cancelled():
        task.exception()


class Joins:
    """One process's joins; built once per process (AppState)."""

    def __init__(self, *, slots: int, queue: int, per_order: int, cache_bytes: int) -> None:
        self.gate = JoinGate(slots, queue, per_order)
        self.cache = PartCache(cache_bytes)
        self._running = asyncio.Semaphore(slots)
        self._inflight: dict[str, asyncio.Task[bytes]] = {}

    async def joined(self, order_id: str, key: str, join: Callable[[], Awaitable[bytes]]) -> bytes:
        """The part under ``key``: kept, being joined, or joined now by ``join``
        (which reads the PDFs). Raises :class:`JoinsBusy` before ``join`` is
        called when there is no room for it."""
        if (body := self.cache.get(key)) is not None:
            return body
        task = self._inflight.get(key)
        if task is None:
            if why := self.gate.enter(order_id):
                raise JoinsBusy(why, RETRY_AFTER_S)
            # A task of its own: a caller that goes away does not cancel the
            # join the others wait for.
            task = self._inflight[key] = asyncio.create_task(self._run(order_id, key, join))
            task.add_done_callback(_retrieve)  # its error is each waiter's; none left is no warning
        return await asyncio.shield(task)

    async def _run(self, order_id: str, key: str, join: Callable[[], Awaitable[bytes]]) -> bytes:
        try:
            async with self._running:
                body = await join()
            self.cache.put(key, body)
            return body
        finally:
            self.gate.leave(order_id)
            del self._inflight[key]
