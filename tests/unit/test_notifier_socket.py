"""The notifier process against a real Redis and FerretDB started here, fed by
writing what the api and the renderers write (progress hashes, ticket events),
so each socket behaviour is driven exactly: text frames, resume, the
``order.cancelled`` relay, malformed ``after=``, the token in the subprotocol,
the bounds per buyer and per process, token expiry (of a queue place's socket
too), and a slow consumer.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
import websockets
from pymongo import MongoClient
from redis.asyncio import Redis
from ticketry import streams
from ticketry.auth import issue_token
from ticketry.ids import new_id
from ticketry.replies import as_text
from ticketry.settings import DEV_JWT_SECRET
from ticketry_api.waitingroom import rooms
from ticketry_devstack.procs import Proc, Stack, free_port, tool, wait_port
from websockets.typing import Subprotocol

from tests.helpers import eventually, metric_sum

ENV = {
    "TICKETRY_DEV_MODE": "1",
    "TICKETRY_LOG_LEVEL": "WARNING",
    "TICKETRY_JWT_LEEWAY_S": "0",  # the expiry test closes at exp itself
    "TICKETRY_NOTIFIER_MAX_SOCKETS_PER_USER": "3",
    "TICKETRY_NOTIFIER_REDIS_POOL": "4",  # a crowd must queue for 4 connections, not fail
    "TICKETRY_NOTIFIER_SOCKET_QUEUE": "600",
}


class World:
    def __init__(self, stack: Stack, redis: Redis) -> None:
        self.stack = stack
        self.redis = redis
        self.base = stack.notifier_url

    def url(self, order_id: str, token: str | None = None, after: str | None = None, base: str = "") -> str:
        query = "&".join(f"{k}={v}" for k, v in (("token", token), ("after", after)) if v is not None)
        return f"{base or self.base}/v1/orders/{order_id}/progress" + (f"?{query}" if query else "")

    async def order(self, owner: str, total: int) -> str:
        """An order as the api leaves it: its progress hash."""
        order_id = new_id("or")
        await self.redis.hset(
            streams.order_progress(order_id), mapping={"total": total, "owner": owner, "order_id": order_id}
        )
        return order_id

    async def emit(self, order_id: str, kind: str, n: int, total: int, reason: str | None = None) -> str:
        """One ticket event (n >= 0) or order event, with its counter or mark in
        the progress hash, in one MULTI as the renderers' script does it."""
        key = streams.order_progress(order_id)
        fields = event(order_id, kind, n, total, reason)
        if n < 0:  # an order event carries the counters as they are
            rendered, failed = await self.redis.hmget(key, ["rendered", "failed"])
            fields |= {"rendered": as_text(rendered or 0), "failed": as_text(failed or 0)}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(streams.TICKET_EVENTS, fields)  # type: ignore[arg-type]
            if n >= 0:
                pipe.hincrby(key, "failed" if kind == "ticket.failed" else "rendered", 1)
            entry, *_ = await pipe.execute()
        eid: str = entry.decode()
        if n < 0:
            await self.redis.hset(key, kind.split(".")[1], eid)
        return eid

    async def metric(self, name: str, base: str = "", **labels: str) -> float:
        http = (base or self.base).replace("ws://", "http://")
        async with httpx.AsyncClient(timeout=10) as client:
            text = (await client.get(f"{http}/metrics")).text
        return metric_sum(text, name, **labels)


def event(order_id: str, kind: str, n: int, total: int, reason: str | None = None) -> dict[str, str]:
    ticket = f"tk_{order_id[3:]}_{n:05d}" if n >= 0 else ""
    done = n + 1 if n >= 0 else total
    fields = {
        "type": kind, "v": "1", "event_uuid": str(uuid.uuid4()), "order_id": order_id, "ticket_id": ticket,
        "occurred_at": datetime.now(UTC).isoformat(), "correlation_id": "",
        "total": str(total), "rendered": str(0 if kind == "ticket.failed" else done),
        "failed": str(done if kind == "ticket.failed" else 0),
    }  # fmt: skip
    if reason is not None:
        fields["reason"] = reason
    return fields


def token(sub: str, ttl_s: int = 3600) -> str:
    return issue_token(sub, "buyer", key=DEV_JWT_SECRET, ttl_s=ttl_s)


