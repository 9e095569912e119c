"""``just bench``: baselines and end-to-end scenarios, one table.

    uv run --frozen python -m bench [--quick] [--runs N] [--quantity N] [--post-rates 100,200]

Starts its own stack (Redis, FerretDB, api, notifier, one renderer per core)
under a temporary directory (where it also runs the orders with names of every
script, ``bench/intl_orders.py``), prints ``figure | value | target/baseline | ratio``
and writes ``bench/results/bench-<time>.json``. Medians over ``--runs`` (3;
``--quick`` = 1 run and smaller baseline samples, no scaler curve). Last, the
scaler curve (``bench/scaler_curve.py``, its own stack, ~3.5 min), then the
bursts (``bench/burst.py``, its own stack, ~5 min), the on-sale rush
(``bench/rush.py``) and its crowd of 5,000 progress sockets
(``bench/crowd.py``), and the flood (``bench/flood.py``: wrk at 20 and 500
connections that never back off, at the api and through HAProxy, ~2.5 min)
and the cost of waiting for a Redis replica (``bench/replica_wait.py``: orders
at 50/s with ``TICKETRY_REDIS_MIN_REPLICAS`` 0 and 1, ~3 min), each on its own
stack, and several hosts (``bench/ha.py``: ``just up --ha``'s topology, one api
direct vs two behind HAProxy, the Redis primary SIGKILLed 5 times, ~3 min),
and wallet passes with emails on vs off (``bench/wallet_mail.py``: 200-ticket
orders, passes fetched and mails in mailpit, ~2 min).
The operator's console's feed: the api's CPU with 10 consoles open vs none
(``bench/ops_feed.py``, its own stack, ~3 min).
Issue 33's figures: the renderer's CPU per ticket and its PDFs' bytes (single
tickets, a 1,000-ticket order), this tree against ``renderer_cpu.BEFORE_REV``
or ``--against``'s revision (``bench/renderer_cpu.py``, no stack, ~1 min; in
``--quick`` too), and the api's CPU per one-ticket order and ``POST
/v1/orders``' p99 at 200/s while the renderers render, 1 api worker vs one per
core (``bench/intake.py``, a stack per worker count, ~3 min).
``--against <rev>``: the end-to-end 10,000-ticket order on this tree and on
revision ``<rev>`` (a git worktree with its own environment), alternately,
``--against-rounds`` each (3), each side's median and their ratio
(``bench/against.py``, ~2 min a round); ``--against-only`` runs just that.
``--only a,b``: just the named parts (``SCENARIOS``; ``core`` is the
baselines and the bench's own stack), e.g. ``--only renderer-cpu,intake``.
The rush, the crowd, the flood and the failovers add a verdict row each; a
scenario that fails or misses its verdict is named at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ticketry_devstack.procs import start_stack

from bench import (
    against,
    baselines,
    burst,
    crowd,
    flood,
    ha,
    intake,
    intl_orders,
    ops_feed,
    renderer_cpu,
    replica_wait,
    rush,
    scaler_curve,
    scenarios,
    wallet_mail,
)

RESULTS = Path(__file__).parent / "results"
# What ``--only`` names: ``core`` is the baselines and the bench's own stack
# (big orders, 100-ticket orders, names of every script, POST load).
SCENARIOS = ("core", "scaler-curve", "burst", "rush", "crowd", "flood", "replica-wait", "ha", "wallet-mail",
             "ops-feed", "renderer-cpu", "intake", "against")  # fmt: skip
# Not in ``--quick``: those that start stacks of their own.
NOT_QUICK = frozenset(
    {"scaler-curve", "burst", "rush", "crowd", "flood", "replica-wait", "ha", "wallet-mail", "ops-feed", "intake"}
)


def med(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "n/a"
    return f"{v:,.1f}{unit}" if abs(v) < 100 else f"{v:,.0f}{unit}"


Row = tuple[str, str, str, str]


@dataclass
class Measured:
    """What the runs measured: baselines, the scenarios on the bench's stack,
    and those that start stacks of their own."""

    fast: float = 0.0
    weasy: list[float] = field(default_factory=list)
    wk: list[float] = field(default_factory=list)
    wk_reason: str | None = None
    big: list[dict[str, Any]] = field(default_factory=list)
    hundred: list[dict[str, Any]] = field(default_factory=list)
    post: dict[float, list[dict[str, Any]]] = field(default_factory=dict)
    curve: dict[str, Any] | None = None
    burst_rows: list[Row] = field(default_factory=list)
    rush_rows: list[Row] = field(default_factory=list)
    crowd_rows: list[Row] = field(default_factory=list)
    flood_rows: list[Row] = field(default_factory=list)
    replica_rows: list[Row] = field(default_factory=list)
    ha_rows: list[Row] = field(default_factory=list)
    wallet_mail_rows: list[Row] = field(default_factory=list)
    ops_feed_rows: list[Row] = field(default_factory=list)
    renderer_cpu_rows: list[Row] = field(default_factory=list)
    intake_rows: list[Row] = field(default_factory=list)
    against_rows: list[Row] = field(default_factory=list)
    intl: dict[str, Any] | None = None


def main() -> int:
    args = _parse_args()
    runs = 1 if args.quick else args.runs
    workers = scenarios.cpu_count()
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "runs": runs, "workers": workers}
    m = Measured()
    core = wanted(args, "core")
    if core:
        _baselines(args, runs, workers, m, out)
        _on_bench_stack(args, runs, workers, m, out)
    _on_own_stacks(args, m, out)
    _issue_33(args, m, out)
    if wanted(args, "against"):
        _against(args, m, out)
    for err in out.get("errors", []):
        print("scenario failed:", err)
    rows = _rows(m, core)
    _print_table(rows)
    out["table"] = [dict(zip(_HEAD, r, strict=True)) for r in rows]
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"\nwritten {path}")
    return 0


def _parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench")
    ap.add_argument("--quick", action="store_true", help="one run, small baseline samples")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quantity", type=int, default=10_000)
    ap.add_argument("--probes", type=int, default=5, help="VIP / small orders per big order")
    ap.add_argument("--post-rates", default="100,200", help="open-loop POST /v1/orders rates, per second")
    ap.add_argument("--no-scaler-curve", action="store_true")
    ap.add_argument("--no-burst", action="store_true", help="skip bench/burst.py (~5 min)")
    ap.add_argument("--no-rush", action="store_true", help="skip bench/rush.py (~4 min)")
    ap.add_argument("--no-intl", action="store_true", help="skip the orders with names of every script")
    ap.add_argument("--no-crowd", action="store_true", help="skip bench/crowd.py's 5,000 sockets at once")
    ap.add_argument("--crowd", type=int, default=5000, help="progress sockets opened at once")
    ap.add_argument("--no-flood", action="store_true", help="skip bench/flood.py's wrk flood (~2.5 min)")
    ap.add_argument(
        "--no-replica-wait", action="store_true", help="skip bench/replica_wait.py, orders with/without WAIT (~3 min)"
    )
    ap.add_argument(
        "--no-ha", action="store_true", help="skip bench/ha.py, 2 apis behind HAProxy and Redis failovers (~3 min)"
    )
    ap.add_argument(
        "--no-wallet-mail", action="store_true", help="skip bench/wallet_mail.py, passes and emails on vs off (~2 min)"
    )
    ap.add_argument(
        "--no-ops-feed", action="store_true", help="skip bench/ops_feed.py, the console feed's api CPU (~3 min)"
    )
    ap.add_argument(
        "--no-renderer-cpu", action="store_true", help="skip bench/renderer_cpu.py, CPU and bytes per ticket (~1 min)"
    )
    ap.add_argument("--renderer-cpu-tickets", type=int, default=1000, help="tickets per kind of name")
    ap.add_argument(
        "--no-intake", action="store_true", help="skip bench/intake.py, api CPU per order and POST p99 (~3 min)"
    )
    ap.add_argument(
        "--intake-workers", type=_ints, default=[1, 0], help="api worker counts, a stack each (0: one per core)"
    )
    ap.add_argument("--intake-orders", type=int, default=400, help="one-ticket orders for the api's CPU")
    ap.add_argument("--intake-big", type=int, default=4000, help="tickets the renderers render under the POST load")
    ap.add_argument("--intake-rate", type=float, default=200.0, help="POST /v1/orders per second")
    ap.add_argument("--intake-seconds", type=float, default=20.0, help="how long the POST load lasts")
    ap.add_argument("--only", type=_names, help=f"only these, comma-separated: {','.join(SCENARIOS)}")
    ap.add_argument("--post-seconds", type=float, default=10.0)
    ap.add_argument("--against", metavar="REV", help="also the end-to-end order on REV, alternated (bench/against.py)")
    ap.add_argument("--against-rounds", type=int, default=3, help=f"rounds per side (≥ {against.MIN_ROUNDS})")
    ap.add_argument("--against-only", action="store_true", help="only the --against A/B")
    args = ap.parse_args(argv)
    if args.against_only and not args.against:
        ap.error("--against-only needs --against REV")
    if args.only and "against" in args.only and not args.against:
        ap.error("--only against needs --against REV")
    if args.only and args.against_only:
        ap.error("--only and --against-only: one or the other")
    if args.against_rounds < against.MIN_ROUNDS:
        ap.error(f"--against-rounds: at least {against.MIN_ROUNDS}")
    return args


def _ints(text: str) -> list[int]:
    return [int(w) for w in text.split(",") if w]


def _names(text: str) -> frozenset[str]:
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - set(SCENARIOS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"not a scenario: {', '.join(unknown)} (one of {', '.join(SCENARIOS)})")
    return names


def wanted(args: argparse.Namespace, name: str) -> bool:
    """Whether this run runs scenario ``name``: named by ``--only``, or else not
    skipped by its ``--no-<name>``, ``--quick`` or ``--against-only``."""
    if args.only:
        return name in args.only
    if name == "against":
        return bool(args.against)
    if args.against_only or (args.quick and name in NOT_QUICK):
        return False
    return not getattr(args, "no_" + name.replace("-", "_"), False)


@contextmanager
def _reported(out: dict[str, Any], name: str) -> Iterator[None]:
    """A scenario that raises is named in ``out["errors"]``; the run goes on."""
    try:
        yield
    except Exception as exc:  # report what was measured, say what failed
        _fail(out, f"{name}: {type(exc).__name__}: {exc}"[:300])


def _fail(out: dict[str, Any], message: str) -> None:
    out.setdefault("errors", []).append(message)


def _baselines(args: argparse.Namespace, runs: int, workers: int, m: Measured, out: dict[str, Any]) -> None:
    """Per-ticket renderers without the stack: the fast path, WeasyPrint, wkhtmltopdf."""
    print(f"baselines ({workers} worker processes, same design) …", flush=True)
    m.fast = baselines.throughput("fastpath", 100 if args.quick else 400, workers)
    m.weasy = [baselines.throughput("weasyprint", 10 if args.quick else 25, workers) for _ in range(runs)]
    m.wk_reason = baselines.ensure_wkhtmltopdf()
    m.wk = (
        []
        if m.wk_reason
        else [baselines.throughput("wkhtmltopdf", 4 if args.quick else 10, workers) for _ in range(runs)]
    )
    out["baselines"] = {"fastpath_harness_tps": m.fast, "weasyprint_tps": m.weasy, "wkhtmltopdf_tps": m.wk,
                        "wkhtmltopdf_unavailable": m.wk_reason}  # fmt: skip


def _on_bench_stack(args: argparse.Namespace, runs: int, workers: int, m: Measured, out: dict[str, Any]) -> None:
    """The big orders, the 100-ticket orders and the POST load, on one stack of the bench's own."""
    root = Path(tempfile.mkdtemp(prefix="ticketry-bench-"))
    stack = start_stack(root, renderers=workers)
    rates = [float(r) for r in args.post_rates.split(",") if r]
    m.post = {r: [] for r in rates}
    try:

        async def go() -> None:
            await scenarios.big_order(stack, 20, 0)  # warm every process's caches
            for i in range(runs):
                print(f"run {i + 1}/{runs}: {args.quantity}-ticket order …", flush=True)
                try:
                    b = await scenarios.big_order(stack, args.quantity, args.probes)
                except Exception as exc:  # report what was measured, say what failed
                    out.setdefault("errors", []).append(f"big order: {type(exc).__name__}: {exc}"[:300])
                    continue
                m.big.append(b)
                print({k: v for k, v in b.items() if k not in ("rss_mb", "final")}, flush=True)
            for i in range(runs):
                print(f"run {i + 1}/{runs}: 100-ticket order …", flush=True)
                m.hundred.append(await scenarios.big_order(stack, 100, 0))
            if not args.no_intl:
                print("names of every script vs ASCII: 2,000-ticket orders with holders (bench/intl_orders.py) …")
                try:
                    m.intl = await intl_orders.measure(stack, 2000, 1 if args.quick else 2)
                    if m.intl["fault_count"] or m.intl["failed"]:
                        out.setdefault("errors", []).append("intl: " + intl_orders.describe(m.intl))
                except Exception as exc:
                    out.setdefault("errors", []).append(f"intl: {type(exc).__name__}: {exc}"[:300])
            # POST load last: overloading FerretDB 1.24 (SQLite) can stall it, which
            # must not cost the other figures.
            for rate in rates:
                for i in range(runs):
                    print(f"run {i + 1}/{runs}: POST /v1/orders at {rate:.0f}/s …", flush=True)
                    try:
                        m.post[rate].append(await scenarios.post_latency(stack, rate, args.post_seconds))
                    except Exception as exc:
                        out.setdefault("errors", []).append(f"post load: {type(exc).__name__}: {exc}"[:300])
                        continue
                    print(m.post[rate][-1], flush=True)

        asyncio.run(go())
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)
    out["big_orders"] = m.big
    out["hundred_ticket_orders"] = [{k: v for k, v in h.items() if k not in ("rss_mb", "final")} for h in m.hundred]
    out["post"] = {f"{r:g}": v for r, v in m.post.items()}
    out["intl"] = m.intl


