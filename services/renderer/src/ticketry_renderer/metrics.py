"""Prometheus metrics of the renderer (docs/contract.md "Metrics").

Where they are served
---------------------
* Under the scaler's local backend (``just up``, the tests) renderers are
  forked processes that come and go, so none serves a port of its own: the
  scaler sets ``PROMETHEUS_MULTIPROC_DIR`` for them, ``prometheus_client``
  then keeps each process's values in a file there, and the scaler's
  ``/metrics`` sums the files (``ticketry_scaler.metrics``). A renderer that
  exited still counts: the scaler keeps its values until it exits itself.
* Anywhere else (a Kubernetes pod) ``TICKETRY_METRICS_PORT`` serves this
  process's own ``/metrics`` (see ``main``).

``lane`` is the render stream a ticket came from: ``vip`` or ``standard``
(small orders ride the vip stream whatever their tier).

Counted once per ticket
-----------------------
A ticket is rendered or failed when its final event is appended, and the emit
script (``ticketry.emit``) appends it once however often the request is
delivered, claimed or re-driven: it returns the new event's id, or nil when the
ticket already had its event or its order was cancelled. :func:`count_final`
counts the scripts of one executed batch that returned an id, so the sum over
every renderer is the number of tickets, never the number of renders.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Final

from prometheus_client import Counter, Histogram
from ticketry import emit, streams

LANES: Final = {streams.RENDER_VIP: "vip", streams.RENDER_STD: "standard"}

TICKETS_RENDERED = Counter("ticketry_tickets_rendered", "Tickets rendered (once per ticket)", ["lane"])
TICKETS_FAILED = Counter("ticketry_tickets_failed", "Tickets failed for good (once per ticket)", ["lane"])
RENDER_SECONDS = Histogram(
    "ticketry_render_seconds",
    "One render attempt (fast path or WeasyPrint), failed and timed-out ones included",
    ["lane"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
RENDERED = Counter("ticketry_renderer_rendered", "Renders performed (a render repeated after a crash counts again)")
RETRIES = Counter("ticketry_renderer_retries", "Render attempts that failed")
DEAD_LETTERS = Counter("ticketry_renderer_dead_letters", "Requests dead-lettered")
SKIPPED = Counter("ticketry_renderer_skipped", "Requests of cancelled orders acked without rendering")
CLAIMED = Counter("ticketry_renderer_claimed", "Entries claimed from dead peers")
BATCH_SECONDS = Histogram(
    "ticketry_renderer_batch_seconds", "Time to handle one batch",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)  # fmt: skip

# Both lanes' series exist from the start (at 0), so a rate or an increase over
# the first order sees it rise and a dashboard shows 0, not "no data".
for _lane in LANES.values():
    TICKETS_RENDERED.labels(_lane)
    TICKETS_FAILED.labels(_lane)
    RENDER_SECONDS.labels(_lane)


def lane_of(stream: str) -> str:
    """The ``lane`` label of a render stream."""
    return LANES.get(stream, "other")


def render_timer(stream: str) -> AbstractContextManager[Any]:
    """Times the block into ``ticketry_render_seconds`` of ``stream``'s lane."""
    return RENDER_SECONDS.labels(lane_of(stream)).time()


def count_final(stream: str, commands: Sequence[tuple[Sequence[Any], Any]], results: Sequence[Any]) -> None:
    """Count the tickets whose final event this batch appended.

    ``commands`` is the batch pipeline's command stack as it was executed,
    ``results`` what ``execute()`` returned for it, one per command
    (:func:`ticketry.emit.emitted` reads each)."""
    outcomes = [emit.emitted(args, result) for (args, _options), result in zip(commands, results, strict=False)]
    lane = lane_of(stream)
    if rendered := outcomes.count("rendered"):
        TICKETS_RENDERED.labels(lane).inc(rendered)
    if failed := outcomes.count("failed"):
        TICKETS_FAILED.labels(lane).inc(failed)
