"""The renderer's fast path in one run, this revision against an earlier one:

    uv run --frozen python -m bench.renderer_cpu [--tickets 1000] [--before REV | --no-before]

For each revision, in a fresh process (the earlier one's renderer modules taken
from git into a temporary copy of the package, everything else as it is here):

* CPU ms per ticket of ``render_ticket`` on the fast path (process CPU time, the
  event's page already built), ASCII names (``Buyer Number <i>``) and names of
  every script of the font chain (``bench.intl``'s mix, each made unique), the
  median and the least of 5 batches: CPU time still grows on a busy host, the
  least batch is the nearest to a quiet one;
* bytes per single-ticket PDF (mean);
* bytes of a 1,000-ticket order's "download all" (half ASCII, half
  international names): the PDFs joined in parts of ``PART_SIZE`` by the api's
  own ``join_pdfs`` (``ticketry.orderpdf`` when the stamps share one template,
  else PDFium), summed over the parts; and joined in one file by
  ``ticketry.orderpdf`` (pages sharing the event's page, fonts and images),
  with its CPU time.

Every fast-path PDF of the run is checked (untimed): its QR decodes to its code.
Results go to ``bench/results/renderer-cpu-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "services/renderer/src/ticketry_renderer"
RESULTS = Path(__file__).parent / "results"
# The revision before the renderer's CPU and size work (issue 33).
BEFORE_REV = "bbeeafae4b927781c0870cfdb2ad9961e99b30e1"
BATCHES = 5
ORDER_TICKETS = 1000


def _measure(tickets: int) -> dict[str, Any]:
    """In this process: the figures of whichever ``ticketry_renderer`` is imported."""
    from ticketry_renderer.render import Design, render_ticket

    from bench.baselines import sample_request
    from bench.intl import holder

    design = Design.default()
    out: dict[str, Any] = {}
    for kind, name_kind in (("ascii", "ascii"), ("intl", "unique")):
        reqs = [
            sample_request(i).model_copy(update={"holder_name": holder(name_kind, i + 10_000)}) for i in range(tickets)
        ]
        for r in reqs[:20]:  # warm: the design, each font's preprocessed face
            render_ticket(r, design)
        full_before = design.full_rendered
        per_batch: list[float] = []
        pdfs: list[bytes] = []
        size = max(1, tickets // BATCHES)
        for b in range(BATCHES):
            batch = reqs[b * size : (b + 1) * size]
            c0 = time.process_time()
            pdfs.extend(render_ticket(r, design) for r in batch)
            per_batch.append((time.process_time() - c0) / len(batch) * 1000)
        assert design.full_rendered == full_before, "a ticket left the fast path"
        bad = [r.ticket_id for r, pdf in zip(reqs[:50], pdfs[:50], strict=False) if decode_qr(pdf) != r.code]
        assert not bad, f"QR does not decode: {bad[:3]}"
        out[kind] = {
            "cpu_ms_per_ticket_median": statistics.median(per_batch),
            "cpu_ms_per_ticket_min": min(per_batch),
            "pdf_bytes_mean": statistics.mean(len(p) for p in pdfs),
        }
    orders = [
        sample_request(i).model_copy(update={"holder_name": holder("unique" if i % 2 else "ascii", i)})
        for i in range(ORDER_TICKETS)
    ]
    pdfs = [render_ticket(r, design) for r in orders]
    out["order_pdf_bytes"] = _joined_bytes(pdfs)
    from ticketry_renderer import fastpath

    if not hasattr(fastpath, "orderpdf"):  # a revision before the shared join (its stamps are not joinable)
        return out
    from ticketry import orderpdf

    c0 = time.process_time()
    shared = orderpdf.join(pdfs)
    assert shared is not None, "the order's stamps did not join"
    out["order_pdf_shared"] = {
        "tickets": len(pdfs), "bytes": len(shared), "cpu_ms": (time.process_time() - c0) * 1000,
    }  # fmt: skip
    return out


def decode_qr(pdf: bytes) -> str | None:
    """The first QR of page 1, rasterised at 200 dpi by PDFium, read by zxing-cpp."""
    import pypdfium2
    import zxingcpp

    doc = pypdfium2.PdfDocument(pdf)
    try:
        image = doc[0].render(scale=200 / 72).to_pil()
    finally:
        doc.close()
    found = zxingcpp.read_barcodes(image)
    return found[0].text if found else None


def _joined_bytes(pdfs: list[bytes]) -> dict[str, int]:
    from ticketry_api.web.pdfs import PART_SIZE, join_pdfs

    parts = [join_pdfs(pdfs[i : i + PART_SIZE]) for i in range(0, len(pdfs), PART_SIZE)]
    return {"tickets": len(pdfs), "parts": len(parts), "bytes": sum(len(p) for p in parts)}


def _package_at(rev: str, into: Path) -> Path:
    """A copy of the renderer package with its modules as of ``rev``."""
    pkg = into / "ticketry_renderer"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for module in sorted(p.name for p in PACKAGE.glob("*.py")):
        rel = f"services/renderer/src/ticketry_renderer/{module}"
        got = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, capture_output=True, check=False)
        if got.returncode == 0:
            (pkg / module).write_bytes(got.stdout)
        else:  # a module that revision did not have
            (pkg / module).unlink()
    return into


def _in_process(tickets: int, path_first: Path | None) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (path_first, ROOT) if p is not None)
    code = f"import json; from bench.renderer_cpu import _measure; print(json.dumps(_measure({tickets})))"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(tickets: int = 1000, before: str | None = BEFORE_REV) -> dict[str, Any]:
    """This revision's figures and, when ``before`` is given, that revision's."""
    out: dict[str, Any] = {"tickets": tickets, "load_average": os.getloadavg()}
    out["now"] = _in_process(tickets, None)
    if before:
        with tempfile.TemporaryDirectory() as tmp:
            out["before"] = _in_process(tickets, _package_at(before, Path(tmp)))
            out["before"]["rev"] = before
    out["load_average_after"] = os.getloadavg()
    return out


def table(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Rows: figure, now, before, target."""

    def get(side: str, *keys: str) -> Any:
        value: Any = result.get(side)
        for k in keys:
            value = value.get(k) if isinstance(value, dict) else None
        return value

    def ms(side: str, kind: str) -> str:
        med, low = get(side, kind, "cpu_ms_per_ticket_median"), get(side, kind, "cpu_ms_per_ticket_min")
        return "-" if med is None else f"{med:.3f} (least {low:.3f})"

    def kb(v: Any, div: float = 1000) -> str:
        return "-" if v is None else f"{v / div:,.1f}"

    return [
        ("renderer CPU ms per ticket, ASCII names", ms("now", "ascii"), ms("before", "ascii"), "≤ 0.6"),
        ("renderer CPU ms per ticket, international names", ms("now", "intl"), ms("before", "intl"), "≤ 0.6"),
        ("kB per single-ticket PDF, ASCII", kb(get("now", "ascii", "pdf_bytes_mean")),
         kb(get("before", "ascii", "pdf_bytes_mean")), "≤ 25"),
        ("kB per single-ticket PDF, international", kb(get("now", "intl", "pdf_bytes_mean")),
         kb(get("before", "intl", "pdf_bytes_mean")), "≤ 25"),
        ("MB of a 1,000-ticket order's download-all (api join)", kb(get("now", "order_pdf_bytes", "bytes"), 1e6),
         kb(get("before", "order_pdf_bytes", "bytes"), 1e6), "≤ 3"),
        ("MB of a 1,000-ticket order, pages sharing the template", kb(get("now", "order_pdf_shared", "bytes"), 1e6),
         kb(get("before", "order_pdf_shared", "bytes"), 1e6), "≤ 3"),
    ]  # fmt: skip


