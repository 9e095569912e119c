"""What the chaos and guarantee tests observe: the real Redis, FerretDB and files."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import websockets
from pymongo import AsyncMongoClient
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import connect_redis
from ticketry_devstack.procs import Stack


def redis_of(stack: Stack) -> Redis:
    # Reconnects by itself, like the services (the Redis-restart test needs it).
    return connect_redis(stack.env["TICKETRY_REDIS_URL"])


def mongo_of(stack: Stack) -> AsyncMongoClient[dict[str, Any]]:
    return AsyncMongoClient(stack.env["TICKETRY_MONGO_URL"], tz_aware=True)


def db_of(client: AsyncMongoClient[dict[str, Any]]) -> Any:
    return client["ticketry"]


async def pending_total(redis: Redis) -> int:
    """Entries delivered but not acked, over both render lanes."""
    total = 0
    for lane in streams.RENDER_LANES:
        summary: Any = await redis.xpending(lane, streams.RENDERERS_GROUP)
        total += int(summary["pending"])
    return total


async def order_events(redis: Redis, order_id: str) -> list[tuple[str, dict[str, str]]]:
    """Every event of one order in the ticket-event stream, oldest first."""
    out = []
    start = "-"
    while True:
        chunk: Any = await redis.xrange(streams.TICKET_EVENTS, min=start, max="+", count=5000)
        if not chunk:
            return out
        for eid, f in chunk:
            fields = {k.decode(): v.decode() for k, v in f.items()}
            if fields.get("order_id") == order_id:
                out.append((eid.decode(), fields))
        start = "(" + chunk[-1][0].decode()


def duplicates(ticket_ids: list[str]) -> dict[str, int]:
    return {t: n for t, n in Counter(ticket_ids).items() if n > 1}


async def completes_rendering_each_once(
    redis: Redis, mongo: AsyncMongoClient[dict[str, Any]], order: dict[str, Any], timeout_s: float
) -> None:
    """Wait until ``order`` (a 202 body) is projected ``completed``, then check
    that each of its tickets has exactly one ``ticket.rendered`` event."""

    async def completed() -> bool:
        doc = await db_of(mongo).order_states.find_one({"_id": order["id"]})
        return bool(doc and doc["status"] == "completed")

    await wait_until(completed, timeout_s)
    events = await order_events(redis, order["id"])
    ids = [f["ticket_id"] for _, f in events if f["type"] == "ticket.rendered"]
    assert not duplicates(ids) and sorted(ids) == sorted(order["tickets"])


def pdfs(stack: Stack, order_id: str) -> list[Path]:
    d = Path(stack.env["TICKETRY_STORAGE_DIR"]) / order_id
    return sorted(p for p in d.glob("*.pdf") if p.is_file() and not p.name.startswith("."))


class ProgressWatcher:
    """One buyer's WebSocket for an order, kept open across drops by resuming with
    ``?after=<last id>`` (as a real client does); records every message."""

    def __init__(self, progress_url: str, token: str, after: str | None = "0-0") -> None:
        self.after = after
        self.url = progress_url
        self.token = token
        self.messages: list[dict[str, Any]] = []
        self.reconnects = 0
        self.done = asyncio.Event()

    async def run(self, timeout_s: float) -> None:
        last = self.after
        deadline = time.monotonic() + timeout_s
        while not self.done.is_set() and time.monotonic() < deadline:
            url = f"{self.url}?token={self.token}" + (f"&after={last}" if last else "")
            try:
                async with websockets.connect(url, max_size=2**22) as ws:
                    while True:
                        msg = orjson.loads(await ws.recv())
                        if msg["type"] == "snapshot":
                            last = last or msg["id"]
                            continue
                        self.messages.append(msg)
                        last = msg["id"]
                        if msg["type"] == "order.completed":
                            self.done.set()
                            return
            except (OSError, websockets.ConnectionClosed, websockets.InvalidStatus):
                self.reconnects += 1
                await asyncio.sleep(0.5)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == kind]


async def wait_until(pred: Any, timeout_s: float, interval_s: float = 0.25) -> float:
    """Poll ``await pred()`` until true; returns the seconds it took."""
    t0 = time.monotonic()
    while True:
        if await pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"condition not met after {timeout_s}s")
        await asyncio.sleep(interval_s)
