"""Goodput under a flood: clients that never honour ``Retry-After``, straight
at the api and through HAProxy in front of it.

    uv run --frozen python -m bench.flood [--seconds 10] [--connections 20,500,20,500,20,500] [--targets direct,proxy]

One stack of its own (Redis, FerretDB, api, notifier; no renderer: the
figure is orders accepted, and a renderer would take a core of two) and
HAProxy in front of its api (``infra/haproxy/``, the devstack's defaults).
wrk (Debian's, C: the load generator must not be the Python it measures)
posts one-ticket orders on kept-alive connections, each sending its next
request as soon as the last is answered, whatever it was: 20 connections
(what the api sustains when paced) and 500 (a flood), alternated in one run,
against each target. Its Lua script (:data:`WRK_SCRIPT`) counts the answers
by status, and the 503s that lack ``Retry-After``.

wrk's latency percentiles mix 202s and 503s, so a second wrk beside the flood,
the probe (:data:`PROBE_SCRIPT`: 2 connections, each pausing 50 ms between an
answer and its next request), times each of its answers with its status: the
503 p99 is the probe's. Its accepted orders count with the flood's. The flood's
wrk runs niced (it stands for clients on other machines; on this one it must
not take the CPU the api and HAProxy need); the probe does not.

Reported per target: the orders accepted per second at 20 and at 500
connections (the median of each's legs), their ratio (the target: ≥ 0.8), the
same per second of the api's own CPU (on a host shared with other work the
api's share of the cores moves from leg to leg; this figure does not),
and the 503s' p99 during the floods (target: ≤ 100 ms). Also what must not
happen at all: answers other than 202 and 503, 503s without ``Retry-After``,
socket errors and timeouts.

The per-buyer rate limits (``TICKETRY_RATE_ORDERS_PER_MIN``, 6,000 a minute,
and ``TICKETRY_RATE_TICKETS_PER_MIN``) are off on this stack: one token posts
every order, and the figure is the api's capacity, not one buyer's allowance.
The event has 10,000,000 tickets, so nothing sells out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from ticketry_devstack.haproxy import LbSettings, start_lb
from ticketry_devstack.procs import Stack, free_port, start_stack

from bench.scenarios import create_event, token

RESULTS = Path(__file__).parent / "results"
GOODPUT_SHARE = 0.8  # accepted/s at 500 connections against 20
SHED_P99_MS = 100.0  # the 503s' p99 under the flood

# wrk's per-thread Lua states each count their answers; done() (main state)
# collects them through the threads kept by setup() and prints one JSON line.
WRK_SCRIPT = r"""
wrk.method = "POST"
wrk.body = [[__BODY__]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer __TOKEN__"

local threads = {}
function setup(thread) table.insert(threads, thread) end

function init(args)
  counts = {}
  no_retry_after = 0
end

function response(status, headers, body)
  local key = tostring(status)
  counts[key] = (counts[key] or 0) + 1
  if status == 503 and headers["Retry-After"] == nil and headers["retry-after"] == nil then
    no_retry_after = no_retry_after + 1
  end
end

function done(summary, latency, requests)
  local all, nra = {}, 0
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("counts")) do all[k] = (all[k] or 0) + v end
    nra = nra + t:get("no_retry_after")
  end
  local parts = {}
  for k, v in pairs(all) do table.insert(parts, string.format('"%s":%d', k, v)) end
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"duration_us":%d,"requests":%d,"statuses":{%s},"no_retry_after":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},"p50_us":%d,"p99_us":%d}\n',
    summary.duration, summary.requests, table.concat(parts, ","), nra,
    e.connect, e.read, e.write, e.timeout, latency:percentile(50), latency:percentile(99)))
