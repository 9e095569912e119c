"""Per-ticket baselines on the same design, measured in the same run.

* ``weasyprint``: what a Celery/arq user writes — one WeasyPrint render per ticket
  (``render_ticket_full``), written to disk, one worker process per core.
* ``wkhtmltopdf``: the design we replace — the same ticket HTML (assets inlined)
  through Debian's ``wkhtmltopdf`` with the seed's flags, one subprocess per ticket,
  one worker per core.
* ``fastpath``: our ``render_ticket`` (stamped), same harness, for the CPU floor.

Queueing overhead is left out of the baselines (favouring them): the ratios we
quote against the end-to-end figure are conservative.
"""

from __future__ import annotations

import base64
import multiprocessing as mp
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from ticketry.events import RenderRequest
from ticketry.ids import ticket_id

WKHTML_FLAGS = ["--quiet", "--dpi", "300", "--page-size", "A4", "--encoding", "utf-8"]


def sample_request(i: int, tier: str = "standard") -> RenderRequest:
    tid = ticket_id("or_0123456789abcdef0123", i)
    sig = base64.urlsafe_b64encode(secrets.token_bytes(64)).rstrip(b"=").decode()
    return RenderRequest(
        ticket_id=tid, order_id="or_0123456789abcdef0123", event_id="ev_bench", event_name="Big On-Sale Night",
        venue="Loopback Arena", starts_at=datetime(2027, 6, 1, 19, 30, tzinfo=UTC),
        holder_name=f"Buyer Number {i}", tier=tier, price=Decimal("25.00"), currency="EUR",
        code=f"TK1.k1.{tid}.{sig}", total=1,
    )  # fmt: skip


def _worker(kind: str, n: int, out_dir: str, q: mp.Queue[float]) -> None:
    from ticketry_renderer.render import Design, render_ticket, render_ticket_full, ticket_html

    design = Design.default()
    render = {"weasyprint": render_ticket_full, "fastpath": render_ticket}.get(kind)
    warm = sample_request(0)
    if render is not None:
        render(warm, design)  # import + first render are not the steady state
    out = Path(out_dir)
    t0 = time.perf_counter()
    for i in range(n):
        req = sample_request(i)
        path = out / f"{kind}-{req.ticket_id}.pdf"
        if render is not None:
            path.write_bytes(render(req, design))
        else:
            html = _inline_assets(ticket_html(req, design), design)
            subprocess.run(
                ["wkhtmltopdf", *WKHTML_FLAGS, "-", str(path)],
                input=html.encode(),
                check=True,
                stderr=subprocess.DEVNULL,
            )
    q.put(time.perf_counter() - t0)


def _inline_assets(html: str, design: object) -> str:
    assets = design.fetcher.assets  # type: ignore[attr-defined]
    css = assets["ticket.css"][0].decode()
    html = re.sub(r'<link rel="stylesheet" href="ticketry-asset:/ticket.css">', f"<style>{css}</style>", html)
    logo = base64.b64encode(assets["logo.svg"][0]).decode()
    return html.replace("ticketry-asset:/logo.svg", f"data:image/svg+xml;base64,{logo}")


def throughput(kind: str, per_worker: int, workers: int = 2) -> float:
    """Tickets per second with ``workers`` processes rendering ``per_worker`` each."""
    ctx = mp.get_context("spawn")
    q: mp.Queue[float] = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_worker, args=(kind, per_worker, tmp, q)) for _ in range(workers)]
        for p in procs:
            p.start()
        elapsed = [q.get(timeout=1800) for _ in procs]
        for p in procs:
            p.join()
    return workers * per_worker / max(elapsed)


def ensure_wkhtmltopdf() -> str | None:
    """Install Debian's wkhtmltopdf if missing; the reason when it is unavailable."""
    if shutil.which("wkhtmltopdf"):
        return None
    try:
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "wkhtmltopdf"],
            check=True, capture_output=True, timeout=600,
            env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"apt-get install wkhtmltopdf failed: {type(exc).__name__}"
    return None if shutil.which("wkhtmltopdf") else "wkhtmltopdf not on PATH after install"
