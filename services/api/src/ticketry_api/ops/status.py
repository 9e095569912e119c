"""The stack at a glance, from Redis alone (what ``ticketryctl status`` shows
and the console's feed sends): streams (length; per consumer group:
consumers, pending, lag), live renderers (their heartbeats), the scaler's
leader, the api's outbox (orders in flight), dead letters (renders, webhooks),
webhook retries waiting, and the waiting rooms the admitters tick (waiting,
admitted, rate, paused). ``console`` adds what only the console shows: each
group's consumers with their idle time and its oldest pending entry's age, the
scaler's last decisions and the counters its throughput chart is drawn from.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError
from ticketry import streams
from ticketry.db import entries_of
from ticketry.replies import as_text

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
        async with redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(key)
            pipe.pttl(key)
            raw, ttl_ms = await pipe.execute()
        data = {as_text(k): as_text(v) for k, v in raw.items()}
        if not data:
            continue
        out.append({
            "consumer": data.get(streams.HEARTBEAT_CONSUMER, key.removeprefix(streams.RENDERER_PREFIX)),
            "host": data.get(streams.HEARTBEAT_HOST, ""), "pid": int(_num(data.get(streams.HEARTBEAT_PID))),
            "rate": _num(data.get(streams.HEARTBEAT_RATE)), "busy": _num(data.get(streams.HEARTBEAT_BUSY)),
            "rendered": int(_num(data.get(streams.HEARTBEAT_RENDERED))),
            "started": _num(data.get(streams.HEARTBEAT_STARTED)),
            "rss": int(_num(data.get(streams.HEARTBEAT_RSS))),  # bytes; 0 from a renderer that does not say
            # Each beat renews the TTL: what has run off it is the time since the last one.
            "beat_age_s": round(max(streams.HEARTBEAT_TTL_S - max(int(ttl_ms), 0) / 1000, 0.0), 1),
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


async def collect(redis: Redis, decisions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """Everything ``status`` shows, as one JSON-able dict (``decisions``: the
    scaler's newest decisions when the caller has read them already)."""
    info = {name: await stream_info(redis, name) for name in WATCHED_STREAMS}
    render_groups = [info[lane]["groups"].get(streams.RENDERERS_GROUP, {}) for lane in streams.RENDER_LANES]
    leader_raw = await redis.get(streams.SCALER_LEADER)
    leader: dict[str, Any] = {"leader": None, "token": None, "ttl_ms": None}
    if leader_raw is not None:
        holder, _, token = as_text(leader_raw).rpartition("|")
        leader = {"leader": holder, "token": int(token) if token.isdigit() else None,
                  "ttl_ms": int(await redis.pttl(streams.SCALER_LEADER))}  # fmt: skip
    # What the scaler wants: the replicas its newest decision set (None before any).
    newest = decisions[:1] if decisions is not None else await scaler_decisions(redis, 1)
    leader["desired"] = int(newest[0]["to"]) if newest and newest[0].get("to", "").isdigit() else None
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


async def group_detail(redis: Redis, name: str, group: str) -> dict[str, Any]:
    """A group's consumers (pending, idle ms) and how long its oldest pending
    entry has waited since it was last delivered (ms; None: nothing pending)."""
    try:
        raw: list[dict[Any, Any]] = await redis.xinfo_consumers(name, group)
        oldest = await redis.xpending_range(name, group, min="-", max="+", count=1)
    except ResponseError:
        return {"consumers_detail": [], "oldest_pending_ms": None}
    consumers = [
        {"name": as_text(c["name"]), "pending": int(c.get("pending", 0)), "idle_ms": int(c.get("idle", 0))} for c in raw
    ]
    return {
        "consumers_detail": sorted(consumers, key=lambda c: c["name"]),
        "oldest_pending_ms": int(oldest[0]["time_since_delivered"]) if oldest else None,
    }


async def scaler_decisions(redis: Redis, count: int = 10) -> list[dict[str, str]]:
    """The scaler's last ``count`` decisions, newest first (``messages.ScalerDecisionEntry``)."""
    found = entries_of(await redis.xrevrange(streams.SCALER_DECISIONS, count=count))
    return [{"id": as_text(i), **{as_text(k): as_text(v) for k, v in f.items()}} for i, f in found]


async def added(redis: Redis, name: str) -> int:
    """Entries ever added to a stream (XINFO STREAM ``entries-added``; 0 when it is not there)."""
    try:
        info = await redis.xinfo_stream(name)
    except ResponseError:
        return 0
    return int(info.get("entries-added", 0))


async def newest_id(redis: Redis, name: str) -> str | None:
    found = entries_of(await redis.xrevrange(name, count=1))
    return as_text(found[0][0]) if found else None


async def counters(redis: Redis, live: list[dict[str, Any]] | None = None) -> dict[str, int]:
    """The console's growing totals: orders accepted, tickets ordered (render
    requests appended) and tickets rendered by the renderers alive (``live``:
    :func:`renderers`, read here when not given)."""
    live = await renderers(redis) if live is None else live
    return {
        "orders_accepted": int(await redis.get(streams.ORDERS_ACCEPTED) or 0),
        "tickets_ordered": sum([await added(redis, lane) for lane in streams.RENDER_LANES]),
        "tickets_rendered": sum(r["rendered"] for r in live),
    }


async def console(redis: Redis) -> dict[str, Any]:
    """``collect`` and what only the console shows (see the module's doc):
    ``counters`` are totals that only grow while the stack runs; the feed
    turns them into rates."""
    decisions = await scaler_decisions(redis)
    s = await collect(redis, decisions)
    for name, info in s["streams"].items():
        for group, g in info["groups"].items():
            g |= await group_detail(redis, name, group)
    s["scaler_decisions"] = decisions
    s["counters"] = await counters(redis, s["renderers"])
    s["heartbeat_ttl_s"] = streams.HEARTBEAT_TTL_S
    # The newest entry of each list the console loads apart: a changed one tells it to reload
    # (a count alone misses one letter re-driven and another arriving between two polls).
    s["newest"] = {
        name: await newest_id(redis, stream)
        for name, stream in (("render", streams.DEAD_LETTERS), ("webhooks", streams.WEBHOOK_DEAD),
                             ("audit", streams.OPS_AUDIT))
    }  # fmt: skip
    return s
