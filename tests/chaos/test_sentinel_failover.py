"""The Redis primary dies (SIGKILL) under a stack that finds it through
Sentinel: Redis's own failover promotes the replica and every service moves
to it by itself.

A real primary + replica + three ``redis-sentinel`` processes
(``tests.redis_ha``) under a real stack (api, notifier, two renderers, each
given ``TICKETRY_REDIS_SENTINELS``). Buyers keep ordering with
``Idempotency-Key``s, retrying on 503, through the kill; what they were told
must hold: every 202 completes, each ticket rendered once, no 5xx other than
503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio
from ticketry.db import connect_redis
from ticketry.redis_ha import RedisTarget, parse_sentinels
from ticketry_devstack.procs import start_stack

from tests.chaos.support import (
    RENDERER_KILL_ENV,
    ProgressWatcher,
    completes_rendering_each_once,
    mongo_of,
)
from tests.conftest import TokenFactory
from tests.helpers import bearer, create_event, eventually
from tests.redis_ha import MASTER, RedisHA, redis_ha

pytestmark = [pytest.mark.chaos]

CLIENTS = 3
BEFORE_KILL = 4  # orders accepted before the primary is killed
AFTER_KILL = 6  # and after


def target_of(ha: RedisHA) -> RedisTarget:
    return RedisTarget(ha.node_url(0), parse_sentinels(ha.sentinels_setting), MASTER)


@pytest.mark.timeout(400)
async def test_the_set_replaces_a_killed_primary_and_takes_it_back_as_a_replica(tmp_path: Path) -> None:
    with redis_ha(tmp_path / "redis") as ha:
        # Given a write the replica has acknowledged (WAIT 1)
        first = await ha.primary_node()
        client = redis.asyncio.Redis.from_url(ha.node_url(first))
        try:
            await client.set("before", "1")
            assert await client.execute_command("WAIT", 1, 10_000) == 1
        finally:
            await client.aclose()
        # When the primary is killed
        old = await ha.kill_primary()
        # Then the sentinels promote the replica, which holds the write and takes new ones
        new = await ha.wait_promoted(old)
        assert new != old
        promoted = redis.asyncio.Redis.from_url(ha.node_url(new))
        try:
            assert await promoted.get("before") == b"1"
            await promoted.set("after", "2")
        finally:
            await promoted.aclose()
        # And the old primary, started again on its data, comes back as the new one's replica
        ha.restart(old)
        await ha.wait_replica_of(old, new)
        rejoined = redis.asyncio.Redis.from_url(ha.node_url(old))
        try:
            assert await eventually(lambda: rejoined.get("after"), "the rejoined replica has the new write") == b"2"
            with pytest.raises(redis.ReadOnlyError):
                await rejoined.set("x", "1")
        finally:
            await rejoined.aclose()


@pytest.mark.timeout(300)
async def test_a_read_in_flight_at_the_kill_goes_on_on_the_new_primary(tmp_path: Path) -> None:
    with redis_ha(tmp_path / "redis") as ha:
        target = target_of(ha)
        # Given a patient reader (background work: no request budget) blocked in XREAD on the primary
        reader = connect_redis(target, timeout_s=60)
        writer = connect_redis(target)
        try:
            await writer.xadd("failover-stream", {"n": "0"})
            assert await writer.execute_command("WAIT", 1, 10_000) == 1
            reading = asyncio.create_task(reader.xread({"failover-stream": "$"}, block=50_000))
            await _wait_blocked_reader(ha, await ha.primary_node())
            # When the primary is killed and the replica promoted
            old = await ha.kill_primary()
            new = await ha.wait_promoted(old)
            # Then the same read, retried, blocks on the new primary (it does not keep
            # reconnecting to the dead one until its retries run out) and gets what is added there
            await _wait_blocked_reader(ha, new)
            added = await writer.xadd("failover-stream", {"n": "1"})
            got = await asyncio.wait_for(reading, 120)
            assert [(entry_id, fields) for _, entries in got for entry_id, fields in entries] == [(added, {b"n": b"1"})]
        finally:
            await reader.aclose()
            await writer.aclose()


async def _wait_blocked_reader(ha: RedisHA, node: int) -> None:
    """Wait until a client is blocked in XREAD on ``node``."""
    watch = redis.asyncio.Redis.from_url(ha.node_url(node))

    async def blocked() -> bool:
        clients: list[dict[str, Any]] = await watch.client_list()
        return any(c.get("cmd") == "xread" and "b" in str(c.get("flags")) for c in clients)

    try:
        await eventually(blocked, f"a reader blocked in XREAD on redis-{node}", timeout_s=60)
    finally:
        await watch.aclose()


@dataclass
class Buyers:
    """Buyers ordering in a loop, each order under its own Idempotency-Key,
    retried on 503 (after its Retry-After) until answered otherwise."""

    api: httpx.AsyncClient
    token: str
    event_id: str
    accepted: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> the 202 body
    statuses: list[int] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)  # answers no client may get
    slowest_s: float = 0.0
    first_after_kill: float | None = None
    killed_at: float | None = None
    keys: itertools.count[int] = field(default_factory=itertools.count)
    timeline: list[tuple[float, int, float]] = field(default_factory=list)  # (sent after the kill, status, took)

    async def order_once(self, key: str) -> None:
        body = {"event_id": self.event_id, "quantity": 2, "holder_name": "Ada Lovelace", "tier": "standard"}
        headers = {**bearer(self.token), "Idempotency-Key": key}
        while True:
            sent = time.monotonic()
            try:
                r = await self.api.post("/v1/orders", json=body, headers=headers)
            except httpx.TransportError as exc:  # no answer at all: counted, retried with the same key
                self.bad.append(f"{key}: {exc!r}")
                continue
            took = time.monotonic() - sent
            self.slowest_s = max(self.slowest_s, took)
            self.statuses.append(r.status_code)
            if self.killed_at is not None:
                self.timeline.append((sent - self.killed_at, r.status_code, took))
            if r.status_code == 202:
                got = r.json()
                # A retry of an accepted key answers the same order, never a second one.
                assert self.accepted.setdefault(key, got)["id"] == got["id"]
                if self.killed_at is not None and self.first_after_kill is None and sent >= self.killed_at:
                    self.first_after_kill = time.monotonic() - self.killed_at
                return
            if r.status_code == 503 and "retry-after" in r.headers:
                await asyncio.sleep(min(float(r.headers["retry-after"]), 1.0))
                continue
            if r.status_code == 409 and r.json().get("title") == "order in progress":
                continue  # the first request with this key is still being finished: ask again
            self.bad.append(f"{key}: {r.status_code} {r.text[:200]}")
            return

    async def at_least(self, n: int) -> bool:
        return len(self.accepted) >= n

    async def run(self, until: asyncio.Event) -> None:
        while not until.is_set():
            await self.order_once(f"failover-{os.getpid()}-{next(self.keys)}")


@pytest.mark.timeout(600)
async def test_orders_go_on_after_the_primary_is_killed(tmp_path: Path, token: TokenFactory) -> None:
    with redis_ha(tmp_path / "redis") as ha:
        env = {**ha.env(), **RENDERER_KILL_ENV}
        # The URL names the first primary: the services take only its database from it.
        stack = await asyncio.to_thread(
            start_stack, tmp_path / "stack", 2, env,
            redis_url=env["TICKETRY_REDIS_URL"], mongo_url=os.environ.get("TICKETRY_TEST_MONGO_URL"),
        )  # fmt: skip
        checks = connect_redis(target_of(ha))  # finds the primary as the services do
        mongo = mongo_of(stack)
        stop = asyncio.Event()
        loops: list[asyncio.Task[None]] = []
        background: list[asyncio.Task[None]] = []
        try:
            async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
                buyer = token("failover-buyer", "buyer")
                event = await create_event(api, token("failover-org", "organizer"), capacity=5000)
                buyers = Buyers(api, buyer, event["id"])
                renderer_pids = [p.pid for p in stack.renderers]

                # Given buyers ordering, and an order of 300 tickets rendering, watched on its socket
                big = await api.post(
                    "/v1/orders", headers={**bearer(buyer), "Idempotency-Key": "failover-big"},
                    json={"event_id": event["id"], "quantity": 300, "holder_name": "Ada", "tier": "standard"},
                )  # fmt: skip
                assert big.status_code == 202, big.text
                watcher = ProgressWatcher(big.json()["progress_url"], buyer)
                watching = asyncio.create_task(watcher.run(timeout_s=400))
                background.append(watching)
                loops += [asyncio.create_task(buyers.run(stop)) for _ in range(CLIENTS)]
                await eventually(lambda: buyers.at_least(BEFORE_KILL), "orders before the kill")

                # When the Redis primary is killed
                old = await ha.primary_node()
                before = len(buyers.accepted)
                buyers.killed_at = time.monotonic()
                ha.kill(old)
                new = await ha.wait_promoted(old)
                print(f"\nsentinels promoted redis-{new} {time.monotonic() - buyers.killed_at:.1f} s after the kill")

                # Then orders are accepted again (the first one is reported), ...
                await eventually(lambda: buyers.at_least(before + AFTER_KILL), "orders after the kill", timeout_s=240)
                stop.set()
                await asyncio.gather(*loops)
                assert buyers.first_after_kill is not None
                print(
                    f"kill -> first 202: {buyers.first_after_kill:.1f} s; orders accepted: {len(buyers.accepted)} "
                    f"({len(buyers.accepted) - before} after the kill); answers: "
                    f"{ {s: buyers.statuses.count(s) for s in sorted(set(buyers.statuses))} }; "
                    f"slowest answer {buyers.slowest_s:.1f} s"
                )
                print("after the kill (sent at s, status, took s):", [
                    (round(t, 1), status, round(took, 1)) for t, status, took in buyers.timeline[:20]
                ])  # fmt: skip
                # ... no answer but 202, 503 with Retry-After, or 409 "in progress" for a
                # retried key whose first request is still being finished (never a 500, never none), ...
                assert buyers.bad == []
                assert set(buyers.statuses) <= {202, 409, 503}
                # ... every order that got a 202 completes, each ticket rendered once, by the
                # same renderer processes (they reconnected by themselves), ...
                accepted = [big.json(), *buyers.accepted.values()]
                for order in accepted:
                    await completes_rendering_each_once(checks, mongo, order, 240)
                assert [p.pid for p in stack.renderers] == renderer_pids
                assert all(p.alive() for p in stack.renderers)
                # ... the big order's socket saw its completion, each ticket counted once
                await asyncio.wait_for(watching, 300)
                assert watcher.done.is_set(), "the progress socket never saw the order complete"
                rendered = {m["ticket_id"] for m in watcher.of_type("ticket.rendered")}
                assert rendered == set(big.json()["tickets"])
                print(f"the big order's socket reconnected {watcher.reconnects} time(s)")

                # And the old primary, started again, comes back as a replica
                ha.restart(old)
                await ha.wait_replica_of(old, new)
                assert await ha.primary_node() == new
        finally:
            stop.set()
            for task in (*loops, *background):
                task.cancel()
            await asyncio.gather(*loops, *background, return_exceptions=True)
            await checks.aclose()
            await mongo.close()
            await asyncio.to_thread(stack.stop)
