"""International names at renderer level, in one run:

    uv run --frozen python -m bench.intl [--tickets 2000] [--workers 2] [--rss 10000]

* tickets/s of ``render_ticket`` + writing the PDF, ``--workers`` processes, for
  ASCII names (``Buyer Number <i>``) and for a mix cycling through the names of
  every script of the chain plus Latin ones; the mix again with every name made
  unique (``<name> <i>``: no subset is reused), the acceptance being ≥ 70 % of ASCII;
  then every PDF is read back (untimed, ``bench.pdfcheck``): no ``.notdef``
  glyph and each holder extracted exactly, or the run fails;
* per-ticket ms of the fast path in one process, per name;
* the first ticket of a new event in a warm process: design built here, vs
  loaded from a stored design (``ticketry_renderer.designs``; the Redis GET,
  ~0.2 ms on loopback, is not included);
* RSS of one process over ``--rss`` mixed tickets (sampled every 1,000).

Results go to ``bench/results/intl-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.baselines import sample_request

WORLD = [
    "Łukasz Żółć", "Дмитрий Шостакович", "Γιώργος Παπαδόπουλος", "Nguyễn Văn An", "محمد علي", "李小龙",
    "山田 太郎", "김민준", "Ωmega", "דוד כהן", "สมชาย ใจดี", "अमित शर्मा",
]  # fmt: skip
LATIN = ["Zoë Ångström", "François Müller", "Søren Kierkegård", "José Núñez"]
MIX = WORLD + LATIN
RESULTS = Path(__file__).parent / "results"


def holder(kind: str, i: int) -> str:
    if kind == "ascii":
        return f"Buyer Number {i}"
    name = MIX[i % len(MIX)]
    return f"{name} {i}" if kind == "unique" else name


def _worker(kind: str, n: int, out_dir: str, q: mp.Queue[tuple[float, float]]) -> None:
    """Render ``n`` tickets into ``out_dir`` (its own: the workers' ticket ids are the same)."""
    from ticketry_renderer.render import Design, render_ticket

    from bench.pdfcheck import faults  # here: PyMuPDF stays out of the RSS worker

    design = Design.default()
    for i in range(len(MIX)):  # warm: the design, each font's preprocessed face
        render_ticket(sample_request(i).model_copy(update={"holder_name": holder(kind, i)}), design)
    out = Path(out_dir)
    written = []
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        req = sample_request(i).model_copy(update={"holder_name": holder(kind, i + 10_000)})
        path = out / f"{kind}-{req.ticket_id}.pdf"
        path.write_bytes(render_ticket(req, design))
        written.append((path, req.holder_name))
    elapsed = (time.perf_counter() - t0, time.process_time() - c0)
    assert design.full_rendered == 0, "a name left the fast path"
    # Untimed: every PDF read back draws no .notdef and extracts its holder as typed.
    bad = [f"{p.name}: {f}" for p, name in written for f in faults(p.read_bytes(), name)]
    assert not bad, bad[:5]
    q.put(elapsed)


def throughput(kind: str, per_worker: int, workers: int) -> tuple[float, float]:
    """Tickets/s (wall clock) and tickets per CPU-second of one process: the
    second does not move when other work shares the machine's cores."""
    ctx = mp.get_context("spawn")
    q: mp.Queue[tuple[float, float]] = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [Path(tmp) / str(w) for w in range(workers)]
        for d in dirs:
            d.mkdir()
        procs = [ctx.Process(target=_worker, args=(kind, per_worker, str(d), q)) for d in dirs]
        for p in procs:
            p.start()
        elapsed = [q.get(timeout=1800) for _ in procs]
        for p in procs:
            p.join()
    return workers * per_worker / max(w for w, _ in elapsed), per_worker / max(c for _, c in elapsed)


def per_name_ms(rounds: int = 200) -> dict[str, float]:
    from ticketry_renderer.render import Design, render_ticket

    design = Design.default()
    out = {}
    for name in ["Buyer Number 1", *MIX]:
        reqs = [sample_request(i).model_copy(update={"holder_name": name}) for i in range(rounds)]
        render_ticket(reqs[0], design)
        t0 = time.perf_counter()
        for r in reqs:
            render_ticket(r, design)
        out[name] = (time.perf_counter() - t0) / rounds * 1000
    return out


def first_ticket_ms(events: int = 5) -> dict[str, Any]:
    from ticketry_renderer import designs
    from ticketry_renderer.render import Design, build_event_template, render_ticket, template_key

    design = Design.default()
    render_ticket(sample_request(0), design)  # a warm process
    built, loaded, blob_kb = [], [], 0.0
    for e in range(events):
        req = sample_request(1).model_copy(update={"event_name": f"Brand New Night {e}", "holder_name": "李小龙"})
        t0 = time.perf_counter()
        render_ticket(req, design)
        built.append((time.perf_counter() - t0) * 1000)
        # Another process: the design comes from Redis (bytes), not WeasyPrint
        blob = designs.dumps(build_event_template(req, design))
        blob_kb = len(blob) / 1024
        other = Design.default()
        t0 = time.perf_counter()
        other.remember(template_key(req, other), designs.loads(blob))
        render_ticket(req, other)
        loaded.append((time.perf_counter() - t0) * 1000)
    return {"built_ms": built, "loaded_ms": loaded, "stored_design_kb": blob_kb}


def rss_over(tickets: int) -> list[tuple[int, float]]:
    """In a fresh process (what a renderer is): RSS after start-up and every 1,000 tickets."""
    ctx = mp.get_context("spawn")
    q: mp.Queue[list[tuple[int, float]]] = ctx.Queue()
    p = ctx.Process(target=_rss_worker, args=(tickets, q))
    p.start()
    samples = q.get(timeout=1800)
    p.join()
    return samples


def _rss_worker(tickets: int, q: mp.Queue[list[tuple[int, float]]]) -> None:
    from ticketry_renderer.render import Design, render_ticket

    def rss_mb() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    design = Design.default()
    samples = [(0, rss_mb())]
    for i in range(tickets):
        render_ticket(sample_request(i).model_copy(update={"holder_name": holder("unique", i)}), design)
        if (i + 1) % 1000 == 0:
            samples.append((i + 1, rss_mb()))
    q.put(samples)


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench.intl")
    ap.add_argument("--tickets", type=int, default=2000, help="tickets per scenario (split over the workers)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rss", type=int, default=10_000)
    args = ap.parse_args()
    per = args.tickets // args.workers
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "workers": args.workers}
    # Interleaved, twice: this machine's speed drifts; compare within a round.
    rounds = []
    for _ in range(3):
        rnd = {kind: throughput(kind, per, args.workers) for kind in ("ascii", "mix", "unique")}
        rounds.append(rnd)
        (aw, ac), (mw, mc), (uw, uc) = rnd["ascii"], rnd["mix"], rnd["unique"]
        print(f"tickets/s wall  ascii {aw:.0f}  mix {mw:.0f} ({mw / aw:.0%})  unique mix {uw:.0f} ({uw / aw:.0%})"
              f"  | per CPU-second  ascii {ac:.0f}  mix {mc:.0f} ({mc / ac:.0%})  unique mix {uc:.0f} ({uc / ac:.0%})",
              flush=True)  # fmt: skip
    out["throughput"] = rounds
    out["per_name_ms"] = per_name_ms()
    print("ms/ticket, one process:", {k: round(v, 2) for k, v in out["per_name_ms"].items()}, flush=True)
    out["first_ticket"] = first = first_ticket_ms()
    print(f"first ticket of a new event: built {statistics.median(first['built_ms']):.0f} ms, "
          f"from a stored design {statistics.median(first['loaded_ms']):.1f} ms "
          f"({first['stored_design_kb']:.0f} KB stored)", flush=True)  # fmt: skip
    out["rss_mb"] = rss = rss_over(args.rss)
    print("RSS MB (tickets, MB):", [(n, round(m, 1)) for n, m in rss], flush=True)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"intl-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2, ensure_ascii=False))
    print(f"→ {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
