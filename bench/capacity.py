"""What one ticket and one order cost each part of the system, measured in
CPU-seconds and Redis/store work rather than in wall time, so a capacity plan
can be drawn from them (docs/capacity.md).

    uv run --frozen python -m bench.capacity [--tickets 5000] [--orders 1000] [--plan-tickets 1000000]

One stack (Redis, FerretDB, api, notifier, 2 renderers) under a temporary
directory, warmed by a small order. Then two phases, each measured by the
difference of counters read before and after it:

1. **Per ticket:** one order of ``--tickets`` tickets, followed to
   ``order.completed`` on its progress socket (every ticket pushed).
2. **Per order:** ``--orders`` 1-ticket orders, from a few concurrent clients,
   each followed by the read model until all are complete (no sockets: a
   buyer's socket is measured by ``bench.crowd``). The per-order cost is this
   phase's cost per order minus one ticket's.

Counters: each process's CPU time (``/proc/<pid>/stat``, user + system: the
same on a busy machine as on an idle one, unlike rates), Redis's own
``INFO commandstats`` (calls and microseconds inside Redis, per command), and
the documents each collection of the store gained.

From these, for ``--plan-tickets`` tickets in ``--plan-minutes`` minutes with
``--plan-order-size`` tickets per order: cores per part, Redis's share of one
core, store inserts per second. Writes ``bench/results/capacity-<time>.json``
and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pymongo import AsyncMongoClient
from redis.asyncio import Redis
from ticketry_devstack.procs import Stack, start_stack

from bench.scenarios import create_event, order, watch

RESULTS = Path(__file__).parent / "results"
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
COLLECTIONS = ("reservations", "orders", "ticket_states", "order_states")
CLIENTS = 8  # concurrent buyers in the per-order phase
DONE = ("completed", "partially_failed", "failed")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime (fields 14, 15)


@dataclass
class Reading:
    cpu: dict[str, float]
    redis_calls: dict[str, int]
    redis_usec: dict[str, int]
    docs: dict[str, int]


def parts(stack: Stack) -> dict[str, list[int]]:
    """The pids of each part of the stack."""
    out = {name: [p.popen.pid] for name, p in stack.procs.items() if p.popen is not None}
    out["renderers"] = [r.popen.pid for r in stack.renderers if r.popen is not None]
    return out


async def read(stack: Stack, redis: Redis, mongo: AsyncMongoClient[Any]) -> Reading:
    stats: dict[str, Any] = await redis.info("commandstats")
    db = mongo.get_default_database()
    return Reading(
        cpu={name: sum(cpu_s(p) for p in pids) for name, pids in parts(stack).items()},
        redis_calls={k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()},
        redis_usec={k.removeprefix("cmdstat_"): int(v["usec"]) for k, v in stats.items()},
        docs={c: await db[c].count_documents({}) for c in COLLECTIONS},
    )


def delta(before: Reading, after: Reading, per: int) -> dict[str, Any]:
    """What happened between two readings, per unit (``per`` tickets or orders)."""
    calls = {k: v - before.redis_calls.get(k, 0) for k, v in after.redis_calls.items()}
    usec = {k: v - before.redis_usec.get(k, 0) for k, v in after.redis_usec.items()}
    return {
        "cpu_ms": {k: round((v - before.cpu.get(k, 0.0)) * 1000 / per, 3) for k, v in after.cpu.items()},
        "redis_calls": round(sum(calls.values()) / per, 2),
        "redis_usec": round(sum(usec.values()) / per, 2),
        "redis_top": dict(sorted(((k, round(v / per, 2)) for k, v in usec.items() if v), key=lambda kv: -kv[1])[:6]),
        "docs": {k: round((v - before.docs[k]) / per, 3) for k, v in after.docs.items()},
    }


async def per_ticket(stack: Stack, api: httpx.AsyncClient, event_id: str, tickets: int) -> None:
    placed = time.time()
    big = await order(api, "capacity-big", event_id, tickets)
    await watch(big["progress_url"], "capacity-big", placed, timeout_s=3600)


async def per_order(api: httpx.AsyncClient, mongo: AsyncMongoClient[Any], event_id: str, orders: int) -> None:
    ids: list[str] = []
    queue = iter(range(orders))

    async def client(n: int) -> None:
        for i in queue:
            ids.append((await order(api, f"capacity-buyer-{n}-{i}", event_id, 1))["id"])

    await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    # Every order rendered and projected: counted in the store, not asked of the
    # api (its answers would be counted as the orders' cost)
    states = mongo.get_default_database()["order_states"]
    while await states.count_documents({"_id": {"$in": ids}, "status": {"$in": list(DONE)}}) < len(ids):
        await asyncio.sleep(0.5)


def plan(t: dict[str, Any], o: dict[str, Any], tickets: int, minutes: float, order_size: float) -> dict[str, Any]:
    """Cores, Redis share and store inserts per second for ``tickets`` in ``minutes``."""
    ticket_rate = tickets / (minutes * 60)
    order_rate = ticket_rate / order_size
    cores = {
        part: round((t["cpu_ms"].get(part, 0.0) * ticket_rate + o["cpu_ms"].get(part, 0.0) * order_rate) / 1000, 2)
        for part in sorted(set(t["cpu_ms"]) | set(o["cpu_ms"]))
    }
    redis_core = (t["redis_usec"] * ticket_rate + o["redis_usec"] * order_rate) / 1e6
    inserts = sum(t["docs"].values()) * ticket_rate + sum(o["docs"].values()) * order_rate
    return {
        "tickets_per_s": round(ticket_rate),
        "orders_per_s": round(order_rate),
        "cores": cores,
        "redis_core_share": round(redis_core, 3),
        "redis_calls_per_s": round(t["redis_calls"] * ticket_rate + o["redis_calls"] * order_rate),
        "store_docs_per_s": round(inserts),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ticketry-capacity-") as tmp:
        stack = await asyncio.to_thread(start_stack, Path(tmp), 2)
        redis = Redis.from_url(stack.env["TICKETRY_REDIS_URL"])
        mongo: AsyncMongoClient[Any] = AsyncMongoClient(stack.env["TICKETRY_MONGO_URL"])
        try:
            await asyncio.to_thread(stack.wait_renderers, 2)
            async with httpx.AsyncClient(base_url=stack.api_url, timeout=120) as api:
                event_id = await create_event(api, args.tickets + args.orders + 1000)
                await per_ticket(stack, api, event_id, 200)  # warm-up: designs built, pools open
                await redis.config_resetstat()
                r0 = await read(stack, redis, mongo)
                await per_ticket(stack, api, event_id, args.tickets)
                r1 = await read(stack, redis, mongo)
                await per_order(api, mongo, event_id, args.orders)
                r2 = await read(stack, redis, mongo)
        finally:
            await redis.aclose()
            await mongo.close()
            await asyncio.to_thread(stack.stop)
    t = delta(r0, r1, args.tickets)
    whole = delta(r1, r2, args.orders)
    # One order of the second phase = its own cost + one ticket's.
    o = {
        "cpu_ms": {k: round(v - t["cpu_ms"].get(k, 0.0), 3) for k, v in whole["cpu_ms"].items()},
        "redis_calls": round(whole["redis_calls"] - t["redis_calls"], 2),
        "redis_usec": round(whole["redis_usec"] - t["redis_usec"], 2),
        "redis_top": whole["redis_top"],
        "docs": {k: round(v - t["docs"].get(k, 0.0), 3) for k, v in whole["docs"].items()},
    }
    return {
        "per_ticket": t,
        "per_order": o,
        "plan": plan(t, o, args.plan_tickets, args.plan_minutes, args.plan_order_size),
        "args": vars(args),
    }


def show(result: dict[str, Any]) -> None:
    t, o, p = result["per_ticket"], result["per_order"], result["plan"]
    print("\n| part | CPU ms per ticket | CPU ms per order (beyond its tickets) | cores for the plan |")
    print("| --- | --- | --- | --- |")
    for part in p["cores"]:
        print(f"| {part} | {t['cpu_ms'].get(part, 0)} | {o['cpu_ms'].get(part, 0)} | {p['cores'][part]} |")
    print(f"\nRedis per ticket: {t['redis_calls']} calls, {t['redis_usec']} µs inside Redis; top: {t['redis_top']}")
    print(f"Redis per order (beyond its ticket): {o['redis_calls']} calls, {o['redis_usec']} µs; top: {o['redis_top']}")
    print(f"Store documents per ticket: {t['docs']}; per order: {o['docs']}")
    print(
        f"\nPlan: {p['tickets_per_s']} tickets/s, {p['orders_per_s']} orders/s → Redis {p['redis_core_share']} "
        f"of one core ({p['redis_calls_per_s']} calls/s), store {p['store_docs_per_s']} documents/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tickets", type=int, default=5000)
    ap.add_argument("--orders", type=int, default=1000)
    ap.add_argument("--plan-tickets", type=int, default=1_000_000)
    ap.add_argument("--plan-minutes", type=float, default=10.0)
    ap.add_argument("--plan-order-size", type=float, default=2.0)
    args = ap.parse_args()
    result = asyncio.run(run(args))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"capacity-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2))
    show(result)
    print(f"\n(also in {out})")


if __name__ == "__main__":
    main()
