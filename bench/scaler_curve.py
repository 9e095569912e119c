"""Scaler response curve: one 3,000-ticket order against a running stack.

Places the order, then samples every 0.5 s from Redis: lag and pending of the
renderers' group (both lanes), live renderers (heartbeats), the scaler's desired
count (its last recorded decision) and the order's progress. Stops once the order
is done and the renderers are back at min (or at the timeout), writes
``bench/results/scaler_curve.json`` and prints the curve with the decisions.

Run against ``just up`` (dev mode) with the scaler's local backend, e.g.::

    TICKETRY_RENDERERS_MIN=1 TICKETRY_RENDERERS_MAX=4 just up   # another terminal
    uv run python bench/scaler_curve.py

Environment: ``TICKETRY_API_URL`` (default ``http://127.0.0.1:8000``),
``TICKETRY_REDIS_URL``, ``TICKETRY_JWT_SECRET`` / ``TICKETRY_DEV_MODE`` (tokens are
minted locally), ``BENCH_QUANTITY`` (3000), ``BENCH_TIMEOUT_S`` (900),
``TICKETRY_RENDERERS_MIN`` (1), ``TICKETRY_SCALER_METRICS_URL`` (default
``http://127.0.0.1:9102/metrics``; the scaler's own count of renderer processes,
recorded as ``processes`` beside the heartbeat count ``running``). The run ends once
the order is done and the scaler's desired count is back at min.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis
from ticketry import streams
from ticketry.auth import issue_token
from ticketry.db import connect_redis
from ticketry.settings import CommonSettings
from ticketry_scaler import observe
from ticketry_scaler.policy import lane_lag

OUT = Path(__file__).parent / "results" / "scaler_curve.json"
SAMPLE_S = 0.5
SETTLED_S = 3.0  # live renderers at min this long after completion ends the run


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def place_order(api: str, key: str, quantity: int) -> str:
    organizer = issue_token("bench-organizer", "organizer", key=key)
    buyer = issue_token(f"bench-buyer-{uuid.uuid4().hex[:8]}", "buyer", key=key)
    async with httpx.AsyncClient(base_url=api, timeout=120) as http:
        event = await http.post(
            "/v1/events",
            headers={"Authorization": f"Bearer {organizer}"},
            json={
                "name": "Scaler curve bench",
                "venue": "Bench Arena",
                "starts_at": (datetime.now(UTC) + timedelta(days=30)).isoformat(),
                "capacity": quantity,
                "price": "10.00",
                "currency": "EUR",
            },
        )
        event.raise_for_status()
        order = await http.post(
            "/v1/orders",
            headers={"Authorization": f"Bearer {buyer}", "Idempotency-Key": uuid.uuid4().hex},
            json={
                "event_id": event.json()["id"],
                "quantity": quantity,
                "holder_name": "Bench Buyer",
                "tier": "standard",
            },
        )
        order.raise_for_status()
        return str(order.json()["id"])


async def last_decision_id(redis: Redis) -> str:
    last = await redis.xrevrange(streams.SCALER_DECISIONS, count=1)
    return _s(last[0][0]) if last else "0-0"


async def decisions_since(redis: Redis, after: str) -> list[dict[str, str]]:
    rows: Any = await redis.xrange(streams.SCALER_DECISIONS, min=f"({after}", max="+")
    return [{"id": _s(i), **{_s(k): _s(v) for k, v in f.items()}} for i, f in rows]


async def scaler_processes(http: httpx.AsyncClient, url: str) -> int | None:
    """``ticketry_scaler_replicas_running`` from the scaler's /metrics, if reachable."""
    try:
        text = (await http.get(url)).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith("ticketry_scaler_replicas_running "):
            return int(float(line.split()[1]))
    return None


async def sample(redis: Redis, order_id: str, t0: float, desired: int) -> dict[str, Any]:
    lanes = await observe.backlogs(redis)
    beats = await observe.heartbeats(redis)
    progress = {_s(k): _s(v) for k, v in (await redis.hgetall(streams.order_progress(order_id))).items()}
    return {
        "t": round(time.monotonic() - t0, 2),
        "lag": sum(lane_lag(lane) for lane in lanes),
        "pending": sum(lane.pending for lane in lanes),
        "running": len(beats),
        "desired": desired,
        "rate": round(sum(b.rate for b in beats), 2),
        "rendered": int(progress.get("rendered", 0)),
        "failed": int(progress.get("failed", 0)),
        "total": int(progress.get("total", 0)),
    }


