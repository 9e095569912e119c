"""Several hosts on one machine (``just up --ha``'s topology, :func:`start_ha`):
what a second api process buys, and what losing the Redis primary costs.

    uv run --frozen python -m bench.ha [--seconds 10] [--pairs 3] [--connections 20] [--failovers 5] [--rate 5]

In ``just bench`` (``--no-ha`` skips it, ~3 min). Needs root (network
namespaces), haproxy, redis-sentinel and wrk (infra/bootstrap.sh).

1. **Order intake**: one-ticket orders from wrk (bench/flood.py's closed loop:
   each connection posts its next order as soon as the last is answered) at
   the api of host a directly, and at HAProxy in front of the apis of hosts
   a and b. Legs alternated (direct, HAProxy, direct, …) so a slower minute
   of a shared machine falls on both. Both apis, all of Redis and the store
   share this machine's cores: the figure is what a second event loop buys on
   the same cores, not on a second machine. No renderers (the scalers are
   stopped once the stack is up): the figure is orders accepted.
2. **Failover**: a light paced load (``--rate`` one-ticket orders a second
   through HAProxy), SIGKILL the Redis primary, the time from the kill to the
   first 202 of an order *sent after* the kill. Then the old primary is
   restarted (it rejoins as a replica) and the next run waits until the set
   is whole (:func:`ticketry_devstack.ha.whole`). The median of ``--failovers``.

Every order asks for a replica's acknowledgement (``TICKETRY_REDIS_MIN_REPLICAS=1``,
the topology's default). The per-buyer rate limits are off (one token posts
every order); the event has 10,000,000 tickets.
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
from ticketry_devstack.ha import HaStack, start_ha, wait_for, whole

from bench import flood
from bench.scenarios import create_event, hdr, token

ACCEPT_WITHIN_S = 15.0  # the bound: the first order accepted within 15 s of the kill
SETTINGS = {
    "TICKETRY_RATE_ORDERS_PER_MIN": "0",
    "TICKETRY_RATE_TICKETS_PER_MIN": "0",
    "TICKETRY_RENDERERS_MIN": "0",
}


def intake(stack: HaStack, event_id: str, root: Path, seconds: float, pairs: int, connections: int) -> dict[str, Any]:
    """Accepted orders per second, one api direct vs two behind HAProxy, legs alternated."""
    script = root / "intake.lua"
    script.write_text(flood.wrk_script(flood.WRK_SCRIPT, event_id, token("ha-buyer", "buyer")))
    urls = {"direct": f"http://{stack.addr('a', 'api')}", "proxy": stack.lb_url}
    legs: dict[str, list[dict[str, Any]]] = {t: [] for t in urls}
    for _ in range(pairs):
        for t, url in urls.items():
            got = flood.wrk(url, script, connections, seconds)
            statuses = {int(k): v for k, v in got["statuses"].items()}
            wall = got["duration_us"] / 1e6
            leg = {"accepted_per_s": statuses.get(202, 0) / wall, "statuses": statuses, "errors": got["errors"],
                   "p50_ms": got["p50_us"] / 1000, "p99_ms": got["p99_us"] / 1000}  # fmt: skip
            legs[t].append(leg)
            print(f"  {t}: {leg['accepted_per_s']:.0f} accepted/s, statuses {statuses}, p99 {leg['p99_ms']:.0f} ms",
                  flush=True)  # fmt: skip
            wait_for("both apis ready again", lambda: whole(stack), 120, lambda: False)
    direct = statistics.median(g["accepted_per_s"] for g in legs["direct"])
    proxy = statistics.median(g["accepted_per_s"] for g in legs["proxy"])
    return {"connections": connections, "seconds": seconds, "legs": legs, "direct_per_s": direct,
            "proxy_per_s": proxy, "ratio": proxy / direct if direct else None}  # fmt: skip


async def _paced(
    lb: str, event_id: str, rate: float, stop: asyncio.Event, seen: list[tuple[float, float, int]]
) -> None:
    """One-ticket orders at ``rate``/s through ``lb`` until ``stop``; each
    answer appended to ``seen`` as (sent, answered, status), status 0 for
    none within 10 s."""
    body = {"event_id": event_id, "quantity": 1, "holder_name": "Failover Buyer", "tier": "standard"}
    headers = hdr(token("ha-failover", "buyer"))
    async with httpx.AsyncClient(base_url=lb, timeout=10) as api:

        async def one() -> None:
            sent = time.monotonic()
            try:
                status = (await api.post("/v1/orders", json=body, headers=headers)).status_code
            except httpx.HTTPError:
                status = 0
            seen.append((sent, time.monotonic(), status))

        tasks: list[asyncio.Task[None]] = []
        due = time.monotonic()
        while not stop.is_set():
            tasks.append(asyncio.create_task(one()))
            due += 1 / rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        await asyncio.gather(*tasks)


def first_202_after(seen: list[tuple[float, float, int]], killed: float) -> float | None:
    """When the first 202 to an order *sent* after the kill came (one sent
    before may have reached the replica just before the kill)."""
    return min((ans for sent, ans, st in seen if st == 202 and sent > killed), default=None)


async def one_failover(stack: HaStack, event_id: str, rate: float) -> dict[str, Any]:
    """SIGKILL the current primary under the paced load; the time to the first 202 after it."""
    primary = stack.current_primary()
    host = next(h for h in "abc" if primary == stack.addr(h, "redis"))
    seen: list[tuple[float, float, int]] = []
    stop = asyncio.Event()
    load = asyncio.create_task(_paced(stack.lb_url, event_id, rate, stop, seen))
    try:
        deadline = time.monotonic() + 60
        while not any(st == 202 for _, _, st in seen):  # the load is being accepted before the kill
            if time.monotonic() > deadline:
                raise TimeoutError(f"no order accepted before the kill: {seen[-5:]}")
            await asyncio.sleep(0.05)
        stack.procs[(host, "redis")].kill()
        killed = time.monotonic()
        deadline = killed + 120
        while first_202_after(seen, killed) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await load
    first = first_202_after(seen, killed)
    statuses: dict[int, int] = {}
    for sent, ans, st in seen:
        if sent > killed and (first is None or ans <= first):
            statuses[st] = statuses.get(st, 0) + 1
    return {"killed": f"{host} {primary}", "kill_to_first_202_s": None if first is None else round(first - killed, 2),
            "answers_until_then": statuses, "new_primary": stack.current_primary()}  # fmt: skip


async def failovers(stack: HaStack, event_id: str, runs: int, rate: float) -> dict[str, Any]:
    """``runs`` failovers, the set made whole again after each; their median."""
    out = []
    for i in range(runs):
        got = await one_failover(stack, event_id, rate)
        out.append(got)
        print(f"  failover {i + 1}/{runs}: {got}", flush=True)
        host = got["killed"].split()[0]
        stack.restart_redis(host)
        await asyncio.to_thread(wait_for, "the set whole again", lambda: whole(stack), 180, lambda: False)
    times = [g["kill_to_first_202_s"] for g in out if g["kill_to_first_202_s"] is not None]
    return {"rate": rate, "runs": out, "median_s": statistics.median(times) if times else None,
            "max_s": max(times, default=None), "missed": runs - len(times)}  # fmt: skip


def run(
    seconds: float = 10.0, pairs: int = 3, connections: int = 20, runs: int = 5, rate: float = 5.0
) -> dict[str, Any]:
    """Both measurements on one :func:`start_ha` topology of their own."""
    root = Path(tempfile.mkdtemp(prefix="ticketry-ha-bench-"))
    started = time.monotonic()
    stack: HaStack | None = None
    try:
        stack = start_ha(root / "ha", SETTINGS, renderers=0, log=lambda m: print(f"  {m}", flush=True))
        for h in "ab":  # no renderers: the figures are orders accepted
            stack.procs[(h, "scaler")].stop()

        async def event() -> str:
            async with httpx.AsyncClient(base_url=stack.lb_url, timeout=60) as api:
                return await create_event(api, 10_000_000)

        event_id = asyncio.run(event())
        print(f"  intake: wrk {connections} connections, {pairs} x (api a direct, HAProxy to a and b), "
              f"{seconds:g} s each …", flush=True)  # fmt: skip
        got: dict[str, Any] = {"intake": intake(stack, event_id, root, seconds, pairs, connections)}
        print(f"  failover: SIGKILL the Redis primary under {rate:g} orders/s, {runs} times …", flush=True)
        got["failover"] = asyncio.run(failovers(stack, event_id, runs, rate))
    finally:
        if stack is not None:
            stack.stop()
        shutil.rmtree(root, ignore_errors=True)
    got["wall_s"] = round(time.monotonic() - started)
    return got


def verdict(got: dict[str, Any]) -> bool:
    """Every failover answered a 202 within :data:`ACCEPT_WITHIN_S` of the kill."""
    f = got["failover"]
    return f["missed"] == 0 and f["max_s"] is not None and f["max_s"] <= ACCEPT_WITHIN_S


Row = tuple[str, str, str, str]


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}"


def table(got: dict[str, Any]) -> list[Row]:
    """Rows for the bench table: intake of each and their ratio; failover median and max."""
    i, f = got["intake"], got["failover"]
    ratio = f"{i['ratio']:.2f}×" if i["ratio"] is not None else "n/a"
    med, worst = f["median_s"], f["max_s"]
    ok = verdict(got)
    return [
        (f"--ha: orders accepted/s, 1 api direct / 2 apis behind HAProxy ({i['connections']} wrk connections)",
         f"{_fmt(i['direct_per_s'])} / {_fmt(i['proxy_per_s'])}", "", ratio),
        (f"--ha: Redis primary SIGKILLed → first 202, median / max of {len(f['runs'])} (s)",
         f"{_fmt(med)} / {_fmt(worst)}", f"≤ {ACCEPT_WITHIN_S:g}", "met" if ok else "not met"),
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench.ha", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="each intake leg's length")
    ap.add_argument("--pairs", type=int, default=3, help="intake legs per target, alternated")
    ap.add_argument("--connections", type=int, default=20, help="wrk connections of the intake legs")
    ap.add_argument("--failovers", type=int, default=5, help="primaries killed, one after the other")
    ap.add_argument("--rate", type=float, default=5.0, help="orders a second through HAProxy during a failover")
    args = ap.parse_args()
    got = run(args.seconds, args.pairs, args.connections, args.failovers, args.rate)
    path = flood.show_and_save(table(got), got, "ha")
    print(f"\nwritten {path} ({got['wall_s']} s)")
    return 0 if verdict(got) else 1


if __name__ == "__main__":
    raise SystemExit(main())
