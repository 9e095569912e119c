"""What wallet passes and emails cost end to end: tickets/s of orders with
them on vs off, on one stack, in the same run.

    uv run --frozen python -m bench.wallet_mail [--quantity 200] [--rounds 2]

In ``just bench`` (``--no-wallet-mail`` skips it). One stack (one renderer
per core) with throw-away wallet credentials (as ``just up`` makes them) and
its mailer pointed at mailpit (the inbox ``just up`` runs: a real SMTP server).
Each round runs two legs, alternated (off, on / on, off) so a slow minute of a
shared machine falls on both; a leg places eight ``--quantity``-ticket orders
at once (an on-sale: one order's mail overlaps the next one's renders). In
both legs every ticket reaches its buyer, as each leg's buyers get it, 8
requests at a time per order as phones would, competing with the renders for
the same two cores:

* off: no email, no wallet: each ticket's PDF is downloaded
  (``GET /v1/tickets/{id}/pdf``) as soon as its ``ticket.rendered`` arrives;
* on: the order carries an email (its PDFs attached), and each ticket's pass
  is fetched instead (``GET /v1/tickets/{id}/pkpass``: built on first
  request, by the api); done once its mail is in mailpit too.

A leg's tickets/s is its tickets over the time until its last order is done
(completed, every ticket fetched, and on: mailed); the verdict is the medians'
ratio on/off ≥ 0.5 (the passes and the mail must not halve throughput). The
pass rate the api sustains while it renders is reported beside.
Both legs run on the same processes: the mailer's group reads the ticket
events in the off leg too (its cost when nobody asked for mail).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets
from ticketry_devstack.procs import Stack, free_port, mailpit_proc, start_stack, wait_port
from ticketry_devstack.walletca import dev_wallet_env

from bench import scenarios
from bench.flood import Row, show_and_save
from bench.scenarios import hdr, token

VERDICT = 0.5  # the passes and the mail must not halve throughput
FETCHES = 8  # PDFs or passes asked for at once per order, as many phones would
ORDERS = 8  # orders placed at once in a leg


async def mail_count(inbox: httpx.AsyncClient, address: str) -> int:
    """Messages mailpit holds for ``address`` (its search API)."""
    r = await inbox.get("/api/v1/search", params={"query": f"to:{address}"})
    r.raise_for_status()
    return len(r.json().get("messages") or [])


async def one_order(
    api: httpx.AsyncClient, inbox: httpx.AsyncClient, event_id: str, quantity: int, on: bool, n: int
) -> dict[str, Any]:
    """A ``quantity``-ticket order to done (see the module's doc); its figures."""
    kind = "on" if on else "off"
    buyer = f"bench-wm-{kind}-{n}-{event_id}"
    email = f"{buyer}@bench.example"
    body: dict[str, Any] = {"event_id": event_id, "quantity": quantity, "holder_name": "Bench Buyer"}
    if on:
        body["email"] = email
    headers = hdr(token(buyer, "buyer"))
    r = await api.post("/v1/orders", json=body, headers=headers)
    if r.status_code != 202:
        raise RuntimeError(f"order refused: {r.status_code} {r.text[:200]}")
    placed = time.time()
    gate = asyncio.Semaphore(FETCHES)
    fetches: dict[str, asyncio.Task[int]] = {}
    what, media = ("pkpass", "application/vnd.apple.pkpass") if on else ("pdf", "application/pdf")

    async def fetch(ticket_id: str) -> int:
        async with gate:
            got = await api.get(f"/v1/tickets/{ticket_id}/{what}", headers=headers)
        if got.status_code != 200 or got.headers["content-type"] != media:
            raise RuntimeError(f"{what} of {ticket_id}: {got.status_code} {got.text[:200]}")
        return len(got.content)

    progress = f"{r.json()['progress_url']}?token={token(buyer, 'buyer')}"
    async with asyncio.timeout(900), websockets.connect(progress, max_size=2**24) as ws:
        while True:
            msg = orjson.loads(await ws.recv())
            if msg["type"] == "ticket.rendered" and msg.get("ticket_id"):
                fetches.setdefault(msg["ticket_id"], asyncio.create_task(fetch(msg["ticket_id"])))
            if msg["type"] == "order.completed" or (msg["type"] == "snapshot" and msg.get("completed")):
                break
    completed_s = time.time() - placed
    out: dict[str, Any] = {"kind": kind, "order_id": r.json()["id"], "completed_s": completed_s}
    # A ticket rendered before the socket opened has no event of its own: fetch it too.
    params = {"limit": "200"}
    while len(fetches) < quantity:
        page = await api.get(f"/v1/orders/{out['order_id']}/tickets", params=params, headers=headers)
        listed = page.raise_for_status().json()
        for t in listed["items"]:
            fetches.setdefault(t["id"], asyncio.create_task(fetch(t["id"])))
        if not listed["next"]:
            break
        params["cursor"] = listed["next"]
    if on:
        async with asyncio.timeout(600):
            while not await mail_count(inbox, email):
                await asyncio.sleep(0.05)
        out["mailed_s"] = time.time() - placed
    sizes = await asyncio.gather(*fetches.values())
    fetched_s = time.time() - placed
    out |= {"fetched": len(sizes), "bytes_median": statistics.median(sizes) if sizes else None,
            "fetched_s": fetched_s, "fetched_per_s": len(sizes) / fetched_s}  # fmt: skip
    out["done_s"] = time.time() - placed
    out["tickets_per_s"] = quantity / out["done_s"]
    return out


async def measure(quantity: int, rounds: int, renderers: int) -> dict[str, Any]:
    """Start mailpit and the stack, run the rounds, stop both; the summary and each order."""
    root = Path(tempfile.mkdtemp(prefix="ticketry-wallet-mail-"))
    smtp_port, ui_port = free_port(), free_port()
    proc = mailpit_proc(root / "mail", smtp_port, ui_port)
    if proc is None:
        raise RuntimeError("no mailpit built (infra/bootstrap.sh builds it)")
    proc.start()
    stack: Stack | None = None
    orders: list[dict[str, Any]] = []
    try:
        wait_port(smtp_port, proc=proc.popen)
        wait_port(ui_port, proc=proc.popen)
        env = {"TICKETRY_SMTP_URL": f"smtp://127.0.0.1:{smtp_port}", **dev_wallet_env(root / "wallet")}
        stack = start_stack(root / "stack", renderers=renderers, extra_env=env)
        async with (
            httpx.AsyncClient(base_url=stack.api_url, timeout=600) as api,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{ui_port}", timeout=60) as inbox,
        ):
            event_id = await scenarios.create_event(api, (2 * rounds * ORDERS + 2) * quantity + 100)
            for on in (False, True):  # warm: designs, fonts, the pass signer, the SMTP connection path
                await one_order(api, inbox, event_id, min(quantity, 20), on, -1)
            for r in range(rounds):
                for on in (False, True) if r % 2 == 0 else (True, False):
                    # A leg: ORDERS orders at once (an on-sale, not one buyer), so the
                    # mail of one overlaps the renders of the next, as in production.
                    t0 = time.time()
                    got = await asyncio.gather(
                        *(one_order(api, inbox, event_id, quantity, on, r * ORDERS + i) for i in range(ORDERS))
                    )
                    leg = {"kind": got[0]["kind"], "round": r, "orders": got,
                           "tickets_per_s": ORDERS * quantity / (time.time() - t0)}  # fmt: skip
                    print(f"  round {r + 1}: {leg['kind']:3} {ORDERS} x {quantity} tickets at"
                          f" {leg['tickets_per_s']:.0f}/s", flush=True)  # fmt: skip
                    orders.append(leg)
    finally:
        if stack is not None:
            stack.stop()
        proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    rate = {k: statistics.median(o["tickets_per_s"] for o in orders if o["kind"] == k) for k in ("off", "on")}
    summary = {"quantity": quantity, "rounds": rounds, "renderers": renderers,
               "off_tickets_per_s": rate["off"], "on_tickets_per_s": rate["on"], "ratio": rate["on"] / rate["off"],
               "orders_per_leg": ORDERS,
               "fetched": {k: sum(o["fetched"] for leg in orders if leg["kind"] == k for o in leg["orders"])
                           for k in ("off", "on")},
               **{f"{k}_{f}": statistics.median(o[f] for leg in orders if leg["kind"] == k for o in leg["orders"])
                  for k in ("off", "on") for f in ("completed_s", "fetched_s")},
               "on_mailed_s": statistics.median(o["mailed_s"] for leg in orders if leg["kind"] == "on"
                                                for o in leg["orders"]),
               **{f"{k}_per_s": statistics.median(
                   sum(o["fetched"] for o in leg["orders"]) / max(o["fetched_s"] for o in leg["orders"])
                   for leg in orders if leg["kind"] == k) for k in ("off", "on")}}  # fmt: skip
    return {"summary": summary, "orders": orders, "ok": summary["ratio"] >= VERDICT}


def run(quantity: int = 200, rounds: int = 2, renderers: int | None = None) -> dict[str, Any]:
    """:func:`measure` from synchronous code (``bench/__main__``)."""
    return asyncio.run(measure(quantity, rounds, renderers or scenarios.cpu_count()))


def table(got: dict[str, Any]) -> list[Row]:
    s = got["summary"]
    return [
        (f"wallet passes + email on vs off, {s['orders_per_leg']} x {s['quantity']:,}-ticket orders at once,"
         " end to end (tickets/s)",
         f"{s['on_tickets_per_s']:.1f} vs {s['off_tickets_per_s']:.1f}", f"≥ {VERDICT:.2f}", f"{s['ratio']:.2f}×"),
        ("  fetched (200): PDFs off / passes on; orders mailed on",
         f"{s['fetched']['off']} / {s['fetched']['on']}; {s['rounds'] * s['orders_per_leg']}", "", ""),
        ("  off, from the 202: completed / last PDF answered (s)",
         " / ".join(f"{s[k]:.2f}" for k in ("off_completed_s", "off_fetched_s")), "", ""),
        ("  on, from the 202: completed / mail in the inbox / last pass answered (s)",
         " / ".join(f"{s[k]:.2f}" for k in ("on_completed_s", "on_mailed_s", "on_fetched_s")), "", ""),
        ("  served by the api while it renders: PDFs off / passes on (per s)",
         f"{s['off_per_s']:.1f} / {s['on_per_s']:.1f}", "", ""),
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench.wallet_mail", description=__doc__.splitlines()[0])
    ap.add_argument("--quantity", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--renderers", type=int, default=None)
    args = ap.parse_args()
    got = run(args.quantity, args.rounds, args.renderers)
    path = show_and_save(table(got), got, "wallet-mail")
    print(f"\nwritten {path}")
    return 0 if got["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
