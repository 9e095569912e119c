"""What the thinnest Python intake of a one-ticket order costs on this machine:
the measured floor of the redesign sketched in docs/performance-notes.md
(capacity counted in Redis, the store written from a stream), not the api's
intake. It answers "would that redesign reach 0.8 ms of api CPU per order?"
with a figure instead of an estimate.

    uv run --frozen python -m bench.intake_floor [--orders 4000] [--rounds 3]

A server process: a bare ASGI app under uvicorn (httptools, uvloop, as the
api), which for each ``POST`` verifies the bearer token (``TokenVerifier``,
HS256 as the devstack), validates the body (``OrderIn``), builds the order
document (``Order``) and its ticket's render request with its signed code
(``adapters.renders.ticket_request``), and in one Lua script counts the
buyer's rate, takes the tickets from a capacity counter, writes the progress
hash and the render request, and queues the order document for the store;
then answers 202. A loop in the same process writes the queued orders to the
store (our FerretDB build) in batches (``insert_many``) and acks them. No
middleware, no outbox, no idempotency, no replicas, no projector: what the
redesign could not do without is here, what it might is not.

``CLIENTS`` closed-loop buyers (bench.capacity's, as ``bench.intake``'s CPU
phase), ``--orders`` orders a round; the server's CPU per order
(``/proc/<pid>/stat``), Redis's and the store's beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from ticketry_devstack.procs import Proc, ferretdb_proc, free_port, redis_proc, wait_port

from bench.capacity import CLIENTS, cpu_s
from bench.scenarios import http_post, order_requests

EVENT_ID = "ev_0eba5a15176502ddacc9"
TO_STORE = "bench:orders-to-store"
GROUP = "store"
STORE_BATCH = 500

# KEYS: the buyer's rate counter, the event's sold counter, the order's
# progress hash, the render stream, the store's queue. ARGV: quantity,
# capacity, owner, render request, order document.
TAKE_LUA = """
if redis.call('INCR', KEYS[1]) == 1 then redis.call('EXPIRE', KEYS[1], 60) end
if redis.call('INCRBY', KEYS[2], ARGV[1]) > tonumber(ARGV[2]) then
  redis.call('DECRBY', KEYS[2], ARGV[1])
  return 0
