"""Bursts on a small machine: the scaler's default against fixed fleets,
measured in one run, as ratios.

    uv run --frozen python -m bench.burst [--rounds 3] [--quantity 2000] [--big 10000] [--samples 10]

One stack (Redis, FerretDB, api, notifier) under a temporary directory; for each
measurement a fresh fleet of renderers, always started by the scaler with its
local backend (forked from its preloaded server), so the fleets differ only in
policy:

* ``default``: what ``just up`` runs (no ``TICKETRY_RENDERERS_*`` or scaler
  setting: min 1 and one spare, max CPUs x 2, every other default);
* ``fixed-N``: ``TICKETRY_RENDERERS_MIN = MAX = N`` and no CPU cap, N = 1 up to
  the machine's usable cores + 1 (``fixed_sizes``: one past the cores, to see
  whether an extra renderer still helps);
* ``old``: the earlier drain-only policy (``TICKETRY_SCALER_POLICY=drain``: renderers
  from the backlog and the drain target only, no CPU cap).

Each measurement: start the fleet and wait for its renderers' heartbeats; create
an event (a standard and a vip tier); a warm-up order of ``--warmup`` tickets on
it (the event's designs are built, the renderers have measured their rate: a stack
that has been serving); wait until the backlog is gone and the fleet is back at
its floor; then the burst. Times come from Redis: a ticket event's stream id
carries the millisecond it was appended, and the burst's time is
``order.completed`` minus the moment the 202 arrived (same host clock).

1. **2,000-ticket burst**: ``default`` and every ``fixed-N``, in ``--rounds`` rounds
   (the order of the fleets rotates each round, so a noisy minute does not
   always hit the same one); medians; ``default`` over the best fixed median.
2. **10,000-ticket order**: ``default`` against ``old``, alternated, medians.
3. **First ticket of a brand-new event on a warm stack**: the ``default`` fleet,
   warmed on another event; ``--samples`` times each way: create an event and
   place a 50-ticket standard order (its own lane) and a 1-ticket vip order
   together, either as soon as the event's 201 arrives (its designs, asked for
   at creation, are still being built) or once they are built (the designers'
   group has nothing left: an organiser's set-up time); the first
   ``ticket.rendered`` of each after its 202. p50/p95.
4. **``just up --demo 50``**: the real command (``python -m ticketry_devstack
   up --demo 50``, its own data directory and ports): from the line saying it is
   up to the demo order's first ticket.

Writes ``bench/results/burst-<time>.json`` and prints one table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis
from redis.exceptions import ResponseError
from ticketry import streams
from ticketry.db import connect_redis
from ticketry.replies import as_text
from ticketry_devstack.procs import REPO, Proc, Stack, free_port, start_stack
from ticketry_scaler import observe
from ticketry_scaler.config import ScalerSettings
from ticketry_scaler.cpu import usable_cores
from ticketry_scaler.main import policy_config
from ticketry_scaler.policy import lane_lag, warm_floor

from bench.scenarios import hdr, token

RESULTS = Path(__file__).parent / "results"
POLL_S = 0.1

# Fleets: the scaler's environment for each. Fixed fleets have no CPU cap, so
# that N means N renderers.
NO_CAP = {"TICKETRY_SCALER_CPU_CAP": "0"}


def fixed_sizes(cores: int) -> range:
    """The fixed fleets' sizes on a machine of ``cores`` usable cores."""
    return range(1, max(cores, 1) + 2)


FIXED = {f"fixed-{n}": {"TICKETRY_RENDERERS_MIN": str(n), "TICKETRY_RENDERERS_MAX": str(n), **NO_CAP}
         for n in fixed_sizes(usable_cores())}  # fmt: skip
FLEETS: dict[str, dict[str, str]] = {"default": {}, **FIXED, "old": {"TICKETRY_SCALER_POLICY": "drain", **NO_CAP}}


def floor_of(fleet: str) -> int:
    """Renderers a fleet runs while idle (with the throughput policy: its spares too)."""
    s = ScalerSettings.model_validate({k.removeprefix("TICKETRY_").lower(): v for k, v in FLEETS[fleet].items()})
    if not s.throughput_policy:
        return s.renderers_min
    return warm_floor(policy_config(s), usable_cores() if s.scaler_cpu_cap is None else s.scaler_cpu_cap)


# -- following the ticket events -------------------------------------------------------


