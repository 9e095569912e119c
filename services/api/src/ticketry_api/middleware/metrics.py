"""Prometheus metrics of the api (served at ``/metrics``, see docs/contract.md "Metrics").

Orders are counted by the answer they got, in one pure-ASGI middleware around
the app, so no route carries metric code: ``POST /v1/orders`` answered 202 is
``accepted``, 409 ``sold_out`` (the event or tier has too few tickets left, or
the buyer would pass its ``max_per_buyer``), 429 ``rate_limited`` and any other
4xx ``rejected``; a 5xx is no outcome of the buyer's (it shows in
``ticketry_http_responses_total{code="5xx"}``). Its latency, whatever the
answer, goes to ``ticketry_order_seconds``. A check-in is counted by the scan's
own outcome (``ScanResult.outcome``) where the route has it.

Several api processes on one port (``TICKETRY_API_WORKERS``): the supervisor
makes a directory and sets ``PROMETHEUS_MULTIPROC_DIR`` to it for its workers
(``ticketry_api.main``), so ``prometheus_client`` in each keeps its values in
files there, and whichever worker answers a scrape sums them all
(:func:`exposition`): counters and histograms over every worker that ever
served (a replaced worker's counts stay), the gauges over live workers only.
"""

from __future__ import annotations

import glob
import hmac
import os
import re
import time
from typing import Final, get_args

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from ticketry.auth import bearer_of
from ticketry.runtime import metrics_dir
from ticketry.settings import is_loopback_host

from ticketry_api.core.checkins import Outcome

ORDER_OUTCOMES: Final = ("accepted", "sold_out", "rejected", "rate_limited")

ORDERS = Counter("ticketry_orders", "POST /v1/orders answers, by outcome", ["outcome"])
ORDER_SECONDS = Histogram(
    "ticketry_order_seconds",
    "POST /v1/orders latency, request received to response sent",
    # 50 ms is the p99 target (README, Performance); the alert rule reads the 0.05 bucket.
    buckets=(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
CHECKINS = Counter("ticketry_checkins", "Scans judged, by outcome", ["outcome"])
RESPONSES = Counter("ticketry_http_responses", "API responses, by status class (2xx…5xx)", ["code"])
# Which of the host's api processes (TICKETRY_API_WORKERS) answered a scrape
# (its own, not summed), and how many are serving (summed over live workers).
PROCESS = Info("ticketry_api_process", "The api process that answered this scrape")
PROCESSES = Gauge("ticketry_api_processes", "api processes serving this port", multiprocess_mode="livesum")

# Every series exists from the start (at 0): a rate or an increase over the
# first order then sees it rise, and a dashboard shows 0, not "no data".
for _outcome in ORDER_OUTCOMES:
    ORDERS.labels(_outcome)
for _outcome in get_args(Outcome):
    CHECKINS.labels(_outcome)
for _code in ("2xx", "3xx", "4xx", "5xx"):
    RESPONSES.labels(_code)


def mark_process() -> None:
    """Label ``ticketry_api_process_info`` with this process's pid and count
    it in ``ticketry_api_processes`` (at start-up: a worker is a process of its own)."""
    PROCESS.info({"pid": str(os.getpid())})
    PROCESSES.set(1)


_LIVE_FILE = re.compile(r"gauge_live\w+_(\d+)\.db$")


def _forget_dead(path: str) -> None:
    """Drop the live-gauge files of workers that exited (their counters stay)."""
    for name in glob.glob(os.path.join(path, "gauge_live*_*.db")):
        found = _LIVE_FILE.search(name)
        if found is None:
            continue
        pid = int(found.group(1))
        if pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


def exposition() -> bytes:
    """What ``/metrics`` answers: this process's registry, or, with several
    workers, every worker's values summed plus which process answered."""
    path = metrics_dir()
    if path is None:
        return generate_latest(REGISTRY)
    _forget_dead(path)
    summed = CollectorRegistry()
    MultiProcessCollector(summed, path)  # type: ignore[no-untyped-call]
    summed.register(PROCESS)
    return generate_latest(summed)


def order_outcome(status: int) -> str | None:
    """The outcome of an order answered with ``status`` (None for no outcome: 5xx)."""
    if status < 300:
        return "accepted"
    if status == 409:
        return "sold_out"
    if status == 429:
        return "rate_limited"
    if 400 <= status < 500:
        return "rejected"
    return None


class RequestMetrics:
    """Counts every HTTP response by status class, and ``POST /v1/orders`` by
    outcome with its latency."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        order = scope["method"] == "POST" and scope["path"] == "/v1/orders"
        t0 = time.perf_counter()
        status = 500  # an exception that escapes becomes Starlette's 500

        async def observed(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = int(msg["status"])
            await send(msg)

        try:
            await self.app(scope, receive, observed)
        finally:
            RESPONSES.labels(f"{min(max(status // 100, 2), 5)}xx").inc()
            if order:
                ORDER_SECONDS.observe(time.perf_counter() - t0)
                outcome = order_outcome(status)
                if outcome is not None:
                    ORDERS.labels(outcome).inc()


def scrape_refusal(token: str | None, authorization: str | None, peer: str | None) -> int | None:
    """Who may read ``/metrics``: with a token set, only a caller bearing it
    (401 otherwise, whoever it is); without one, loopback peers only (403),
    the local Prometheus of a single host. None: allowed. The series tell
    order and check-in volumes and failures: nothing for the open internet."""
    if token:
        offered = bearer_of(authorization) or ""
        return None if hmac.compare_digest(offered.encode(), token.encode()) else 401
    return None if peer is not None and is_loopback_host(peer) else 403
