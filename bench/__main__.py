"""``just bench``: baselines and end-to-end scenarios of issue 6, one table.

    uv run --frozen python -m bench [--quick] [--runs N] [--quantity N] [--post-rates 100,200]

Starts its own stack (Redis, FerretDB, api, notifier, one renderer per core)
under a temporary directory, prints ``figure | value | target/baseline | ratio``
and writes ``bench/results/bench-<time>.json``. Medians over ``--runs`` (3;
``--quick`` = 1 run and smaller baseline samples, no scaler curve). Last, the
scaler curve of issue 4 (``bench/scaler_curve.py``, its own stack, ~3.5 min),
then the bursts of issue 16 (``bench/burst.py``, its own stack, ~15 min).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ticketry_devstack.procs import start_stack

from bench import baselines, burst, rush, scaler_curve, scenarios

RESULTS = Path(__file__).parent / "results"


def med(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "n/a"
    return f"{v:,.1f}{unit}" if abs(v) < 100 else f"{v:,.0f}{unit}"


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench")
    ap.add_argument("--quick", action="store_true", help="one run, small baseline samples")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quantity", type=int, default=10_000)
    ap.add_argument("--probes", type=int, default=5, help="VIP / small orders per big order")
    ap.add_argument("--post-rates", default="100,200", help="open-loop POST /v1/orders rates, per second")
    ap.add_argument("--no-scaler-curve", action="store_true")
    ap.add_argument("--no-burst", action="store_true", help="skip bench/burst.py (issue 16, ~15 min)")
    ap.add_argument("--no-rush", action="store_true", help="skip bench/rush.py (issue 20, ~4 min)")
    ap.add_argument("--post-seconds", type=float, default=10.0)
    args = ap.parse_args()
    runs = 1 if args.quick else args.runs
    workers = scenarios.cpu_count()
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "runs": runs, "workers": workers}

    print(f"baselines ({workers} worker processes, same design) …", flush=True)
    fast = baselines.throughput("fastpath", 100 if args.quick else 400, workers)
    weasy = [baselines.throughput("weasyprint", 10 if args.quick else 25, workers) for _ in range(runs)]
    wk_reason = baselines.ensure_wkhtmltopdf()
    wk = (
        []
        if wk_reason
        else [baselines.throughput("wkhtmltopdf", 4 if args.quick else 10, workers) for _ in range(runs)]
    )
    out["baselines"] = {"fastpath_harness_tps": fast, "weasyprint_tps": weasy, "wkhtmltopdf_tps": wk,
                        "wkhtmltopdf_unavailable": wk_reason}  # fmt: skip

    root = Path(tempfile.mkdtemp(prefix="ticketry-bench-"))
    stack = start_stack(root, renderers=workers)
    big: list[dict[str, Any]] = []
    hundred: list[dict[str, Any]] = []
    rates = [float(r) for r in args.post_rates.split(",") if r]
    post: dict[float, list[dict[str, Any]]] = {r: [] for r in rates}
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
                big.append(b)
                print({k: v for k, v in b.items() if k not in ("rss_mb", "final")}, flush=True)
            for i in range(runs):
                print(f"run {i + 1}/{runs}: 100-ticket order …", flush=True)
                hundred.append(await scenarios.big_order(stack, 100, 0))
            # POST load last: overloading FerretDB 1.24 (SQLite) can stall it, which
            # must not cost the other figures.
            for rate in rates:
                for i in range(runs):
                    print(f"run {i + 1}/{runs}: POST /v1/orders at {rate:.0f}/s …", flush=True)
                    try:
                        post[rate].append(await scenarios.post_latency(stack, rate, args.post_seconds))
                    except Exception as exc:
                        out.setdefault("errors", []).append(f"post load: {type(exc).__name__}: {exc}"[:300])
                        continue
                    print(post[rate][-1], flush=True)

        asyncio.run(go())
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)
    out["big_orders"] = big
    out["hundred_ticket_orders"] = [{k: v for k, v in h.items() if k not in ("rss_mb", "final")} for h in hundred]
    out["post"] = {f"{r:g}": v for r, v in post.items()}
    curve: dict[str, Any] | None = None
    if not (args.quick or args.no_scaler_curve):
        print("scaler curve: 3,000-ticket order, min 1, max 4 …", flush=True)
        try:
            curve = out["scaler_curve"] = scaler_curve.run()["summary"]
        except Exception as exc:
            out.setdefault("errors", []).append(f"scaler curve: {type(exc).__name__}: {exc}"[:300])
    burst_rows: list[tuple[str, str, str, str]] = []
    if not (args.quick or args.no_burst):
        print("bursts: default scaler vs fixed renderers, old vs new policy, first tickets (bench/burst.py) …")
        try:
            b = burst.run()
            out["burst"], burst_rows = b["summary"], b["table"]
        except Exception as exc:
            out.setdefault("errors", []).append(f"burst: {type(exc).__name__}: {exc}"[:300])
    rush_rows: list[tuple[str, str, str, str]] = []
    if not (args.quick or args.no_rush):
        print("the on-sale rush: 500 orders at once, 5,000 buyers through a waiting room (bench/rush.py) …")
        try:
            got = rush.run()
            out["rush"], rush_rows = got["summary"], got["table"]
        except Exception as exc:
            out.setdefault("errors", []).append(f"rush: {type(exc).__name__}: {exc}"[:300])
    for err in out.get("errors", []):
        print("scenario failed:", err)

    tps = med([b["tickets_per_s"] for b in big])
    w, k = med(weasy), med(wk)
    rss_max = max((max(s) for b in big for s in b["rss_mb"] if s), default=None)
    trend = []
    for b in big:
        for s in b["rss_mb"]:
            if len(s) >= 8:
                q = len(s) // 4
                trend.append(statistics.mean(s[-q:]) - statistics.mean(s[q : 2 * q]))
    rows: list[tuple[str, str, str, str]] = [
        ("end to end, 10k order → order.completed (tickets/s)", fmt(tps), "≥ 500",
         fmt(tps / 500 if tps else None, "×")),
        ("  vs per-ticket WeasyPrint worker (tickets/s)", fmt(tps), fmt(w), fmt(tps / w if tps and w else None, "×")),
        ("  vs wkhtmltopdf per ticket (tickets/s)", fmt(tps), fmt(k) if k else f"n/a ({wk_reason})",
         fmt(tps / k if tps and k else None, "×")),
        ("fast path alone, 2 procs, no queue (tickets/s)", fmt(fast), fmt(w), fmt(fast / w if w else None, "×")),
        ("10k order: POST → 202 (s)", fmt(med([b["post_202_s"] for b in big])), "", ""),
        ("100-ticket order: POST → 202 / 202 → order.completed (ms)",
         f"{fmt(med([h['post_202_s'] * 1000 for h in hundred]))} / "
         f"{fmt(med([h['end_to_end_s'] * 1000 for h in hundred]))}", "", ""),
        ("first ticket after 202, p50 (ms)", fmt(med([b["first_ticket_ms"] for b in big])), "≤ 150", ""),
        ("WebSocket push after render event, p99 (ms)", fmt(med([b["push_p99_ms"] for b in big])), "≤ 50", ""),
        ("WebSocket push after render event, p50 (ms)", fmt(med([b["push_p50_ms"] for b in big])), "", ""),
        *[row for r, ps in post.items() for row in (
            (f"POST /v1/orders 1 ticket at {r:.0f}/s, p99 / p50 (ms)",
             f"{fmt(med([p['p99_ms'] for p in ps]))} / {fmt(med([p['p50_ms'] for p in ps]))}",
             "p99 ≤ 50 at 200/s", ""),
            (f"  at {r:.0f}/s: accepted per second; refused or timed out / sent",
             f"{fmt(med([p.get('accepted_per_s') for p in ps]))}; "
             f"{sum(p['refused'] for p in ps)} / {sum(p['sent'] for p in ps)}", "", ""),
        )],
        ("VIP 1-ticket during 10k order, first ticket p50 (ms)",
         fmt(med([v for b in big for v in b["vip_first_ms"]])), "≤ 150", ""),
        ("standard 2-ticket during 10k order, completed p50 (ms)",
         fmt(med([v for b in big for v in b["small_done_ms"]])), "≤ 1000", ""),
        ("renderer RSS max over the runs (MB)", fmt(rss_max), "≤ 250", ""),
        ("renderer RSS trend, last vs 2nd quarter (MB)", fmt(max(trend) if trend else None), "≈ 0", ""),
        *([] if curve is None else [
            ("scaler: 3,000 tickets, first scale-up decision / extra renderer live (s)",
             f"{fmt(curve.get('first_scale_up_decision_s'))} / {fmt(curve.get('first_extra_renderer_live_s'))}",
             "rise ≤ 10", ""),
            ("scaler: order completed / back at min (s)",
             f"{fmt(curve.get('completed_s'))} / {fmt(curve.get('back_to_min_live_s'))}", "", ""),
        ]),
        *burst_rows,
        *rush_rows,
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    head = ("figure", "value", "target / baseline", "ratio")
    widths = [max(w_, len(h)) for w_, h in zip(widths, head, strict=True)]
    print()
    for r in [head, tuple("-" * w_ for w_ in widths), *rows]:
        print(" | ".join(c.ljust(w_) for c, w_ in zip(r, widths, strict=True)))
    out["table"] = [dict(zip(head, r, strict=True)) for r in rows]
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"\nwritten {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