@dataclass
class OrderSeen:
    first_ms: int | None = None  # Redis time of its first ticket.rendered
    completed_ms: int | None = None
    rendered: int = 0


@dataclass
class Follower:
    """Reads ``ticketry:ticket-events`` from a given id and keeps, per order, the
    Redis times of its first rendered ticket and of its completion."""

    redis: Redis
    start: str = "$"
    orders: dict[str, OrderSeen] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Follower:
        if self.start == "$":
            last: Any = await self.redis.xrevrange(streams.TICKET_EVENTS, count=1)
            self.start = as_text(last[0][0]) if last else "0-0"
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        last = self.start
        while True:
            got: Any = await self.redis.xread({streams.TICKET_EVENTS: last}, count=1000, block=1000)
            for _, entries in got or []:
                for entry_id, raw in entries:
                    last = as_text(entry_id)
                    fields = {as_text(k): as_text(v) for k, v in raw.items()}
                    seen = self.orders.setdefault(fields.get("order_id", ""), OrderSeen())
                    ms = int(last.split("-")[0])
                    if fields.get("type") == "ticket.rendered":
                        seen.rendered += 1
                        seen.first_ms = seen.first_ms or ms
                    elif fields.get("type") == "order.completed":
                        seen.completed_ms = ms

    async def completed(self, order_id: str, timeout_s: float) -> OrderSeen:
        await until(lambda: _true(self.orders.get(order_id, OrderSeen()).completed_ms is not None), timeout_s,
                    f"order {order_id} completed")  # fmt: skip
        return self.orders[order_id]


async def _true(value: bool) -> bool:
    return value


async def until(cond: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:g}s for {what}")
        await asyncio.sleep(POLL_S)


# -- the API ------------------------------------------------------------------------------


async def create_event(api: httpx.AsyncClient, capacity: int, name: str) -> str:
    body = {
        "name": name, "venue": "Burst Arena", "starts_at": "2027-06-01T19:30:00Z",
        "capacity": capacity, "price": "25.00", "currency": "EUR", "timezone": "Europe/Berlin",
        "tiers": [
            {"id": "standard", "name": "Standard", "price": "25.00"},
            {"id": "vip", "name": "VIP", "price": "80.00", "lane": "vip"},
        ],
    }  # fmt: skip
    r = await api.post("/v1/events", json=body, headers=hdr(token("burst-org", "organizer")))
    r.raise_for_status()
    return str(r.json()["id"])


async def place(api: httpx.AsyncClient, event_id: str, quantity: int, tier: str = "standard") -> tuple[str, float]:
    """Place an order; its id and the wall time (s) its 202 arrived."""
    buyer = f"burst-{uuid.uuid4().hex[:10]}"
    r = await api.post(
        "/v1/orders",
        json={"event_id": event_id, "quantity": quantity, "holder_name": "Burst Buyer", "tier": tier},
        headers={**hdr(token(buyer, "buyer")), "Idempotency-Key": uuid.uuid4().hex},
    )
    at = time.time()
    if r.status_code != 202:
        raise RuntimeError(f"order refused: {r.status_code} {r.text[:200]}")
    return str(r.json()["id"]), at


# -- fleets ---------------------------------------------------------------------------------


async def live(redis: Redis) -> int:
    return len(await observe.heartbeats(redis))


async def backlog(redis: Redis) -> int:
    return sum(lane_lag(lane) + lane.pending for lane in await observe.backlogs(redis))


@contextlib.asynccontextmanager
async def fleet(stack: Stack, redis: Redis, name: str) -> AsyncIterator[Proc]:
    """The scaler with ``name``'s settings, until its floor of renderers is live."""
    env = {"TICKETRY_SCALER_METRICS_PORT": "0", **FLEETS[name]}
    proc = Proc("scaler", [str(Path(sys.executable).parent / "ticketry-scaler")], stack.service_env(env),
                stack.data_dir / "logs" / f"scaler-{name}.log").start()  # fmt: skip
    try:
        await until(lambda: _floor(redis, floor_of(name)), 180, f"{name}: its renderers")
        yield proc
    finally:
        await asyncio.to_thread(proc.stop, 60)
        await until(lambda: _none(redis), 60, "every renderer gone")


async def _floor(redis: Redis, n: int) -> bool:
    return await live(redis) == n


async def _none(redis: Redis) -> bool:
    return await live(redis) == 0


