"""When Redis does not answer a socket's handshake, the notifier closes it
1013 "try again later" (docs: ``ticketry_notifier.handshake``): an order's
socket (its coalesced handshake read, ``lookups``) and a waiting-room place's
socket alike, neither a hang nor 1011; and once Redis is back the same
sockets open as usual. A notifier process against a real Redis and FerretDB
started here; Redis is stopped and started again on its data.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import websockets
from redis.asyncio import Redis
from ticketry import streams
from ticketry.auth import issue_token
from ticketry.ids import new_id
from ticketry.settings import DEV_JWT_SECRET
from ticketry_api.waitingroom import rooms
from ticketry_devstack.procs import Stack, redis_proc, wait_port

ENV = {"TICKETRY_DEV_MODE": "1", "TICKETRY_LOG_LEVEL": "WARNING"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("notifier-unavailable")
    s = Stack(root, env=dict(ENV))
    try:
        s.start_infra(None, os.environ.get("TICKETRY_TEST_MONGO_URL"))  # a Redis of its own: it is stopped
        s.start_notifier()
        yield s
    finally:
        s.stop()
        shutil.rmtree(root, ignore_errors=True)


def token(sub: str) -> str:
    return issue_token(sub, "buyer", key=DEV_JWT_SECRET)


async def outcome(url: str) -> tuple[str, int | None, str]:
    """The socket's first message type, or ``("closed", code, reason)``; the
    deadline only bounds a hang (a handshake gives up on Redis after its
    request budget, ``db.REQUEST_RETRY_BUDGET_S``)."""
    try:
        async with asyncio.timeout(150), websockets.connect(url) as ws:
            msg: dict[str, Any] = orjson.loads(await ws.recv())
            return str(msg["type"]), None, ""
    except websockets.ConnectionClosed as exc:
        assert exc.rcvd is not None, "closed without a close frame"
        return "closed", exc.rcvd.code, exc.rcvd.reason


async def test_sockets_are_told_to_try_again_later_while_redis_is_down(stack: Stack) -> None:
    # Given an order and a waiting-room place, each with its buyer's socket URL
    redis = Redis.from_url(stack.env["TICKETRY_REDIS_URL"])
    try:
        order = new_id("or")
        await redis.hset(streams.order_progress(order), mapping={"total": 1, "owner": "olga", "order_id": order})
        place = await rooms.join(
            redis, new_id("ev"), "quinn", on_sale_ms=int(time.time() * 1000) + 3_600_000, early=0.5,
            new_id=new_id("qu"), max_waiting=10,
        )  # fmt: skip
        assert isinstance(place, rooms.Joined)
    finally:
        await redis.aclose()
    urls = [
        f"{stack.notifier_url}/v1/orders/{order}/progress?token={token('olga')}",
        f"{stack.notifier_url}/v1/queue/{place.queue_id}/progress?token={token('quinn')}",
    ]

    # When Redis is down and both buyers open their sockets
    await asyncio.to_thread(stack.procs["redis"].stop)
    got = await asyncio.gather(*(outcome(u) for u in urls))
    # Then each is closed 1013 "try again later"
    assert got == [("closed", 1013, "try again later")] * 2

    # And once Redis is back on its data, trying again works
    stack.procs["redis"] = redis_proc(stack.data_dir / "redis", stack.redis_port).start()
    await asyncio.to_thread(wait_port, stack.redis_port, 60, stack.procs["redis"].popen)
    assert [(await outcome(u))[0] for u in urls] == ["snapshot", "queue.position"]
