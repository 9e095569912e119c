"""The on-sale rush at the notifier: a crowd of progress sockets.

    uv run --frozen python -m bench.crowd [--orders 1000] [--sockets 10000] [--burst 2000] [--crowd 5000]

Starts its own stack with no renderer (so orders stay open while sockets
gather), places ``--orders`` 1-ticket orders of as many buyers, then:

1. **memory**: sockets opened in waves of 1,000 up to ``--sockets`` and held
   open, the notifier's VmRSS (``/proc/<pid>/status``) after each wave: KB per
   socket at 1,000 and at 10,000, and the curve (flat or not).
2. **burst**: ``--burst`` sockets fired at once on a quiet notifier: how many
   are served, the time until the last snapshot, the notifier's CPU per socket.
3. **crowd**: ``--crowd`` sockets opened at once (spread over the orders, each
   with ``after=`` the stream's position before the orders, as a reconnecting
   client does): time until every one has its snapshot; then a renderer is
   started and every socket must get its order's ``order.completed``.

Prints a table, writes ``bench/results/crowd-<time>.json`` and exits 1 unless
every socket of the crowd got its snapshot and its completion. ``run()`` is the
crowd alone on a stack of its own, with the notifier's RSS per 1,000 sockets
of the crowd (``just bench``: 5,000 sockets); ``scenario(stack)`` runs 1 and 2
against a stack started elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import re
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets
from ticketry_devstack.procs import Stack, start_stack

from bench.scenarios import create_event, order, rss_mb, token

RESULTS = Path(__file__).parent / "results"
PER_BUYER = 10  # sockets per buyer in the memory ramp (the default bound is 16)
OPEN_BOUND_S = 300.0  # the crowd's wait for its snapshots


def raise_open_files_limit() -> int:
    """Each socket is a file here and in the notifier (which lifts its own limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def metric(stack: Stack, name: str) -> float:
    async with httpx.AsyncClient(timeout=60) as client:
        text = (await client.get(stack.notifier_url.replace("ws://", "http://") + "/metrics")).text
    m = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


async def wait_gauge(stack: Stack, at_most: float, timeout_s: float = 120) -> None:
    async with asyncio.timeout(timeout_s):
        while await metric(stack, "ticketry_websocket_connections") > at_most:
            await asyncio.sleep(0.2)


class RawSocket:
    """A lean WebSocket client (RFC 6455 by hand: upgrade, read frames, answer
    pings, close), so that 10,000 sockets and a crowd of 5,000 cost this process
    little and the figures are the notifier's. Held open after its first message
    (the snapshot) until ``release``; with ``until_completed`` it also reads
    every message and notes when its order's ``order.completed`` arrives."""

    def __init__(self, url: str, release: asyncio.Event, until_completed: bool = False) -> None:
        rest = url.removeprefix("ws://")
        self.hostport, _, path = rest.partition("/")
        self.path = "/" + path
        self.release = release
        self.until_completed = until_completed
        self.snapshot_at: float | None = None
        self.completed_at: float | None = None
        self.closed: tuple[int, str] | None = None
        self.error: str | None = None
        self.snapshot = asyncio.Event()

    async def run(self) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            host, _, port = self.hostport.partition(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            key = base64.b64encode(os.urandom(16)).decode()
            writer.write(
                f"GET {self.path} HTTP/1.1\r\nHost: {self.hostport}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 101"):
                raise RuntimeError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
            closer = asyncio.create_task(self._close_on_release(writer))
            try:
                while True:
                    opcode, payload = await _read_frame(reader)
                    if opcode == 0x1:
                        self._text(payload)
                    elif opcode == 0x9:
                        writer.write(_client_frame(0xA, payload))
                    elif opcode == 0x8:
                        code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
                        if not self.release.is_set():
                            self.closed = (code, payload[2:].decode(errors="replace"))
                        return
            finally:
                closer.cancel()
        except (OSError, asyncio.IncompleteReadError, RuntimeError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"[:200]
        finally:
            self.snapshot.set()
            if writer is not None:
                writer.close()

    def _text(self, payload: bytes) -> None:
        if self.snapshot_at is None:
            self.snapshot_at = time.perf_counter()
            self.snapshot.set()
        wanted = self.until_completed and self.completed_at is None
        if wanted and orjson.loads(payload).get("type") == "order.completed":
            self.completed_at = time.perf_counter()

    async def _close_on_release(self, writer: asyncio.StreamWriter) -> None:
        await self.release.wait()
        writer.write(_client_frame(0x8, (1000).to_bytes(2, "big")))


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        n = int.from_bytes(await reader.readexactly(2), "big")
    elif n == 127:
        n = int.from_bytes(await reader.readexactly(8), "big")
    return b0 & 0x0F, await reader.readexactly(n)  # a server's frames are not masked


def _client_frame(opcode: int, payload: bytes) -> bytes:
    """A final frame as a client must send it: masked (payloads < 126 bytes here)."""
    mask = os.urandom(4)
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def place_orders(stack: Stack, n: int) -> list[tuple[str, str]]:
    """``n`` 1-ticket orders of ``n`` buyers: ``(buyer, progress_url)``."""
    out: list[tuple[str, str]] = []
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=300) as api:
        event_id = await create_event(api, n + 10)
        for start in range(0, n, 25):
            buyers = [f"crowd-{i}" for i in range(start, min(n, start + 25))]
            got = await asyncio.gather(*(order(api, b, event_id, 1) for b in buyers))
            out += [(b, o["progress_url"]) for b, o in zip(buyers, got, strict=True)]
    return out


async def stream_position(stack: Stack, buyer: str, progress_url: str) -> str:
    async with websockets.connect(f"{progress_url}?token={token(buyer, 'buyer')}") as ws:
        return str(orjson.loads(await ws.recv())["id"])


def _summary(socks: Sequence[RawSocket], t0: float) -> dict[str, Any]:
    served = [s for s in socks if s.snapshot_at is not None]
    closes: dict[str, int] = {}
    for s in socks:
        if s.closed is not None or s.error is not None:
            key = f"{s.closed[0]} {s.closed[1]}" if s.closed else str(s.error)
            closes[key] = closes.get(key, 0) + 1
    times = sorted((s.snapshot_at or t0) - t0 for s in served)
    return {
        "sockets": len(socks),
        "served": len(served),
        "all_snapshots_s": times[-1] if times else None,
        "snapshot_p50_s": statistics.median(times) if times else None,
        "refused_or_failed": closes,
    }


async def crowd(stack: Stack, orders: list[tuple[str, str]], n: int, start_renderer: bool) -> dict[str, Any]:
    """``n`` sockets at once, then every one's ``order.completed``; the
    notifier's RSS before, with every socket open, and once all completed
    (per 1,000 sockets: meaningful on a notifier that has held no crowd before,
    as CPython reuses what it once allocated)."""
    pid = stack.procs["notifier"].pid
    after = await stream_position(stack, *orders[0])
    release = asyncio.Event()
    socks = [
        RawSocket(f"{url}?token={token(buyer, 'buyer')}&after={after}", release, until_completed=True)
        for i in range(n)
        for buyer, url in [orders[i % len(orders)]]
    ]
    rss0 = rss_mb(pid)
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(s.run()) for s in socks]
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(OPEN_BOUND_S):
            await asyncio.gather(*(s.snapshot.wait() for s in socks))
    out = _summary(socks, t0)
    rss_open = rss_mb(pid)
    t1 = time.perf_counter()
    if start_renderer:
        await asyncio.to_thread(stack.start_renderer)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(900):
            while any(s.completed_at is None and s.closed is None and s.error is None for s in socks):
                await asyncio.sleep(0.1)
    done = [s.completed_at - t1 for s in socks if s.completed_at is not None]
    rss_done = rss_mb(pid)
    out |= {
        "completed": len(done), "all_completed_after_renderer_start_s": max(done) if done else None,
        "rss_mb_before_open_completed": [rss0, rss_open, rss_done],
        "mb_per_1000_sockets": (rss_open - rss0) * 1000 / out["served"] if out["served"] else None,
        "mb_per_1000_sockets_completed": (rss_done - rss0) * 1000 / out["served"] if out["served"] else None,
    }  # fmt: skip
    out["refused_or_failed"] = _summary(socks, t0)["refused_or_failed"]
    out["failed"] = crowd_failed(out)
    out["ok"] = not out["failed"]
    release.set()
    await asyncio.gather(*tasks)
    return out


def crowd_failed(c: dict[str, Any]) -> list[str]:
    """What the crowd failed of its target (docs/performance.md; empty: met): every
    socket its snapshot and its order's completion."""
    failed = []
    if c["served"] < c["sockets"]:
        failed.append(f"{c['sockets'] - c['served']:,} of {c['sockets']:,} without a snapshot")
    if c["completed"] < c["sockets"]:
        failed.append(f"{c['sockets'] - c['completed']:,} of {c['sockets']:,} without order.completed")
    if c["refused_or_failed"]:
        failed.append("closed or failed: " + ", ".join(f"{n} × {k}" for k, n in c["refused_or_failed"].items()))
    return failed


def crowd_rows(c: dict[str, Any], *, rss: bool = True) -> list[tuple[str, str, str, str]]:
    """``figure | value | target | ratio`` rows of the crowd (``rss``: with
    the notifier's RSS per 1,000 sockets, when it held no crowd before)."""
    rss0, rss_open, rss_done = c["rss_mb_before_open_completed"]
    rows = [
        (f"crowd: {c['sockets']:,} progress sockets at once: snapshots served / all in (s)",
         f"{c['served']:,} / {_f(c['all_snapshots_s'], 2)}", f"{c['sockets']:,}", ""),
        ("crowd: then a renderer: order.completed on each / last one after its start (s)",
         f"{c['completed']:,} / {_f(c['all_completed_after_renderer_start_s'], 2)}", f"{c['sockets']:,}", ""),
        ("crowd: notifier RSS per 1,000 sockets, all open / all completed (MB)",
         f"{_f(c['mb_per_1000_sockets'], 1)} / {_f(c['mb_per_1000_sockets_completed'], 1)} "
         f"({rss0:.1f} → {rss_open:.1f} → {rss_done:.1f} MB)", "", ""),
        ("crowd: verdict", "met" if c["ok"] else "NOT MET: " + "; ".join(c["failed"]), "met", ""),
    ]  # fmt: skip
    return rows if rss else [r for r in rows if "RSS" not in r[0]]


def _f(v: float | None, digits: int) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


async def memory(stack: Stack, orders: list[tuple[str, str]], total: int, wave: int = 1000) -> dict[str, Any]:
    """Hold ``total`` idle sockets open, in waves; the notifier's RSS after each."""
    pid = stack.procs["notifier"].pid
    warm = asyncio.Event()  # a few sockets first: lazy imports and caches are not per socket
    first = [RawSocket(f"{url}?token={token(buyer, 'buyer')}", warm) for buyer, url in orders[:20]]
    warming = [asyncio.create_task(s.run()) for s in first]
    await asyncio.gather(*(s.snapshot.wait() for s in first))
    warm.set()
    await asyncio.gather(*warming)
    await wait_gauge(stack, 0)
    release = asyncio.Event()
    socks: list[RawSocket] = []
    tasks: list[asyncio.Task[None]] = []
    rss = [(0, rss_mb(pid))]
    try:
        while len(socks) < total:
            batch: list[RawSocket] = []
            for _ in range(min(wave, total - len(socks))):
                i = len(socks) + len(batch)
                buyer, url = orders[(i // PER_BUYER) % len(orders)]
                batch.append(RawSocket(f"{url}?token={token(buyer, 'buyer')}", release))
            tasks += [asyncio.create_task(s.run()) for s in batch]
            await asyncio.gather(*(s.snapshot.wait() for s in batch))
            socks += batch
            rss.append((sum(1 for s in socks if s.snapshot_at is not None), rss_mb(pid)))
            print(f"  {rss[-1][0]:>6} sockets open: notifier RSS {rss[-1][1]:.1f} MB", flush=True)
        open_now = await metric(stack, "ticketry_websocket_connections")
    finally:
        release.set()
        await asyncio.gather(*tasks)
    await wait_gauge(stack, 0)
    base = rss[0][1]
    per_kb = {n: (mb - base) * 1024 / n for n, mb in rss[1:] if n}
    (n1, mb1), (n2, mb2) = rss[1], rss[-1]
    return {
        "rss_mb": rss,
        "kb_per_socket_marginal": (mb2 - mb1) * 1024 / (n2 - n1) if n2 > n1 else None,
        "rss_after_close_mb": rss_mb(pid),
        "gauge_at_peak": open_now,
        "kb_per_socket": per_kb,
        "failed": _summary(socks, 0.0)["refused_or_failed"],
    }


async def burst(stack: Stack, orders: list[tuple[str, str]], n: int) -> dict[str, Any]:
    """``n`` sockets fired at once on a quiet notifier."""
    pid = stack.procs["notifier"].pid
    await wait_gauge(stack, 0)
    release = asyncio.Event()
    socks = [
        RawSocket(f"{url}?token={token(buyer, 'buyer')}", release)
        for i in range(n)
        for buyer, url in [orders[(i // PER_BUYER) % len(orders)]]
    ]
    reads0 = await metric(stack, "ticketry_websocket_handshake_reads_total")
    cpu0, t0 = cpu_s(pid), time.perf_counter()
    tasks = [asyncio.create_task(s.run()) for s in socks]
    await asyncio.gather(*(s.snapshot.wait() for s in socks))
    cpu = cpu_s(pid) - cpu0
    out = _summary(socks, t0)
    reads = await metric(stack, "ticketry_websocket_handshake_reads_total") - reads0
    release.set()
    await asyncio.gather(*tasks)
    return out | {
        "notifier_cpu_ms_per_socket": cpu * 1000 / n,
        "redis_round_trips_for_handshakes": reads,
    }


async def scenario(stack: Stack, orders: list[tuple[str, str]], sockets: int, burst_n: int) -> dict[str, Any]:
    """Memory ramp and burst against a running stack."""
    return {"memory": await memory(stack, orders, sockets), "burst": await burst(stack, orders, burst_n)}


def run(*, sockets: int = 5000, orders: int = 1000) -> dict[str, Any]:
    """The crowd alone, on a stack of its own with no renderer until every
    snapshot is in: ``{"summary", "table", "ok"}`` (``just bench`` calls this)."""
    limit = raise_open_files_limit()
    if limit < sockets + 500:
        raise RuntimeError(f"open files limit {limit} < {sockets + 500}: fewer sockets")
    root = Path(tempfile.mkdtemp(prefix="ticketry-crowd-"))
    stack = start_stack(root, renderers=0)
    try:

        async def go() -> dict[str, Any]:
            print(f"placing {orders} orders, then {sockets} sockets at once …", flush=True)
            return await crowd(stack, await place_orders(stack, orders), sockets, start_renderer=True)

        c = asyncio.run(go())
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)
    print({k: v for k, v in c.items() if k != "refused_or_failed"}, flush=True)
    return {"summary": c, "table": crowd_rows(c), "ok": c["ok"]}


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench.crowd")
    ap.add_argument("--orders", type=int, default=1000)
    ap.add_argument("--sockets", type=int, default=10_000)
    ap.add_argument("--burst", type=int, default=2000)
    ap.add_argument("--crowd", type=int, default=5000)
    args = ap.parse_args()
    limit = raise_open_files_limit()
    if limit < max(args.sockets, args.crowd) + 500:
        print(f"open files limit {limit} < {max(args.sockets, args.crowd) + 500}: lower --sockets / --crowd")
        return 2
    root = Path(tempfile.mkdtemp(prefix="ticketry-crowd-"))
    stack = start_stack(root, renderers=0)
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": vars(args)}
    try:

        async def go() -> None:
            print(f"placing {args.orders} orders …", flush=True)
            orders = await place_orders(stack, args.orders)
            # Memory first, on a notifier that has held no crowd yet (CPython keeps
            # what it once allocated and reuses it: a later baseline would hide it).
            print(f"memory: up to {args.sockets} sockets held open …", flush=True)
            out["memory"] = await memory(stack, orders, args.sockets)
            print(f"burst: {args.burst} sockets at once …", flush=True)
            out["burst"] = await burst(stack, orders, args.burst)
            print(out["burst"], flush=True)
            print(f"crowd: {args.crowd} sockets at once, then a renderer …", flush=True)
            out["crowd"] = await crowd(stack, orders, args.crowd, start_renderer=True)
            print(out["crowd"], flush=True)

        asyncio.run(go())
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)
    c, m, b = out["crowd"], out["memory"], out["burst"]
    kb = m["kb_per_socket"]
    rows = [
        # The crowd's own RSS is left out: the ramp before it already grew the
        # notifier's heap, which CPython reuses (``run()`` measures it fresh).
        *[(name, value) for name, value, _, _ in crowd_rows(c, rss=False)],
        *[(f"notifier RSS per idle socket at {n:,} sockets (KB)", f"{v:.1f}") for n, v in kb.items()
          if n in (1000, args.sockets)],
        ("notifier RSS per socket, marginal from 1,000 to the peak (KB)", f"{m['kb_per_socket_marginal'] or 0:.1f}"),
        ("notifier RSS: idle / at peak / after all closed (MB)",
         f"{m['rss_mb'][0][1]:.1f} / {m['rss_mb'][-1][1]:.1f} / {m['rss_after_close_mb']:.1f}"),
        (f"burst: {b['sockets']} at once, served / all snapshots in (s)",
         f"{b['served']} / {b['all_snapshots_s']:.2f}"),
        ("  notifier CPU per socket (ms) / Redis round trips for all handshakes",
         f"{b['notifier_cpu_ms_per_socket']:.2f} / {b['redis_round_trips_for_handshakes']:.0f}"),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    print()
    for name, value in rows:
        print(f"{name.ljust(width)} | {value}")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"crowd-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"\nwritten {path}")
    return 0 if c["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
