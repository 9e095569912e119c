"""What the chaos and guarantee tests observe: the real Redis, FerretDB and files."""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import websockets
from pymongo import AsyncMongoClient
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import connect_redis
from ticketry_devstack.procs import Stack, tool
from websockets.asyncio.client import ClientConnection

from tests.helpers import eventually

# For tests that SIGKILL renderers: far above one render (ms), far below the
# tests' patience; a renderer keeps a slow batch alive (ticketry.consumer.Claimer.touch),
# so only dead ones' work is claimed.
RENDERER_KILL_ENV = {
    "TICKETRY_CLAIM_IDLE_MS": "3000",
    "TICKETRY_CLAIM_INTERVAL_S": "0.5",
}


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
    ``?after=<last id>`` (as a real client does); records every message. With
    ``linger``, the socket stays open after the order completed (as the buyer's
    page keeps it) until ``linger`` is set, resumed if it drops meanwhile."""

    def __init__(
        self, progress_url: str, token: str, after: str | None = "0-0", linger: asyncio.Event | None = None
    ) -> None:
        self.after = after
        self.url = progress_url
        self.token = token
        self.linger = linger
        self.messages: list[dict[str, Any]] = []
        self.reconnects = 0
        self.opened = asyncio.Event()  # its first snapshot arrived
        self.connected = False  # a socket is open now
        self.done = asyncio.Event()

    def _finished(self) -> bool:
        return self.done.is_set() and (self.linger is None or self.linger.is_set())

    async def run(self, timeout_s: float) -> None:
        last = self.after
        deadline = time.monotonic() + timeout_s
        while not self._finished() and time.monotonic() < deadline:
            url = f"{self.url}?token={self.token}" + (f"&after={last}" if last else "")
            try:
                async with websockets.connect(url, max_size=2**22) as ws:
                    self.connected = True
                    while not self.done.is_set():
                        msg = orjson.loads(await ws.recv())
                        if msg["type"] == "snapshot":
                            self.opened.set()
                            last = last or msg["id"]
                            continue
                        self.messages.append(msg)
                        last = msg["id"]
                        if msg["type"] == "order.completed":
                            self.done.set()
                    await self._hold(ws)
            except (OSError, websockets.ConnectionClosed, websockets.InvalidStatus):
                self.reconnects += 1
                await asyncio.sleep(0.5)
            finally:
                self.connected = False

    async def _hold(self, ws: ClientConnection) -> None:
        """Keep the socket of a completed order open until ``linger`` is set
        (what still comes is read and dropped; a drop raises, and is resumed)."""
        if self.linger is None:
            return
        released = asyncio.create_task(self.linger.wait())
        try:
            while not released.done():
                reading = asyncio.create_task(ws.recv())
                await asyncio.wait({released, reading}, return_when=asyncio.FIRST_COMPLETED)
                if reading.done():
                    reading.result()  # a message (dropped), or the drop
                else:
                    reading.cancel()
                    await asyncio.gather(reading, return_exceptions=True)
        finally:
            released.cancel()

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == kind]


async def wait_until(pred: Any, timeout_s: float, interval_s: float = 0.25) -> float:
    """:func:`tests.helpers.eventually` on ``pred``, named after it; returns the
    seconds it took (the chaos reports print them)."""
    t0 = time.monotonic()
    await eventually(pred, getattr(pred, "__name__", "condition"), timeout_s, interval_s=interval_s)
    return time.monotonic() - t0


async def consumers_holding_work(redis: Redis) -> dict[str, int]:
    """Renderer consumers with delivered but unacked requests: name → how many."""
    holding: dict[str, int] = {}
    for lane in streams.RENDER_LANES:
        for c in await redis.xinfo_consumers(lane, streams.RENDERERS_GROUP):
            if int(c["pending"]) > 0:
                name = c["name"].decode()
                holding[name] = holding.get(name, 0) + int(c["pending"])
    return holding


@dataclass
class Kills:
    """What ``kill_renderers_holding_work`` did."""

    started: float = field(default_factory=time.monotonic)
    kills: int = 0
    # Render requests the killed renderers held (delivered, unacked): each was
    # claimed by another renderer, or delivered again if it had rendered already.
    held: int = 0
    polls_without_a_victim: int = 0
    last_kill: float = 0.0


async def kill_renderers_holding_work(
    stack: Stack,
    redis: Redis,
    *,
    kills: int,
    every_s: float,
    deadline_s: float,
    rng: random.Random,
    min_s: float = 0.0,
    before_each: Callable[[], Awaitable[None]] | None = None,
) -> Kills:
    """SIGKILL a renderer holding work, at most one every ``every_s``, and start
    a fresh one in its place, until ``kills`` were killed (counted, not fitted
    into a number of seconds: a slow machine takes longer to start the
    replacements) and at least ``min_s`` passed; ``deadline_s`` only bounds a
    hang. Never a renderer holding nothing (one still importing would test
    nothing). ``before_each`` runs before each look for a victim, e.g. to place
    a successor order so that every kill lands mid-order."""
    done = Kills()
    last_kill = done.started - every_s

    def elapsed() -> float:
        return time.monotonic() - done.started

    while (done.kills < kills or elapsed() < min_s) and elapsed() < deadline_s:
        await asyncio.sleep(max(last_kill + every_s - time.monotonic(), 0.1))
        if before_each is not None:
            await before_each()
        holding = await consumers_holding_work(redis)
        victims = [p for p in stack.renderers if p.alive() and p.env["TICKETRY_RENDERER_NAME"] in holding]
        if not victims:
            done.polls_without_a_victim += 1
            continue
        victim = rng.choice(victims)
        await asyncio.to_thread(victim.kill)
        done.kills += 1
        done.held += holding[victim.env["TICKETRY_RENDERER_NAME"]]
        last_kill = done.last_kill = time.monotonic()
        stack.start_renderer()
    return done


def ctl(stack: Stack, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``ticketryctl <args>``: the real console script, as an operator runs it
    (the timeout only bounds a hang)."""
    return subprocess.run(
        [tool("ticketryctl"), *args], env=stack.service_env(env), capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip


async def actl(stack: Stack, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(ctl, stack, *args, env=env)


def ok_json(p: subprocess.CompletedProcess[str]) -> Any:
    assert p.returncode == 0, p.stdout + p.stderr
    return orjson.loads(p.stdout)
