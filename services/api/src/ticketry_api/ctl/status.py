"""``ticketryctl status``: the stack at a glance, from Redis alone.

Streams (length; per consumer group: consumers, pending, lag), live renderers
(their heartbeats), the scaler's leader, the api's outbox (orders in flight),
dead letters (renders, webhooks), webhook retries waiting, and the waiting
rooms the admitters tick (waiting, admitted, rate, paused).
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
import typer
from redis.asyncio import Redis
from redis.exceptions import ResponseError
from rich.console import Group
from rich.live import Live
from rich.table import Table
from ticketry import streams
from ticketry.replies import as_text

from ticketry_api.ctl.common import JsonOpt, console, print_json, redis_client, run

WATCHED_STREAMS = (
    streams.RENDER_VIP,
    streams.RENDER_STD,
    streams.TICKET_EVENTS,
    streams.DESIGN_REQUESTS,
    streams.WEBHOOK_DELIVERIES,
)


def _num(v: Any) -> float:
    try:
        return float(as_text(v))
    except (TypeError, ValueError):
        return 0.0


async def stream_info(redis: Redis, name: str) -> dict[str, Any]:
    """Length and consumer groups of one stream (``exists: false`` when it is not there)."""
    if not await redis.exists(name):
        return {"exists": False, "length": 0, "groups": {}}
    groups: dict[str, Any] = {}
    try:
        raw: list[dict[Any, Any]] = await redis.xinfo_groups(name)
    except ResponseError:
        raw = []
    for g in raw:
        info = {as_text(k): v for k, v in g.items()}
        lag = info.get("lag")
        groups[as_text(info["name"])] = {
            "consumers": int(info.get("consumers", 0)),
            "pending": int(info.get("pending", 0)),
            # NULL when Redis cannot tell (entries deleted in the range): unknown, not 0.
            "lag": None if lag is None else int(lag),
            "last_delivered_id": as_text(info.get("last-delivered-id", "")),
        }
    return {"exists": True, "length": int(await redis.xlen(name)), "groups": groups}


async def renderers(redis: Redis) -> list[dict[str, Any]]:
    """Live renderers from their heartbeat hashes (gone ``HEARTBEAT_TTL_S`` after death)."""
    keys = [as_text(k) async for k in redis.scan_iter(match=streams.renderer_heartbeat("*"), count=500)]
    out = []
    for key in sorted(keys):
        data = {as_text(k): as_text(v) for k, v in (await redis.hgetall(key)).items()}
        if not data:
            continue
        out.append({
            "consumer": data.get(streams.HEARTBEAT_CONSUMER, key.removeprefix(streams.RENDERER_PREFIX)),
            "host": data.get(streams.HEARTBEAT_HOST, ""), "pid": int(_num(data.get(streams.HEARTBEAT_PID))),
            "rate": _num(data.get(streams.HEARTBEAT_RATE)), "busy": _num(data.get(streams.HEARTBEAT_BUSY)),
            "rendered": int(_num(data.get(streams.HEARTBEAT_RENDERED))),
            "started": _num(data.get(streams.HEARTBEAT_STARTED)),
        })  # fmt: skip
    return out


async def rooms(redis: Redis) -> list[dict[str, Any]]:
    """The waiting rooms the admitters tick (``streams.ROOMS``), read only: a
    closed room, or one whose line is all admitted, is not among them."""
    out = []
    for event_id in sorted(as_text(e) for e in await redis.smembers(streams.ROOMS)):
        async with redis.pipeline(transaction=False) as pipe:
            pipe.hmget(
                streams.room_state(event_id),
                [streams.ROOM_ADMITTED, streams.ROOM_RATE, streams.ROOM_PAUSED, streams.ROOM_SOLD_OUT],
            )
            pipe.zcard(streams.room_line(event_id))
            (admitted_raw, rate, paused, sold_out), line = await pipe.execute()
        admitted = int(_num(admitted_raw))
        out.append({
            "event_id": event_id, "waiting": max(int(line) - admitted, 0),
            "admitted": admitted, "rate": _num(rate), "paused": as_text(paused or b"") == "1",
            "sold_out": as_text(sold_out or b"") == "1",
        })  # fmt: skip
    return out


async def collect(redis: Redis) -> dict[str, Any]:
    """Everything ``status`` shows, as one JSON-able dict."""
    info = {name: await stream_info(redis, name) for name in WATCHED_STREAMS}
    render_groups = [info[lane]["groups"].get(streams.RENDERERS_GROUP, {}) for lane in streams.RENDER_LANES]
    leader_raw = await redis.get(streams.SCALER_LEADER)
    leader: dict[str, Any] = {"leader": None, "token": None, "ttl_ms": None}
    if leader_raw is not None:
        holder, _, token = as_text(leader_raw).rpartition("|")
        leader = {"leader": holder, "token": int(token) if token.isdigit() else None,
                  "ttl_ms": int(await redis.pttl(streams.SCALER_LEADER))}  # fmt: skip
    oldest: list[Any] = await redis.zrange(streams.ORDERS_IN_FLIGHT, 0, 0, withscores=True)
    now_ms = time.time() * 1000
    return {
        "at": datetime.now(UTC).isoformat(),
        "streams": info,
        # The renderers' backlog over both lanes (what the scaler sizes from).
        "lag": sum(g.get("lag") or 0 for g in render_groups),
        "pending": sum(g.get("pending", 0) for g in render_groups),
        "renderers": await renderers(redis),
        "scaler": leader,
        "outbox": {
            "in_flight": int(await redis.zcard(streams.ORDERS_IN_FLIGHT)),
            "oldest_age_s": round((now_ms - float(oldest[0][1])) / 1000, 3) if oldest else None,
        },
        "dead_letters": {
            "render": int(await redis.xlen(streams.DEAD_LETTERS)),
            "webhooks": int(await redis.xlen(streams.WEBHOOK_DEAD)),
        },
        "webhooks": {"retries_waiting": int(await redis.zcard(streams.WEBHOOK_RETRIES))},
        "rooms": await rooms(redis),
    }


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
