"""A demo order against a running stack, with its live progress printed."""

from __future__ import annotations

import time

import httpx
import orjson
import websockets
from ticketry.auth import issue_token
from ticketry.settings import DEV_JWT_SECRET


async def demo(api_url: str, quantity: int) -> None:
    organizer = issue_token("demo-organizer", "organizer", key=DEV_JWT_SECRET)
    buyer = issue_token("demo-buyer", "buyer", key=DEV_JWT_SECRET)
    async with httpx.AsyncClient(base_url=api_url, timeout=60) as api:
        ev = await api.post(
            "/v1/events",
            json={"name": "Ticketry Live", "venue": "Loopback Hall", "starts_at": "2027-06-01T20:00:00Z",
                  "capacity": max(quantity, 100), "price": "39.00", "currency": "EUR"},
            headers={"Authorization": f"Bearer {organizer}"},
        )  # fmt: skip
        if ev.status_code != 201:
            print(f"demo: creating the event failed: {ev.status_code} {ev.text}")
            return
        t0 = time.perf_counter()
        r = await api.post(
            "/v1/orders",
            json={"event_id": ev.json()["id"], "quantity": quantity, "holder_name": "Grace Hopper"},
            headers={"Authorization": f"Bearer {buyer}"},
        )
        if r.status_code != 202:
            print(f"demo: the order was refused: {r.status_code} {r.text}")
            return
        order = r.json()
        print(f"order {order['id']}: {quantity} tickets, 202 after {1000 * (time.perf_counter() - t0):.0f} ms")
        # From the order's start (after=0-0): a small order may be rendered before the socket opens.
        # The snapshot counts what is done so far; the replay after it carries each event's own,
        # older counts, so what is printed is the most seen, and only when it moved a tenth on.
        rendered = failed = shown = 0
        async with websockets.connect(f"{order['progress_url']}?token={buyer}&after=0-0") as ws:
            while True:
                msg = orjson.loads(await ws.recv())
                rendered, failed = max(rendered, msg["rendered"]), max(failed, msg["failed"])
                if msg["type"] in ("snapshot", "order.completed") or rendered >= shown + max(quantity // 10, 1):
                    shown = rendered
                    print(
                        f"  {time.perf_counter() - t0:6.2f}s {msg['type']:<16} "
                        f"{rendered}/{msg['total']} rendered, {failed} failed"
                    )
                if msg["type"] == "order.completed":
                    break
        print(f"buyer's page (open it in a browser): {order['status_page_url']}")
        print(f"PDFs: {api_url}/v1/tickets/<id>/pdf  (buyer token: {buyer})")
