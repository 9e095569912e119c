"""One XREAD loop per notifier process, fanned out to the sockets of each order.

The hub reads ``ticketry:ticket-events`` without a consumer group, so every
notifier instance sees every event. Each event of an order somebody watches is
decoded and serialised once (:func:`~ticketry_notifier.core.message_for`) and
offered to that order's sessions. Sessions register *before* their snapshot is
read; what the snapshot already covers is skipped by stream id.

The hub also keeps the socket bounds: per process and per buyer (``sub``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from redis.asyncio import Redis
from ticketry import streams
from ticketry.replies import as_text
from ticketry.retry import Retrying, RetryPolicy

from ticketry_notifier import core, handshake
from ticketry_notifier.handshake import Close
from ticketry_notifier.session import Session

log = logging.getLogger(__name__)

# Entries per XREAD. A session's queue must hold one read's worth of its order's
# events (they are queued before its sender runs), so keep it below the queue bound.
READ_COUNT = 500


class Hub:
    def __init__(self, redis: Redis, *, max_sockets: int = 0, max_per_user: int = 0) -> None:
        self.redis = redis
        self.max_sockets = max_sockets
        self.max_per_user = max_per_user
        self.subs: dict[str, set[Session]] = {}
        self.sockets = 0
        self.per_user: Counter[str] = Counter()
        self.last_id = "$"

    # ------------------------------------------------------------ admission

    def admit(self, user: str) -> Close | None:
        """Count one more socket of ``user``, or the close that refuses it (0 = no bound)."""
        if self.max_sockets and self.sockets >= self.max_sockets:
            return handshake.NOTIFIER_FULL
        if self.max_per_user and self.per_user[user] >= self.max_per_user:
            return handshake.TOO_MANY_FOR_USER
        self.sockets += 1
        self.per_user[user] += 1
        return None

    def release(self, user: str) -> None:
        self.sockets -= 1
        self.per_user[user] -= 1
        if self.per_user[user] <= 0:
            del self.per_user[user]

    # ------------------------------------------------------------ fan-out

    def subscribe(self, session: Session) -> None:
        self.subs.setdefault(session.order_id, set()).add(session)

    def unsubscribe(self, session: Session) -> None:
        group = self.subs.get(session.order_id)
        if group is not None:
            group.discard(session)
            if not group:
                del self.subs[session.order_id]

    def dispatch(self, entries: list[tuple[Any, dict[bytes, bytes]]]) -> None:
        """Offer each entry of a watched order to its sessions (synchronously)."""
        for raw_id, fields in entries:
            sessions = self.subs.get(core.entry_order(fields))
            if not sessions:
                continue
            out = core.message_for(raw_id, fields)
            if out is None:
                continue
            for session in list(sessions):
                session.offer(out)

    async def run(self, stop: asyncio.Event) -> None:
        # Start at the stream's current end; sockets get history from their snapshot/resume.
        retry = Retrying("hub", log, stop, RetryPolicy(error_s=0.5))
        while not stop.is_set():
            try:
                if self.last_id == "$":
                    info = await self.redis.xinfo_stream(streams.TICKET_EVENTS)
                    last = info.get("last-generated-id", b"0-0")
                    self.last_id = as_text(last)
                resp: Any = await self.redis.xread({streams.TICKET_EVENTS: self.last_id}, count=READ_COUNT, block=1000)
            except Exception as exc:
                if "no such key" in str(exc).lower():
                    # No stream yet: its first entry will be one to deliver (waiting
                    # for the stream and starting at its end would skip that one).
                    self.last_id = "0-0"
                    continue
                await retry.failed(exc)
                continue
            retry.ok()
            for _, entries in resp or []:
                if entries:
                    self.last_id = as_text(entries[-1][0])
                    self.dispatch(entries)