end
redis.call('HSET', KEYS[3], 'total', ARGV[1], 'owner', ARGV[3])
redis.call('EXPIRE', KEYS[3], 86400)
redis.call('XADD', KEYS[4], '*', 'v', '1', 'data', ARGV[4])
redis.call('XADD', KEYS[5], '*', 'order', ARGV[5])
return 1
"""


def serve(redis_port: int, http_port: int, mongo_url: str) -> None:
    """The server process: the thin intake on ``http_port``."""
    from decimal import Decimal

    import uvicorn
    from beanie import init_beanie
    from pymongo import AsyncMongoClient
    from redis.asyncio import Redis
    from starlette.types import Receive, Scope, Send
    from ticketry.auth import TokenVerifier
    from ticketry.codes import load_keyring
    from ticketry.documents import Event, Order
    from ticketry.ids import new_id, ticket_ids
    from ticketry.settings import DEV_JWT_SECRET
    from ticketry_api.adapters.renders import ticket_request
    from ticketry_api.http.schemas import OrderIn

    verifier = TokenVerifier(algorithm="HS256", key=DEV_JWT_SECRET)
    keyring = load_keyring(Path(tempfile.mkdtemp(prefix="ticketry-floor-keys-")), create=True)
    redis = Redis(port=redis_port)
    take = redis.register_script(TAKE_LUA)
    mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_url)
    events: list[Event] = []
    tasks: list[asyncio.Task[None]] = []

    async def store_writer() -> None:
        orders = mongo.get_database("ticketry")["orders"]
        while True:
            got: Any = await redis.xreadgroup(GROUP, "w", {TO_STORE: ">"}, count=STORE_BATCH, block=5)
            if not got:
                continue
            entries = got[0][1]
            await orders.insert_many([orjson.loads(f[b"order"]) for _, f in entries], ordered=False)
            await redis.xack(TO_STORE, GROUP, *[i for i, _ in entries])

    async def start() -> None:
        await init_beanie(database=mongo.get_database("ticketry"), document_models=[Event, Order])
        events.append(
            Event(
                id=EVENT_ID,
                organizer_id="bench-org",
                name="Floor",
                venue="Here",
                starts_at=datetime(2027, 6, 1, tzinfo=UTC),
                capacity=10**9,
                price_minor=2500,
                currency="EUR",
            )
        )
        with contextlib.suppress(Exception):  # BUSYGROUP: made before
            await redis.xgroup_create(TO_STORE, GROUP, id="0", mkstream=True)
        tasks.append(asyncio.create_task(store_writer()))

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] == "lifespan.startup":
                await start()
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        auth = next(v for k, v in scope["headers"] if k == b"authorization").decode()
        who = verifier.verify(auth.removeprefix("Bearer "))
        req = OrderIn.model_validate_json(body)
        event = events[0]
        tier = event.tier(req.tier)
        assert tier is not None
        oid = new_id("or")
        order = Order(
            id=oid, owner_id=who.sub, event_id=event.id, quantity=req.quantity, tier=tier.id,
            holder_name=req.holder_name, unit_price_minor=tier.price_minor, ticket_ids=ticket_ids(oid, req.quantity),
            key_id=keyring.active_kid, idem=f"auto:{oid}", request_hash="x",
        )  # fmt: skip
        render = ticket_request(keyring, event, tier.id, oid, 0, 1, req.holder_name, Decimal(tier.price_minor) / 100)
        keys = [f"bench:rate:{who.sub}", f"bench:sold:{event.id}", f"bench:progress:{oid}", "bench:render", TO_STORE]
        args: list[Any] = [req.quantity, event.capacity, who.sub, render.to_fields()["data"],
                orjson.dumps(order.model_dump(mode="json", by_alias=True))]  # fmt: skip
        taken = await take(keys=keys, args=args)
        out = orjson.dumps({"id": oid, "event_id": event.id, "quantity": req.quantity, "tickets": order.ticket_ids})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
        await send({"type": "http.response.start", "status": 202 if taken else 409, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    uvicorn.run(app, host="127.0.0.1", port=http_port, http="httptools", loop="uvloop", log_level="warning")


async def buyers(http_port: int, orders: int) -> dict[int, int]:
    """``orders`` one-ticket orders from ``CLIENTS`` closed-loop buyers on kept-alive
    connections (bench.scenarios' bare HTTP/1.1 client); answers by status."""
    requests = order_requests("127.0.0.1", EVENT_ID, 64)
    todo = iter(range(orders))
    answers: dict[int, int] = {}

    async def buyer() -> None:
        conn = await asyncio.open_connection("127.0.0.1", http_port)
        for i in todo:
            status = await http_post(conn, requests[i % len(requests)])
            answers[status] = answers.get(status, 0) + 1
        conn[1].close()

    await asyncio.gather(*(buyer() for _ in range(CLIENTS)))
    return answers


@contextlib.contextmanager
def servers(tmp: Path) -> Iterator[tuple[int, int, Proc, Proc, subprocess.Popen[bytes]]]:
    """Redis, FerretDB and the thin intake, each listening; the intake's and Redis's ports, and the three."""
    redis_port, mongo_port, http_port = free_port(), free_port(), free_port()
    redis = redis_proc(tmp / "redis", redis_port).start()
    store = ferretdb_proc(tmp / "ferretdb", mongo_port).start()
    intake: subprocess.Popen[bytes] | None = None
    try:
        wait_port(redis_port, 60, proc=redis.popen)
        wait_port(mongo_port, 60, proc=store.popen)
        argv = [sys.executable, "-m", "bench.intake_floor", "--serve", str(redis_port), str(http_port)]
        intake = subprocess.Popen([*argv, f"mongodb://127.0.0.1:{mongo_port}/"])
        wait_port(http_port, 60, proc=intake)
        yield http_port, redis_port, redis, store, intake
    finally:
        if intake is not None:
            intake.terminate()
            intake.wait(15)
        store.stop()
        redis.stop()


def stored(redis_port: int) -> None:
    """Wait until the store loop has written and acked every queued order."""
    from redis import Redis

    with Redis(port=redis_port) as r:
        while True:
            (group,) = r.xinfo_groups(TO_STORE)
            if group["pending"] == 0 and group["last-delivered-id"] == r.xinfo_stream(TO_STORE)["last-generated-id"]:
                return
            time.sleep(0.01)


def pid_of(proc: Proc) -> int:
    assert proc.popen is not None
    return proc.popen.pid


def run(orders: int, rounds: int) -> list[dict[str, Any]]:
    out = []
    with (
        tempfile.TemporaryDirectory(prefix="ticketry-floor-") as tmp,
        servers(Path(tmp)) as (port, redis_port, redis, store, intake),
    ):
        asyncio.run(buyers(port, 500))  # warm-up: connections, scripts, the store's collection
        for _ in range(rounds):
            pids = {"intake": intake.pid, "redis": pid_of(redis), "store": pid_of(store)}
            before = {k: cpu_s(p) for k, p in pids.items()}
            start = time.perf_counter()
            answers = asyncio.run(buyers(port, orders))
            wall = time.perf_counter() - start
            stored(redis_port)  # the orders' writes to the store count too
            cpu = {f"{k}_cpu_ms_per_order": round((cpu_s(p) - before[k]) * 1000 / orders, 3) for k, p in pids.items()}
            out.append({"orders": orders, "answers": answers, "orders_per_s": round(orders / wall), **cpu})
    return out


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--orders", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    for r in run(args.orders, args.rounds):
        print(
            f"thin intake: {r['intake_cpu_ms_per_order']:.3f} ms of its CPU per one-ticket order "
            f"(Redis {r['redis_cpu_ms_per_order']:.3f}, store {r['store_cpu_ms_per_order']:.3f}); "
            f"{r['orders_per_s']:,} orders/s; answers {r['answers']}"
        )


if __name__ == "__main__":
    main()