def _on_own_stacks(args: argparse.Namespace, m: Measured, out: dict[str, Any]) -> None:
    """The scaler curve, the bursts, the rush and the crowd: each starts a stack of its own."""
    if wanted(args, "scaler-curve"):
        print("scaler curve: 3,000-ticket order, min 1, max 4 …", flush=True)
        with _reported(out, "scaler curve"):
            m.curve = out["scaler_curve"] = scaler_curve.run()["summary"]
    if wanted(args, "burst"):
        print("bursts: default scaler vs fixed renderers, old vs new policy, first tickets (bench/burst.py) …")
        with _reported(out, "burst"):
            b = burst.run()
            out["burst"], m.burst_rows = b["summary"], b["table"]
    if wanted(args, "rush"):
        print("the on-sale rush: 500 orders at once, 5,000 buyers through a waiting room (bench/rush.py) …")
        with _reported(out, "rush"):
            got = rush.run()
            out["rush"], m.rush_rows = got["summary"], got["table"]
            if not got["ok"]:
                _fail(out, "rush: verdict not met (its verdict rows say why)")
    if wanted(args, "crowd"):
        print(f"the on-sale crowd: {args.crowd:,} progress sockets at once, then their completions (bench/crowd.py) …")
        with _reported(out, "crowd"):
            got = crowd.run(sockets=args.crowd)
            out["crowd"], m.crowd_rows = got["summary"], got["table"]
            if not got["ok"]:
                _fail(out, "crowd: verdict not met (its verdict row says why)")
    if wanted(args, "flood"):
        print("the flood: wrk, 20 vs 500 connections that never back off, api vs HAProxy (bench/flood.py) …")
        with _reported(out, "flood"):
            got = flood.run()
            out["flood"], m.flood_rows = got, flood.table(got)
            if not flood.verdict(got["summary"]["proxy"]):
                _fail(out, "flood: verdict not met through HAProxy (its rows say why)")
    if wanted(args, "replica-wait"):
        print("waiting for a replica: POST /v1/orders at 50/s, MIN_REPLICAS 0 vs 1 (bench/replica_wait.py) …")
        with _reported(out, "replica_wait"):
            got = replica_wait.run()
            out["replica_wait"], m.replica_rows = got["summary"], replica_wait.table(got)
    if wanted(args, "ha"):
        print("several hosts: 1 api vs 2 behind HAProxy, Redis primary killed 5 times (bench/ha.py) …")
        with _reported(out, "ha"):
            got = ha.run()
            out["ha"], m.ha_rows = got, ha.table(got)
            if not ha.verdict(got):
                _fail(out, "ha: a failover missed its 15 s (its row says why)")
    if wanted(args, "wallet-mail"):
        print("wallet passes and emails: on vs off, 200-ticket orders (bench/wallet_mail.py) …", flush=True)
        with _reported(out, "wallet_mail"):
            got = wallet_mail.run()
            out["wallet_mail"], m.wallet_mail_rows = got, wallet_mail.table(got)
            if not got["ok"]:
                _fail(out, "wallet_mail: passes and emails halve throughput (its row)")
    if wanted(args, "ops-feed"):
        print("the console's feed: api CPU with 10 consoles vs none (bench/ops_feed.py) …", flush=True)
        with _reported(out, "ops_feed"):
            got = ops_feed.run()
            out["ops_feed"], m.ops_feed_rows = got, ops_feed.table(got)
            if not got["ok"]:
                _fail(out, "ops_feed: 10 consoles cost the api 2 % of a core or more")