end
"""


# The probe: one connection per wrk thread, so each thread's request() and
# response() alternate and the time between them (LuaJIT's FFI: wrk's Lua has
# no clock of its own) is that answer's latency, kept with its status.
PROBE_SCRIPT = r"""
wrk.method = "POST"
wrk.body = [[__BODY__]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer __TOKEN__"

local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } probe_timespec;
int clock_gettime(int clk, probe_timespec *ts);
]]
local ts = ffi.new("probe_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts)  -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) statuses = {}; millis = {}; t0 = 0 end
function request() t0 = now_ms(); return wrk.format() end
function delay() return __PAUSE_MS__ end
function response(status, headers, body)
  table.insert(statuses, status)
  table.insert(millis, now_ms() - t0)
end

function done(summary, latency, requests)
  local parts = {}
  for _, t in ipairs(threads) do
    local s, m = t:get("statuses"), t:get("millis")
    for i = 1, #s do table.insert(parts, string.format("[%d,%.2f]", s[i], m[i])) end
  end
  io.write("PROBE_JSON [" .. table.concat(parts, ",") .. "]\n")
end
"""
PROBES = 2  # probe connections
PROBE_PAUSE_MS = 50  # between a probe's answer and its next request


def wrk_script(template: str, event_id: str, tok: str) -> str:
    body = json.dumps({"event_id": event_id, "quantity": 1, "holder_name": "Flood Buyer", "tier": "standard"})
    return (template.replace("__BODY__", body).replace("__TOKEN__", tok)
            .replace("__PAUSE_MS__", str(PROBE_PAUSE_MS)))  # fmt: skip


def wrk(url: str, script: Path, connections: int, seconds: float, *, threads: int = 2, nice: int = 10,
        mark: str = "WRK_JSON ") -> Any:  # fmt: skip
    """One wrk run: its JSON line (see :data:`WRK_SCRIPT`, :data:`PROBE_SCRIPT`)."""
    binary = shutil.which("wrk")
    if binary is None:
        raise FileNotFoundError("wrk not installed; run infra/bootstrap.sh")
    # Niced: the flood stands for clients on other machines; on this one it
    # must not take the api's CPU before HAProxy's answers do.
    argv = ["nice", "-n", str(nice), binary, "-t", str(threads), "-c", str(connections), "-d", f"{seconds:g}s",
            "--timeout", "30s", "-s", str(script), f"{url}/v1/orders"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120, check=True).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith(mark)), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result: {out[-500:]}")
    return json.loads(line.removeprefix(mark))


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * 0.99))]


async def leg(url: str, scripts: tuple[Path, Path], connections: int, seconds: float,
              pids: dict[str, int]) -> dict[str, Any]:  # fmt: skip
    """wrk with ``connections`` for ``seconds``, and the probe beside it; the
    CPU seconds each of ``pids`` (and wrk) spent meanwhile."""
    cpu0 = {k: cpu_s(p) for k, p in pids.items()}
    wrk0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    got, seen = await asyncio.gather(
        asyncio.to_thread(wrk, url, scripts[0], connections, seconds),
        asyncio.to_thread(wrk, url, scripts[1], PROBES, seconds, threads=PROBES, nice=0, mark="PROBE_JSON "),
    )
    wrk1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {k: round(cpu_s(p) - cpu0[k], 1) for k, p in pids.items()}
    cpu["wrk"] = round(wrk1.ru_utime + wrk1.ru_stime - wrk0.ru_utime - wrk0.ru_stime, 1)
    statuses = {int(k): v for k, v in got["statuses"].items()}
    wall = got["duration_us"] / 1e6
    shed = [ms for st, ms in seen if st == 503]
    probe_accepted = sum(1 for st, _ in seen if st == 202)
    return {
        "connections": connections,
        "seconds": wall,
        "accepted_per_s": (statuses.get(202, 0) + probe_accepted) / wall,
        "shed_per_s": statuses.get(503, 0) / wall,
        "statuses": statuses,
        "other_statuses": {k: v for k, v in statuses.items() if k not in (202, 503)},
        "no_retry_after": got["no_retry_after"],
        "socket_errors": got["errors"],
        "wrk_p50_ms": got["p50_us"] / 1000,
        "wrk_p99_ms": got["p99_us"] / 1000,
        "probe_answers": len(seen),
        "probe_202_p99_ms": p99([ms for st, ms in seen if st == 202]),
        "probe_503s": len(shed),
        "probe_503_p99_ms": p99(shed),
        "probe_other": sorted({st for st, _ in seen if st not in (202, 503)}),
        "cpu_s": cpu,
    }


def summarize(legs: list[dict[str, Any]], low: int, high: int) -> dict[str, Any]:
    """The medians of the paced and the flood legs, their ratio, the flood's 503 p99."""
    paced = [g["accepted_per_s"] for g in legs if g["connections"] == low]
    flood = [g for g in legs if g["connections"] == high]
    lo = statistics.median(paced) if paced else None
    hi = statistics.median([g["accepted_per_s"] for g in flood]) if flood else None
    shed = [g["probe_503_p99_ms"] for g in flood if g["probe_503_p99_ms"] is not None]
    # Orders per second of the api's own CPU: what the flood leaves of each
    # second the api gets, whatever share of a shared host that was.
    per_cpu = {n: [g["accepted_per_s"] * g["seconds"] / g["cpu_s"]["api"] for g in legs
                   if g["connections"] == n and g["cpu_s"].get("api")] for n in (low, high)}  # fmt: skip
    lo_cpu = statistics.median(per_cpu[low]) if per_cpu[low] else None
    hi_cpu = statistics.median(per_cpu[high]) if per_cpu[high] else None
    bad = sum(sum(g["other_statuses"].values()) + g["no_retry_after"] + sum(g["socket_errors"].values())
              for g in legs)  # fmt: skip
    return {
        "paced_per_s": lo,
        "flood_per_s": hi,
        "ratio": hi / lo if lo and hi is not None else None,
        "paced_per_api_cpu_s": lo_cpu,
        "flood_per_api_cpu_s": hi_cpu,
        "cpu_ratio": hi_cpu / lo_cpu if lo_cpu and hi_cpu is not None else None,
        "shed_p99_ms": max(shed) if shed else None,
        "flood_503_per_s": statistics.median([g["shed_per_s"] for g in flood]) if flood else None,
        "bad_answers": bad,
    }


def verdict(s: dict[str, Any]) -> bool:
    return (
        s["ratio"] is not None
        and s["ratio"] >= GOODPUT_SHARE
        and (s["shed_p99_ms"] is None or s["shed_p99_ms"] <= SHED_P99_MS)
        and s["bad_answers"] == 0
    )


def run(seconds: float = 10.0, connections: tuple[int, ...] = (20, 500, 20, 500, 20, 500),
        targets: tuple[str, ...] = ("direct", "proxy"), lb_over: dict[str, Any] | None = None,
        renderers: int = 0) -> dict[str, Any]:  # fmt: skip
    """The scenario on a stack of its own: per target, the legs and a summary."""
    root = Path(tempfile.mkdtemp(prefix="ticketry-flood-"))
    stack: Stack | None = None
    try:
        stack = start_stack(root, renderers=renderers, extra_env={
            "TICKETRY_RATE_ORDERS_PER_MIN": "0", "TICKETRY_RATE_TICKETS_PER_MIN": "0"})  # fmt: skip
        lb = LbSettings(port=free_port(), apis=[f"127.0.0.1:{stack.api_port}"], **(lb_over or {}))
        start_lb(stack, lb, root / "haproxy")
        urls = {"direct": stack.api_url, "proxy": f"http://127.0.0.1:{lb.port}"}
        return asyncio.run(_measure(stack, urls, seconds, connections, targets, root, lb))
    finally:
        if stack is not None:
            stack.stop()
        shutil.rmtree(root, ignore_errors=True)


async def _measure(stack: Stack, urls: dict[str, str], seconds: float, connections: tuple[int, ...],
                   targets: tuple[str, ...], root: Path, lb: LbSettings) -> dict[str, Any]:  # fmt: skip
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
        event_id = await create_event(api, 10_000_000)
    tok = token("flood-buyer", "buyer")
    scripts = (root / "flood.lua", root / "probe.lua")
    scripts[0].write_text(wrk_script(WRK_SCRIPT, event_id, tok))
    scripts[1].write_text(wrk_script(PROBE_SCRIPT, event_id, tok))
    low, high = min(connections), max(connections)
    pids: dict[str, int] = {n: stack.procs[n].pid for n in ("api", "haproxy", "redis", "ferretdb") if n in stack.procs}
    out: dict[str, Any] = {"seconds": seconds, "connections": list(connections),
                           "haproxy": {"maxconn": lb.maxconn, "max_queued": lb.max_queued,
                                       "tarpit_ms": lb.tarpit_ms, "queue_s": lb.queue_s}}  # fmt: skip
    legs: dict[str, list[dict[str, Any]]] = {t: [] for t in targets}
    # Alternated: each target's paced and flood legs interleave in one run, so a
    # slower minute of the host shows in both.
    for n in connections:
        for t in targets:
            print(f"  {t}: {n} connections for {seconds:g} s …", flush=True)
            g = await leg(urls[t], scripts, n, seconds, pids)
            legs[t].append(g)
            print(f"    accepted {g['accepted_per_s']:.0f}/s, 503 {g['shed_per_s']:.0f}/s, "
                  f"probe 503 p99 {g['probe_503_p99_ms']} ms, statuses {g['statuses']}, "
                  f"errors {g['socket_errors']}, CPU s {g['cpu_s']}", flush=True)  # fmt: skip
            await _quiet(api_url=stack.api_url)
    out["legs"] = legs
    out["summary"] = {t: summarize(legs[t], low, high) for t in targets}
    return out


async def _quiet(api_url: str, timeout_s: float = 60.0) -> None:
    """Until the api answers /readyz again after a leg (the flood's backlog drained)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as api:
        while time.monotonic() < deadline:
            try:
                if (await api.get("/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)


Row = tuple[str, str, str, str]


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}"


def table(got: dict[str, Any]) -> list[Row]:
    """Rows for the bench table: per target, both rates and their ratio, the 503 p99."""
    rows: list[Row] = []
    lo, hi = min(got["connections"]), max(got["connections"])
    names = {"direct": "api direct", "proxy": "through HAProxy"}
    for t, s in got["summary"].items():
        ok = verdict(s)
        rows.append((f"flood, {names.get(t, t)}: accepted/s at {lo} / {hi} connections", f"{_fmt(s['paced_per_s'])} / "
                     f"{_fmt(s['flood_per_s'])}", f"≥ {GOODPUT_SHARE:.0%} of {lo}",
                     f"{s['ratio']:.2f}×" if s["ratio"] is not None else "n/a"))  # fmt: skip
        rows.append((f"  {names.get(t, t)}: accepted per api CPU-second at {lo} / {hi}",
                     f"{_fmt(s['paced_per_api_cpu_s'])} / {_fmt(s['flood_per_api_cpu_s'])}", "",
                     f"{s['cpu_ratio']:.2f}×" if s["cpu_ratio"] else "n/a"))  # fmt: skip
        rows.append((f"  {names.get(t, t)}: 503 p99 under the flood (ms); 503/s; bad answers",
                     f"{_fmt(s['shed_p99_ms'])}; {_fmt(s['flood_503_per_s'])}; {s['bad_answers']}",
                     f"≤ {SHED_P99_MS:.0f}; -; 0", "met" if ok else "not met"))  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench.flood")
    ap.add_argument("--seconds", type=float, default=10.0, help="each leg's length")
    ap.add_argument("--connections", default="20,500,20,500,20,500", help="wrk connections of each leg, in order")
    ap.add_argument("--targets", default="direct,proxy", help="direct (the api), proxy (HAProxy in front)")
    ap.add_argument("--renderers", type=int, default=0, help="renderer processes (0: orders are only accepted)")
    ap.add_argument("--maxconn", type=int, help="HAProxy's requests at once per api (default: the devstack's)")
    ap.add_argument("--max-queued", type=int, help="orders in HAProxy's line before 503 (default: the devstack's)")
    ap.add_argument("--tarpit-ms", type=int, help="pause before HAProxy's 503 (default: the devstack's)")
    args = ap.parse_args()
    over = {k: v for k, v in (("maxconn", args.maxconn), ("max_queued", args.max_queued),
                              ("tarpit_ms", args.tarpit_ms)) if v is not None}  # fmt: skip
    got = run(
        args.seconds,
        tuple(int(c) for c in args.connections.split(",")),
        tuple(args.targets.split(",")),
        over,
        args.renderers,
    )
    path = show_and_save(table(got), got, "flood")
    print(f"\nwritten {path}")
    return 0 if verdict(got["summary"].get("proxy", {"ratio": None})) else 1


def show_and_save(rows: list[Row], got: dict[str, Any], name: str) -> Path:
    """Print a scenario's rows as a table and write its whole result to
    ``bench/results/<name>-<time>.json``; that file's path."""
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    print()
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(got, indent=1, default=str))
    return path


if __name__ == "__main__":
    raise SystemExit(main())