async def recv(ws: websockets.ClientConnection, timeout_s: float = 60) -> dict[str, Any]:
    """The next message, which must be a text frame (browsers get Blobs from binary ones)."""
    async with asyncio.timeout(timeout_s):
        raw = await ws.recv()
    assert isinstance(raw, str), f"binary frame: {raw!r}"
    msg: dict[str, Any] = orjson.loads(raw)
    return msg


async def closed(ws: websockets.ClientConnection, timeout_s: float = 60) -> tuple[int, str, list[dict[str, Any]]]:
    """Read until the server closes: its code, its reason and what came before."""
    seen: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                seen.append(orjson.loads(await ws.recv()))
    except websockets.ConnectionClosed as exc:
        assert exc.rcvd is not None, "closed without a close frame"
        return exc.rcvd.code, exc.rcvd.reason, seen


@pytest.fixture(scope="module")
def notifier_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("notifier")
    stack = Stack(root, env=dict(ENV))
    try:
        stack.start_infra(os.environ.get("TICKETRY_TEST_REDIS_URL"), os.environ.get("TICKETRY_TEST_MONGO_URL"))
        stack.start_notifier()
        yield stack
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def world(notifier_stack: Stack) -> AsyncIterator[World]:
    redis = Redis.from_url(notifier_stack.env["TICKETRY_REDIS_URL"])
    w = World(notifier_stack, redis)
    try:
        yield w
    finally:
        # Every socket a test opened is gone from the server before the next test counts.
        await eventually(lambda: _zero(w), "the sockets gauge back at zero", 60, interval_s=0.05)
        await redis.aclose()


async def _zero(w: World) -> bool:
    return await w.metric("ticketry_websocket_connections") == 0


async def test_text_frames_live_events_and_resume_without_gaps(world: World) -> None:
    # Given an order of 3 with one ticket rendered already
    order = await world.order("alice", 3)
    first = await world.emit(order, "ticket.rendered", 0, 3)
    # When its buyer connects with the token in the subprotocol, not the URL
    offered = [Subprotocol("ticketry"), Subprotocol(f"bearer.{token('alice')}")]
    async with websockets.connect(world.url(order), subprotocols=offered) as ws:
        assert ws.subprotocol == "ticketry"
        snap = await recv(ws)
        assert (snap["type"], snap["status"], snap["rendered"], snap["total"]) == ("snapshot", "processing", 1, 3)
        # Then live events follow as text frames, in order
        ids = [await world.emit(order, "ticket.rendered", n, 3) for n in (1, 2)]
        ids.append(await world.emit(order, "order.completed", -1, 3))
        live = [await recv(ws) for _ in ids]
    assert [m["id"] for m in live] == ids
    assert [m["type"] for m in live] == ["ticket.rendered", "ticket.rendered", "order.completed"]
    # And a socket resuming after the first event gets exactly the rest (?token= still works)
    async with websockets.connect(world.url(order, token("alice"), after=first)) as ws:
        snap = await recv(ws)
        assert (snap["status"], snap["completed"]) == ("completed", True)
        assert [(await recv(ws))["id"] for _ in ids] == ids


async def test_a_bare_bearer_subprotocol_is_answered_with_itself(world: World) -> None:
    order = await world.order("bob", 1)
    offered = Subprotocol(f"bearer.{token('bob')}")
    async with websockets.connect(world.url(order), subprotocols=[offered]) as ws:
        assert ws.subprotocol == offered
        assert (await recv(ws))["type"] == "snapshot"


async def test_order_cancelled_is_relayed_then_the_socket_closes(world: World) -> None:
    # Given a buyer watching an order of 2
    order = await world.order("carol", 2)
    async with websockets.connect(world.url(order, token("carol"))) as ws:
        assert (await recv(ws))["status"] == "processing"
        # When one ticket renders and the order is cancelled
        rendered = await world.emit(order, "ticket.rendered", 0, 2)
        cancelled = await world.emit(order, "order.cancelled", -1, 2)
        code, reason, seen = await closed(ws)
    # Then both arrive, and the socket closes normally after the cancellation
    assert [(m["type"], m["id"]) for m in seen] == [("ticket.rendered", rendered), ("order.cancelled", cancelled)]
    assert (seen[1]["total"], seen[1]["rendered"]) == (2, 1)
    assert (code, reason) == (1000, "order cancelled")
    # And a later snapshot says cancelled, and a resume replays the cancellation
    async with websockets.connect(world.url(order, token("carol"))) as ws:
        code, reason, seen = await closed(ws)
    assert [(m["type"], m["status"]) for m in seen] == [("snapshot", "cancelled")]
    assert code == 1000
    async with websockets.connect(world.url(order, token("carol"), after=rendered)) as ws:
        code, _, seen = await closed(ws)
    assert [m["type"] for m in seen] == ["snapshot", "order.cancelled"] and code == 1000


