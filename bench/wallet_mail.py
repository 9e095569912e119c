"""What wallet passes and emails cost end to end: tickets/s of orders with
them on vs off, on one stack, in the same run.

    uv run --frozen python -m bench.wallet_mail [--quantity 200] [--rounds 2]

In ``just bench`` (``--no-wallet-mail`` skips it). One stack (one renderer
per core) with throw-away wallet credentials (as ``just up`` makes them) and
its mailer pointed at mailpit (the inbox ``just up`` runs: a real SMTP server).
Each round runs two legs, alternated (off, on / on, off) so a slow minute of a
shared machine falls on both; a leg places eight ``--quantity``-ticket orders
at once (an on-sale: one order's mail overlaps the next one's renders):

* off: no email, no pass asked for; done at ``order.completed`` on its socket;
* on: the order carries an email, and each ticket's pass is fetched
  (``GET /v1/tickets/{id}/pkpass``: passes are built on first request, by
  the api) as soon as its ``ticket.rendered`` arrives, 8 at a time, as the
  buyers' phones would, competing with the renders for the same two cores;
  done once the order completed and its mail is in mailpit.

A leg's tickets/s is its tickets over the time until its last order is done; the verdict
is the medians' ratio on/off ≥ 0.5 (the passes must not halve throughput).
Serving the passes themselves is the api's work, like serving PDFs: how fast
it answers them (passes/s, the last one's time) is reported beside.
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
PASS_FETCHES = 8  # passes asked for at once per order, as many phones would
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
    gate = asyncio.Semaphore(PASS_FETCHES)
    fetches: dict[str, asyncio.Task[int]] = {}

    async def fetch_pass(ticket_id: str) -> int:
        async with gate:
            got = await api.get(f"/v1/tickets/{ticket_id}/pkpass", headers=headers)
        if got.status_code != 200 or got.headers["content-type"] != "application/vnd.apple.pkpass":
            raise RuntimeError(f"pass of {ticket_id}: {got.status_code} {got.text[:200]}")
        return len(got.content)

    progress = f"{r.json()['progress_url']}?token={token(buyer, 'buyer')}"
    async with asyncio.timeout(900), websockets.connect(progress, max_size=2**24) as ws:
        while True:
            msg = orjson.loads(await ws.recv())
            if on and msg["type"] == "ticket.rendered" and msg.get("ticket_id"):
                fetches.setdefault(msg["ticket_id"], asyncio.create_task(fetch_pass(msg["ticket_id"])))
            if msg["type"] == "order.completed" or (msg["type"] == "snapshot" and msg.get("completed")):
                break
    completed_s = time.time() - placed
    out: dict[str, Any] = {"kind": kind, "order_id": r.json()["id"], "completed_s": completed_s}
    if on:
        # A ticket rendered before the socket opened has no event of its own: ask for its pass too.
        params = {"limit": "200"}
        while len(fetches) < quantity:
            page = await api.get(f"/v1/orders/{out['order_id']}/tickets", params=params, headers=headers)
            listed = page.raise_for_status().json()
            for t in listed["items"]:
                fetches.setdefault(t["id"], asyncio.create_task(fetch_pass(t["id"])))
            if not listed["next"]:
                break
            params["cursor"] = listed["next"]
        async with asyncio.timeout(600):
            while not await mail_count(inbox, email):
                await asyncio.sleep(0.05)
        out["mailed_s"] = time.time() - placed
    out["done_s"] = time.time() - placed
    out["tickets_per_s"] = quantity / out["done_s"]
    if on:
        sizes = await asyncio.gather(*fetches.values())
        passes_s = time.time() - placed
        out |= {"passes": len(sizes), "pass_bytes_median": statistics.median(sizes) if sizes else None,
                "passes_s": passes_s, "passes_per_s": len(sizes) / passes_s}  # fmt: skip
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
               "passes_fetched": sum(o.get("passes", 0) for leg in orders for o in leg["orders"]),
               **{f"on_{k}": statistics.median(o[k] for leg in orders if leg["kind"] == "on" for o in leg["orders"])
                  for k in ("completed_s", "mailed_s", "passes_s")},
               "on_passes_per_s": statistics.median(
                   sum(o["passes"] for o in leg["orders"]) / max(o["passes_s"] for o in leg["orders"])
                   for leg in orders if leg["kind"] == "on")}  # fmt: skip
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
        ("  on: passes fetched (200, pkpass) / orders mailed",
         f"{s['passes_fetched']} / {s['rounds'] * s['orders_per_leg']}", "", ""),
        ("  on, from the 202: completed / mail in the inbox / last pass answered (s)",
         " / ".join(f"{s[k]:.2f}" for k in ("on_completed_s", "on_mailed_s", "on_passes_s")), "", ""),
        ("  on: passes served by the api while it renders (passes/s)", f"{s['on_passes_per_s']:.1f}", "", ""),
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
