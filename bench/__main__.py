"""``just bench``: baselines and end-to-end scenarios of issue 6, one table.

    uv run --frozen python -m bench [--quick] [--runs N] [--quantity N]

Starts its own stack (Redis, FerretDB, api, notifier, one renderer per core)
under a temporary directory, prints ``figure | value | target/baseline | ratio``
and writes ``bench/results/bench-<time>.json``. Medians over ``--runs`` (3;
``--quick`` = 1 run and smaller baseline samples).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ticketry_devstack.procs import start_stack

from bench import baselines, scenarios

RESULTS = Path(__file__).parent / "results"


def med(values: list[float | None]) -> float | None:
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
    ap.add_argument("--post-rate", type=float, default=200.0)
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
    post: list[dict[str, Any]] = []
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
            # POST load last: overloading FerretDB 1.24 (SQLite) can stall it, which
            # must not cost the other figures.
            for i in range(runs):
                print(f"run {i + 1}/{runs}: POST /v1/orders at {args.post_rate:.0f}/s …", flush=True)
                try:
                    post.append(await scenarios.post_latency(stack, args.post_rate, args.post_seconds))
                except Exception as exc:
                    out.setdefault("errors", []).append(f"post load: {type(exc).__name__}: {exc}"[:300])
                    continue
                print(post[-1], flush=True)

        asyncio.run(go())
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)
    out["big_orders"] = big
    out["post"] = post
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
        ("first ticket after 202, p50 (ms)", fmt(med([b["first_ticket_ms"] for b in big])), "≤ 150", ""),
        ("WebSocket push after render event, p99 (ms)", fmt(med([b["push_p99_ms"] for b in big])), "≤ 50", ""),
        ("WebSocket push after render event, p50 (ms)", fmt(med([b["push_p50_ms"] for b in big])), "", ""),
        (f"POST /v1/orders 1 ticket at {args.post_rate:.0f}/s, p99 (ms)", fmt(med([p["p99_ms"] for p in post])),
         "≤ 50", ""),
        (f"POST /v1/orders 1 ticket at {args.post_rate:.0f}/s, p50 (ms)", fmt(med([p["p50_ms"] for p in post])),
         "", ""),
        ("  refused or timed out / sent",
         f"{sum(p['refused'] for p in post)} / {sum(p['sent'] for p in post)}", "", ""),
        ("  orders accepted per second", fmt(med([p.get("accepted_per_s") for p in post])), "200", ""),
        ("VIP 1-ticket during 10k order, first ticket p50 (ms)",
         fmt(med([v for b in big for v in b["vip_first_ms"]])), "≤ 150", ""),
        ("standard 2-ticket during 10k order, completed p50 (ms)",
         fmt(med([v for b in big for v in b["small_done_ms"]])), "≤ 1000", ""),
        ("renderer RSS max over the runs (MB)", fmt(rss_max), "≤ 250", ""),
        ("renderer RSS trend, last vs 2nd quarter (MB)", fmt(max(trend) if trend else None), "≈ 0", ""),
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
