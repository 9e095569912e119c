"""Guarantee 4 (no stuck work) and the dead-letter tools: poison requests are
dead-lettered after N attempts with their reason and history, the rest of the
order completes, and `ticketryctl dlq redrive` re-drives exactly once."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import httpx
import orjson
import pytest
from ticketry import streams
from ticketry_devstack.procs import tool

from tests.chaos.support import (
    ProgressWatcher,
    db_of,
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

ATTEMPTS = 3
ENV = {
    "TICKETRY_RENDER_MAX_ATTEMPTS": str(ATTEMPTS),
    "TICKETRY_RETRY_BASE_S": "0.1",
    "TICKETRY_RETRY_CAP_S": "0.5",
    "TICKETRY_CLAIM_IDLE_MS": "3000",
    "TICKETRY_CLAIM_INTERVAL_S": "0.2",
}


def ctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("ticketryctl"), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.timeout(300)
async def test_poison_requests_are_dead_lettered_and_redriven_once(tmp_path: Path, token: TokenFactory) -> None:
    stack = await asyncio.to_thread(make_stack, tmp_path, 0, ENV)
    redis, mongo = redis_of(stack), mongo_of(stack)
    env = stack.service_env()
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            # Given a 10-ticket order, no renderer running yet, and
            buyer = token("poison-buyer", "buyer")
            event = await create_event(api, token("poison-org", "organizer"), capacity=10)
            r = await place_order(api, buyer, event["id"], 10)
            assert r.status_code == 202, r.text
            order = r.json()
            poisoned = order["tickets"][0]
            # ... one ticket that fails on every attempt: a directory squats on its PDF
            # path, so render-and-store raises each time (the same path as a template
            # error: any exception from render/store is a failed attempt) ...
            squat = Path(stack.env["TICKETRY_STORAGE_DIR"]) / order["id"] / f"{poisoned}.pdf"
            (squat / "x").mkdir(parents=True)
            # ... and two malformed requests XADDed straight onto the lane
            lane = streams.render_lane("standard", 10)
            await redis.xadd(lane, {"v": "1", "data": b"{not json"})
            await redis.xadd(lane, {"v": "1", "data": orjson.dumps({"ticket_id": "tk_x"})})

            # When renderers start
            watcher = ProgressWatcher(order["progress_url"], buyer)
            watching = asyncio.create_task(watcher.run(timeout_s=240))
            stack.start_renderer()
            stack.start_renderer()
            await asyncio.wait_for(watching, 270)

            # Then the rest of the order completes and the buyer hears ticket.failed
            assert watcher.done.is_set(), watcher.messages
            failed = watcher.of_type("ticket.failed")
            assert [m["ticket_id"] for m in failed] == [poisoned]
            assert "IsADirectoryError" in failed[0]["reason"] or "Error" in failed[0]["reason"]
            assert sorted(m["ticket_id"] for m in watcher.of_type("ticket.rendered")) == sorted(order["tickets"][1:])
            done = watcher.of_type("order.completed")[0]
            assert (done["rendered"], done["failed"]) == (9, 1)

            async def projected(status: str) -> bool:
                doc = await db_of(mongo).order_states.find_one({"_id": order["id"]})
                return bool(doc and doc["status"] == status)

            await wait_until(lambda: projected("partially_failed"), 120)
            t = await db_of(mongo).ticket_states.find_one({"_id": poisoned})
            assert t["status"] == "failed" and t["reason"]

            # And three dead letters: two malformed at once, one after N attempts with its history
            await wait_until(lambda: _dead_letters_are(redis, 3), 240)
            listed = orjson.loads(ctl(env, "dlq", "list", "--json").stdout)
            assert len(listed) == 3
            malformed = [d for d in listed if not d["redrivable"]]
            assert len(malformed) == 2 and all("malformed" in d["reason"] for d in malformed)
            (dead,) = [d for d in listed if d["redrivable"]]
            assert dead["ticket_id"] == poisoned and dead["source"] == lane
            assert [h.split(":")[0] for h in dead["history"]] == [f"attempt {i}" for i in range(1, ATTEMPTS + 1)]
            assert await pending_total(redis) == 0  # nothing stuck in the group

            # When the operator fixes the cause and re-drives it (twice)
            shutil.rmtree(squat)
            first = ctl(env, "dlq", "redrive", dead["id"])
            second = ctl(env, "dlq", "redrive", dead["id"])
            assert first.returncode == 0 and "re-driven" in first.stdout, first.stdout + first.stderr
            assert second.returncode == 1 and "not found" in second.stdout
            bad = ctl(env, "dlq", "redrive", malformed[0]["id"])
            assert bad.returncode == 1 and "not re-drivable" in bad.stdout

            # Then the ticket renders once, the order completes with exact counters
            await wait_until(lambda: projected("completed"), 120)
            doc = await db_of(mongo).order_states.find_one({"_id": order["id"]})
            assert (doc["rendered"], doc["failed"]) == (10, 0)
            assert (await db_of(mongo).ticket_states.find_one({"_id": poisoned}))["status"] == "rendered"
            progress = await redis.hgetall(streams.order_progress(order["id"]))
            assert (int(progress[b"rendered"]), int(progress[b"failed"])) == (10, 0)
            events = await order_events(redis, order["id"])
            kinds = [(f["type"], f["ticket_id"]) for _, f in events]
            assert kinds.count(("ticket.rendered", poisoned)) == 1
            assert kinds.count(("ticket.failed", poisoned)) == 1
            assert [k for k, _ in kinds].count("order.completed") == 2  # partially_failed, then completed
            assert len(pdfs(stack, order["id"])) == 10
            assert await redis.xlen(streams.DEAD_LETTERS) == 2
            await wait_until(lambda: _no_pending(redis), 240)
    finally:
        await redis.aclose()
        await mongo.close()
        await asyncio.to_thread(stack.stop)


async def _dead_letters_are(redis: object, n: int) -> bool:
    return int(await redis.xlen(streams.DEAD_LETTERS)) == n  # type: ignore[attr-defined]


async def _no_pending(redis: object) -> bool:
    return await pending_total(redis) == 0  # type: ignore[arg-type]
