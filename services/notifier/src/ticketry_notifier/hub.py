"""One XREAD loop per notifier process, fanned out to the sockets of each order.

The hub reads ``ticketry:ticket-events`` without a consumer group, so every
notifier instance sees every event. Subscribers register *before* they read
their snapshot; anything the hub delivers that the snapshot already covers is
dropped by stream id, so there is neither a gap nor a duplicate.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError, TimeoutError
from ticketry import streams
from ticketry.db import as_text
from ticketry.events import DecodeError, TicketEvent, decode_ticket_event

log = logging.getLogger(__name__)


def stream_id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Subscription:
    def __init__(self, order_id: str, maxsize: int) -> None:
        self.order_id = order_id
        self.queue: asyncio.Queue[TicketEvent | None] = asyncio.Queue(maxsize)
        self.overflowed = False

    def offer(self, ev: TicketEvent) -> None:
        try:
            self.queue.put_nowait(ev)
        except asyncio.QueueFull:
            self.overflowed = True
            self.queue.get_nowait()
            self.queue.put_nowait(None)  # tell the socket to close; client resumes


class Hub:
    def __init__(self, redis: Redis, queue_size: int) -> None:
        self.redis = redis
        self.queue_size = queue_size
        self.subs: dict[str, set[Subscription]] = defaultdict(set)
        self.last_id = "$"

    def subscribe(self, order_id: str) -> Subscription:
        sub = Subscription(order_id, self.queue_size)
        self.subs[order_id].add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        group = self.subs.get(sub.order_id)
        if group is not None:
            group.discard(sub)
            if not group:
                del self.subs[sub.order_id]

    async def run(self, stop: asyncio.Event) -> None:
        # Start at the stream's current end; sockets get history from their snapshot/resume.
        while not stop.is_set():
            try:
                if self.last_id == "$":
                    info = await self.redis.xinfo_stream(streams.TICKET_EVENTS)
                    last = info.get("last-generated-id", b"0-0")
                    self.last_id = as_text(last)
                resp: Any = await self.redis.xread({streams.TICKET_EVENTS: self.last_id}, count=1000, block=1000)
            except (ConnectionError, TimeoutError) as exc:
                log.warning("hub: redis unavailable", extra={"error": str(exc)})
                await asyncio.sleep(0.5)
                continue
            except Exception as exc:
                if "no such key" in str(exc).lower():
                    await asyncio.sleep(0.5)
                    continue
                log.exception("hub: read failed")
                await asyncio.sleep(0.5)
                continue
            for _, entries in resp or []:
                for raw_id, fields in entries:
                    eid = as_text(raw_id)
                    self.last_id = eid
                    order = fields.get(b"order_id", b"").decode()
                    if order not in self.subs:
                        continue
                    try:
                        ev = decode_ticket_event(eid, fields)
                    except DecodeError:
                        continue
                    for sub in list(self.subs.get(order, ())):
                        sub.offer(ev)
