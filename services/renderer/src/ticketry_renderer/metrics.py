"""Prometheus metrics of the renderer."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

RENDERED = Counter("ticketry_renderer_rendered_total", "Tickets rendered")
RETRIES = Counter("ticketry_renderer_retries_total", "Render attempts that failed")
DEAD_LETTERS = Counter("ticketry_renderer_dead_letters_total", "Requests dead-lettered")
SKIPPED = Counter("ticketry_renderer_skipped_total", "Requests of cancelled orders acked without rendering")
CLAIMED = Counter("ticketry_renderer_claimed_total", "Entries claimed from dead peers")
BATCH_SECONDS = Histogram(
    "ticketry_renderer_batch_seconds", "Time to handle one batch",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)  # fmt: skip
