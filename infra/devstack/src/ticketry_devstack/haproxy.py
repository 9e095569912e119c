"""HAProxy in front of the api: its configuration, rendered from
``infra/haproxy/haproxy.cfg.tmpl``, and its process.

One ``server`` line per api address, so the same file grows to several api
processes; with ``notifiers``, progress WebSockets (``/v1/orders/{id}/progress``)
go to those, health-checked the same way (``just up --ha``); an optional stats
page (``stats_port`` on ``stats_host``, ``;csv`` for machines).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import string
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ticketry_devstack.procs import REPO, Proc, Stack, wait_port

HAPROXY_DIR = REPO / "infra" / "haproxy"


@dataclass(frozen=True)
class LbSettings:
    """What the template leaves open."""

    port: int  # where clients reach it, on ``host``
    apis: Sequence[str]  # each api's ``host:port``
    host: str = "127.0.0.1"
    # Requests one api has at once (HAProxy's server maxconn): 1.5 times the
    # api's TICKETRY_MAX_INFLIGHT_ORDERS (32), so at most 16 wait in the api's
    # own queue and it has the next order at hand while others wait on Redis
    # and the store (bench/flood.py: 0.85-0.95 of the paced rate at 32, 1.00 at 48).
    maxconn: int = 48
    # Orders waiting in HAProxy's line before the next is refused (503).
    max_queued: int = 64
    queue_s: float = 2.0  # longest wait in the line, seconds
    tarpit_ms: int = 50  # pause before a refused order's 503, ms: ≤ 100 keeps the 503s fast
    threads: int = 1
    stats_port: int | None = None  # the stats page (``/``)
    stats_host: str = "127.0.0.1"
    # Each notifier's ``host:port``: none, the notifier is reached directly.
    notifiers: Sequence[str] = ()


# HAProxy refuses a stats socket path longer than this (a unix socket's sun_path, less its own suffix).
SOCKET_PATH_MAX = 97


def stats_socket(run_dir: Path) -> Path:
    """Where HAProxy's runtime socket lives: in ``run_dir``, or, where that path
    is too long for a unix socket (deep test folders), in the temp folder under
    a name derived from ``run_dir`` (the same folder always gets the same one)."""
    path = run_dir / "haproxy.sock"
    if len(str(path)) <= SOCKET_PATH_MAX:
        return path
    digest = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"ticketry-lb-{digest}.sock"


def render(cfg: LbSettings, run_dir: Path) -> str:
    """The configuration text for ``cfg``; its runtime socket lives in ``run_dir``."""
    servers = "\n".join(f"    server api-{i} {addr}" for i, addr in enumerate(cfg.apis))
    stats = (
        ""
        if cfg.stats_port is None
        else f"listen stats\n    bind {cfg.stats_host}:{cfg.stats_port}\n    stats enable\n    stats uri /\n"
        "    stats refresh 5s\n"
    )
    routes = backends = ""
    if cfg.notifiers:
        routes = (
            "    # A progress WebSocket goes to a notifier (HAProxy carries the upgrade).\n"
            "    acl progress path_reg ^/v1/orders/[^/]+/progress$\n"
            "    use_backend notifier if progress\n"
        )
        backends = (
            "backend notifier\n"
            "    balance leastconn\n"
            "    option httpchk GET /readyz\n"
            "    http-check expect status 200\n"
            "    # No maxconn: a socket is held for an order's whole rendering.\n"
            "    default-server check inter 2s fall 3 rise 1 observe layer4 error-limit 3 on-error mark-down\n"
            + "\n".join(f"    server notifier-{i} {addr}" for i, addr in enumerate(cfg.notifiers))
            + "\n"
        )
    template = string.Template((HAPROXY_DIR / "haproxy.cfg.tmpl").read_text())
    return template.substitute(
        threads=cfg.threads,
        stats_socket=stats_socket(run_dir),
        queue_s=f"{cfg.queue_s:g}",
        tarpit_ms=cfg.tarpit_ms,
        errors=HAPROXY_DIR / "errors",
        bind=f"{cfg.host}:{cfg.port}",
        max_queued=cfg.max_queued,
        maxconn=cfg.maxconn,
        servers=servers,
        routes=routes,
        backends=backends,
        stats=stats,
    )


def haproxy_binary() -> str | None:
    return shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if Path(p).exists()), None)


def haproxy_proc(run_dir: Path, cfg: LbSettings) -> Proc:
    """HAProxy in the foreground (``-db``) with ``cfg`` written to ``run_dir``."""
    binary = haproxy_binary()
    if binary is None:
        raise FileNotFoundError("haproxy not installed; run infra/bootstrap.sh")
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "haproxy.cfg"
    path.write_text(render(cfg, run_dir))
    return Proc("haproxy", [binary, "-db", "-f", str(path)], dict(os.environ), run_dir / "haproxy.log")


def stats_csv(text: str) -> list[dict[str, str]]:
    """The rows of HAProxy's stats CSV (``<stats page>/;csv``), by column name
    (``pxname``, ``svname``, ``status``, ``stot`` (sessions in all), …)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise ValueError("not HAProxy's stats CSV")
    header = lines[0][2:].split(",")
    return [dict(zip(header, line.split(","), strict=False)) for line in lines[1:]]


def start_lb(stack: Stack, cfg: LbSettings, run_dir: Path | None = None) -> Proc:
    """HAProxy for ``cfg`` as ``stack``'s process "haproxy" (stopped first by
    ``stack.stop()``), once it listens."""
    proc = stack.procs["haproxy"] = haproxy_proc(run_dir or stack.data_dir / "haproxy", cfg).start()
    wait_port(cfg.port, 30, proc.popen)
    return proc