def summarise(samples: list[dict[str, Any]], minimum: int) -> dict[str, Any]:
    first_up = next((s["t"] for s in samples if s["desired"] > minimum), None)
    first_running = next((s["t"] for s in samples if max(s["running"], s.get("processes") or 0) > minimum), None)
    done = next(
        (s["t"] for s in samples if s["total"] and s["rendered"] + s["failed"] >= s["total"]),
        None,
    )
    back = None
    if done is not None:
        back = next((s["t"] for s in samples if s["t"] >= done and s["desired"] <= minimum), None)
    return {
        "first_scale_up_decision_s": first_up,
        "first_extra_renderer_s": first_running,
        "peak_processes": max((s.get("processes") or 0 for s in samples), default=0),
        "peak_running": max((s["running"] for s in samples), default=0),
        "peak_lag": max((s["lag"] for s in samples), default=0),
        "completed_s": done,
        "back_to_min_s": back,
    }


async def main() -> int:
    settings = CommonSettings()
    api = os.environ.get("TICKETRY_API_URL", "http://127.0.0.1:8000")
    quantity = int(os.environ.get("BENCH_QUANTITY", "3000"))
    timeout_s = float(os.environ.get("BENCH_TIMEOUT_S", "900"))
    minimum = int(os.environ.get("TICKETRY_RENDERERS_MIN", "1"))
    metrics_url = os.environ.get("TICKETRY_SCALER_METRICS_URL", "http://127.0.0.1:9102/metrics")
    redis = connect_redis(settings.redis_url)
    http = httpx.AsyncClient(timeout=2)
    try:
        start_id = await last_decision_id(redis)
        before = await decisions_since(redis, "0-0")
        desired = int(before[-1]["to"]) if before else minimum
        t0 = time.monotonic()
        order_id = await place_order(api, settings.jwt_key, quantity)
        print(f"order {order_id}: {quantity} tickets accepted after {time.monotonic() - t0:.2f}s")
        samples: list[dict[str, Any]] = []
        settled_since: float | None = None
        while time.monotonic() - t0 < timeout_s:
            new = await decisions_since(redis, start_id)
            if new:
                desired = int(new[-1]["to"])
            s = await sample(redis, order_id, t0, desired)
            s["processes"] = await scaler_processes(http, metrics_url)
            samples.append(s)
            done = s["total"] > 0 and s["rendered"] + s["failed"] >= s["total"]
            if done and s["desired"] <= minimum:
                settled_since = settled_since if settled_since is not None else s["t"]
                if s["t"] - settled_since >= SETTLED_S:
                    break
            else:
                settled_since = None
            await asyncio.sleep(SAMPLE_S)
        decisions = await decisions_since(redis, start_id)
    finally:
        await http.aclose()
        await redis.aclose()

    summary = summarise(samples, minimum)
    result = {
        "order_id": order_id,
        "quantity": quantity,
        "sample_s": SAMPLE_S,
        "measured_at": datetime.now(UTC).isoformat(),
        "summary": summary,
        "samples": samples,
        "decisions": decisions,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")

    print(f"{'t/s':>7} {'lag':>6} {'pend':>5} {'hb':>3} {'proc':>4} {'want':>4} {'done':>6}")
    for s in samples[::2]:  # one line a second
        print(
            f"{s['t']:7.1f} {s['lag']:6d} {s['pending']:5d} {s['running']:3d} "
            f"{s['processes'] if s['processes'] is not None else '-':>4} "
            f"{s['desired']:4d} {s['rendered'] + s['failed']:6d}"
        )
    print("\ndecisions:")
    for d in decisions:
        print(f"  {d.get('from')} -> {d.get('to')}: {d.get('reason')}")
    print(f"\nsummary: {summary}\nwritten to {OUT}")
    return 0 if summary["completed_s"] is not None else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
