"""Read what the policy needs from Redis: lane backlogs and renderer heartbeats."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError
from ticketry import streams
from ticketry.replies import as_text

from ticketry_scaler.policy import LaneBacklog

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One live renderer, as it last reported itself (the key expires when it dies)."""

    consumer: str
    pid: int
    host: str
    rate: float  # capacity: tickets per busy second (0 until first measured)
    rendered: int
    started: float
    busy: float = 0.0  # share of its last second spent rendering


def _num(value: Any, default: float = 0.0) -> float:
    try:
        return float(as_text(value))
    except (TypeError, ValueError):
        return default


async def lane_backlog(redis: Redis, stream: str, group: str, *, scan_cap: int) -> LaneBacklog:
    """``XINFO GROUPS`` of one lane; a missing stream is an empty lane.

    A missing group means nobody ever read the lane: everything in it is lag.
    """
    try:
        groups: list[dict[str, Any]] = await redis.xinfo_groups(stream)
    except ResponseError as exc:
        if "no such key" in str(exc).lower():
            return LaneBacklog(stream=stream, lag=0, pending=0, entries_read=0, last_delivered="0-0")
        raise
    info = next((g for g in groups if as_text(g.get("name")) == group), None)
    length = int(await redis.xlen(stream))
    if info is None:
        log.warning("group missing on lane", extra={"stream": stream, "group": group})
        return LaneBacklog(stream=stream, lag=length, pending=0, length=length, entries_read=0)
    lag = info.get("lag")
    pending = int(info.get("pending") or 0)
    read = info.get("entries-read")  # Redis >= 7.0; NULL when it cannot tell …
    last = as_text(info.get("last-delivered-id") or "0-0")
    if read is None and last == "0-0":  # … and when the group never delivered anything: none
        read = 0
    undelivered: int | None = None
    if lag is None:
        # Redis could not compute the lag (see policy.py); count what is past the
        # group's position ourselves, capped: the max bounds the answer anyway.
        after = await redis.xrange(stream, min=f"({last}", max="+", count=scan_cap)
        undelivered = len(after or [])
    return LaneBacklog(
        stream=stream,
        lag=None if lag is None else int(lag),
        pending=pending,
        undelivered=undelivered,
        length=length,
        entries_read=None if read is None else int(read),
        last_delivered=last,
    )


async def backlogs(
    redis: Redis,
    lanes: Iterable[str] = streams.RENDER_LANES,
    group: str = streams.RENDERERS_GROUP,
    *,
    scan_cap: int = 10_000,
) -> list[LaneBacklog]:
    """Every render lane's backlog for the renderers' group."""
    return [await lane_backlog(redis, lane, group, scan_cap=scan_cap) for lane in lanes]


def _heartbeat(key: str, fields: dict[Any, Any]) -> Heartbeat | None:
    data = {as_text(k): v for k, v in fields.items()}
    if not data:  # expired between SCAN and HGETALL
        return None
    consumer = as_text(data.get(streams.HEARTBEAT_CONSUMER, key.removeprefix(streams.RENDERER_PREFIX)))
    return Heartbeat(
        consumer=consumer,
        pid=int(_num(data.get(streams.HEARTBEAT_PID))),
        host=as_text(data.get(streams.HEARTBEAT_HOST, "")),
        rate=_num(data.get(streams.HEARTBEAT_RATE)),
        rendered=int(_num(data.get(streams.HEARTBEAT_RENDERED))),
        started=_num(data.get(streams.HEARTBEAT_STARTED)),
        busy=_num(data.get(streams.HEARTBEAT_BUSY)),
    )


async def heartbeats(redis: Redis) -> list[Heartbeat]:
    """Live renderers (their heartbeat keys expire ``HEARTBEAT_TTL_S`` after death)."""
    keys = [as_text(k) async for k in redis.scan_iter(match=streams.renderer_heartbeat("*"), count=500)]
    if not keys:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hgetall(key)
        rows: list[dict[Any, Any]] = await pipe.execute()
    beats = (_heartbeat(key, row) for key, row in zip(keys, rows, strict=True))
    return sorted((b for b in beats if b is not None), key=lambda b: b.consumer)