async def test_a_cancelled_order_without_live_counters_says_so(world: World) -> None:
    # Given an order whose progress hash expired, cancelled in the store
    order = new_id("or")
    mongo: MongoClient[dict[str, Any]] = MongoClient(world.stack.env["TICKETRY_MONGO_URL"])
    try:
        mongo.get_default_database()["orders"].insert_one(
            {"_id": order, "owner_id": "dave", "quantity": 4, "status": "cancelled"}
        )
    finally:
        mongo.close()
    async with websockets.connect(world.url(order, token("dave"))) as ws:
        code, _, seen = await closed(ws)
    assert [(m["type"], m["status"], m["total"]) for m in seen] == [("snapshot", "cancelled", 4)]
    assert code == 1000


@pytest.mark.parametrize("after", ["1_0-0", "1-0_0", "%201-0", "-1", "1-", "abc", "1-2-3", "99999999999999999999999-0"])
async def test_a_malformed_after_gets_a_clear_close(world: World, after: str) -> None:
    order = await world.order("erin", 1)
    async with websockets.connect(world.url(order, token("erin"), after=after)) as ws:
        code, reason, seen = await closed(ws)
    assert (code, seen) == (4400, [])
    assert reason.startswith("invalid after")


async def test_unknown_and_unauthenticated(world: World) -> None:
    order = await world.order("frank", 1)
    for url, want in (
        (world.url(order), 4401),
        (world.url(order, "not-a-token"), 4401),
        (world.url(order, token("mallory")), 4404),
        (world.url(new_id("or"), token("frank")), 4404),
        (world.url("or_nonsense", token("frank")), 4404),
    ):
        async with websockets.connect(url) as ws:
            code, _, seen = await closed(ws)
        assert (code, seen) == (want, []), url


async def test_sockets_per_buyer_are_bounded(world: World) -> None:
    # Given a buyer with 3 sockets open (the bound)
    order = await world.order("gina", 1)
    url = world.url(order, token("gina"))
    socks = [await websockets.connect(url) for _ in range(3)]
    try:
        for ws in socks:
            assert (await recv(ws))["type"] == "snapshot"
        # When a 4th opens, it is refused with a clear reason; another buyer is not
        async with websockets.connect(url) as ws:
            code, reason, _ = await closed(ws)
        assert (code, reason) == (4429, "too many connections for this user")
        other = await world.order("hank", 1)
        async with websockets.connect(world.url(other, token("hank"))) as ws:
            assert (await recv(ws))["type"] == "snapshot"
        assert await world.metric("ticketry_websocket_connections") >= 3
        # And once one closes, the buyer may open one again
        await socks.pop().close()
        await eventually(lambda: _fewer(world, 3), "fewer than 3 sockets", 60, interval_s=0.05)
        async with websockets.connect(url) as ws:
            assert (await recv(ws))["type"] == "snapshot"
    finally:
        for ws in socks:
            await ws.close()


async def _fewer(world: World, n: int) -> bool:
    return await world.metric("ticketry_websocket_connections") < n


async def test_sockets_per_process_are_bounded(world: World) -> None:
    # Given a second notifier that takes 4 sockets
    port = free_port()
    env = world.stack.service_env({"TICKETRY_NOTIFIER_PORT": str(port), "TICKETRY_NOTIFIER_MAX_SOCKETS": "4"})
    proc = Proc("notifier-small", [tool("ticketry-notifier")], env, world.stack.data_dir / "logs" / "small.log")
    proc.start()
    try:
        await asyncio.to_thread(wait_port, port, 60, proc.popen)
        base = f"ws://127.0.0.1:{port}"
        orders = [(f"buyer-{i}", await world.order(f"buyer-{i}", 1)) for i in range(5)]
        socks = []
        for who, order in orders[:4]:
            ws = await websockets.connect(world.url(order, token(who), base=base))
            assert (await recv(ws))["type"] == "snapshot"
            socks.append(ws)
        # When a 5th socket comes, it is told to try again later
        who, order = orders[4]
        async with websockets.connect(world.url(order, token(who), base=base)) as ws:
            code, reason, _ = await closed(ws)
        assert (code, reason) == (1013, "notifier at capacity; try again later")
        assert await world.metric("ticketry_websocket_connections", base) == 4
        for ws in socks:
            await ws.close()
    finally:
        proc.stop()