def _issue_33(args: argparse.Namespace, m: Measured, out: dict[str, Any]) -> None:
    """The renderer's CPU and bytes per ticket against an earlier revision (``--against``'s,
    else ``renderer_cpu.BEFORE_REV``), and the api's CPU per order and POST p99 with renderers busy."""
    if wanted(args, "renderer-cpu"):
        before = args.against or renderer_cpu.BEFORE_REV
        print(f"renderer CPU and PDF bytes per ticket, this tree vs {before[:7]} (bench/renderer_cpu.py) …", flush=True)
        with _reported(out, "renderer_cpu"):
            got = renderer_cpu.run(args.renderer_cpu_tickets, before)
            out["renderer_cpu"], m.renderer_cpu_rows = got, renderer_cpu.rows(got)
    if wanted(args, "intake"):
        print(f"intake: api CPU per order, POST at {args.intake_rate:g}/s with renderers busy (bench/intake.py) …")
        with _reported(out, "intake"):
            got = asyncio.run(
                intake.run(
                    args.intake_workers, args.intake_rate, args.intake_seconds, args.intake_orders, args.intake_big
                )
            )
            out["intake"], m.intake_rows = got, intake.rows(got)


def _against(args: argparse.Namespace, m: Measured, out: dict[str, Any]) -> None:
    """This tree vs ``--against``: the end-to-end order, alternated (bench/against.py)."""
    print(f"this tree vs {args.against}: the end-to-end order, alternated (bench/against.py) …", flush=True)
    with _reported(out, "against"):
        got = against.run(args.against, args.against_rounds, args.quantity)
        out["against"], m.against_rows = got, against.rows(got)
        for r in got["rounds"]:
            if "error" in r:
                out.setdefault("errors", []).append(f"against: round {r['round']} {r['side']}: {r['error']}"[:300])
        if not against.met(got):
            out.setdefault("errors", []).append(f"against: ratio under {against.TARGET_RATIO:g}× (its row)")


