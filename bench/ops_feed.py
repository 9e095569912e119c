"""What the operator's console's live feed costs the api: the api process's
CPU with no console open vs ``--consoles`` (10) consoles' feeds open.

    uv run --frozen python -m bench.ops_feed [--consoles 10] [--seconds 20] [--rounds 3]

In ``just bench`` (``--no-ops-feed`` skips it). One stack (one renderer), a
sale going on in both legs so every part of the snapshot has work (two
2-ticket orders a second from changing buyers: streams move, ticket events
are folded into the sales counters, first-ticket latencies arrive) and a
waiting room with buyers in line. Each round runs two legs, alternated (off,
on / on, off) so a slow minute of a shared machine falls on both:

* off: no console; the api's own work (orders, projector, webhooks, mail);
* on: ``--consoles`` ``GET /v1/ops/feed`` streams open, each reading every
  snapshot (the feed polls once per api process however many listen, and
  sends each console the same bytes).

A leg's CPU is the api process's user + system time (``/proc/<pid>/stat``)
over ``--seconds`` of wall time, in cores; measuring starts once every
console has had a snapshot, and an off leg starts two feed intervals after
the last console left (its poll has stopped). The verdict: the medians'
difference under 0.02 cores (2 % of one core); their ratio is reported too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from ticketry_devstack.procs import Stack, start_stack

from bench import scenarios
from bench.flood import Row, show_and_save
from bench.scenarios import hdr, token

VERDICT_CORES = 0.02  # the consoles may cost the api at most 2 % of one core
FEED_INTERVAL_S = 1.5  # TICKETRY_OPS_FEED_INTERVAL_S's default
ORDERS_PER_S = 2.0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (its threads included)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


async def trickle(api: httpx.AsyncClient, event_id: str, stop: asyncio.Event) -> int:
    """Orders of two tickets at ``ORDERS_PER_S`` until ``stop``; how many were accepted."""
    n = accepted = 0
    while not stop.is_set():
        n += 1
        body = {"event_id": event_id, "quantity": 2, "holder_name": "Bench Buyer", "tier": "standard"}
        r = await api.post("/v1/orders", json=body, headers=hdr(token(f"bench-opsfeed-{n % 50}", "buyer")))
        accepted += r.status_code == 202
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1 / ORDERS_PER_S)
    return accepted


async def console(api: httpx.AsyncClient, admin: str, first: asyncio.Event, stop: asyncio.Event) -> int:
    """One console's feed, read until ``stop``; the snapshots it got."""
    frames = 0
    async with api.stream("GET", "/v1/ops/feed", headers=hdr(admin)) as r:
        r.raise_for_status()
        async for chunk in r.aiter_bytes():
            frames += chunk.count(b"\n\n")
            if frames:
                first.set()
            if stop.is_set():
                break
    return frames


async def leg(stack: Stack, api: httpx.AsyncClient, admin: str, consoles: int, seconds: float) -> dict[str, Any]:
    """The api's CPU (cores) over ``seconds`` with ``consoles`` feeds open."""
    pid = stack.procs["api"].pid
    stop = asyncio.Event()
    firsts = [asyncio.Event() for _ in range(consoles)]
    readers = [asyncio.create_task(console(api, admin, f, stop)) for f in firsts]
    try:
        await asyncio.wait_for(asyncio.gather(*(f.wait() for f in firsts)), 60)
        c0, t0 = cpu_s(pid), time.monotonic()
        await asyncio.sleep(seconds)
        c1, t1 = cpu_s(pid), time.monotonic()
    finally:
        stop.set()
        got = await asyncio.gather(*readers, return_exceptions=True)
    if consoles:
        await asyncio.sleep(2 * FEED_INTERVAL_S)  # the feed sees them gone and its poll stops
    frames = [g for g in got if isinstance(g, int)]
    return {"consoles": consoles, "cores": (c1 - c0) / (t1 - t0), "frames": sum(frames), "seconds": t1 - t0}


async def measure(consoles: int, seconds: float, rounds: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="ticketry-ops-feed-"))
    stack: Stack | None = None
    legs: list[dict[str, Any]] = []
    try:
        stack = start_stack(root / "stack", renderers=1)
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=120) as api:
            event_id = await scenarios.create_event(api, 1_000_000)
            org = hdr(token("bench-org", "organizer"))
            room = await api.post("/v1/events", headers=org, json={
                "name": "Bench Queue", "venue": "Loopback Arena", "starts_at": "2027-06-01T19:30:00Z",
                "capacity": 1000, "price": "25.00", "currency": "EUR", "waiting_room": True,
                "on_sale_at": "2027-05-01T10:00:00Z",
            })  # fmt: skip
            room.raise_for_status()
            for n in range(20):
                joined = await api.post(
                    f"/v1/events/{room.json()['id']}/queue", headers=hdr(token(f"bench-opsfeed-q{n}", "buyer"))
                )
                joined.raise_for_status()
            admin = token("bench-ops-admin", "admin")
            stop = asyncio.Event()
            sale = asyncio.create_task(trickle(api, event_id, stop))
            try:
                await leg(stack, api, admin, consoles, 5)  # warm: the feed's first poll, the event cache
                for r in range(rounds):
                    for n in (0, consoles) if r % 2 == 0 else (consoles, 0):
                        got = await leg(stack, api, admin, n, seconds)
                        print(f"  round {r + 1}: {n:2} consoles: api {got['cores'] * 100:.2f} % of a core"
                              f" ({got['frames']} snapshots sent)", flush=True)  # fmt: skip
                        legs.append(got)
            finally:
                stop.set()
                accepted = await sale
    finally:
        if stack is not None:
            stack.stop()
        shutil.rmtree(root, ignore_errors=True)
    off = statistics.median(g["cores"] for g in legs if g["consoles"] == 0)
    on = statistics.median(g["cores"] for g in legs if g["consoles"] == consoles)
    summary = {
        "consoles": consoles, "seconds": seconds, "rounds": rounds, "off_cores": off, "on_cores": on,
        "more_cores": on - off, "ratio": on / off if off > 0 else None, "orders_accepted": accepted,
    }  # fmt: skip
    return {"summary": summary, "legs": legs, "ok": on - off < VERDICT_CORES}


def run(consoles: int = 10, seconds: float = 20.0, rounds: int = 3) -> dict[str, Any]:
    """:func:`measure` from synchronous code (``bench/__main__``)."""
    return asyncio.run(measure(consoles, seconds, rounds))


def table(got: dict[str, Any]) -> list[Row]:
    s = got["summary"]
    ratio = "n/a" if s["ratio"] is None else f"{s['ratio']:.2f}×"
    return [
        (f"ops feed: api CPU with {s['consoles']} consoles vs none, a sale going on (% of one core)",
         f"{s['on_cores'] * 100:.2f} vs {s['off_cores'] * 100:.2f}", f"< +{VERDICT_CORES * 100:.0f}", ratio),
        ("  ops feed: the consoles' cost (% of one core more)", f"{s['more_cores'] * 100:+.2f}", "", ""),
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench.ops_feed", description=__doc__.splitlines()[0])
    ap.add_argument("--consoles", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    got = run(args.consoles, args.seconds, args.rounds)
    path = show_and_save(table(got), got, "ops-feed")
    print(f"\nwritten {path}")
    return 0 if got["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