async def test_the_socket_closes_when_its_token_expires(world: World) -> None:
    # Given a socket opened with a token that expires in 10 s
    order = await world.order("ivy", 1)
    async with websockets.connect(world.url(order, token("ivy", ttl_s=10))) as ws:
        snap = await recv(ws)
        # Then it is closed then, with the id to resume after
        code, reason, seen = await closed(ws, 120)
    assert seen == []
    assert (code, reason) == (4401, f"token expired; reconnect with a fresh token and after={snap['id']}")


async def test_a_queue_socket_closes_when_its_token_expires(world: World) -> None:
    # Given a place in a waiting room whose sale starts in an hour (made by the api's join script)
    place = await rooms.join(
        world.redis, new_id("ev"), "ivy", on_sale_ms=int(time.time() * 1000) + 3_600_000, early=0.5,
        new_id=new_id("qu"), max_waiting=10,
    )  # fmt: skip
    assert isinstance(place, rooms.Joined)
    url = f"{world.base}/v1/queue/{place.queue_id}/progress?token={token('ivy', ttl_s=10)}"
    # When its buyer follows it with a token that expires in 10 s
    async with websockets.connect(url) as ws:
        first = await recv(ws)
        # Then the socket is closed then, as an order's socket is
        code, reason, seen = await closed(ws, 120)
    assert (first["type"], first["position"]) == ("queue.position", None)
    assert seen == []
    assert (code, reason) == (4401, "token expired; reconnect with a fresh token")


async def test_a_crowd_queues_for_the_redis_pool_instead_of_failing(world: World) -> None:
    # Given 100 buyers with an order each and a notifier with 4 Redis connections
    ids = [await world.emit(await world.order("seed", 1), "ticket.rendered", 0, 1)]
    buyers = [(f"crowd-{i}", await world.order(f"crowd-{i}", 1)) for i in range(100)]

    async def one(who: str, order: str) -> list[dict[str, Any]]:
        # after= makes each handshake also replay from Redis (one more connection each)
        async with websockets.connect(world.url(order, token(who), after=ids[0])) as ws:
            return [await recv(ws, 120)]

    # When 300 sockets open at once (3 per buyer, each replaying)
    got = await asyncio.gather(*(one(who, order) for who, order in buyers for _ in range(3)))
    # Then every one gets its snapshot
    assert len(got) == 300
    assert all(msgs[0]["type"] == "snapshot" for msgs in got)


async def test_a_slow_consumer_is_closed_with_where_to_resume(world: World) -> None:
    # Given a buyer whose client stops reading (its queue holds 4 messages)
    n = 30_000  # ~20 MB of events: more than every socket buffer between us and it
    order = await world.order("slow", n)
    url = world.url(order, token("slow"))
    ws = await websockets.connect(url, max_queue=4, ping_interval=None)
    try:
        snap = await recv(ws)
        # When its order produces far more than it reads
        reason = "x" * 500
        pipe = world.redis.pipeline(transaction=False)
        for i in range(n):
            pipe.xadd(streams.TICKET_EVENTS, event(order, "ticket.failed", i, n, reason))  # type: ignore[arg-type]
        pipe.xadd(streams.TICKET_EVENTS, event(order, "order.completed", -1, n))  # type: ignore[arg-type]
        all_ids = [e.decode() for e in await pipe.execute()]

        async def overflowed() -> bool:
            return await world.metric("ticketry_websocket_closes_total", reason="too_slow") >= 1

        await eventually(overflowed, "the slow socket closed for overflow", 120, interval_s=0.05)
        # Then, reading at last, it finds a close that names the last id it got
        code, why, first = await closed(ws, 120)
    finally:
        await ws.close()
    assert snap["type"] == "snapshot" and 0 < len(first) < n
    assert (code, why) == (4008, f"too slow; reconnect with after={first[-1]['id']}")
    # And resuming there delivers the rest: every event exactly once, in order
    async with websockets.connect(world.url(order, token("slow"), after=first[-1]["id"]), max_size=2**22) as ws:
        rest: list[dict[str, Any]] = []
        assert (await recv(ws))["type"] == "snapshot"
        while not rest or rest[-1]["type"] != "order.completed":
            rest.append(await recv(ws, 120))
    assert [m["id"] for m in first + rest] == all_ids