def _rows(m: Measured, core: bool = True) -> list[Row]:
    """The table: each figure, its value, its target or baseline, their ratio
    (without ``core``: only the rows of the scenarios that ran)."""
    if not core:
        return [*_curve_rows(m.curve), *m.burst_rows, *m.rush_rows, *m.crowd_rows, *m.flood_rows, *m.replica_rows,
                *m.ha_rows, *m.wallet_mail_rows, *m.ops_feed_rows, *m.renderer_cpu_rows,
                *m.intake_rows, *m.against_rows]  # fmt: skip
    tps = med([b["tickets_per_s"] for b in m.big])
    w, k = med(m.weasy), med(m.wk)
    rss_max = max((max(s) for b in m.big for s in b["rss_mb"] if s), default=None)
    trend = []
    for b in m.big:
        for s in b["rss_mb"]:
            if len(s) >= 8:
                q = len(s) // 4
                trend.append(statistics.mean(s[-q:]) - statistics.mean(s[q : 2 * q]))
    return [
        ("end to end, 10k order → order.completed (tickets/s)", fmt(tps), "≥ 500",
         fmt(tps / 500 if tps else None, "×")),
        ("  vs per-ticket WeasyPrint worker (tickets/s)", fmt(tps), fmt(w), fmt(tps / w if tps and w else None, "×")),
        ("  vs wkhtmltopdf per ticket (tickets/s)", fmt(tps), fmt(k) if k else f"n/a ({m.wk_reason})",
         fmt(tps / k if tps and k else None, "×")),
        ("fast path alone, 2 procs, no queue (tickets/s)", fmt(m.fast), fmt(w), fmt(m.fast / w if w else None, "×")),
        ("10k order: POST → 202 (s)", fmt(med([b["post_202_s"] for b in m.big])), "", ""),
        ("100-ticket order: POST → 202 / 202 → order.completed (ms)",
         f"{fmt(med([h['post_202_s'] * 1000 for h in m.hundred]))} / "
         f"{fmt(med([h['end_to_end_s'] * 1000 for h in m.hundred]))}", "", ""),
        ("first ticket after 202, p50 (ms)", fmt(med([b["first_ticket_ms"] for b in m.big])), "≤ 150", ""),
        ("WebSocket push after render event, p99 (ms)", fmt(med([b["push_p99_ms"] for b in m.big])), "≤ 50", ""),
        ("WebSocket push after render event, p50 (ms)", fmt(med([b["push_p50_ms"] for b in m.big])), "", ""),
        *[row for r, ps in m.post.items() for row in (
            (f"POST /v1/orders 1 ticket at {r:.0f}/s, p99 / p50 (ms)",
             f"{fmt(med([p['p99_ms'] for p in ps]))} / {fmt(med([p['p50_ms'] for p in ps]))}",
             "p99 ≤ 50 at 200/s", ""),
            (f"  at {r:.0f}/s: accepted per second; refused or timed out / sent",
             f"{fmt(med([p.get('accepted_per_s') for p in ps]))}; "
             f"{sum(p['refused'] for p in ps)} / {sum(p['sent'] for p in ps)}", "", ""),
        )],
        ("VIP 1-ticket during 10k order, first ticket p50 (ms)",
         fmt(med([v for b in m.big for v in b["vip_first_ms"]])), "≤ 150", ""),
        ("standard 2-ticket during 10k order, completed p50 (ms)",
         fmt(med([v for b in m.big for v in b["small_done_ms"]])), "≤ 1000", ""),
        ("renderer RSS max over the runs (MB)", fmt(rss_max), "≤ 250", ""),
        ("renderer RSS trend, last vs 2nd quarter (MB)", fmt(max(trend) if trend else None), "≈ 0", ""),
        *_curve_rows(m.curve),
        *_intl_rows(m.intl),
        *m.burst_rows,
        *m.rush_rows,
        *m.crowd_rows,
        *m.flood_rows,
        *m.replica_rows,
        *m.ha_rows,
        *m.wallet_mail_rows,
        *m.ops_feed_rows,
        *m.renderer_cpu_rows,
        *m.intake_rows,
        *m.against_rows,
    ]  # fmt: skip