async def _idle_at(redis: Redis, n: int) -> bool:
    return await backlog(redis) == 0 and await live(redis) == n


async def sample_live(redis: Redis, out: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(Exception):
            out.append(await live(redis))
        await asyncio.sleep(0.25)


async def one_order(
    stack: Stack, redis: Redis, api: httpx.AsyncClient, name: str, quantity: int, warmup: int
) -> dict[str, Any]:
    """Start fleet ``name``, warm it on a new event, then time one ``quantity`` order."""
    async with fleet(stack, redis, name):
        event = await create_event(api, quantity + warmup + 10, f"Burst {name} {quantity}")
        async with Follower(redis) as follow:
            if warmup:
                warm, _ = await place(api, event, warmup)
                await follow.completed(warm, 300)
                await until(lambda: _idle_at(redis, floor_of(name)), 180, f"{name}: back at its floor")
            peaks: list[int] = []
            stop = asyncio.Event()
            sampler = asyncio.create_task(sample_live(redis, peaks, stop))
            decisions_before: Any = await redis.xrevrange(streams.SCALER_DECISIONS, count=1)
            order_id, at = await place(api, event, quantity)
            seen = await follow.completed(order_id, 900)
            stop.set()
            await sampler
        after = as_text(decisions_before[0][0]) if decisions_before else "0-0"
        rows: Any = await redis.xrange(streams.SCALER_DECISIONS, min=f"({after}", max="+")
    took = (seen.completed_ms or 0) / 1000 - at
    return {
        "fleet": name,
        "quantity": quantity,
        "seconds": round(took, 3),
        "tickets_per_s": round(quantity / took, 1),
        "first_ticket_ms": None if seen.first_ms is None else round(seen.first_ms - at * 1000),
        "max_live": max(peaks, default=0),
        "decisions": [f"{as_text(d[b'from'])}->{as_text(d[b'to'])}: {as_text(d[b'reason'])}" for _, d in rows],
    }


# -- first tickets of new events -------------------------------------------------------------


async def designs_built(redis: Redis) -> bool:
    """Every design request has been handled (group ``designers``: no lag, nothing pending)."""
    try:
        groups: Any = await redis.xinfo_groups(streams.DESIGN_REQUESTS)
    except ResponseError:
        return False
    g = next((g for g in groups if as_text(g["name"]) == streams.DESIGNERS_GROUP), None)
    return g is not None and not g.get("lag") and not g.get("pending")


async def first_tickets(
    stack: Stack, redis: Redis, api: httpx.AsyncClient, samples: int
) -> dict[str, dict[str, list[float]]]:
    """The default fleet, warm; per sample a new event and a standard 50-ticket
    and a vip 1-ticket order together: ms from each 202 to its first ticket.
    Alternately placed at once after the event's 201 (``at_once``: its designs,
    asked for at creation, are built meanwhile) and once its designs are built
    (``designs_ready``: an organiser's set-up time)."""
    out: dict[str, dict[str, list[float]]] = {
        "at_once": {"standard": [], "vip": []},
        "designs_ready": {"standard": [], "vip": []},
    }
    async with fleet(stack, redis, "default"):
        warm_event = await create_event(api, 200, "Warm-up")
        async with Follower(redis) as follow:
            warm, _ = await place(api, warm_event, 100)
            await follow.completed(warm, 300)
            for i in range(2 * samples):
                variant = "at_once" if i % 2 == 0 else "designs_ready"
                await until(lambda: _idle_at(redis, floor_of("default")), 180, "default: back at its floor")
                event = await create_event(api, 100, f"New event {i}")
                if variant == "designs_ready":
                    await until(lambda: designs_built(redis), 120, "the new event's designs")
                (std, std_at), (vip, vip_at) = await asyncio.gather(
                    place(api, event, 50, "standard"), place(api, event, 1, "vip")
                )
                for order_id, at, tier in ((std, std_at, "standard"), (vip, vip_at, "vip")):
                    seen = await follow.completed(order_id, 120)
                    assert seen.first_ms is not None
                    out[variant][tier].append(seen.first_ms - at * 1000)
    return out


# -- just up --demo ---------------------------------------------------------------------------


_BANNER = re.compile(r"Ticketry is up")
_REDIS = re.compile(r"Redis\s+(redis://\S+)")


def demo_after_up(quantity: int = 50, timeout_s: float = 300) -> dict[str, Any]:
    """``python -m ticketry_devstack up --demo N`` in a data directory of its own:
    seconds from its "up" line to the demo order's first ticket."""
    data = Path(tempfile.mkdtemp(prefix="ticketry-up-demo-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETRY_")}
    env.update(
        TICKETRY_API_PORT=str(free_port()), TICKETRY_NOTIFIER_PORT=str(free_port()),
        TICKETRY_DEV_REDIS_PORT=str(free_port()), TICKETRY_DEV_MONGO_PORT=str(free_port()),
        TICKETRY_SCALER_METRICS_PORT="0", PYTHONUNBUFFERED="1",
    )  # fmt: skip
    argv = [sys.executable, "-m", "ticketry_devstack", "up", "--data-dir", str(data), "--demo", str(quantity)]
    started = time.time()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, text=True)
    up_at: float | None = None
    redis_url = ""
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        for line in proc.stdout:
            lines.append(line.rstrip())
            if up_at is None and _BANNER.search(line):
                up_at = time.time()
            if (m := _REDIS.search(line)) and not redis_url:
                redis_url = m.group(1)
            if line.startswith("PDFs:") or time.monotonic() > deadline:
                break
        first_ms = asyncio.run(_first_rendered(redis_url)) if redis_url else None
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data, ignore_errors=True)
    return {
        "quantity": quantity,
        "up_after_s": None if up_at is None else round(up_at - started, 2),
        "first_ticket_after_up_s": None if up_at is None or first_ms is None else round(first_ms / 1000 - up_at, 3),
        "output": lines[-40:],
    }