# Where each of :func:`table`'s figures is in a side's result, row by row.
_RAW = (
    ("ascii", "cpu_ms_per_ticket_median"),
    ("intl", "cpu_ms_per_ticket_median"),
    ("ascii", "pdf_bytes_mean"),
    ("intl", "pdf_bytes_mean"),
    ("order_pdf_bytes", "bytes"),
    ("order_pdf_shared", "bytes"),
)


def rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """:func:`table` as ``just bench``'s rows: figure (unit), this revision's
    value, the target and the earlier revision's value, their ratio (this / earlier)."""
    now, before = result.get("now") or {}, result.get("before") or {}
    rev = str(before.get("rev") or "before")[:7]
    out = []
    for (figure, a, b, target), (part, key) in zip(table(result), _RAW, strict=True):
        x, y = (now.get(part) or {}).get(key), (before.get(part) or {}).get(key)
        unit = figure.split(" ", 1)[0] if figure.startswith(("kB ", "MB ")) else "ms"
        out.append((
            f"{figure} ({unit})",
            a,
            target if b == "-" else f"{target}; {rev}: {b}",
            f"{x / y:.2f}×" if x is not None and y else "",
        ))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=1000, help="tickets per kind of name")
    parser.add_argument("--before", default=BEFORE_REV, help="the revision to compare with")
    parser.add_argument("--no-before", action="store_true", help="this revision only")
    args = parser.parse_args()
    result = run(args.tickets, None if args.no_before else args.before)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"renderer-cpu-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"load average {result['load_average'][0]:.2f} → {result['load_average_after'][0]:.2f}")
    print(f"{'figure':<56} {'now':>22} {'before':>22} {'target':>8}")
    for row in table(result):
        print(f"{row[0]:<56} {row[1]:>22} {row[2]:>22} {row[3]:>8}")
    print(f"written to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
