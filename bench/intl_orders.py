"""International names end to end: orders through the api, as buyers place them.

    uv run --frozen python -m bench.intl_orders [--quantity 2000] [--rounds 2]

On one stack (one renderer per core): an event, a warm-up order of each kind
(the renderers build the design and load the fonts), then ``--rounds`` rounds of two
``--quantity``-ticket orders, each naming every ticket's holder in ``holders``:
ASCII names (``Buyer Number <i>``) and the world mix (``bench.intl.MIX``: every
script of the font chain, plus Latin names), alternated so a drifting machine
does not always favour one. Tickets/s is ``--quantity`` over the time from the
202 to ``order.completed`` on the order's WebSocket; the acceptance is the mix
at ≥ 70 % of ASCII (medians).

Untimed, afterwards: every PDF of every mixed order is downloaded through the
api and read back (``bench.pdfcheck``): no ``.notdef`` glyph, each holder
extracted as typed; and each renderer's memory (``/proc/<pid>/smaps_rollup``)
after the ASCII and after the mixed orders: RSS, PSS (shared pages counted once
across processes) and private memory, which is what the CJK fonts would
multiply per renderer if they were not shared.

``just bench`` runs it (``bench.__main__``); results go to
``bench/results/intl-orders-<time>.json`` when run alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from ticketry_devstack.procs import Stack, start_stack

from bench import scenarios
from bench.intl import MIX, holder
from bench.pdfcheck import faults
from bench.scenarios import hdr, token

RESULTS = Path(__file__).parent / "results"


def memory_kb(pid: int) -> dict[str, int]:
    """RSS, PSS and private memory of a process, in KB (empty if it is gone)."""
    out: dict[str, int] = {}
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
            out[name] = int(rest.split()[0])
    out["Private"] = out.pop("Private_Clean", 0) + out.pop("Private_Dirty", 0)
    return out


def renderers_memory(stack: Stack) -> list[dict[str, int]]:
    return [memory_kb(r.pid) for r in stack.renderers]


async def one_order(api: httpx.AsyncClient, event_id: str, kind: str, quantity: int, n: int) -> dict[str, Any]:
    """A ``quantity``-ticket order whose holders are of ``kind``, to ``order.completed``."""
    names = [holder(kind, i) for i in range(quantity)]
    buyer = f"bench-intl-{kind}-{n}-{event_id}"
    body = {"event_id": event_id, "quantity": quantity, "holder_name": names[0], "holders": names}
    r = await api.post("/v1/orders", json=body, headers=hdr(token(buyer, "buyer")))
    if r.status_code != 202:
        raise RuntimeError(f"order refused: {r.status_code} {r.text[:200]}")
    placed = time.time()
    got = await scenarios.watch(r.json()["progress_url"], buyer, placed)
    final = got["final"]
    return {
        "kind": kind,
        "order_id": r.json()["id"],
        "buyer": buyer,
        "tickets_per_s": quantity / got["done_s"],
        "failed": final.get("failed", 0),
        "names": names,
    }


async def read_back(api: httpx.AsyncClient, order: dict[str, Any]) -> list[str]:
    """Every ticket's PDF of ``order``, through the api: what is wrong with each."""
    headers = hdr(token(order["buyer"], "buyer"))
    tickets: list[dict[str, Any]] = []
    params = {"limit": "200"}
    while True:
        page = (await api.get(f"/v1/orders/{order['order_id']}/tickets", params=params, headers=headers)).json()
        tickets += page["items"]
        if not page["next"]:
            break
        params["cursor"] = page["next"]
    if len(tickets) != len(order["names"]):
        return [f"{len(tickets)} tickets listed, {len(order['names'])} ordered"]
    gate = asyncio.Semaphore(8)

    async def check(n: int, ticket: dict[str, Any]) -> list[str]:
        async with gate:
            pdf = (await api.get(ticket["pdf_url"], headers=headers, follow_redirects=True)).raise_for_status()
        return [f"{ticket['id']}: {f}" for f in faults(pdf.content, order["names"][n])]

    found = await asyncio.gather(*(check(n, t) for n, t in enumerate(tickets)))  # listed in order
    return [f for fs in found for f in fs]


async def measure(stack: Stack, quantity: int, rounds: int) -> dict[str, Any]:
    """The rounds on a running stack; the summary and every order's figures."""
    orders: list[dict[str, Any]] = []
    memory: dict[str, list[dict[str, int]]] = {}
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=600) as api:
        event_id = await scenarios.create_event(api, 2 * rounds * quantity + 200)
        memory["at start"] = renderers_memory(stack)
        for kind in ("ascii", "mix"):  # warm: every renderer's design and fonts
            await one_order(api, event_id, kind, 2 * len(MIX), -1)
        for r in range(rounds):
            for kind in ("ascii", "mix") if r % 2 == 0 else ("mix", "ascii"):
                got = await one_order(api, event_id, kind, quantity, r)
                print(f"  round {r + 1}: {kind:5} {quantity} tickets at {got['tickets_per_s']:.0f}/s", flush=True)
                orders.append(got)
                memory[f"after {kind}"] = renderers_memory(stack)
        faults_found = [f for o in orders if o["kind"] == "mix" for f in await read_back(api, o)]
    rate = {k: statistics.median(o["tickets_per_s"] for o in orders if o["kind"] == k) for k in ("ascii", "mix")}
    return {
        "quantity": quantity,
        "ascii_tickets_per_s": rate["ascii"],
        "mix_tickets_per_s": rate["mix"],
        "ratio": rate["mix"] / rate["ascii"],
        "failed": sum(o["failed"] for o in orders),
        "pdfs_checked": sum(len(o["names"]) for o in orders if o["kind"] == "mix"),
        "faults": faults_found[:20],
        "fault_count": len(faults_found),
        "renderer_memory_kb": memory,
        "rounds": [{k: v for k, v in o.items() if k != "names"} for o in orders],
    }


def describe(got: dict[str, Any]) -> str:
    mem = got["renderer_memory_kb"]
    private = {k: [m.get("Private", 0) // 1024 for m in v] for k, v in mem.items()}
    return (
        f"names of 12 scripts vs ASCII, {got['quantity']}-ticket orders through the api: "
        f"{got['mix_tickets_per_s']:.0f} vs {got['ascii_tickets_per_s']:.0f} tickets/s ({got['ratio']:.0%}); "
        f"{got['pdfs_checked']} PDFs read back, {got['fault_count']} faults; "
        f"renderers' private MB {private}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench.intl_orders")
    ap.add_argument("--quantity", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--renderers", type=int, default=scenarios.cpu_count())
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ticketry-intl-"))
    stack = start_stack(root, renderers=args.renderers)
    try:
        got = asyncio.run(measure(stack, args.quantity, args.rounds))
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(describe(got))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"intl-orders-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(got, indent=2, ensure_ascii=False))
    print(f"→ {path}")
    return 0 if got["fault_count"] == 0 and got["failed"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
