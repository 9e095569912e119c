"""A room's watch in the notifier (``ticketry_notifier.queue``) against a real
redis-server started here, driven without a WebSocket: a recorder stands in
for the socket's send and close, and the places and ticks are made by the
api's own scripts (``ticketry_api.waitingroom.rooms``).

- A dispatch whose reads Redis refuses is retried, not the end of the room's
  watch: once Redis answers again its sockets hear the tick, and every later one.
- The watch rides out Redis going away and coming back.
- An entry written right after a socket read its first state (a close, heard
  once) reaches that socket, however soon it came.
- A socket never applies an update entry older than the state it has shown,
  and its first position goes out however far back in line it is.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.websockets import WebSocket
from ticketry.db import connect_redis
from ticketry.ids import new_id
from ticketry.replies import as_text
from ticketry_api.waitingroom import rooms
from ticketry_devstack.procs import Proc, free_port, redis_proc, wait_port
from ticketry_notifier.queue import QueueSocket, Rooms, RoomWatch, Update, send_first

from tests.helpers import eventually, until

HOUR_MS = 3_600_000


class Recorder:
    """What the notifier sends a queue socket, in order (in place of the WebSocket)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.closed_with: tuple[int, str] | None = None

    async def send_text(self, text: str) -> None:
        self.sent.append(orjson.loads(text))

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.closed_with = (code, reason or "")

    def positions(self) -> list[int | None]:
        return [m["position"] for m in self.sent if m["type"] == "queue.position"]


class RedisServer:
    """A redis-server of this test on its own port and data (AOF): stopped and started again at will."""

    def __init__(self, data: Path) -> None:
        self.data, self.port = data, free_port()
        self.proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = redis_proc(self.data, self.port).start()
        wait_port(self.port, 60, self.proc.popen)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()  # SIGTERM: the AOF is flushed


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    s = RedisServer(tmp_path / "redis")
    s.start()
    try:
        yield s
    finally:
        s.stop()
        shutil.rmtree(s.data, ignore_errors=True)


@pytest.fixture
async def admin(server: RedisServer) -> AsyncIterator[Redis]:
    """The api's side: joins, ticks, closes (reconnects by itself after a restart)."""
    client = connect_redis(server.url)
    try:
        yield client
    finally:
        await client.aclose()


async def line_of(redis: Redis, n: int) -> tuple[str, list[tuple[str, str]]]:
    """A room whose sale starts in an hour, with ``n`` buyers who came early
    (``b0`` drew the first place, ``b1`` the second, …); its event id and the
    ``(buyer, queue id)`` of each."""
    event_id = new_id("ev")
    on_sale_ms = int(time.time() * 1000) + HOUR_MS
    places = []
    for i in range(n):
        got = await rooms.join(
            redis, event_id, f"b{i}", on_sale_ms=on_sale_ms, early=(i + 1) / (n + 1), new_id=new_id("qu"),
            max_waiting=100,
        )  # fmt: skip
        assert isinstance(got, rooms.Joined) and got.rank == i
        places.append((f"b{i}", got.queue_id))
    return event_id, places


async def tick(redis: Redis, event_id: str, admitted: int, buyers: list[str]) -> None:
    """The admitter's tick that admits ``buyers`` (the next in line) at 2 a
    second, and announces them (as it does once a replica holds them). The
    script is told the sale has started: the line is drawn from here on (the
    places were made before it)."""
    expires_ms = int(time.time() * 1000) + 120_000
    got = await rooms.admit(
        redis, event_id, expected=admitted, on_sale_ms=0, rate=2.0, carry=0.0, sold_out=False,
        permits=[(b, f"permission-of-{b}", expires_ms) for b in buyers],
    )  # fmt: skip
    assert got == admitted + len(buyers)
    if buyers:
        assert await rooms.announce(redis, event_id) == len(buyers)


def socket_of(event_id: str, buyer: str, queue_id: str) -> tuple[QueueSocket, Recorder]:
    rec = Recorder()
    return QueueSocket(cast(WebSocket, rec), queue_id, event_id, buyer), rec


async def test_a_dispatch_that_redis_refuses_is_retried_and_the_room_keeps_talking(
    server: RedisServer, admin: Redis
) -> None:
    # Given a line of 3 before its sale, the notifier's watch on its own Redis
    # user, and the third buyer's socket showing no position yet (not drawn)
    await admin.execute_command("ACL", "SETUSER", "watch", "on", ">pw", "~*", "&*", "+@all")
    watcher = Redis.from_url(f"redis://watch:pw@127.0.0.1:{server.port}/0")
    rooms = Rooms(watcher)
    event_id, places = await line_of(admin, 3)
    sock, rec = socket_of(event_id, *places[2])
    try:
        await rooms.subscribe(sock)
        await send_first(watcher, sock)
        await until(lambda: len(rec.sent) == 1)
        assert rec.positions() == [None]

        # When Redis refuses the read a dispatch needs (the drawn line's ranks)
        # and the first tick draws the line and admits b0
        await admin.execute_command("ACL", "SETUSER", "watch", "-zrank")
        await tick(admin, event_id, 0, ["b0"])
        await _refused(admin, "zrank")
        assert rec.positions() == [None]  # the dispatch failed

        # Then once Redis answers again, the socket hears that tick, then every later one
        await admin.execute_command("ACL", "SETUSER", "watch", "+zrank")
        await until(lambda: rec.positions() == [None, 2])
        assert rec.sent[-1]["eta_s"] == 1.0  # 2 places at 2 a second
        await tick(admin, event_id, 1, ["b1"])
        await until(lambda: rec.positions() == [None, 2, 1])
        await tick(admin, event_id, 2, ["b2"])
        await until(lambda: rec.closed_with is not None)
    finally:
        await rooms.close()
        await watcher.aclose()
    assert rec.sent[-1]["type"] == "queue.admitted" and rec.sent[-1]["permission"] == "permission-of-b2"
    assert rec.closed_with == (1000, "admitted")


