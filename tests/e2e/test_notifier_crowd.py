"""The on-sale rush at the notifier: 1,000 progress sockets opened at once.

Before, 99 were served and 901 dropped without a close frame (each handshake
took a Redis connection of its own from a pool that failed at 100). Here every
one must get its snapshot, stay open, and get its order's completion. The orders
cannot complete before the sockets are open: the stack has no renderer until
every snapshot is in. Generous deadlines, no timing asserts (timings: bench.crowd).
"""

from __future__ import annotations

import asyncio
import resource
import shutil
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets

from tests.conftest import TokenFactory, make_stack
from tests.helpers import create_event, metric_one, place_order

BUYERS = 250
SOCKETS_PER_BUYER = 4  # within the default bound per buyer (16)
SOCKETS = BUYERS * SOCKETS_PER_BUYER


def raise_open_files_limit(want: int) -> None:
    """This process (and the notifier it starts) holds a file per socket."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


async def gauge(notifier_url: str) -> float:
    async with httpx.AsyncClient(timeout=30) as client:
        text = (await client.get(notifier_url.replace("ws://", "http://") + "/metrics")).text
    return metric_one(text, "ticketry_websocket_connections")


async def test_a_thousand_sockets_at_once_all_get_snapshot_and_completion(tmp_path: Path, token: TokenFactory) -> None:
    raise_open_files_limit(4 * SOCKETS)
    stack = await asyncio.to_thread(make_stack, tmp_path / "stack", 0)
    watchers: list[asyncio.Task[list[dict[str, Any]]]] = []
    try:
        # Given 250 buyers with a 1-ticket order each, and no renderer yet
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=120) as api:
            event = await create_event(api, token("crowd-org", "organizer"), capacity=BUYERS)
            buyers = [token(f"crowd-{i}", "buyer") for i in range(BUYERS)]
            orders: list[dict[str, Any]] = []
            for start in range(0, BUYERS, 25):
                batch = await asyncio.gather(*(place_order(api, b, event["id"], 1) for b in buyers[start : start + 25]))
                assert all(r.status_code == 202 for r in batch), [r.text for r in batch if r.status_code != 202]
                orders += [r.json() for r in batch]

        snapshots = 0
        all_in = asyncio.Event()

        async def watch(order: dict[str, Any], buyer: str) -> list[dict[str, Any]]:
            nonlocal snapshots
            got: list[dict[str, Any]] = []
            async with websockets.connect(f"{order['progress_url']}?token={buyer}", open_timeout=120) as ws:
                while not got or got[-1]["type"] != "order.completed":
                    raw = await ws.recv()
                    assert isinstance(raw, str), "a binary frame"
                    got.append(orjson.loads(raw))
                    if len(got) == 1:
                        snapshots += 1
                        if snapshots == SOCKETS:
                            all_in.set()
            return got

        # When 1,000 sockets open at once (4 per order)
        watchers += [
            asyncio.create_task(watch(order, buyer))
            for order, buyer in zip(orders, buyers, strict=True)
            for _ in range(SOCKETS_PER_BUYER)
        ]
        # (none can end before a renderer runs: a watcher done now has failed)
        all_in_task = asyncio.ensure_future(all_in.wait())
        async with asyncio.timeout(300):
            done, _ = await asyncio.wait([all_in_task, *watchers], return_when=asyncio.FIRST_COMPLETED)
        early = [w for w in watchers if w in done]
        assert not early, f"a socket ended before its order could complete: {early[0].exception()!r}"
        # Then every one has its snapshot and is still open (counted on /metrics)
        assert snapshots == SOCKETS
        assert await gauge(stack.notifier_url) == SOCKETS
        # And once a renderer runs, every socket gets its order's completion
        await asyncio.to_thread(stack.start_renderer)
        async with asyncio.timeout(600):
            results = await asyncio.gather(*watchers)
        for order, msgs in zip((o for o in orders for _ in range(SOCKETS_PER_BUYER)), results, strict=True):
            assert [m["type"] for m in msgs] == ["snapshot", "ticket.rendered", "order.completed"], msgs
            snap, rendered, completed = msgs
            assert (snap["order_id"], snap["status"], snap["total"]) == (order["id"], "processing", 1)
            assert snap["rendered"] == 0
            assert rendered["ticket_id"] == order["tickets"][0]
            assert (completed["order_id"], completed["rendered"]) == (order["id"], 1)
        log = (stack.data_dir / "logs" / "notifier.log").read_text(errors="replace")
        assert "Traceback" not in log and "MaxConnectionsError" not in log
    finally:
        for w in watchers:
            w.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await asyncio.to_thread(stack.stop)
        shutil.rmtree(tmp_path / "stack", ignore_errors=True)
