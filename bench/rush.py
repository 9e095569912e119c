"""The on-sale rush: a burst of orders at once, and a crowd through
the waiting room.

    uv run --frozen python -m bench.rush [burst|room|all] [--burst 500] [--buyers 5000] [--tickets 2000]
        [--open-after 0.5]

``burst``: first the *paced* rate (``--paced-orders`` orders from
``--paced-clients`` clients, each sending its next order when the last one is
answered), then ``--burst`` orders sent at once, in the same stack. Every
answer is counted by its class (202, 409, 503 with ``Retry-After``, and what
is not allowed: a 503 without it, any other status, no answer within 30 s, a
broken connection). The verdict (:func:`burst_verdict`): every answer allowed
(202, 409 or 503 with ``Retry-After``), none later than 30 s, and the burst
accepted at ≥ 80 % of the paced rate, or else its excess shed with 503s. The
excess is the part of the burst that the accepted rate does not carry in the
time 80 % of the paced rate would take for the whole burst: at half that rate,
at least half the burst must have been shed (an api that accepts everything
slowly, keeping every client waiting, fails).

``room``: ``--buyers`` buyers arrive within ``--arrive-s`` seconds for an
event with a waiting room and ``--tickets`` tickets (fewer than buyers); the
sale opens once ``--open-after`` of the arrival time has passed (0.5: half the
buyers have arrived; above 1, after the last arrival). Buyers whose join the
api answers before the sale opens (Redis's clock) are *early* and draw their
places; the later ones queue behind them in arrival order. Each queues, follows
its place on the WebSocket until admitted, orders with its permission, and must
end with tickets or a definitive sold out. Reported: early and late places,
oversold (must be 0), buyers without a definitive answer (must be 0), buyers
whose position ever moved back (must be 0), later arrivals placed out of
arrival order (must be 0; read back from the line in Redis), buyers admitted
ahead of their place in the line (must be 0), p99 of the position updates'
delay, admission rate.

Load comes from a second process over bare HTTP/1.1 (httpx's CPU per request
would measure the client). The command exits 1 when a scenario's verdict is
not met.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import itertools
import json
import math
import multiprocessing as mp
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
from redis.asyncio import Redis
from ticketry import streams
from ticketry_devstack.procs import Stack, start_stack

from bench.scenarios import cpu_count, create_event, hdr, token

RESULTS = Path(__file__).parent / "results"
ANSWER_BOUND_S = 30.0
PACED_SHARE = 0.8  # the burst's accepted rate against the paced rate


# -- a bare HTTP/1.1 client ------------------------------------------------------------


@dataclass
class Answer:
    status: int  # 0: no answer (``error`` says why)
    error: str = ""  # "timeout" (no answer within the bound) or "connection error"
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
    return Answer(status, headers=headers, body=body)


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
        if conn is not None and conn[0].at_eof():
            conn[1].close()  # the server closed it while idle (keep-alive timeout)
            conn = None
        sent = time.perf_counter()
        try:
            async with asyncio.timeout(bound_s):
                if conn is None:
                    conn = await self.connect()
                answer = await _exchange(*conn, raw)
        except (OSError, ValueError, IndexError, TimeoutError, asyncio.IncompleteReadError) as exc:
            if conn is not None:
                conn[1].close()
            error = "timeout" if isinstance(exc, TimeoutError) else "connection error"
            return Answer(0, error, sent=sent, done=time.perf_counter()), None
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
    statuses: list[str] = []
    lat: list[float] = []

    async def one_client(i: int) -> None:
        nonlocal left
        conn = None
        while left > 0:
            left -= 1
            a, conn = await client.call(conn, "POST", "/v1/orders", hdr(tokens[i]), order_body(event_id))
            statuses.append(answer_class(a))
            lat.append(a.latency_s)

    t0 = time.perf_counter()
    await asyncio.gather(*(one_client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    accepted = statuses.count("202")
    return {
        "orders": orders, "clients": clients, "accepted": accepted, "wall_s": wall,
        "accepted_per_s": accepted / wall, "p50_ms": (_pct(lat, 0.5) or 0) * 1000,
        "p99_ms": (_pct(lat, 0.99) or 0) * 1000, "statuses": _counts(statuses),
    }  # fmt: skip


def _counts(classes: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in classes:
        out[c] = out.get(c, 0) + 1
    return out


ALLOWED = ("202", "409", "503")


def answer_class(a: Answer) -> str:
    """What an answer counts as: ``"202"``, ``"409"``, ``"503"`` (with
    ``Retry-After``), and the classes a burst must not get: ``"503 without
    Retry-After"``, any other status (``"500"``, ``"429"``, …), ``"timeout"``,
    ``"connection error"``."""
    if a.status == 0:
        return a.error or "connection error"
    if a.status == 503 and "retry-after" not in a.headers:
        return "503 without Retry-After"
    return str(a.status)


def not_allowed(classes: dict[str, int]) -> dict[str, int]:
    """The counts of the classes a burst must not get."""
    return {c: n for c, n in classes.items() if c not in ALLOWED and n}


def burst_verdict(paced_per_s: float, burst: dict[str, Any]) -> list[str]:
    """What the burst failed of its target (docs/performance.md; empty: met). ``burst``
    as :func:`_burst` returns it: every answer 202, 409 or 503 with
    ``Retry-After``; none after ``ANSWER_BOUND_S``; accepted at ≥ 80 % of
    ``paced_per_s``, or else the excess shed: of the orders not sold out, the
    share the accepted rate does not carry in the time 80 % of the paced rate
    takes for them all, ``1 - ratio / 0.8``."""
    failed: list[str] = []
    if bad := not_allowed(burst["statuses"]):
        failed.append("not allowed: " + ", ".join(f"{n} × {c}" for c, n in sorted(bad.items())))
    if burst["max_s"] > ANSWER_BOUND_S:
        failed.append(f"an answer took {burst['max_s']:.1f} s (> {ANSWER_BOUND_S:.0f})")
    ratio = burst["accepted_per_s"] / paced_per_s if paced_per_s else 0.0
    if ratio < PACED_SHARE:
        orders = burst["sent"] - burst["statuses"].get("409", 0)
        excess = orders - int(orders * ratio / PACED_SHARE)
        if burst["shed"] < excess:
            failed.append(
                f"accepted at {ratio:.2f} of the paced rate and {burst['shed']} shed, fewer than the excess ({excess})"
            )
    return failed


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
    classes = [answer_class(a) for a in answers]
    accepted = [a for a, c in zip(answers, classes, strict=True) if c == "202"]
    last_202 = max((a.done for a in accepted), default=t0)
    shed = [a for a, c in zip(answers, classes, strict=True) if c == "503"]
    lat = [a.latency_s for a in answers]
    statuses = _counts(classes)
    return {
        "sent": n, "statuses": statuses, "accepted": len(accepted),
        "accepted_wall_s": last_202 - t0, "accepted_per_s": len(accepted) / (last_202 - t0) if accepted else 0.0,
        "shed": len(shed), "shed_p99_ms": (_pct([a.latency_s for a in shed], 0.99) or 0) * 1000,
        "p50_ms": (_pct(lat, 0.5) or 0) * 1000, "p99_ms": (_pct(lat, 0.99) or 0) * 1000,
        "max_s": max(lat, default=0.0), "not_allowed": sum(not_allowed(statuses).values()),
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
    """Paced rate, then the burst, in one stack; and the verdict."""
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
        event_id = await create_event(api, orders + burst + 100)
    ctx = mp.get_context("spawn")
    q: mp.Queue[Any] = ctx.Queue()
    p = ctx.Process(target=_burst_load, args=(stack.api_url, event_id, clients, orders, burst, q))
    p.start()
    out: dict[str, Any] = await asyncio.to_thread(q.get, True, 900)
    p.join()
    paced, b = out["paced"], out["burst"]
    out["ratio"] = b["accepted_per_s"] / paced["accepted_per_s"] if paced["accepted_per_s"] else 0.0
    out["failed"] = burst_verdict(paced["accepted_per_s"], b)
    out["ok"] = not out["failed"]
    return out


# -- the waiting room: a crowd for fewer tickets ---------------------------------------


async def _ws_messages(url: str, bound_s: float) -> tuple[list[tuple[float, dict[str, Any]]], int | None]:
    """A lean WebSocket client (RFC 6455 by hand: thousands of sockets must
    cost this process little): every text message with its receive time (epoch
    ms), until the server closes (and the close code) or says it is sold out
    (the server keeps that socket open for tickets that may come back; None)."""
    rest = url.removeprefix("ws://")
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    out: list[tuple[float, dict[str, Any]]] = []
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(bound_s):
            reader, writer = await asyncio.open_connection(host, int(port))
            key = base64.b64encode(os.urandom(16)).decode()
            writer.write(
                f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 101"):
                return out, None
            while True:
                b0, b1 = await reader.readexactly(2)
                n = b1 & 0x7F
                if n == 126:
                    n = int.from_bytes(await reader.readexactly(2), "big")
                elif n == 127:
                    n = int.from_bytes(await reader.readexactly(8), "big")
                payload = await reader.readexactly(n)
                opcode = b0 & 0x0F
                if opcode == 0x1:
                    out.append((time.time() * 1000, orjson.loads(payload)))
                    if out[-1][1].get("type") == "queue.sold_out":
                        return out, None
                elif opcode == 0x9:  # ping: the server closes a socket that does not answer
                    mask = os.urandom(4)
                    masked = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
                    writer.write(bytes([0x8A, 0x80 | len(payload)]) + mask + masked)
                elif opcode == 0x8:
                    return out, int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        out.append((time.time() * 1000, {"type": f"client error {type(exc).__name__}"}))
        return out, None
    finally:
        if writer is not None:
            writer.close()


def buyer_sub(n: int) -> str:
    """The ``n``-th buyer's token subject: their member in the room's line."""
    return f"rush-room-{n}"


@dataclass
class Buyer:
    n: int
    joined: bool = False
    early: bool = False
    admitted: bool = False  # heard queue.admitted
    outcome: str = "none"  # "tickets", "sold_out" (socket), "409", or what went wrong
    positions: list[int] = field(default_factory=list)
    delays_ms: list[float] = field(default_factory=list)  # position updates: receive time minus their tick
    final_ms: float | None = None  # the same for the admission or sold-out message
    join_ms: float = 0.0
    join_sent: float = 0.0  # perf_counter: the join request written …
    join_done: float = 0.0  # … and its answer read
    shed: int = 0


def placed_out_of_order(late: Sequence[tuple[float, float, float]]) -> int:
    """Of later arrivals as ``(join sent, join answered, score in the line)``,
    how many hold a place ahead of another's whose join was answered before
    theirs was sent (the api placed that one first, so it must be ahead)."""
    by_answer = sorted((done, score) for _, done, score in late)
    answered = [done for done, _ in by_answer]
    furthest = list(itertools.accumulate((score for _, score in by_answer), max))
    out = 0
    for sent, _, score in late:
        i = bisect.bisect_left(answered, sent)  # the joins answered before this one was sent
        if i and furthest[i - 1] > score:
            out += 1
    return out


def admitted_out_of_line(line: Sequence[str], admitted: int, heard: Collection[str]) -> int:
    """Buyers told they were admitted who are not among the first ``admitted``
    of the line (in score order): admitted ahead of their turn."""
    return len(set(heard) - set(line[:admitted]))


async def _room_buyer(client: Client, event_id: str, b: Buyer, due: float, pool: asyncio.Queue[Any]) -> Buyer:
    if (delay := due - time.perf_counter()) > 0:
        await asyncio.sleep(delay)  # its arrival time (open loop)
    tok = token(buyer_sub(b.n), "buyer")
    conn = await pool.get()
    try:
        a, conn = await client.call(conn, "POST", f"/v1/events/{event_id}/queue", hdr(tok))
    finally:
        pool.put_nowait(conn)
    b.join_ms = (a.done - due) * 1000  # from its arrival: waiting for a connection counts
    b.join_sent, b.join_done = a.sent, a.done
    if a.status != 201:
        b.outcome = f"join {a.status or a.error}"
        return b
    place = a.json()
    b.joined, b.early = True, bool(place["early"])
    msgs, _ = await _ws_messages(f"{place['progress_url']}?token={tok}", 600)
    for i, (at_ms, m) in enumerate(msgs):
        if m.get("position") is not None:
            b.positions.append(int(m["position"]))
        if i > 0 and "at" in m:  # the first message is the socket's snapshot, not a live update
            if m["type"] == "queue.position":
                b.delays_ms.append(at_ms - float(m["at"]))
            else:
                b.final_ms = at_ms - float(m["at"])
    last = msgs[-1][1] if msgs else {}
    if last.get("type") == "queue.sold_out":
        b.outcome = "sold_out"
        return b
    if last.get("type") != "queue.admitted":
        b.outcome = f"socket ended without an answer ({last.get('type')})"
        return b
    b.admitted = True
    headers = {**hdr(tok), "Queue-Permission": str(last["permission"])}
    lost = 0
    while True:
        conn = await pool.get()
        try:
            a, conn = await client.call(conn, "POST", "/v1/orders", headers, order_body(event_id))
        finally:
            pool.put_nowait(conn)
        if a.status == 202:
            b.outcome = "tickets"
        elif a.status == 409:
            b.outcome = "409"
        elif a.status == 503 and "retry-after" in a.headers:
            b.shed += 1
            await asyncio.sleep(int(a.headers["retry-after"]))
            continue
        elif a.status == 0 and (lost := lost + 1) <= 3:
            continue  # the connection broke (not an answer): again, on a new one
        else:
            b.outcome = f"order {a.status}"
        return b


def _room_load(api_url: str, buyers: int, arrive_s: float, ctl: mp.Queue[Any], q: mp.Queue[Any]) -> None:
    """The buyers, in a process of their own: says it is ready, is told the
    event and when the first buyer arrives, and answers with every buyer's story."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    q.put("ready")
    event_id, start_at = ctl.get(True, 300)

    async def run() -> list[Buyer]:
        client = Client(api_url)
        pool: asyncio.Queue[Any] = asyncio.Queue()
        for _ in range(64):
            pool.put_nowait(None)  # connections opened on first use, then kept
        await asyncio.sleep(max(start_at - time.time(), 0))  # the first arrival, on the wall clock
        t0 = time.perf_counter()
        return list(
            await asyncio.gather(
                *(_room_buyer(client, event_id, Buyer(i), t0 + arrive_s * i / buyers, pool) for i in range(buyers))
            )
        )

    q.put([vars(b) for b in asyncio.run(run())])