async def _first_rendered(redis_url: str) -> int | None:
    redis = connect_redis(redis_url)
    try:
        rows: Any = await redis.xrange(streams.TICKET_EVENTS, count=10_000)
        for entry_id, raw in rows:
            if as_text(raw.get(b"type", b"")) == "ticket.rendered":
                return int(as_text(entry_id).split("-")[0])
        return None
    finally:
        await redis.aclose()


# -- the run ------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class Options:
    rounds: int = 3
    quantity: int = 2000
    big: int = 10_000
    big_rounds: int = 2
    warmup: int = 100
    samples: int = 10
    demo: bool = True


async def measure(stack: Stack, opts: Options) -> dict[str, Any]:
    redis = connect_redis(stack.env["TICKETRY_REDIS_URL"])
    out: dict[str, Any] = {"bursts": [], "big": []}
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=120) as api:
            names = ["default", *FIXED]
            for r in range(opts.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    got = await one_order(stack, redis, api, name, opts.quantity, opts.warmup)
                    print(f"  round {r + 1}: {name:8} {opts.quantity} tickets in {got['seconds']:.2f}s "
                          f"= {got['tickets_per_s']:.0f}/s (max live {got['max_live']})", flush=True)  # fmt: skip
                    out["bursts"].append(got)
            for r in range(opts.big_rounds if opts.big else 0):
                for name in ("old", "default") if r % 2 == 0 else ("default", "old"):
                    got = await one_order(stack, redis, api, name, opts.big, opts.warmup)
                    print(f"  round {r + 1}: {name:8} {opts.big} tickets in {got['seconds']:.2f}s "
                          f"= {got['tickets_per_s']:.0f}/s (max live {got['max_live']})", flush=True)  # fmt: skip
                    out["big"].append(got)
            if opts.samples:
                out["first_ticket_ms"] = await first_tickets(stack, redis, api, opts.samples)
    finally:
        await redis.aclose()
    return out


def summarise(raw: dict[str, Any], opts: Options) -> dict[str, Any]:
    by: dict[str, list[float]] = {}
    for b in raw["bursts"]:
        by.setdefault(b["fleet"], []).append(b["tickets_per_s"])
    medians = {k: med(v) for k, v in by.items()}
    fixed = {k: v for k, v in medians.items() if k.startswith("fixed-") and v is not None}
    best = max(fixed, key=lambda k: fixed[k]) if fixed else None
    big: dict[str, list[float]] = {}
    for b in raw["big"]:
        big.setdefault(b["fleet"], []).append(b["tickets_per_s"])
    big_med = {k: med(v) for k, v in big.items()}
    old = big_med.get("old")
    first = raw.get("first_ticket_ms", {})
    s: dict[str, Any] = {
        "burst_tickets_per_s": medians,
        "best_fixed": best,
        "default_over_best_fixed": (medians.get("default") or 0) / fixed[best] if best else None,
        "big_tickets_per_s": big_med,
        "big_new_over_old": (big_med.get("default") or 0) / old if old else None,
    }
    for variant, tiers in first.items():
        for tier, values in tiers.items():
            s[f"first_ticket_{variant}_{tier}_p50_ms"] = pct(values, 0.5)
            s[f"first_ticket_{variant}_{tier}_p95_ms"] = pct(values, 0.95)
    if "demo" in raw:
        s["demo_first_ticket_after_up_s"] = raw["demo"]["first_ticket_after_up_s"]
    return s


def table(s: dict[str, Any], opts: Options) -> list[tuple[str, str, str, str]]:
    def f(v: float | None, unit: str = "") -> str:
        return "n/a" if v is None else (f"{v:,.2f}{unit}" if abs(v) < 10 else f"{v:,.0f}{unit}")

    m = s["burst_tickets_per_s"]
    best = s["best_fixed"]
    rows = [
        (f"{opts.quantity}-ticket burst, default just up (tickets/s)", f(m.get("default")),
         f"{best}: {f(m.get(best))}" if best else "n/a", f(s["default_over_best_fixed"], "×") + " (≥ 0.90)"),
        *[(f"  {k.split('-')[1]} fixed renderer(s) (tickets/s); default over it", f(v), "",
           f((m.get("default") or 0) / v if v else None, "×")) for k, v in sorted(m.items()) if k.startswith("fixed-")],
    ]  # fmt: skip
    if s["big_tickets_per_s"]:
        b = s["big_tickets_per_s"]
        rows.append((f"{opts.big}-ticket order, default vs old policy (tickets/s)", f(b.get("default")),
                     f"old: {f(b.get('old'))}", f(s["big_new_over_old"], "×") + " (≥ 1)"))  # fmt: skip
    for variant, when in (("at_once", "ordered at once"), ("designs_ready", "designs built")):
        for tier in ("standard", "vip"):
            p50, p95 = s.get(f"first_ticket_{variant}_{tier}_p50_ms"), s.get(f"first_ticket_{variant}_{tier}_p95_ms")
            if p50 is not None:
                rows.append((f"new event ({when}): first {tier} ticket after 202, p50 / p95 (ms)",
                             f"{f(p50)} / {f(p95)}", "p50 ≤ 150", ""))  # fmt: skip
    if "demo_first_ticket_after_up_s" in s:
        rows.append(("just up --demo 50: first ticket after 'up' (s)", f(s["demo_first_ticket_after_up_s"]),
                     "≤ 2", ""))  # fmt: skip
    return rows


def run(opts: Options | None = None) -> dict[str, Any]:
    """Every measurement above on one stack of our own; prints and writes the results."""
    opts = opts or Options()
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="ticketry-burst-"))
    stack = start_stack(root, renderers=0)
    try:
        raw = asyncio.run(measure(stack, opts))
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)
    if opts.demo:
        print("  just up --demo 50 …", flush=True)
        raw["demo"] = demo_after_up()
    raw["loadavg"] = {"before": load_before, "after": os.getloadavg(), "cores": os.cpu_count()}
    raw["summary"] = s = summarise(raw, opts)
    raw["table"] = rows = table(s, opts)
    raw["options"] = opts.__dict__
    print_table(rows)
    print(f"load average before / after: {load_before[0]:.1f} / {raw['loadavg']['after'][0]:.1f} "
          f"on {os.cpu_count()} CPUs (this machine is shared: ratios, not absolutes)")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"burst-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(raw, indent=1, default=str) + "\n")
    print(f"written {path}")
    return raw


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    head = ("figure", "value", "baseline / target", "ratio")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    print()
    for r in [head, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.burst", description=(__doc__ or "").split("\n")[0])
    d = Options()
    ap.add_argument("--rounds", type=int, default=d.rounds)
    ap.add_argument("--quantity", type=int, default=d.quantity)
    ap.add_argument("--big", type=int, default=d.big, help="the big order (0: skip)")
    ap.add_argument("--big-rounds", type=int, default=d.big_rounds)
    ap.add_argument("--warmup", type=int, default=d.warmup)
    ap.add_argument("--samples", type=int, default=d.samples, help="new events for the first-ticket figure (0: skip)")
    ap.add_argument("--no-demo", dest="demo", action="store_false")
    run(Options(**vars(ap.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