async def _refused(admin: Redis, command: str) -> None:
    """Wait until Redis has refused ``command`` to the watch's user (its ACL log says so)."""

    async def logged() -> bool:
        entries: list[dict[str, Any]] = await admin.acl_log()
        return any(
            as_text(e.get("object", "")) == command and as_text(e.get("username", "")) == "watch" for e in entries
        )

    await eventually(logged, f"{command} refused", 60)


async def test_the_watch_rides_out_redis_going_away_and_coming_back(
    server: RedisServer, admin: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a line of 2 and the second buyer's socket; the watch's client does
    # not retry by itself (as the services' does for ~35 s): its loop must
    caplog.set_level(logging.WARNING, logger="ticketry_notifier.queue")
    watcher = Redis.from_url(server.url, retry=Retry(NoBackoff(), 0))
    rooms = Rooms(watcher)
    event_id, places = await line_of(admin, 2)
    sock, rec = socket_of(event_id, *places[1])
    try:
        await rooms.subscribe(sock)
        await send_first(watcher, sock)
        await until(lambda: rec.positions() == [None])

        # When Redis goes away (the watch notices) and comes back on its data
        await asyncio.to_thread(server.stop)
        await until(lambda: any("queue watch: redis unavailable" in r.getMessage() for r in caplog.records))
        await asyncio.to_thread(server.start)

        # Then the socket hears the next ticks: its position, then its admission
        await tick(admin, event_id, 0, ["b0"])
        await until(lambda: rec.positions() == [None, 1])
        await tick(admin, event_id, 1, ["b1"])
        await until(lambda: rec.closed_with is not None)
    finally:
        await rooms.close()
        await watcher.aclose()
    assert rec.sent[-1]["type"] == "queue.admitted" and rec.closed_with == (1000, "admitted")


async def test_a_close_written_right_after_a_sockets_first_state_reaches_it(server: RedisServer, admin: Redis) -> None:
    # Given a watch that knows where to read from, and a socket that read its first state
    event_id, places = await line_of(admin, 2)
    sock, rec = socket_of(event_id, *places[1])
    watch = RoomWatch(admin, event_id)
    watch.sockets.add(sock)
    await watch.begin()
    await send_first(admin, sock)
    # When the organiser closes the room before the watch's first read
    closed = await rooms.close_for_good(admin, event_id)
    assert closed.closed
    watch.task = asyncio.create_task(watch.run())
    try:
        # Then the socket hears it (once), and closes normally
        await until(lambda: rec.closed_with is not None)
    finally:
        watch.sockets.clear()
        watch.task.cancel()
        await asyncio.gather(watch.task, return_exceptions=True)
    assert [m["type"] for m in rec.sent] == ["queue.position", "queue.closed"]
    assert rec.closed_with == (1000, "closed")


async def test_a_socket_applies_no_entry_older_than_what_it_showed() -> None:
    sock, rec = socket_of("ev_x", "b3", "qu_x")
    sock.rank = 3

    def update(paused: bool, upto: tuple[int, int]) -> Update:
        return Update(
            admitted=1, rate=2.0, at=upto[0], sold_out=False, drawn=True, permits={}, paused=paused, upto=upto
        )

    # Given a socket that showed the room paused as of entry 5-0
    sock.apply(update(True, (5, 0)))
    await until(lambda: len(rec.sent) == 1)
    # When a dispatch of entry 4-0 (not paused) comes after it, then one of 6-0
    sock.apply(update(False, (4, 0)))
    sock.apply(update(False, (6, 0)))
    await until(lambda: len(rec.sent) == 2)
    # Then only the newer one changed what it shows
    assert [(m["position"], m["paused"], m["at"]) for m in rec.sent] == [(3, True, 5), (3, False, 6)]


async def test_the_first_position_is_shown_however_far_back_then_only_news() -> None:
    sock, rec = socket_of("ev_x", "b80", "qu_x")
    sock.rank = 80

    def update(admitted: int) -> Update:
        return Update(admitted=admitted, rate=4.0, at=admitted, sold_out=False, drawn=True, permits={})

    # Given a socket whose first state is the drawn line, 80 places from its front
    sock.apply(update(0))
    await until(lambda: len(rec.sent) == 1)
    # When the line moves one place, then ten
    sock.apply(update(1))
    sock.apply(update(11))
    await until(lambda: len(rec.sent) == 2)
    # Then it showed where it stood at once, then the move that is news (a tenth of the way)
    assert [(m["position"], m["eta_s"]) for m in rec.sent] == [(81, 20.2), (70, 17.5)]