async def room_scenario(
    stack: Stack, *, buyers: int = 5000, tickets: int = 2000, arrive_s: float = 2.0, open_after: float = 0.5
) -> dict[str, Any]:
    """``buyers`` arrive within ``arrive_s`` for ``tickets`` tickets, through the
    waiting room; the sale opens ``open_after * arrive_s`` after the first
    arrival (buyers whose join the api answers before that draw their places;
    the others queue behind them in arrival order)."""
    ctx = mp.get_context("spawn")
    q: mp.Queue[Any] = ctx.Queue()
    ctl: mp.Queue[Any] = ctx.Queue()
    p = ctx.Process(target=_room_load, args=(stack.api_url, buyers, arrive_s, ctl, q))
    p.start()
    assert await asyncio.to_thread(q.get, True, 300) == "ready"
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
        org = hdr(token("rush-room-org", "organizer"))
        start_at = time.time() + 1.0
        on_sale = datetime.fromtimestamp(start_at + arrive_s * open_after, UTC)
        body = {
            "name": "Rush Night", "venue": "Loopback Arena", "starts_at": "2027-06-01T19:30:00Z",
            "capacity": tickets, "price": "25.00", "currency": "EUR", "on_sale_at": on_sale.isoformat(),
            "waiting_room": True,
        }  # fmt: skip
        r = await api.post("/v1/events", json=body, headers=org)
        r.raise_for_status()
        event_id = str(r.json()["id"])
        ctl.put((event_id, start_at))
        t0 = time.perf_counter()
        raw: list[dict[str, Any]] = await asyncio.to_thread(q.get, True, 1800)
        wall = time.perf_counter() - t0
        p.join()
        sold = int((await api.get(f"/v1/events/{event_id}", headers=org)).json()["sold"])
    redis = Redis.from_url(stack.env["TICKETRY_REDIS_URL"])
    try:
        ticks: list[Any] = list(await redis.xrange(streams.room_updates(event_id)) or [])
        line: list[Any] = list(await redis.zrange(streams.room_line(event_id), 0, -1, withscores=True))
        admitted = int(await redis.hget(streams.room_state(event_id), streams.ROOM_ADMITTED) or 0)
    finally:
        await redis.aclose()
    rates = [float(f[streams.ROOM_RATE.encode()]) for _, f in ticks]
    got = [Buyer(**d) for d in raw]
    scores = {m.decode(): score for m, score in line}
    late = [
        (b.join_sent, b.join_done, scores[buyer_sub(b.n)]) for b in got
        if b.joined and not b.early and buyer_sub(b.n) in scores
    ]  # fmt: skip
    in_line = [m.decode() for m, _ in line]
    heard = [buyer_sub(b.n) for b in got if b.admitted]
    outcomes: dict[str, int] = {}
    for b in got:
        outcomes[b.outcome] = outcomes.get(b.outcome, 0) + 1
    delays = [d for b in got for d in b.delays_ms]
    finals = [b.final_ms for b in got if b.final_ms is not None]
    back = [b.n for b in got if b.positions != sorted(b.positions, reverse=True)]
    tickets_sold = outcomes.get("tickets", 0)
    definitive = outcomes.get("tickets", 0) + outcomes.get("sold_out", 0) + outcomes.get("409", 0)
    first_admit = next((i for i, (_, f) in enumerate(ticks) if json.loads(f[streams.ROOM_PERMITS.encode()])), None)
    out_of_order = placed_out_of_order(late)
    ahead = admitted_out_of_line(in_line, admitted, heard)
    out = {
        "buyers": buyers, "tickets": tickets, "arrive_s": arrive_s, "open_after": open_after, "wall_s": wall,
        "arrived_before_open": min(buyers, math.ceil(buyers * open_after)),
        "early": sum(b.early for b in got), "late": sum(b.joined and not b.early for b in got),
        "late_admitted": sum(b.admitted and not b.early for b in got), "outcomes": outcomes, "sold": sold,
        "oversold": max(sold - tickets, 0) + max(tickets_sold - sold, 0),
        "without_definitive_answer": buyers - definitive, "position_moved_back": len(back),
        "late_placed_out_of_order": out_of_order, "admitted": admitted, "admitted_out_of_line": ahead,
        "position_updates": len(delays), "update_p50_ms": _pct(delays, 0.5), "update_p99_ms": _pct(delays, 0.99),
        "answer_p50_ms": _pct(finals, 0.5), "answer_p99_ms": _pct(finals, 0.99),
        "join_p50_ms": _pct([b.join_ms for b in got], 0.5), "join_p99_ms": _pct([b.join_ms for b in got], 0.99),
        "orders_shed_and_retried": sum(b.shed for b in got),
        "admission_ticks": len(ticks), "rate_first_last_max": [rates[first_admit or 0], rates[-1], max(rates)]
        if rates else None,
    }  # fmt: skip
    out["failed"] = room_failed(out)
    out["ok"] = not out["failed"]
    return out


