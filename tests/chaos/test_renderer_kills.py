"""Guarantees 1 and 2 under renderer crashes: SIGKILL a renderer every second
(and start a fresh one) while a 1,000-ticket order renders."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from ticketry import streams

from tests.chaos.support import (
    ProgressWatcher,
    db_of,
    duplicates,
    mongo_of,
    order_events,
    pdfs,
    pending_total,
    redis_of,
    wait_until,
)
from tests.conftest import TokenFactory, make_stack
from tests.helpers import create_event, place_order

pytestmark = [pytest.mark.chaos]

# 3,000 tickets: with the fast path 1,000 render in ~10 s, too soon for more than
# a handful of kills (a renderer start costs ~3.7 CPU-s here).
TICKETS = int(os.environ.get("TICKETRY_CHAOS_TICKETS", "3000"))
RENDERERS = 4
# One kill a second (the issue). A renderer start costs ~3.7 CPU-seconds here
# (imports: WeasyPrint, FastStream, pydantic), so on small machines the cadence
# can be relaxed with TICKETRY_CHAOS_KILL_EVERY_S.
KILL_EVERY_S = float(os.environ.get("TICKETRY_CHAOS_KILL_EVERY_S", "1.0"))
CHAOS_S = float(os.environ.get("TICKETRY_CHAOS_SECONDS", "30"))
CHAOS_ENV = {
    # Far above one render (ms), far below the test's patience; the renderer keeps
    # a slow batch alive (handlers.Worker._keep_alive) so only dead ones are claimed.
    "TICKETRY_CLAIM_IDLE_MS": "3000",
    "TICKETRY_CLAIM_INTERVAL_S": "0.5",
}


@pytest.mark.timeout(1200)
async def test_sigkill_a_renderer_every_second(tmp_path: Path, token: TokenFactory) -> None:
    stack = await asyncio.to_thread(make_stack, tmp_path, RENDERERS, CHAOS_ENV)
    redis = redis_of(stack)
    mongo = mongo_of(stack)
    figures: dict[str, Any] = {"tickets": TICKETS, "kill_every_s": KILL_EVERY_S}
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=120) as api:
            # Given a 1,000-ticket order being rendered by three renderers
            buyer = token("chaos-buyer", "buyer")
            event = await create_event(api, token("chaos-org", "organizer"), capacity=TICKETS)
            t0 = time.monotonic()
            r = await place_order(api, buyer, event["id"], TICKETS)
            assert r.status_code == 202, r.text
            order = r.json()
            watcher = ProgressWatcher(order["progress_url"], buyer)
            watching = asyncio.create_task(watcher.run(timeout_s=1100))

            # When a renderer holding work is SIGKILLed every second and a fresh one
            # started, for CHAOS_S seconds or until 90% of the order is rendered
            # (unbounded kills on 2 CPUs only test that nothing renders at all:
            # every replacement is killed while it catches up)
            async def rendered() -> int:
                return int(await redis.hget(streams.order_progress(order["id"]), "rendered") or 0)

            kills = skipped = 0
            last_kill = time.monotonic()
            rng = random.Random(1234)
            while await rendered() < TICKETS * 0.9 and time.monotonic() - t0 < CHAOS_S:
                await asyncio.sleep(KILL_EVERY_S)
                # Victim: a renderer that holds work (killed mid-batch), else one that is
                # up (heartbeat); never one still importing, which would test nothing.
                live = [p for p in stack.renderers if p.alive()]
                holding = await _consumers_holding_work(redis)
                up = {
                    n
                    for n in (p.env["TICKETRY_RENDERER_NAME"] for p in live)
                    if await redis.exists(streams.renderer_heartbeat(n))
                }
                victims = [p for p in live if p.env["TICKETRY_RENDERER_NAME"] in holding] or [
                    p for p in live if p.env["TICKETRY_RENDERER_NAME"] in up
                ]
                if not victims:
                    skipped += 1
                    continue
                victim = rng.choice(victims)
                await asyncio.to_thread(victim.kill)
                kills += 1
                last_kill = time.monotonic()
                stack.start_renderer()
            figures |= {"kills": kills, "ticks_without_a_live_renderer": skipped, "chaos_s": round(last_kill - t0, 1)}

            # Then the order completes, and nothing is pending on either lane
            async def drained() -> bool:
                doc = await db_of(mongo).order_states.find_one({"_id": order["id"]})
                return bool(watcher.done.is_set() and doc and doc["status"] != "processing") and (
                    await pending_total(redis) == 0
                )

            await wait_until(drained, timeout_s=300)
            figures["drain_after_last_kill_s"] = round(time.monotonic() - last_kill, 1)
            figures["total_s"] = round(time.monotonic() - t0, 1)
            await watching

            # Every ticket has exactly one final event, and it is `rendered`
            events = await order_events(redis, order["id"])
            rendered_ids = [f["ticket_id"] for _, f in events if f["type"] == "ticket.rendered"]
            figures["duplicates"] = len(duplicates(rendered_ids))
            figures["lost"] = len(set(order["tickets"]) - set(rendered_ids))
            assert figures["duplicates"] == 0 and figures["lost"] == 0
            assert sorted(rendered_ids) == sorted(order["tickets"])
            assert [f["type"] for _, f in events].count("order.completed") == 1
            assert not [f for _, f in events if f["type"] == "ticket.failed"]

            # The WebSocket saw each ticket once, and the completion with exact counters
            ws_ids = [m["ticket_id"] for m in watcher.of_type("ticket.rendered")]
            assert sorted(ws_ids) == sorted(order["tickets"]), duplicates(ws_ids)
            done = watcher.of_type("order.completed")
            assert len(done) == 1 and (done[0]["total"], done[0]["rendered"], done[0]["failed"]) == (
                TICKETS,
                TICKETS,
                0,
            )
            figures["ws_reconnects"] = watcher.reconnects

            # Counters are exact in Redis and in MongoDB; one PDF per ticket
            progress = {
                k.decode(): v.decode() for k, v in (await redis.hgetall(streams.order_progress(order["id"]))).items()
            }
            assert (int(progress["total"]), int(progress["rendered"]), int(progress.get("failed", 0))) == (
                TICKETS,
                TICKETS,
                0,
            )
            assert await redis.scard(streams.order_done(order["id"])) == TICKETS
            doc = await db_of(mongo).order_states.find_one({"_id": order["id"]})
            assert (doc["status"], doc["rendered"], doc["failed"]) == ("completed", TICKETS, 0)
            statuses = [t["status"] async for t in db_of(mongo).ticket_states.find({"order_id": order["id"]})]
            assert len(statuses) == TICKETS and set(statuses) == {"rendered"}
            files = pdfs(stack, order["id"])
            assert sorted(p.stem for p in files) == sorted(order["tickets"])
            assert all(p.read_bytes()[:5] == b"%PDF-" for p in files)
            assert await pending_total(redis) == 0
            assert await redis.xlen(streams.DEAD_LETTERS) == 0
            figures["consumers_seen"] = await _consumers_seen(redis)
    finally:
        print(f"\nCHAOS FIGURES {figures}")
        await redis.aclose()
        await mongo.close()
        await asyncio.to_thread(stack.stop)


async def _consumers_holding_work(redis: Any) -> set[str]:
    names: set[str] = set()
    for lane in streams.RENDER_LANES:
        for c in await redis.xinfo_consumers(lane, streams.RENDERERS_GROUP):
            if int(c["pending"]) > 0:
                names.add(c["name"].decode())
    return names


async def _consumers_seen(redis: Any) -> int:
    """How many renderer processes took part (each has its own consumer name)."""
    total = 0
    for lane in streams.RENDER_LANES:
        total += len(await redis.xinfo_consumers(lane, streams.RENDERERS_GROUP))
    return total
