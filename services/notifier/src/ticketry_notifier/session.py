"""One progress socket's delivery: a bounded queue and a sender that exists
only while there is something to send.

An idle socket costs its handler task (waiting for the client to go) and this
object; no task of its own. The hub :meth:`offer`\\ s each event; the first one
into an empty queue starts a sender task, which sends what is queued as text
frames and ends. A socket that lets ``limit`` messages pile up (a client that
does not read, so its TCP window and our write buffer are full) is closed with
4008 and the id to resume after; its queue is dropped. So a slow consumer holds
at most ``limit`` references to messages that are shared by every socket of the
order, never an unbounded backlog.

Until :meth:`start` (while the handler sends the snapshot and the ``after=``
replay) events are only queued; the sender then skips those the snapshot
already covers, by stream id: neither a gap nor a duplicate.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketDisconnected
from ticketry.tracing import context_from, tracer

from ticketry_notifier import handshake
from ticketry_notifier.core import Outgoing
from ticketry_notifier.handshake import Close, StreamKey

log = logging.getLogger(__name__)
_TRACER = tracer(__name__)

# What a send raises once the client is gone (uvicorn's ClientDisconnected is an OSError).
SEND_ERRORS = (WebSocketDisconnect, WebSocketDisconnected, OSError)


def expiry_timer(token: str, leeway_s: float, expire: Callable[[], None]) -> asyncio.TimerHandle | None:
    """Call ``expire`` when the (verified) token's ``exp`` plus the verifier's
    leeway passes, as every socket does (order progress, queue place); None for
    a token without ``exp``. The caller cancels the handle when the socket ends."""
    exp = handshake.expires_at(token)
    if exp is None:
        return None
    return asyncio.get_running_loop().call_later(max(exp + leeway_s - time.time(), 0.0), expire)


class Session:
    """The delivery state of one socket; ``on_close`` reports each server close."""

    __slots__ = (
        "_closer",
        "_on_close",
        "_sender",
        "closing",
        "limit",
        "order_id",
        "overflowed",
        "pending",
        "pending_close",
        "ready",
        "resume_after",
        "sent_key",
        "user",
        "ws",
    )

    def __init__(self, ws: WebSocket, order_id: str, user: str, limit: int, on_close: Callable[[Close], None]) -> None:
        self.ws = ws
        self.order_id = order_id
        self.user = user
        self.limit = limit
        # Made on the first event and dropped once sent: an empty deque is 600 bytes,
        # a fifth of what an idle socket costs here.
        self.pending: collections.deque[Outgoing] | None = None
        self.ready = False
        self.closing = False
        self.pending_close: Close | None = None
        self.overflowed = False
        self.sent_key: StreamKey = (0, 0)
        self.resume_after = "0-0"
        self._sender: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None
        self._on_close = on_close

    def offer(self, out: Outgoing) -> None:
        """Queue one event (called by the hub, synchronously, for every socket of the order)."""
        if self.closing or self.overflowed:
            return
        if self.pending is None:
            self.pending = collections.deque()
        elif len(self.pending) >= self.limit:
            # Before start() the resume id is not known yet: start() closes.
            self.pending, self.overflowed = None, True
            if self.ready:
                self.close_soon(handshake.too_slow(self.resume_after))
            return
        self.pending.append(out)
        if self.ready and self._sender is None:
            self._sender = asyncio.create_task(self._send_pending())

    def delivered(self, key: StreamKey, stream_id: str) -> None:
        """The handler sent everything up to ``stream_id`` (snapshot, replay)."""
        if key > self.sent_key:
            self.sent_key, self.resume_after = key, stream_id

    def start(self) -> None:
        """Snapshot and replay are out: live delivery begins (or a close that
        became due meanwhile goes out)."""
        self.ready = True
        if self.overflowed:
            self.close_soon(handshake.too_slow(self.resume_after))
        elif self.pending_close is not None:
            close, self.pending_close = self.pending_close, None
            self.close_soon(close)
        elif self.pending and self._sender is None:
            self._sender = asyncio.create_task(self._send_pending())

    def close_soon(self, close: Close) -> None:
        """Close the socket with ``close`` (once): at once if live, else at :meth:`start`."""
        if self.closing:
            return
        if not self.ready:
            self.pending_close = self.pending_close or close
            return
        self.closing = True
        self.pending = None
        sender, self._sender = self._sender, None
        if sender is not None and sender is not asyncio.current_task():
            sender.cancel()  # it may be waiting for the client to read; nothing half-sent
        self._closer = asyncio.create_task(self._close(close))

    def expire(self) -> None:
        """The token's ``exp`` passed (a timer's callback)."""
        self.close_soon(handshake.token_expired(self.resume_after))

    def stop(self) -> None:
        """The handler is done (the client went): let go of everything."""
        self.closing = True
        self.pending = None
        if self._sender is not None:
            self._sender.cancel()
            self._sender = None

    async def _send_pending(self) -> None:
        try:
            while self.pending and not self.closing:
                out = self.pending.popleft()
                if not self.pending:
                    self.pending = None
                if out.key <= self.sent_key:
                    continue  # the snapshot or the replay had it
                await self._push(out)
                self.sent_key, self.resume_after = out.key, out.id
                if out.final:
                    self.close_soon(handshake.CANCELLED)
                    return
        except SEND_ERRORS:
            self.closing = True  # the client is gone; its handler sees the disconnect
        finally:
            if self._sender is asyncio.current_task():
                self._sender = None

    async def _push(self, out: Outgoing) -> None:
        """Send one live event; a traced ticket's trace ends here, at the buyer's socket."""
        if not out.traceparent:
            await self.ws.send_text(out.text)
            return
        attributes = {"order.id": out.order_id, "ticket.id": out.ticket_id or "", "event.type": out.type}
        with _TRACER.start_as_current_span(
            "progress.push", context=context_from(out.traceparent), attributes=attributes
        ):
            await self.ws.send_text(out.text)

    async def _close(self, close: Close) -> None:
        self._on_close(close)
        try:
            await self.ws.close(close.code, close.reason)
        except (*SEND_ERRORS, RuntimeError):
            pass  # gone, or closed already
