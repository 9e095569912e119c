"""``ticketryctl status``: the stack at a glance, from Redis alone
(``ticketry_api.ops.status``, which the console at ``/ops`` reads too)."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, Any

import orjson
import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table

from ticketry_api.ctl.common import JsonOpt, console, print_json, redis_client, run
from ticketry_api.ops.status import collect


def render(s: dict[str, Any]) -> Group:
    """The status as rich tables."""
    st = Table("stream", "length", "group", "consumers", "pending", "lag", title="streams", title_justify="left")
    for name, info in s["streams"].items():
        if not info["groups"]:
            st.add_row(name, str(info["length"]) if info["exists"] else "-", "", "", "", "")
        for i, (group, g) in enumerate(info["groups"].items()):
            st.add_row(
                name if i == 0 else "", str(info["length"]) if i == 0 else "", group, str(g["consumers"]),
                str(g["pending"]), "?" if g["lag"] is None else str(g["lag"]),
            )  # fmt: skip
    rt = Table("renderer", "host", "pid", "rate/s", "busy", "rendered", title="renderers", title_justify="left")
    for r in s["renderers"]:
        rt.add_row(r["consumer"], r["host"], str(r["pid"]), f"{r['rate']:.0f}", f"{r['busy']:.0%}", str(r["rendered"]))
    sc = s["scaler"]
    ob = s["outbox"]
    summary = Table.grid(padding=(0, 2))
    summary.add_row("render backlog", f"lag {s['lag']}, pending {s['pending']}")
    summary.add_row("scaler leader", f"{sc['leader']} (token {sc['token']})" if sc["leader"] else "none")
    desired = "no decision yet" if sc.get("desired") is None else str(sc["desired"])
    summary.add_row("renderers desired / live", f"{desired} / {len(s['renderers'])}")
    summary.add_row(
        "outbox", f"{ob['in_flight']} in flight" + (f", oldest {ob['oldest_age_s']:.1f} s" if ob["in_flight"] else "")
    )
    summary.add_row("dead letters", f"renders {s['dead_letters']['render']}, webhooks {s['dead_letters']['webhooks']}")
    summary.add_row("webhook retries", str(s["webhooks"]["retries_waiting"]))
    if not s["rooms"]:
        return Group(st, rt, summary)
    wr = Table("event", "waiting", "admitted", "rate/s", "state", title="waiting rooms", title_justify="left")
    for r in s["rooms"]:
        state = "paused" if r["paused"] else "sold out" if r["sold_out"] else "admitting"
        wr.add_row(r["event_id"], str(r["waiting"]), str(r["admitted"]), f"{r['rate']:.0f}", state)
    return Group(st, rt, summary, wr)


def status(
    json: JsonOpt = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes with --watch.", min=0.2)] = 2.0,
) -> None:
    """Streams (length, lag, pending per group), renderers, scaler leader, outbox, dead letters, waiting rooms.

    With --json: one JSON document (with --watch: one line per refresh)."""

    async def once() -> dict[str, Any]:
        async with redis_client() as redis:
            return await collect(redis)

    async def watching() -> None:
        async with redis_client() as redis:
            if json:
                while True:
                    sys.stdout.write(orjson.dumps(await collect(redis)).decode() + "\n")
                    sys.stdout.flush()
                    await asyncio.sleep(interval)
            with Live(render(await collect(redis)), console=console, auto_refresh=False) as live:
                while True:
                    await asyncio.sleep(interval)
                    live.update(render(await collect(redis)), refresh=True)

    if not watch:
        s = run(once)
        if json:
            print_json(s)
        else:
            console.print(render(s))
        return
    try:
        run(watching)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
