"""The api's intake: its CPU per one-ticket order and ``POST /v1/orders``'s p99
at 200/s while the renderers render, with one api process and with several
(``TICKETRY_API_WORKERS``).

    uv run --frozen python -m bench.intake [--workers 1,0] [--rate 200] [--seconds 20] [--orders 400] [--big 4000]

For each worker count (0: the default, one per allowed core) one stack
(Redis, FerretDB, api, notifier, 2 renderers) under a temporary directory,
warmed by a short load (which also starts every worker's connections). Then:

1. **api CPU per order:** ``--orders`` one-ticket orders from a few concurrent
   clients, followed in the store until all are complete; the CPU of the api's
   processes (the supervisor and its workers, ``/proc/<pid>/stat``) over that
   phase, per order (bench/capacity.py's accounting). Before it, the api's CPU
   over 10 s with no orders: what its own loops (projector, sweeps, senders,
   the supervisor's pings) cost, once per worker.
2. **POST p99 with renderers busy:** an order of ``--big`` tickets is placed,
   then ``POST /v1/orders`` runs open-loop at ``--rate`` for ``--seconds``
   (bench/scenarios.py's ``post_latency``) while the renderers work on it.

Prints one line per worker count and the load average at the end; writes
``bench/results/intake-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from pymongo import AsyncMongoClient
from ticketry_devstack.procs import Stack, start_stack

from bench.capacity import CLIENTS, DONE, cpu_s
from bench.scenarios import create_event, order, post_latency

RESULTS = Path(__file__).parent / "results"
IDLE_S = 10.0  # the api's idle CPU is read over this long


def tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            continue
    return out


def api_cpu_s(stack: Stack) -> float:
    """CPU seconds so far of the api's processes (a supervisor's workers included)."""
    popen = stack.procs["api"].popen
    assert popen is not None
    return sum(cpu_s(p) for p in tree(popen.pid))


async def api_cpu_per_order(stack: Stack, orders: int) -> float:
    """Milliseconds of api CPU per one-ticket order, ``orders`` of them placed and completed."""
    mongo: AsyncMongoClient[Any] = AsyncMongoClient(stack.env["TICKETRY_MONGO_URL"])
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            event_id = await create_event(api, orders + 10)
            before = api_cpu_s(stack)
            ids: list[str] = []
            queue = iter(range(orders))

            async def client(n: int) -> None:
                for i in queue:
                    ids.append((await order(api, f"intake-buyer-{n}-{i}", event_id, 1))["id"])

            await asyncio.gather(*(client(n) for n in range(CLIENTS)))
            # Done when the store says so (asking the api would count the asking)
            states = mongo.get_default_database()["order_states"]
            while await states.count_documents({"_id": {"$in": ids}, "status": {"$in": list(DONE)}}) < len(ids):
                await asyncio.sleep(0.5)
            return (api_cpu_s(stack) - before) * 1000 / orders
    finally:
        await mongo.close()


async def post_while_rendering(stack: Stack, big: int, rate: float, seconds: float) -> dict[str, Any]:
    """``post_latency`` at ``rate`` while the renderers work on a ``big``-ticket order."""
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=120) as api:
        event_id = await create_event(api, big + 10)
        placed = await order(api, "intake-big", event_id, big)
    out = await post_latency(stack, rate, seconds)
    mongo: AsyncMongoClient[Any] = AsyncMongoClient(stack.env["TICKETRY_MONGO_URL"])
    try:  # was the big order still rendering when the load ended? (else the renderers idled part of it)
        state = await mongo.get_default_database()["order_states"].find_one({"_id": placed["id"]})
        out["big_order_done_during_load"] = state is not None and state.get("status") in DONE
    finally:
        await mongo.close()
    return out


async def leg(workers: int, rate: float, seconds: float, orders: int, big: int) -> dict[str, Any]:
    loadavg_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ticketry-intake-") as tmp:
        env = {"TICKETRY_API_WORKERS": str(workers)}
        stack = await asyncio.to_thread(start_stack, Path(tmp), 2, env)
        try:
            await post_latency(stack, 50, 4)  # warm-up: every worker's pools, the designs
            popen = stack.procs["api"].popen
            assert popen is not None
            processes = len(tree(popen.pid))
            before = api_cpu_s(stack)
            await asyncio.sleep(IDLE_S)  # what the api's own loops cost with no order coming
            idle_ms_per_s = (api_cpu_s(stack) - before) * 1000 / IDLE_S
            cpu_ms = await api_cpu_per_order(stack, orders)
            post = await post_while_rendering(stack, big, rate, seconds)
        finally:
            await asyncio.to_thread(stack.stop)
    return {
        "workers": workers or len(os.sched_getaffinity(0)),
        "api_processes": processes,
        "api_cpu_ms_per_order": round(cpu_ms, 3),
        "api_idle_cpu_ms_per_s": round(idle_ms_per_s, 2),
        "post": post,
        "loadavg_before": loadavg_before,
        "loadavg": os.getloadavg(),
    }


async def run(
    workers: list[int] | None = None, rate: float = 200.0, seconds: float = 20.0, orders: int = 400, big: int = 4000
) -> dict[str, Any]:
    """Each worker count of ``workers`` in turn (default 1, then one per allowed
    core: 0), a stack of its own each; what :func:`main` prints."""
    counts = workers if workers is not None else [1, 0]
    legs = [await leg(w, rate, seconds, orders, big) for w in counts]
    return {"rate": rate, "seconds": seconds, "orders": orders, "big": big, "legs": legs}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=lambda s: [int(w) for w in s.split(",")], default=[1, 0])
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--orders", type=int, default=400)
    p.add_argument("--big", type=int, default=4000)
    return p


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} ms"


# Issue 33's targets for the api's intake.
CPU_TARGET_MS = 0.8
P99_TARGET_MS = 50.0


def rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``just bench``'s rows, per worker count: the api's CPU per order, POST's
    p99 / p50 with renderers busy, and what was accepted (figure, value, target, ratio)."""

    def num(v: float | None, digits: int = 1) -> str:
        return "n/a" if v is None else f"{v:,.{digits}f}"

    rate = f"{result['rate']:g}/s"
    out: list[tuple[str, str, str, str]] = []
    for g in result["legs"]:
        p, w, cpu = g["post"], g["workers"], g["api_cpu_ms_per_order"]
        who = f"{w} api worker{'s' if w != 1 else ''}"
        busy = "the whole load" if not p.get("big_order_done_during_load") else "done before the load ended"
        idle = num(g["api_idle_cpu_ms_per_s"])
        out += [
            (f"api CPU per one-ticket order, {who} (ms)", f"{num(cpu, 2)} ({idle} ms/s idle)",
             f"≤ {CPU_TARGET_MS:g}", f"{cpu / CPU_TARGET_MS:.2f}×" if cpu is not None else ""),
            (f"POST /v1/orders at {rate} with renderers busy, {who}: p99 / p50 (ms)",
             f"{num(p['p99_ms'])} / {num(p['p50_ms'])}", f"p99 ≤ {P99_TARGET_MS:g}",
             f"{p['p99_ms'] / P99_TARGET_MS:.2f}×" if p["p99_ms"] is not None else ""),
            (f"  {who}: accepted per second; refused or timed out / sent; the {result['big']:,}-ticket order",
             f"{num(p.get('accepted_per_s'))}; {p['refused']} / {p['sent']}; {busy}", "", ""),
        ]  # fmt: skip
    return out


def main() -> None:
    args = parser().parse_args()
    out = asyncio.run(run(args.workers, args.rate, args.seconds, args.orders, args.big))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"intake-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2))
    for g in out["legs"]:
        p = g["post"]
        print(
            f"api workers {g['workers']}: api CPU {g['api_cpu_ms_per_order']:.2f} ms per one-ticket order "
            f"({g['api_idle_cpu_ms_per_s']:.1f} ms/s idle); "
            f"POST at {out['rate']:g}/s with renderers busy: p50 {_ms(p['p50_ms'])}, p99 {_ms(p['p99_ms'])}, "
            f"{p['accepted_per_s'] or 0:.0f}/s accepted, {p['refused']} refused; "
            f"load average before / after {g['loadavg_before'][0]:.2f} / {g['loadavg'][0]:.2f}"
        )
    print(f"written {path}")


if __name__ == "__main__":
    main()
