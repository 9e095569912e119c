"""Outages answered as clients expect: the store (FerretDB) or Redis is
SIGKILLed while buyers place orders, then started again on its data.

While it is down, every request gets a definite answer soon: ``503``
problem+json with ``Retry-After`` (or its usual answer where the request did
not need it), never a 500, a reset connection or a request that hangs for the
outage; ``/readyz`` says which dependency is down. The traffic is orders, and
beside them reads of an order and check-ins at a door. When it is back the api
serves again by itself (same process). Buyers retry with their
Idempotency-Key, as real clients do. Afterwards every accepted (202) order
completes, every recorded order was accepted, and the event's ``sold`` equals
the accepted orders' tickets (the outbox sweep gave back what the outage
left reserved).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from ticketry import streams
from ticketry_devstack.procs import Proc, Stack, ferretdb_proc, redis_proc, wait_port

from tests.chaos.support import db_of, mongo_of, pending_total, redis_of, wait_until
from tests.conftest import TokenFactory, make_stack
from tests.helpers import bearer, checkin_list, codes_of, create_event, place_order, scan

pytestmark = [pytest.mark.chaos]

# The product's promise: no answer slower than this while a dependency is down.
# With Redis down a request gives up within its retry budget (0.5 s); with the
# store down a store call waits out server selection (0.5 s): a read or a
# check-in answers within about a second, an order within about 2 s (on a
# loaded 2-core machine). The bounds leave such a machine room, while a request
# that waits out the outage, or a connect timeout of 5 s, fails them.
ANSWER_BOUND_S = {"ferretdb": 5.0, "redis": 3.0}
# Only bounds on a hang (each event comes much sooner).
CLIENT_TIMEOUT_S = 60.0
PHASE_DEADLINE_S = 120.0
SETTLE_DEADLINE_S = 300.0
# Each phase lasts until this much happened in it (counted, not timed).
ACCEPTED_PER_PHASE = 10
UNAVAILABLE_IN_OUTAGE = 10
READS_IN_OUTAGE = 5  # of each kind: an order read, a check-in
BUYERS = 4
API_ENV = {
    # Quick sweeps: what the outage left in flight is settled within the test.
    "TICKETRY_OUTBOX_GRACE_S": "3",
    "TICKETRY_OUTBOX_INTERVAL_S": "1",
}
# What each kind of request may answer (an order read and a check-in need
# only the store; a check-in of a code admitted before is 409 "already").
ALLOWED = {"order": {202, 409, 429, 503}, "read": {200, 429, 503}, "checkin": {200, 409, 429, 503}}


@dataclass
class Answer:
    phase: str
    status: int | str  # an HTTP status, or the transport error's class name
    took_s: float
    retry_after: str | None = None
    content_type: str = ""
    body: str = ""
    kind: str = "order"  # or "read", "checkin"

    @classmethod
    def of(cls, phase: str, r: httpx.Response, took_s: float, kind: str) -> Answer:
        return cls(
            phase, r.status_code, took_s, r.headers.get("retry-after"), r.headers.get("content-type", ""),
            r.text[:300], kind,
        )  # fmt: skip


@dataclass
class Phases:
    now: str = "before"
    answers: list[Answer] = field(default_factory=list)

    def count(self, phase: str, status: int | None = None, kind: str = "order") -> int:
        """Answers of ``kind`` in ``phase`` (with ``status``, if given)."""
        return sum(
            1 for a in self.answers if a.phase == phase and a.kind == kind and status in (None, a.status)
        )  # fmt: skip

    def slowest(self, phase: str, kind: str) -> float:
        return round(max((a.took_s for a in self.answers if a.phase == phase and a.kind == kind), default=0.0), 3)


class Buyer:
    """Places small orders one after another; a 503/429 (after its Retry-After),
    a 409 "in progress" or a transport error is retried with the same
    Idempotency-Key until the order is accepted."""

    def __init__(self, api_url: str, token: str, event_id: str, phases: Phases, seed: int) -> None:
        self.api_url, self.token, self.event_id, self.phases = api_url, token, event_id, phases
        self.rng = random.Random(seed)
        self.accepted: dict[str, dict[str, Any]] = {}  # Idempotency-Key → 202 body

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=self.api_url, timeout=CLIENT_TIMEOUT_S) as api:
            while not stop.is_set():
                key, quantity = f"o-{uuid.uuid4().hex}", self.rng.randint(1, 4)
                while True:  # once started, an order is retried to an answer, even after `stop`
                    phase, t0 = self.phases.now, time.monotonic()
                    try:
                        r = await place_order(api, self.token, self.event_id, quantity, idempotency_key=key)
                    except httpx.TransportError as exc:
                        self.phases.answers.append(Answer(phase, type(exc).__name__, time.monotonic() - t0))
                        await asyncio.sleep(0.5)
                        continue
                    self.phases.answers.append(Answer.of(phase, r, time.monotonic() - t0, "order"))
                    if r.status_code == 202:
                        body = r.json()
                        assert self.accepted.setdefault(key, body)["id"] == body["id"], "one key, two orders"
                        break
                    wait = float(r.headers.get("retry-after") or 0.2)
                    await asyncio.sleep(wait + self.rng.uniform(0, 0.2))


class Door:
    """Beside the buyers: reads an order and scans its codes at a door, one
    request after another (a short pause between: a polling page, a queue of
    people), whatever the answer."""

    def __init__(self, api_url: str, buyer: str, staff: str, order_id: str, codes: list[str], list_id: str) -> None:
        self.api_url, self.buyer, self.staff = api_url, buyer, staff
        self.order_id, self.codes, self.list_id = order_id, codes, list_id

    async def run(self, phases: Phases, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=self.api_url, timeout=CLIENT_TIMEOUT_S) as api:
            n = 0
            while not stop.is_set():
                for kind in ("read", "checkin"):
                    phase, t0 = phases.now, time.monotonic()
                    try:
                        if kind == "read":
                            r = await api.get(f"/v1/orders/{self.order_id}", headers=bearer(self.buyer))
                        else:
                            r = await scan(api, self.staff, self.codes[n % len(self.codes)], self.list_id)
                    except httpx.TransportError as exc:
                        phases.answers.append(Answer(phase, type(exc).__name__, time.monotonic() - t0, kind=kind))
                    else:
                        phases.answers.append(Answer.of(phase, r, time.monotonic() - t0, kind))
                    await asyncio.sleep(0.2)
                n += 1


async def _door(api: httpx.AsyncClient, stack: Stack, token: TokenFactory) -> Door:
    """An order of its own event (not counted with the buyers'), rendered, its
    codes read from its PDFs, and a check-in list."""
    org, buyer, staff = (
        token("door-org", "organizer"),
        token("door-buyer", "buyer"),
        token("door-staff", "staff", org="door-org"),
    )
    event = await create_event(api, org, capacity=10)
    r = await place_order(api, buyer, event["id"], 3)
    assert r.status_code == 202, r.text
    order = r.json()
    codes = await codes_of(api, order, buyer)
    return Door(stack.api_url, buyer, staff, order["id"], codes, await checkin_list(api, org, event["id"]))


async def _restart(stack: Stack, name: str) -> None:
    """``name`` (redis or ferretdb) again, on its own data and port."""
    fresh: Proc
    if name == "redis":
        fresh, port = redis_proc(stack.data_dir / "redis", stack.redis_port).start(), stack.redis_port
    else:
        fresh, port = ferretdb_proc(stack.data_dir / "ferretdb", stack.mongo_port).start(), stack.mongo_port
    stack.procs[name] = fresh
    await asyncio.to_thread(wait_port, port, 60, fresh.popen)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("dependency", ["ferretdb", "redis"])
async def test_a_dependency_killed_under_order_traffic(tmp_path: Path, token: TokenFactory, dependency: str) -> None:
    if dependency == "ferretdb" and os.environ.get("TICKETRY_TEST_MONGO_URL"):
        pytest.skip("the store is an external one (TICKETRY_TEST_MONGO_URL): nothing here to kill")
    if dependency == "redis" and os.environ.get("TICKETRY_TEST_REDIS_URL"):
        pytest.skip("Redis is an external one (TICKETRY_TEST_REDIS_URL): nothing here to kill")
    dep_key = "store" if dependency == "ferretdb" else "redis"
    stack = await asyncio.to_thread(make_stack, tmp_path, 1, API_ENV)
    redis, mongo = redis_of(stack), mongo_of(stack)
    db = db_of(mongo)
    phases = Phases()
    figures: dict[str, Any] = {"dependency": dependency}
    ready_in_outage: list[dict[str, Any]] = []
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=CLIENT_TIMEOUT_S) as api:
            door = await _door(api, stack, token)
            org = token("outage-org", "organizer")
            event = await create_event(api, org, capacity=100_000)
            buyers = [
                Buyer(stack.api_url, token(f"outage-buyer-{i}", "buyer"), event["id"], phases, seed=i)
                for i in range(BUYERS)
            ]
            stop = asyncio.Event()
            placing = [asyncio.create_task(b.run(stop)) for b in buyers]
            placing.append(asyncio.create_task(door.run(phases, stop)))

            # Given buyers whose orders are being accepted
            await wait_until(lambda: _at_least(phases, "before", 202, ACCEPTED_PER_PHASE), PHASE_DEADLINE_S)

            # When the dependency is SIGKILLed under that traffic
            phases.now = "down"
            await asyncio.to_thread(stack.procs[dependency].kill)

            # Then orders keep getting answers (503 with Retry-After), so do reads
            # and check-ins, and /readyz says not ready
            async def outage_seen() -> bool:
                r = await api.get("/readyz")
                if r.status_code == 503:
                    assert r.headers.get("retry-after") and r.headers["content-type"] == "application/problem+json"
                    ready_in_outage.append(r.json())
                return (
                    bool(ready_in_outage)
                    and phases.count("down", 503) >= UNAVAILABLE_IN_OUTAGE
                    and phases.count("down", kind="read") >= READS_IN_OUTAGE
                    and phases.count("down", kind="checkin") >= READS_IN_OUTAGE
                )

            await wait_until(outage_seen, PHASE_DEADLINE_S)
            problem = ready_in_outage[-1]
            assert problem[dep_key].startswith("down") and problem["status"] == 503, problem

            # When it is started again on its data
            phases.now = "back"
            await _restart(stack, dependency)

            # Then the same api process serves again by itself: ready, orders accepted
            async def ready() -> bool:
                return (await api.get("/readyz")).status_code == 200

            await wait_until(ready, PHASE_DEADLINE_S)
            await wait_until(lambda: _at_least(phases, "back", 202, ACCEPTED_PER_PHASE), PHASE_DEADLINE_S)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*placing), PHASE_DEADLINE_S)

            answers = phases.answers
            figures["answers"] = {
                f"{kind}/{ph}": dict(Counter(a.status for a in answers if a.phase == ph and a.kind == kind))
                for kind in ALLOWED
                for ph in ("before", "down", "back")
            }
            down = sorted((a for a in answers if a.phase == "down"), key=lambda a: -a.took_s)
            figures["slowest_in_outage"] = [(a.kind, a.status, round(a.took_s, 3), a.body[:80]) for a in down[:3]]
            figures["slowest_s"] = {
                f"{kind}/{ph}": phases.slowest(ph, kind) for kind in ALLOWED for ph in ("before", "down", "back")
            }
            accepted = {body["id"]: body for b in buyers for body in b.accepted.values()}
            figures["accepted_orders"] = len(accepted)

            # Every answer was one a client can act on: no 500, no reset, no hang
            odd = [a for a in answers if a.status not in ALLOWED[a.kind]]
            assert not odd, odd[:5]
            slow = [a for a in answers if a.took_s >= ANSWER_BOUND_S[dependency]]
            assert not slow, slow[:5]
            for a in answers:
                if a.status == 503:
                    assert a.retry_after is not None and float(a.retry_after) > 0, a
                    assert a.content_type.startswith("application/problem+json"), a
                if a.status == 409 and a.kind == "order":
                    assert "in progress" in a.body, a  # capacity is ample: never sold out
                if a.status == 409 and a.kind == "checkin":
                    assert "already" in a.body, a  # each code is scanned again and again

            # And nothing accepted is lost, nothing unaccepted is kept: after the
            # outbox sweep every recorded order is an accepted one, complete, and
            # the ledger counts exactly their tickets
            async def live_orders() -> dict[str, dict[str, Any]]:
                return {
                    o["_id"]: o async for o in db.orders.find({"event_id": event["id"], "status": {"$ne": "abandoned"}})
                }

            async def settled() -> bool:
                live = await live_orders()
                sold = (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()["sold"]
                outcomes = {s["_id"]: s async for s in db.order_states.find({"_id": {"$in": list(live)}})}
                done = all(
                    (s := outcomes.get(oid)) and s["status"] == "completed" and s["rendered"] == o["quantity"]
                    for oid, o in live.items()
                )
                in_flight = await redis.zcard(streams.ORDERS_IN_FLIGHT)
                # What the last look saw, printed when the deadline passes
                figures["last_seen"] = {
                    "live": len(live),
                    "not_done": {
                        oid: (outcomes.get(oid) or {}).get("status")
                        for oid in live
                        if not ((s := outcomes.get(oid)) and s["status"] == "completed")
                    },
                    "in_flight": in_flight,
                    "sold": sold,
                    "live_tickets": sum(o["quantity"] for o in live.values()),
                    "groups": {
                        key: [
                            {k: g[k] for k in ("name", "pending", "lag", "last-delivered-id") if k in g}
                            for g in await redis.xinfo_groups(key)
                        ]
                        for key in (*streams.RENDER_LANES, streams.TICKET_EVENTS)
                        if await redis.exists(key)
                    },
                }
                return done and in_flight == 0 and sold == sum(o["quantity"] for o in live.values())

            await wait_until(settled, SETTLE_DEADLINE_S, interval_s=1.0)
            live = await live_orders()
            figures["recorded_orders"] = len(live)
            assert set(live) == set(accepted)
            for order_id, body in accepted.items():
                assert live[order_id]["ticket_ids"] == body["tickets"]
            sold = (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()["sold"]
            figures["sold"] = sold
            assert sold == sum(len(b["tickets"]) for b in accepted.values())
            await wait_until(lambda: _no_pending(redis), PHASE_DEADLINE_S)
    finally:
        print(f"\nOUTAGE FIGURES {figures}")
        await redis.aclose()
        await mongo.close()
        await asyncio.to_thread(stack.stop)


async def _at_least(phases: Phases, phase: str, status: int, n: int) -> bool:
    return phases.count(phase, status) >= n


async def _no_pending(redis: Any) -> bool:
    return await pending_total(redis) == 0