# -- command line ------------------------------------------------------------------------


Row = tuple[str, str, str, str]


def _f(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def _classes(st: dict[str, int]) -> str:
    """``202 / 409 / 503`` counts, then every class not allowed (or ``none``)."""
    bad = not_allowed(st)
    rest = ", ".join(f"{n} × {c}" for c, n in sorted(bad.items())) or "none"
    return f"{st.get('202', 0)} / {st.get('409', 0)} / {st.get('503', 0)}; not allowed: {rest}"


def _verdict(ok: bool, failed: list[str]) -> str:
    return "met" if ok else "NOT MET: " + "; ".join(failed)


def room_failed(r: dict[str, Any]) -> list[str]:
    """What the room scenario failed (empty: met)."""
    checks = [
        ("oversold", r["oversold"]), ("without a definitive answer", r["without_definitive_answer"]),
        ("position moved back", r["position_moved_back"]),
        ("later arrivals placed out of order", r["late_placed_out_of_order"]),
        ("admitted ahead of their place", r["admitted_out_of_line"]),
    ]  # fmt: skip
    failed = [f"{n:,} {what}" for what, n in checks if n]
    if r["sold"] != r["outcomes"].get("tickets", 0):
        failed.append(f"{r['sold']:,} sold but {r['outcomes'].get('tickets', 0):,} buyers told they have tickets")
    return failed


def table(result: dict[str, Any]) -> list[Row]:
    """``figure | value | target | ratio`` rows for ``just bench``."""
    rows: list[Row] = []
    if (b := result.get("burst")) is not None:
        paced, burst = b["paced"], b["burst"]
        rows += [
            (f"rush: paced rate, {paced['orders']:,} orders from {paced['clients']} clients, accepted/s "
             "(202 / 409 / 503; not allowed)", f"{_f(paced['accepted_per_s'])} ({_classes(paced['statuses'])})",
             "", ""),
            (f"rush: {burst['sent']} orders at once, accepted/s (202 / 409 / 503 with Retry-After; not allowed)",
             f"{_f(burst['accepted_per_s'])} ({_classes(burst['statuses'])})",
             "≥ 80 % of paced, or the excess shed", f"{b['ratio']:.2f}×"),
            ("rush: the burst's answers, p50 / p99 / max (ms); 503s p99 (ms)",
             f"{_f(burst['p50_ms'])} / {_f(burst['p99_ms'])} / {_f(burst['max_s'] * 1000)}; "
             f"{_f(burst['shed_p99_ms'])}", "max ≤ 30,000", ""),
            ("rush: the burst's verdict", _verdict(b["ok"], b["failed"]), "met", ""),
        ]  # fmt: skip
    if (r := result.get("room")) is not None:
        rate = r.get("rate_first_last_max") or [None, None, None]
        rows += [
            (f"rush room: {r['buyers']:,} buyers, {r['tickets']:,} tickets: sold; oversold; no answer; moved back",
             f"{r['sold']:,}; {r['oversold']}; {r['without_definitive_answer']}; {r['position_moved_back']}",
             "0; 0; 0", ""),
            (f"rush room: sale opens after {r['open_after']:g} of the arrivals ({r['arrived_before_open']:,} "
             "arrived before): early / late places; late admitted",
             f"{r['early']:,} / {r['late']:,}; {r['late_admitted']:,}", "", ""),
            ("rush room: later arrivals placed out of arrival order; admitted ahead of their place",
             f"{r['late_placed_out_of_order']}; {r['admitted_out_of_line']}", "0; 0", ""),
            ("rush room: position updates after their tick, p50 / p99 (ms); how many",
             f"{_f(r['update_p50_ms'])} / {_f(r['update_p99_ms'])}; {r['position_updates']:,}", "", ""),
            ("rush room: admitted / sold-out answers after their tick, p50 / p99 (ms)",
             f"{_f(r['answer_p50_ms'])} / {_f(r['answer_p99_ms'])}", "", ""),
            ("rush room: admission rate first → last (max) per s; all done (s)",
             f"{_f(rate[0])} → {_f(rate[1])} ({_f(rate[2])}); {_f(r['wall_s'], 1)}", "", ""),
            ("rush room: verdict", _verdict(r["ok"], r["failed"]), "met", ""),
        ]  # fmt: skip
    return rows


def run(what: str = "all", *, renderers: int | None = None, keep: bool = False, **kw: Any) -> dict[str, Any]:
    """The scenarios on a stack of their own: ``{"summary", "table", "ok"}``
    (``ok``: every scenario's verdict met; ``just bench`` calls this)."""
    root = Path(tempfile.mkdtemp(prefix="ticketry-rush-"))
    stack = start_stack(root, renderers=renderers or cpu_count())
    result: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        if what in ("burst", "all"):
            result["burst"] = asyncio.run(
                burst_scenario(
                    stack, clients=kw.get("paced_clients", 20), orders=kw.get("paced_orders", 1000),
                    burst=kw.get("burst", 500),
                )
            )  # fmt: skip
            print(json.dumps(result["burst"], indent=1), flush=True)
        if what in ("room", "all"):
            result["room"] = asyncio.run(
                room_scenario(
                    stack, buyers=kw.get("buyers", 5000), tickets=kw.get("tickets", 2000),
                    arrive_s=kw.get("arrive_s", 2.0), open_after=kw.get("open_after", 0.5),
                )
            )  # fmt: skip
            print(json.dumps(result["room"], indent=1), flush=True)
    finally:
        stack.stop()
        if keep:
            print(f"stack kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    ok = all(result[k]["ok"] for k in ("burst", "room") if k in result)
    return {"summary": result, "table": table(result), "ok": ok}


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench.rush")
    ap.add_argument("what", nargs="?", default="all", choices=["burst", "room", "all"])
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--paced-orders", type=int, default=1000)
    ap.add_argument("--paced-clients", type=int, default=20)
    ap.add_argument("--buyers", type=int, default=5000)
    ap.add_argument("--tickets", type=int, default=2000)
    ap.add_argument("--arrive-s", type=float, default=2.0)
    ap.add_argument(
        "--open-after", type=float, default=0.5,
        help="the sale opens after this share of the arrival time (0.5: half the buyers arrived; >1: after the last)",
    )  # fmt: skip
    ap.add_argument("--renderers", type=int, default=cpu_count())
    ap.add_argument("--keep", action="store_true", help="keep the stack's directory (logs)")
    args = ap.parse_args()
    got = run(
        args.what, renderers=args.renderers, keep=args.keep, burst=args.burst, paced_orders=args.paced_orders,
        paced_clients=args.paced_clients, buyers=args.buyers, tickets=args.tickets, arrive_s=args.arrive_s,
        open_after=args.open_after,
    )  # fmt: skip
    print()
    for row in got["table"]:
        print(" | ".join(row))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"rush-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(got, indent=1, default=str))
    print(f"written {path}")
    print("verdict:", "met" if got["ok"] else "NOT MET")
    return 0 if got["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
