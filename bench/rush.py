"""The on-sale rush (issue 20): a burst of orders at once, and a crowd through
the waiting room.

    uv run --frozen python -m bench.rush [burst|room|all] [--burst 500] [--buyers 5000] [--tickets 2000]

``burst``: first the *paced* rate (``--paced-orders`` orders from
``--paced-clients`` clients, each sending its next order when the last one is
answered), then ``--burst`` orders sent at once, in the same stack. Every
answer must be 202, 409 or 503 with ``Retry-After``, none later than 30 s, and
the burst must be accepted at ≥ 80 % of the paced rate (or the excess shed
with 503s).

``room``: ``--buyers`` buyers arrive within ``--arrive-s`` seconds for an
event with a waiting room and ``--tickets`` tickets (fewer than buyers). Each
queues, follows its place on the WebSocket until admitted, orders with its
permission, and must end with tickets or a definitive sold out. Reported:
oversold (must be 0), buyers without a definitive answer (must be 0), buyers
whose position ever moved back (must be 0), p99 of the position updates'
delay, admission rate.

Load comes from a second process over bare HTTP/1.1 (httpx's CPU per request
would measure the client).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from ticketry_devstack.procs import Stack, start_stack

from bench.scenarios import cpu_count, create_event, hdr, token

RESULTS = Path(__file__).parent / "results"
ANSWER_BOUND_S = 30.0


# -- a bare HTTP/1.1 client ------------------------------------------------------------


@dataclass
class Answer:
    status: int  # 0: no answer (connection error or past the bound)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    sent: float = 0.0  # perf_counter
    done: float = 0.0

    @property
    def latency_s(self) -> float:
        return self.done - self.sent

    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None


def _request_bytes(host: str, method: str, path: str, headers: dict[str, str], body: bytes | None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> Answer:
    writer.write(request)
    status = int((await reader.readline()).split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Answer(status, headers, body)


class Client:
    """Kept-alive connections to the api, opened on demand."""

    def __init__(self, api_url: str) -> None:
        host, _, port = api_url.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port)

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(self.host, self.port)

    async def call(
        self,
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None,
        method: str,
        path: str,
        headers: dict[str, str],
        body: Any = None,
        bound_s: float = ANSWER_BOUND_S,
    ) -> tuple[Answer, tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]:
        """One request (on ``conn``, or a new connection); the answer and the
        connection to reuse (None when it broke)."""
        raw = _request_bytes(self.host, method, path, headers, None if body is None else orjson.dumps(body))
        sent = time.perf_counter()
        try:
            async with asyncio.timeout(bound_s):
                if conn is None:
                    conn = await self.connect()
                answer = await _exchange(*conn, raw)
        except (OSError, ValueError, IndexError, TimeoutError, asyncio.IncompleteReadError):
            if conn is not None:
                conn[1].close()
            return Answer(0, sent=sent, done=time.perf_counter()), None
        answer.sent, answer.done = sent, time.perf_counter()
        return answer, conn


def order_body(event_id: str, quantity: int = 1) -> dict[str, Any]:
    return {"event_id": event_id, "quantity": quantity, "holder_name": "Rush Buyer", "tier": "standard"}


def _pct(values: list[float], q: float) -> float | None:
    vals = sorted(values)
    return vals[min(len(vals) - 1, int(len(vals) * q))] if vals else None


# -- burst: paced rate vs 500 at once ---------------------------------------------------


async def _paced(client: Client, event_id: str, clients: int, orders: int) -> dict[str, Any]:
    """``orders`` orders from ``clients`` closed-loop clients: the rate the api sustains."""
    tokens = [token(f"rush-paced-{i}", "buyer") for i in range(clients)]
    left = orders
    statuses: list[int] = []
    lat: list[float] = []

    async def one_client(i: int) -> None:
        nonlocal left
        conn = None
        while left > 0:
            left -= 1
            a, conn = await client.call(conn, "POST", "/v1/orders", hdr(tokens[i]), order_body(event_id))
            statuses.append(a.status)
            lat.append(a.latency_s)

    t0 = time.perf_counter()
    await asyncio.gather(*(one_client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    accepted = statuses.count(202)
    return {
        "orders": orders, "clients": clients, "accepted": accepted, "wall_s": wall,
        "accepted_per_s": accepted / wall, "p50_ms": (_pct(lat, 0.5) or 0) * 1000,
        "p99_ms": (_pct(lat, 0.99) or 0) * 1000, "statuses": _counts(statuses),
    }  # fmt: skip


def _counts(statuses: list[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in statuses:
        out[str(s)] = out.get(str(s), 0) + 1
    return out


def allowed(a: Answer) -> bool:
    """An answer the burst may get: 202, 409 (sold out), or 503 with Retry-After."""
    return a.status in (202, 409) or (a.status == 503 and "retry-after" in a.headers)


async def _burst(client: Client, event_id: str, n: int) -> dict[str, Any]:
    """``n`` orders at once, each on its own connection (opened first, so the
    burst is the requests, not the handshakes)."""
    tokens = [token(f"rush-burst-{i}", "buyer") for i in range(n)]
    conns = await asyncio.gather(*(client.connect() for _ in range(n)))
    go = asyncio.Event()

    async def one(i: int) -> Answer:
        await go.wait()
        a, conn = await client.call(conns[i], "POST", "/v1/orders", hdr(tokens[i]), order_body(event_id))
        if conn is not None:
            conn[1].close()
        return a

    tasks = [asyncio.create_task(one(i)) for i in range(n)]
    await asyncio.sleep(0.2)
    t0 = time.perf_counter()
    go.set()
    answers = await asyncio.gather(*tasks)
    accepted = [a for a in answers if a.status == 202]
    last_202 = max((a.done for a in accepted), default=t0)
    shed = [a for a in answers if a.status == 503]
    bad = [a for a in answers if not allowed(a)]
    lat = [a.latency_s for a in answers]
    return {
        "sent": n, "statuses": _counts([a.status for a in answers]), "accepted": len(accepted),
        "accepted_wall_s": last_202 - t0, "accepted_per_s": len(accepted) / (last_202 - t0) if accepted else 0.0,
        "shed": len(shed), "shed_p99_ms": (_pct([a.latency_s for a in shed], 0.99) or 0) * 1000,
        "p50_ms": (_pct(lat, 0.5) or 0) * 1000, "p99_ms": (_pct(lat, 0.99) or 0) * 1000,
        "max_s": max(lat, default=0.0), "not_allowed": len(bad),
        "retry_after": sorted({a.headers.get("retry-after", "") for a in shed}),
    }  # fmt: skip


def _burst_load(api_url: str, event_id: str, clients: int, orders: int, burst: int, q: mp.Queue[Any]) -> None:
    async def run() -> dict[str, Any]:
        client = Client(api_url)
        paced = await _paced(client, event_id, clients, orders)
        await asyncio.sleep(1.0)
        return {"paced": paced, "burst": await _burst(client, event_id, burst)}

    q.put(asyncio.run(run()))


async def burst_scenario(stack: Stack, *, clients: int = 20, orders: int = 1000, burst: int = 500) -> dict[str, Any]:
    """Paced rate, then the burst, in one stack; the verdict of issue 20."""
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
        event_id = await create_event(api, orders + burst + 100)
    ctx = mp.get_context("spawn")
    q: mp.Queue[Any] = ctx.Queue()
    p = ctx.Process(target=_burst_load, args=(stack.api_url, event_id, clients, orders, burst, q))
    p.start()
    out: dict[str, Any] = await asyncio.to_thread(q.get, True, 900)
    p.join()
    paced, b = out["paced"], out["burst"]
    ratio = b["accepted_per_s"] / paced["accepted_per_s"] if paced["accepted_per_s"] else 0.0
    out["ratio"] = ratio
    out["ok"] = b["not_allowed"] == 0 and b["max_s"] <= ANSWER_BOUND_S and (ratio >= 0.8 or b["shed"] > 0)
    return out


# -- command line ------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench.rush")
    ap.add_argument("what", nargs="?", default="all", choices=["burst", "room", "all"])
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--paced-orders", type=int, default=1000)
    ap.add_argument("--paced-clients", type=int, default=20)
    ap.add_argument("--renderers", type=int, default=cpu_count())
    ap.add_argument("--keep", action="store_true", help="keep the stack's directory (logs)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ticketry-rush-"))
    stack = start_stack(root, renderers=args.renderers)
    result: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        if args.what in ("burst", "all"):
            result["burst"] = asyncio.run(
                burst_scenario(stack, clients=args.paced_clients, orders=args.paced_orders, burst=args.burst)
            )
            print(json.dumps(result["burst"], indent=1))
    finally:
        stack.stop()
        if args.keep:
            print(f"stack kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"rush-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1, default=str))
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
