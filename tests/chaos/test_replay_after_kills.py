"""``ticketryctl replay`` after a chaos run (issue #18): the read models folded
from the ticket-event stream are exactly the live ones the projector built
while renderers were SIGKILLed holding work (their requests claimed by others,
or delivered twice when a killed renderer had rendered but not acked).

A replay that counts a ticket twice, misses a reclaimed one or gets an order's
counters wrong fails here: the live read models are first checked against
what was ordered (every ticket once, its status, each order's counters), then
dropped, and the real ``ticketryctl replay`` must rebuild them exactly."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry.replies import as_text

from tests.chaos.support import (
    RENDERER_KILL_ENV,
    actl,
    db_of,
    kill_renderers_holding_work,
    mongo_of,
    ok_json,
    pending_total,
    redis_of,
    wait_until,
)
from tests.conftest import TokenFactory, make_stack
from tests.helpers import create_event, place_order

pytestmark = [pytest.mark.chaos]

# Modest on purpose (the suite runs on a slow 2-core machine): three orders of
# 100 tickets, a successor placed when the last one is nearly rendered, until
# KILLS renderers were killed holding work (counted, not timed).
ORDER_TICKETS = 100
FIRST_ORDERS = 3
MAX_ORDERS = 8
RENDERERS = 3
KILLS = int(os.environ.get("TICKETRY_CHAOS_REPLAY_KILLS", "3"))
KILL_EVERY_S = float(os.environ.get("TICKETRY_CHAOS_KILL_EVERY_S", "1.0"))
CHAOS_DEADLINE_S = 300  # only a bound on a hang
WAIT_S = 300  # likewise
ENV = {
    **RENDERER_KILL_ENV,
    # the poisoned ticket: dead-lettered after two attempts, soon
    "TICKETRY_RENDER_MAX_ATTEMPTS": "2",
    "TICKETRY_RETRY_BASE_S": "0.1",
    "TICKETRY_RETRY_CAP_S": "0.5",
}
KEPT = "ticketry_replay_chaos"


@pytest.mark.timeout(900)
async def test_replay_after_renderer_kills_rebuilds_the_read_models_exactly(
    tmp_path: Path, token: TokenFactory
) -> None:
    stack = await asyncio.to_thread(make_stack, tmp_path, 0, ENV)
    redis, mongo = redis_of(stack), mongo_of(stack)
    db = db_of(mongo)
    figures: dict[str, Any] = {"order_tickets": ORDER_TICKETS}
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=120) as api:
            # Given three orders, the first with a ticket that cannot be rendered (a
            # directory squats on its PDF path; placed before any renderer runs, so
            # none renders it first)
            buyer = token("replay-chaos-buyer", "buyer")
            event = await create_event(api, token("replay-chaos-org", "organizer"), capacity=ORDER_TICKETS * MAX_ORDERS)
            orders: list[dict[str, Any]] = []

            async def place() -> None:
                r = await place_order(api, buyer, event["id"], ORDER_TICKETS)
                assert r.status_code == 202, r.text
                orders.append(r.json())

            for _ in range(FIRST_ORDERS):
                await place()
            poisoned = orders[0]["tickets"][0]
            (Path(stack.env["TICKETRY_STORAGE_DIR"]) / orders[0]["id"] / f"{poisoned}.pdf" / "x").mkdir(parents=True)

            async def successor() -> None:
                progress = streams.order_progress(orders[-1]["id"])
                if len(orders) < MAX_ORDERS and int(await redis.hget(progress, "rendered") or 0) >= ORDER_TICKETS * 0.9:
                    await place()

            # When renderers start, and one holding work is SIGKILLed (at most one a
            # second) and replaced, until KILLS were killed
            for _ in range(RENDERERS):
                stack.start_renderer()
            kills = await kill_renderers_holding_work(
                stack, redis, kills=KILLS, every_s=KILL_EVERY_S, deadline_s=CHAOS_DEADLINE_S,
                rng=random.Random(1818), before_each=successor,
            )  # fmt: skip
            figures |= {"kills": kills.kills, "held_by_killed": kills.held, "orders": len(orders)}
            assert kills.kills >= KILLS and kills.held >= KILLS, figures

            # ...and everything completed and the projector folded every event
            tickets = {t: o["id"] for o in orders for t in o["tickets"]}
            figures["tickets"] = len(tickets)

            async def settled() -> bool:
                return (
                    await db.order_states.count_documents({}) == len(orders)
                    and await db.ticket_states.count_documents({}) == len(tickets)
                    and await pending_total(redis) == 0
                    and await _projector_caught_up(redis)
                )

            figures["settle_s"] = round(await wait_until(settled, WAIT_S), 1)

            # Then the live read models are what was ordered: every ticket once, with
            # its order and status, and each order's counters
            live = {name: await _documents(db, name) for name in ("ticket_states", "order_states")}
            assert set(live["ticket_states"]) == set(tickets)
            assert {t: (d["order_id"], d["status"]) for t, d in live["ticket_states"].items()} == {
                t: (o, "failed" if t == poisoned else "rendered") for t, o in tickets.items()
            }
            outcomes = live["order_states"]
            counters = {_id: (d["status"], d["total"], d["rendered"], d["failed"]) for _id, d in outcomes.items()}
            assert counters == {
                o["id"]: ("partially_failed", ORDER_TICKETS, ORDER_TICKETS - 1, 1)
                if o is orders[0]
                else ("completed", ORDER_TICKETS, ORDER_TICKETS, 0)
                for o in orders
            }

            # ...and `ticketryctl replay` finds the rebuilt ones identical, every document compared
            report = ok_json(await actl(stack, "replay", "--json"))
            assert report["identical"] and report["differences"] == [], report
            for name in live:
                assert report[name]["compared"] == report[name]["rebuilt"] == len(live[name]), report
                assert report[name]["moved_on"] == report[name]["older_than_stream"] == 0, report
            figures["events_replayed"] = report["events"]["replayed"]

            # When the live read models are dropped and rebuilt by `ticketryctl replay`
            # into a database kept for a look
            for name in live:
                await db.drop_collection(name)
            rebuilt = await actl(stack, "replay", "--json", "--keep", "--database", KEPT)
            # Then replay reports each of them missing from the live side (exit 1)...
            assert rebuilt.returncode == 1, rebuilt.stdout + rebuilt.stderr
            diffs = orjson.loads(rebuilt.stdout)["differences"]
            assert sorted((d["collection"], d["id"], d["kind"]) for d in diffs) == sorted(
                (name, _id, "missing_in_live") for name, docs in live.items() for _id in docs
            )
            # ...and the rebuilt read models equal the snapshot exactly, document by document
            for name, docs in live.items():
                again = await _documents(mongo[KEPT], name)
                assert again == docs
    finally:
        print(f"\nREPLAY CHAOS FIGURES {figures}")
        await mongo.drop_database(KEPT)
        await redis.aclose()
        await mongo.close()
        await asyncio.to_thread(stack.stop)


async def _projector_caught_up(redis: Redis) -> bool:
    """The projector group has read every ticket event and acked them all."""
    groups: list[dict[Any, Any]] = await redis.xinfo_groups(streams.TICKET_EVENTS)
    (group,) = [g for g in groups if as_text(g["name"]) == streams.PROJECTOR_GROUP]
    info: dict[Any, Any] = await redis.xinfo_stream(streams.TICKET_EVENTS)
    return int(group["pending"]) == 0 and as_text(group["last-delivered-id"]) == as_text(info["last-generated-id"])


async def _documents(db: Any, name: str) -> dict[str, dict[str, Any]]:
    """Every document of a collection by ``_id``, each ``_id`` once."""
    docs = [d async for d in db[name].find({})]
    by_id = {d["_id"]: d for d in docs}
    assert len(by_id) == len(docs), f"{name}: an _id twice"
    return by_id
