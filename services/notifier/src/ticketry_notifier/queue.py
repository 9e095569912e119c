"""``/v1/queue/{queue_id}/progress`` (WebSocket): a waiting-room place's position.

Sends ``{type: "queue.position", queue_id, position, eta_s, paused, at}`` when
the place's position changes (every step near the front, every tenth of the
way further back: :func:`news`) or its room is paused or resumed (``eta_s`` is
null while paused), then ``{type: "queue.admitted", queue_id,
permission, expires_at, at}`` (or ``{type: "queue.closed", …}`` when its
organiser closed the room for good) and closes 1000; 4401 when the token
expires first (as an order's socket). ``{type: "queue.sold_out", …}`` when
every ticket is taken leaves the socket open: tickets that come back (a
cancel) tick the room again, and the place hears its position again, or its
admission. ``position`` is null for an early
arrival until the draw is final (``on_sale_at``); ``at`` is the admission tick
(Redis ms) that the message reflects.

The api's admitter publishes one entry per tick on the room's update stream
(``streams.room_updates``: the admitted count, the rate, the sold-out flag and
the permissions it issued); a pause, resume or close by the organiser
publishes one entry too (the same values, ``paused`` and ``closed``). Each notifier reads it once per room it has
sockets for (:class:`RoomWatch`, XREAD without a group) and each socket works
out its own position: ``rank - admitted + 1``, where its rank in the line is
fixed once drawn (read once, for every socket of the room in one pipeline).
Updates carry absolute values, but a close, the permissions and the last
sold-out word come once: the watch reads on from the stream's newest entry as
it was before any of its sockets read its first state (:meth:`RoomWatch.begin`),
so no entry after a socket's first state is skipped, and a failed step (the
read, or the reads of a dispatch) is retried from the same entry. A socket
applies no entry older than what it has shown. A socket keeps only the newest
message it has not sent yet: a slow client skips positions, never falls behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.websockets import WebSocket
from ticketry import streams
from ticketry.auth import QUEUE_SCOPE, AuthError, verify_bearer_or_link
from ticketry.db import request_budget
from ticketry.ids import is_valid_id
from ticketry.replies import as_text
from ticketry.retry import Retrying
from ticketry.streams import StreamKey

from ticketry_notifier import handshake
from ticketry_notifier.handshake import Close
from ticketry_notifier.session import SEND_ERRORS, expiry_timer

log = logging.getLogger(__name__)

ADMITTED = Close(1000, "admitted", "admitted")
CLOSED = Close(1000, "closed", "closed")
# A room update's fields as Redis gives them (``streams.ROOM_*``).
_ADMITTED, _RATE, _AT = streams.ROOM_ADMITTED.encode(), streams.ROOM_RATE.encode(), streams.ROOM_AT.encode()
_SOLD_OUT, _DRAWN = streams.ROOM_SOLD_OUT.encode(), streams.ROOM_DRAWN.encode()
_PERMITS, _PAUSED, _CLOSED = streams.ROOM_PERMITS.encode(), streams.ROOM_PAUSED.encode(), streams.ROOM_CLOSED.encode()


@dataclass(frozen=True)
class Update:
    """One admission tick of a room (or the state read at a socket's start)."""

    admitted: int
    rate: float
    at: int
    sold_out: bool
    drawn: bool
    permits: dict[str, list[Any]]
    paused: bool = False
    closed: bool = False
    upto: StreamKey = (0, 0)  # the newest update entry it reflects

    @classmethod
    def from_fields(cls, f: dict[bytes, bytes]) -> Update:
        return cls(
            admitted=int(f.get(_ADMITTED, b"0")), rate=float(f.get(_RATE, b"0")), at=int(f.get(_AT, b"0")),
            sold_out=f.get(_SOLD_OUT) == b"1", drawn=f.get(_DRAWN) == b"1",
            permits=orjson.loads(f.get(_PERMITS, b"{}")), paused=f.get(_PAUSED) == b"1",
            closed=f.get(_CLOSED) == b"1",
        )  # fmt: skip


def news(sent: int, now: int) -> bool:
    """Whether a place that was last told ``sent`` is told ``now``: near the
    front every step, further back once it moved a tenth of the way (at least
    10 places). At 5,000 places and 60 admitted a second, that is a message
    every few seconds per socket instead of one a tick, with the same
    information for the buyer (an ETA of 80 s or 75 s)."""
    return now <= 20 or sent - now >= max(10, sent // 10)


def _text(msg: dict[str, Any]) -> str:
    return orjson.dumps(msg).decode()


class QueueSocket:
    """One place's socket: its rank once drawn, the newest message to send."""

    def __init__(self, ws: WebSocket, queue_id: str, event_id: str, buyer: str) -> None:
        self.ws, self.queue_id, self.event_id, self.buyer = ws, queue_id, event_id, buyer
        self.rank: int | None = None
        self.position: int | None = -1  # last position sent (-1: none yet)
        self.paused = False  # last paused flag sent
        self.sold_out = False  # last told it was sold out (the socket stays: tickets may come back)
        self.final: Close | None = None
        self.seen = -1  # the highest admitted count applied: an older tick never moves a place back
        self.upto: StreamKey = (0, 0)  # the newest update entry applied: an older one changes nothing
        self._latest: str | None = None
        self._sender: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()

    def apply(self, u: Update, permit: tuple[str, int] | None = None, until_on_sale_s: float = 0.0) -> None:
        """The message ``u`` means for this place (if any), queued to send."""
        if self.final is not None or u.admitted < self.seen or u.upto < self.upto:
            return
        self.seen, self.upto = u.admitted, u.upto
        if u.drawn and self.rank is not None and self.rank < u.admitted:
            if permit is None and (got := u.permits.get(self.buyer)) is not None:
                permit = (str(got[0]), int(got[1]))
            if permit is not None:
                expires = datetime.fromtimestamp(permit[1] / 1000, UTC).isoformat()
                self._offer(
                    {"type": "queue.admitted", "queue_id": self.queue_id, "permission": permit[0],
                     "expires_at": expires, "at": u.at},
                    ADMITTED,
                )  # fmt: skip
            return  # admitted: the permission is on its way (read by the watch)
        if u.closed:
            self._offer({"type": "queue.closed", "queue_id": self.queue_id, "at": u.at}, CLOSED)
            return
        if u.sold_out:
            if not self.sold_out:
                self.sold_out = True
                self._offer({"type": "queue.sold_out", "queue_id": self.queue_id, "at": u.at})
            return
        back, self.sold_out = self.sold_out, False  # tickets came back: where the place stands now
        pos = self.rank - u.admitted + 1 if u.drawn and self.rank is not None else None
        # The first position (none shown yet: -1, or null before the draw)
        # goes out however far back it is; after it, what news() says is news.
        prev = self.position
        moved = pos != prev and (pos is None or prev is None or prev < 0 or news(prev, pos))
        if not (moved or back) and u.paused == self.paused:
            return
        self.position, self.paused = pos, u.paused
        if u.paused:
            eta = None  # nobody moves until the organiser resumes
        elif pos is None:
            eta = round(until_on_sale_s, 1) if until_on_sale_s > 0 else None
        else:
            eta = round(pos / max(u.rate, 1e-6), 1) if u.rate > 0 else None
        self._offer(
            {"type": "queue.position", "queue_id": self.queue_id, "position": pos, "eta_s": eta, "paused": u.paused,
             "at": u.at},
        )  # fmt: skip

    def needs_permit(self, u: Update) -> bool:
        return (
            self.final is None and u.drawn and self.rank is not None and self.rank < u.admitted
            and self.buyer not in u.permits
        )  # fmt: skip

    def _offer(self, msg: dict[str, Any], final: Close | None = None) -> None:
        self._latest = _text(msg)
        self.final = final
        self._start()

    def _start(self) -> None:
        if self._sender is None:
            self._sender = asyncio.create_task(self._send())

    async def _send(self) -> None:
        try:
            while self._latest is not None:
                text, self._latest = self._latest, None
                await self.ws.send_text(text)
            if self.final is not None:
                await self.ws.close(self.final.code, self.final.reason)
        except (*SEND_ERRORS, RuntimeError):
            pass  # the client went
        finally:
            self._sender = None
            if self.final is not None:
                self.closed.set()

    def expire(self) -> None:
        """The token's ``exp`` passed (a timer's callback): close 4401 at once,
        dropping a position not sent yet; a close already under way stands."""
        if self.final is not None:
            return
        self._latest = None
        self.final = handshake.token_expired()
        self._start()

    def stop(self) -> None:
        if self._sender is not None and self._sender is not asyncio.current_task():
            self._sender.cancel()


class RoomWatch:
    """One room's update stream, read while this notifier has sockets for it."""

    def __init__(self, redis: Redis, event_id: str) -> None:
        self.redis, self.event_id = redis, event_id
        self.sockets: set[QueueSocket] = set()
        self.task: asyncio.Task[None] | None = None
        self.last_id: str | None = None  # the newest entry dispatched (None: not known yet)
        self._begin = asyncio.Lock()

    async def begin(self) -> str:
        """Know where to read from: the stream's newest entry now. A socket
        waits for this before it reads its first state, so every entry after
        that state comes after this id and is dispatched to it (an XREAD from
        ``$`` would skip one written before the watch's first read: a close,
        say, heard by nobody). The id to read after."""
        async with self._begin:
            if self.last_id is None:
                newest = await self.redis.xrevrange(streams.room_updates(self.event_id), count=1)
                self.last_id = as_text(newest[0][0]) if newest else "0-0"
            return self.last_id

    async def run(self) -> None:
        key = streams.room_updates(self.event_id)
        retry = Retrying("queue watch", log)
        while self.sockets:
            entries: list[Any] = []
            try:
                resp: Any = await self.redis.xread({key: await self.begin()}, count=100, block=1000)
                entries = [e for _, got in resp or [] for e in got]
                if entries:
                    await self.dispatch(Update.from_fields(entries[-1][1]), entries)
            except RedisError as exc:
                # The read or a dispatch's reads failed: wait, then read the
                # same entries again (absolute values: a repeat sends nothing
                # new). The watch never ends of it: its sockets would hear nothing more.
                await retry.failed(exc)
                continue
            except Exception as exc:
                await retry.failed(exc)  # a bug: logged, and these entries are skipped rather than failed on forever
                if entries:
                    self.last_id = as_text(entries[-1][0])
                continue
            retry.ok()
            if entries:
                self.last_id = as_text(entries[-1][0])

    async def dispatch(self, newest: Update, entries: list[Any]) -> None:
        """Apply the newest tick to every socket (the values are absolute; the
        permissions of every entry in the read count, and a close in any). A
        socket that joins meanwhile is left out: its first state is newer."""
        sockets = list(self.sockets)
        permits: dict[str, list[Any]] = {}
        for _, fields in entries:
            permits.update(orjson.loads(fields.get(_PERMITS, b"{}")))
        closed = any(fields.get(_CLOSED) == b"1" for _, fields in entries)
        u = dataclasses.replace(newest, permits=permits, closed=closed, upto=streams.stream_key(entries[-1][0]))
        if u.drawn:
            await self.read_ranks([s for s in sockets if s.rank is None])
        lacking = [s for s in sockets if s.needs_permit(u)]
        found: dict[QueueSocket, tuple[str, int] | None] = {}
        if lacking:
            got = await self.redis.hmget(streams.room_permits(self.event_id), [s.buyer for s in lacking])
            found = {s: _permit(v) for s, v in zip(lacking, got, strict=True)}
        for s in sockets:
            s.apply(u, found.get(s))

    async def read_ranks(self, sockets: list[QueueSocket]) -> None:
        """Each socket's rank in the line (fixed once drawn), in one pipeline."""
        if not sockets:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in sockets:
                pipe.zrank(streams.room_line(self.event_id), s.buyer)
            ranks = await pipe.execute()
        for s, r in zip(sockets, ranks, strict=True):
            s.rank = None if r is None else int(r)


def _permit(raw: Any) -> tuple[str, int] | None:
    if not raw:
        return None
    token, _, expires = as_text(raw).partition(" ")
    return token, int(expires)


class Rooms:
    """The room watches of this notifier."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.watches: dict[str, RoomWatch] = {}

    async def subscribe(self, s: QueueSocket) -> RoomWatch:
        """Add ``s`` to its room's watch, once the watch knows where it reads
        from (:meth:`RoomWatch.begin`): call it before reading the socket's
        first state (:func:`send_first`)."""
        watch = self.watches.get(s.event_id)
        if watch is None:
            watch = self.watches[s.event_id] = RoomWatch(self.redis, s.event_id)
        watch.sockets.add(s)
        try:
            await watch.begin()
        except BaseException:
            self.unsubscribe(s)
            raise
        if watch.task is None or watch.task.done():
            # A context of its own: the watch outlives this socket's handshake budget.
            watch.task = asyncio.create_task(watch.run(), context=contextvars.Context())
        return watch

    def unsubscribe(self, s: QueueSocket) -> None:
        watch = self.watches.get(s.event_id)
        if watch is None:
            return
        watch.sockets.discard(s)
        if not watch.sockets:
            del self.watches[s.event_id]  # its task ends after its current read

    async def close(self) -> None:
        for watch in list(self.watches.values()):
            watch.sockets.clear()
            if watch.task is not None:
                watch.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watch.task


async def queue_progress(ws: WebSocket) -> None:
    """The socket of a place in line (its buyer only)."""
    try:
        await _queue_progress(ws)
    except SEND_ERRORS:
        pass  # the client went
    except RedisError as exc:
        log.warning("queue socket: redis unavailable", extra={"error": str(exc)[:200]})
        await _close(ws, handshake.UNAVAILABLE)
    except Exception:
        log.exception("queue socket failed", extra={"queue_id": ws.path_params.get("queue_id")})
        await _close(ws, handshake.INTERNAL)


async def _queue_progress(ws: WebSocket) -> None:
    app = ws.app.state.notifier
    rooms: Rooms = ws.app.state.rooms
    creds = handshake.credentials(ws.scope.get("subprotocols", []), ws.query_params.get("token"))
    await ws.accept(subprotocol=creds.subprotocol)
    queue_id = ws.path_params["queue_id"]
    try:
        # A bearer token, or the place's link (its buyer's page, ``/q/<queue id>``).
        who = verify_bearer_or_link(app.verifier, app.settings.jwt_key, creds.token, QUEUE_SCOPE + queue_id)
    except AuthError:
        await _close(ws, handshake.UNAUTHORIZED)
        return
    with request_budget():  # Redis down: 1013 in about a second, not after ~35 s of retries
        event_id, buyer = await _place_of(rooms.redis, queue_id)
    if not event_id or buyer != who.sub:
        await _close(ws, Close(4404, "queue place not found", "not_found"))
        return
    refused = app.hub.admit(who.sub)
    if refused is not None:
        await _close(ws, refused)
        return
    sock = QueueSocket(ws, queue_id, event_id, buyer)
    timer: asyncio.TimerHandle | None = None
    try:
        with request_budget():
            await rooms.subscribe(sock)
            timer = expiry_timer(creds.token, app.verifier.leeway_s, sock.expire)
            await send_first(rooms.redis, sock)
        await _until_closed(ws, sock)
    finally:
        if timer is not None:
            timer.cancel()
        sock.stop()
        rooms.unsubscribe(sock)
        app.hub.release(who.sub)


async def _place_of(redis: Redis, queue_id: str) -> tuple[str, str]:
    """``(event id, buyer)`` of a place in line; empty for an id that is none
    (queue ids are made by the api, ``new_id("qu")``: nothing else is looked up)."""
    place = await redis.hgetall(streams.queue_place(queue_id)) if is_valid_id(queue_id, "qu") else {}
    return as_text(place.get(streams.QUEUE_EVENT.encode(), b"")), as_text(place.get(streams.QUEUE_BUYER.encode(), b""))


async def send_first(redis: Redis, sock: QueueSocket) -> None:
    """The socket's first message: its room's state, its rank once drawn, its
    permission and the newest update entry that state reflects, read in one
    transaction with Redis's clock (after :meth:`Rooms.subscribe`)."""
    event_id, buyer = sock.event_id, sock.buyer
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hmget(
            streams.room_state(event_id),
            [
                streams.ROOM_ADMITTED, streams.ROOM_RATE, streams.ROOM_AT, streams.ROOM_SOLD_OUT,
                streams.ROOM_DRAWN, streams.ROOM_ON_SALE_MS, streams.ROOM_PAUSED, streams.ROOM_CLOSED,
            ],
        )  # fmt: skip
        pipe.zrank(streams.room_line(event_id), buyer)
        pipe.hget(streams.room_permits(event_id), buyer)
        pipe.time()
        pipe.xrevrange(streams.room_updates(event_id), count=1)
        st, rank, permit, now, newest = await pipe.execute()
    admitted, rate, at, sold_out, drawn, on_sale_ms, paused, closed = (as_text(v) if v is not None else "" for v in st)
    now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    u = Update(
        admitted=int(admitted or 0), rate=float(rate or 0), at=int(at or now_ms), sold_out=sold_out == "1",
        # Drawn from on_sale_at by Redis's clock, as the join says, before any
        # admission tick did (none comes while the room is paused).
        drawn=drawn == "1" or (on_sale_ms != "" and now_ms >= int(on_sale_ms)), permits={}, paused=paused == "1",
        closed=closed == "1", upto=streams.stream_key(newest[0][0]) if newest else (0, 0),
    )  # fmt: skip
    if u.drawn:
        sock.rank = None if rank is None else int(rank)
    sock.apply(u, _permit(permit), until_on_sale_s=(int(on_sale_ms or 0) - now_ms) / 1000)


async def _until_closed(ws: WebSocket, sock: QueueSocket) -> None:
    """Wait until the socket is closed by us (admitted, closed, expired) or the client goes."""
    while True:
        receive = asyncio.ensure_future(ws.receive())
        closed = asyncio.ensure_future(sock.closed.wait())
        done, _ = await asyncio.wait({receive, closed}, return_when=asyncio.FIRST_COMPLETED)
        if closed in done:
            receive.cancel()
            return
        closed.cancel()
        if receive.result()["type"] == "websocket.disconnect":
            return


async def _close(ws: WebSocket, close: Close) -> None:
    with contextlib.suppress(*SEND_ERRORS, RuntimeError):
        await ws.close(close.code, close.reason)