def _curve_rows(curve: dict[str, Any] | None) -> list[Row]:
    if curve is None:
        return []
    return [
        ("scaler: 3,000 tickets, first scale-up decision / extra renderer live (s)",
         f"{fmt(curve.get('first_scale_up_decision_s'))} / {fmt(curve.get('first_extra_renderer_live_s'))}",
         "rise ≤ 10", ""),
        ("scaler: order completed / back at min (s)",
         f"{fmt(curve.get('completed_s'))} / {fmt(curve.get('back_to_min_live_s'))}", "", ""),
    ]  # fmt: skip


def _intl_rows(got: dict[str, Any] | None) -> list[Row]:
    if got is None:
        return []
    private = {k: max((p.get("Private", 0) for p in v), default=0) / 1024 for k, v in got["renderer_memory_kb"].items()}
    return [
        (f"names of 12 scripts vs ASCII, {got['quantity']:,}-ticket orders with holders (tickets/s)",
         f"{fmt(got['mix_tickets_per_s'])} vs {fmt(got['ascii_tickets_per_s'])}", "≥ 0.70", fmt(got["ratio"], "×")),
        ("  their PDFs read back: faults (.notdef, name not as typed) / PDFs",
         f"{got['fault_count']} / {got['pdfs_checked']}", "0", ""),
        ("  renderer private memory, max: before / after ASCII / after the mix (MB)",
         " / ".join(fmt(private.get(k)) for k in ("at start", "after ascii", "after mix")), "", ""),
    ]  # fmt: skip


_HEAD = ("figure", "value", "target / baseline", "ratio")


def _print_table(rows: list[Row]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    widths = [max(w_, len(h)) for w_, h in zip(widths, _HEAD, strict=True)]
    print()
    for r in [_HEAD, tuple("-" * w_ for w_ in widths), *rows]:
        print(" | ".join(c.ljust(w_) for c, w_ in zip(r, widths, strict=True)))


if __name__ == "__main__":
    raise SystemExit(main())
