"""End-to-end scenarios against the real stack (Redis, FerretDB, api, notifier,
one renderer per core), started here with infra/devstack's ``Stack``.

Times are taken on this host's clock; a ticket event's stream id carries the
millisecond Redis appended it, so the WebSocket push latency is receive time
minus that timestamp.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets
from ticketry.auth import issue_token
from ticketry.settings import DEV_JWT_SECRET
from ticketry_devstack.procs import Stack


def token(sub: str, role: str) -> str:
    return issue_token(sub, role, key=DEV_JWT_SECRET)  # type: ignore[arg-type]


def hdr(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


async def create_event(api: httpx.AsyncClient, capacity: int) -> str:
    body = {
        "name": "Big On-Sale Night", "venue": "Loopback Arena", "starts_at": "2027-06-01T19:30:00Z",
        "capacity": capacity, "price": "25.00", "currency": "EUR", "timezone": "Europe/Berlin",
        "tiers": [
            {"id": "standard", "name": "Standard", "price": "25.00"},
            {"id": "vip", "name": "VIP", "price": "80.00", "lane": "vip"},
        ],
    }  # fmt: skip
    r = await api.post("/v1/events", json=body, headers=hdr(token("bench-org", "organizer")))
    r.raise_for_status()
    return str(r.json()["id"])


async def order(api: httpx.AsyncClient, buyer: str, event_id: str, qty: int, tier: str = "standard") -> dict[str, Any]:
    body = {"event_id": event_id, "quantity": qty, "holder_name": "Bench Buyer", "tier": tier}
    r = await api.post("/v1/orders", json=body, headers=hdr(token(buyer, "buyer")))
    if r.status_code != 202:
        raise RuntimeError(f"order refused: {r.status_code} {r.text[:200]}")
    out: dict[str, Any] = r.json()
    return out


async def watch(progress_url: str, buyer: str, placed_at: float, timeout_s: float = 900) -> dict[str, Any]:
    """Follow one order's socket to ``order.completed``: first ticket, completion,
    push latencies (receive time minus the event's stream timestamp)."""
    first = None
    pushes: list[float] = []
    async with (
        asyncio.timeout(timeout_s),
        websockets.connect(f"{progress_url}?token={token(buyer, 'buyer')}", max_size=2**24) as ws,
    ):
        while True:
            msg = orjson.loads(await ws.recv())
            now = time.time()
            if msg["type"] in ("ticket.rendered", "order.completed"):
                pushes.append(now * 1000 - int(str(msg["id"]).split("-")[0]))
            if msg["type"] == "ticket.rendered" and first is None:
                first = now - placed_at
            if msg["type"] == "snapshot" and msg.get("rendered", 0) and first is None:
                first = now - placed_at  # rendered before we connected: an upper bound
            if msg["type"] == "order.completed" or (msg["type"] == "snapshot" and msg.get("completed")):
                return {"first_s": first, "done_s": now - placed_at, "pushes_ms": pushes, "final": msg}


async def big_order(stack: Stack, quantity: int, probes: int) -> dict[str, Any]:
    """One ``quantity``-ticket order, end to end; meanwhile VIP 1-ticket and
    standard 2-ticket orders from other buyers, and the renderers' RSS."""
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=600) as api:
        event_id = await create_event(api, quantity + 10 * probes + 100)
        rss: list[list[float]] = [[] for _ in stack.renderers]
        stop = asyncio.Event()

        async def sample_rss() -> None:
            while not stop.is_set():
                for i, r in enumerate(stack.renderers):
                    rss[i].append(rss_mb(r.pid))
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample_rss())
        t0 = time.time()
        # A buyer of its own per big order: one buyer's tickets per minute are
        # rate-limited (TICKETRY_RATE_TICKETS_PER_MIN), and runs follow each other.
        buyer = f"bench-big-{event_id}"
        big = await order(api, buyer, event_id, quantity)
        placed = time.time()
        watcher = asyncio.create_task(watch(big["progress_url"], buyer, placed))

        async def probe(i: int, tier: str, qty: int) -> float:
            buyer = f"bench-probe-{event_id}-{tier}-{i}"
            o = await order(api, buyer, event_id, qty, tier)
            at = time.time()
            got = await watch(o["progress_url"], buyer, at, 120)
            return float(got["first_s"] if tier == "vip" else got["done_s"])

        vip: list[float] = []
        small: list[float] = []
        await asyncio.sleep(2.0)
        for i in range(probes):
            if watcher.done():
                break
            vip.append(await probe(i, "vip", 1))
            small.append(await probe(i, "standard", 2))
            await asyncio.sleep(0.5)
        got = await watcher
        stop.set()
        await sampler
    pushes = sorted(got["pushes_ms"])
    return {
        "quantity": quantity,
        "post_202_s": placed - t0,
        "end_to_end_s": got["done_s"],
        "tickets_per_s": quantity / got["done_s"],
        "first_ticket_ms": (got["first_s"] or 0) * 1000,
        "push_p50_ms": pushes[len(pushes) // 2] if pushes else None,
        "push_p99_ms": pushes[int(len(pushes) * 0.99)] if pushes else None,
        "vip_first_ms": [v * 1000 for v in vip],
        "small_done_ms": [s * 1000 for s in small],
        "rss_mb": rss,
        "final": got["final"],
    }


# -- POST /v1/orders from a second process ---------------------------------------


def order_requests(host: str, event_id: str, buyers: int) -> list[bytes]:
    """A raw ``POST /v1/orders`` of one ticket for each of ``buyers`` buyers
    (``bench-load-<i>``), for :func:`http_post`."""
    body = orjson.dumps({"event_id": event_id, "quantity": 1, "holder_name": "Load Buyer", "tier": "standard"})
    return [
        (
            f"POST /v1/orders HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token(f'bench-load-{i}', 'buyer')}"
            f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
        for i in range(buyers)
    ]


async def http_post(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: bytes) -> int:
    """One HTTP/1.1 request on a kept-alive connection; the response's status."""
    reader, writer = conn
    writer.write(request)
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


def _post_load(
    api_url: str, event_id: str, rate: float, seconds: float, buyers: int, q: mp.Queue[tuple[list[float], float]]
) -> None:
    """Open-loop load: request *i* is due at ``i / rate`` s and its latency counts
    from then (waiting for a free connection included, so a slow server cannot
    hide behind a slow client). A bare HTTP/1.1 client over 64 kept-alive
    connections: httpx costs ~10 ms of CPU per request here and saturated its own
    core at 100 requests/s, which measured the client, not the api. Puts the
    latencies and the seconds from the first request due to the last answer
    (the process's own start-up is not the api's time)."""
    host, _, port = api_url.removeprefix("http://").partition(":")
    requests = order_requests(host, event_id, buyers)

    async def run() -> tuple[list[float], float]:
        lat: list[float] = []
        pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        for _ in range(64):
            pool.put_nowait(await asyncio.open_connection(host, int(port)))

        async def one(i: int, due: float) -> None:
            conn = await pool.get()
            try:
                ok = await asyncio.wait_for(http_post(conn, requests[i % buyers]), 10) == 202
            except (OSError, ValueError, IndexError, TimeoutError, asyncio.IncompleteReadError):
                ok = False  # a timeout counts as refused, not as a crashed run
                conn[1].close()
                conn = await asyncio.open_connection(host, int(port))
            lat.append((time.perf_counter() - due) * 1000 if ok else float("inf"))
            pool.put_nowait(conn)

        start = time.perf_counter()
        tasks = []
        for i in range(int(rate * seconds)):  # open loop: send on schedule, whatever the answers do
            due = start + i / rate
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, due)))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - start
        while not pool.empty():
            pool.get_nowait()[1].close()
        return lat, wall

    q.put(asyncio.run(run()))


async def post_latency(stack: Stack, rate: float, seconds: float) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as api:
        event_id = await create_event(api, int(rate * seconds) + 100)
    ctx = mp.get_context("spawn")
    q: mp.Queue[tuple[list[float], float]] = ctx.Queue()
    p = ctx.Process(target=_post_load, args=(stack.api_url, event_id, rate, seconds, 64, q))
    p.start()
    lat, wall = await asyncio.to_thread(q.get, True, seconds + 90)
    p.join()
    ok = sorted(v for v in lat if v != float("inf"))
    return {
        "sent": len(lat),
        "refused": len(lat) - len(ok),
        "accepted_per_s": len(ok) / wall if wall else None,
        "p50_ms": statistics.median(ok) if ok else None,
        "p99_ms": ok[min(len(ok) - 1, int(len(ok) * 0.99))] if ok else None,
    }


def cpu_count() -> int:
    return os.cpu_count() or 1
