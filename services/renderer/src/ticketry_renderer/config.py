"""Renderer settings."""

from __future__ import annotations

from pydantic import Field
from ticketry.settings import CommonSettings


class RendererSettings(CommonSettings):
    # Consumer name in group ``renderers``; unique per process (the scaler sets it).
    renderer_name: str = ""
    vip_batch: int = Field(default=16, ge=1)
    # Bounded on purpose: a vip entry waits at most one standard batch
    # (32 fast-path tickets ≈ 30-60 ms).
    std_batch: int = Field(default=32, ge=1)
    # Wall-clock limit of one render; a render that exceeds it fails (and is
    # retried, then dead-lettered). Keep it well below claim_idle_ms.
    render_timeout_s: float = Field(default=10.0, gt=0)
    poll_ms: int = Field(default=1000, ge=10)
    # After a batch shorter than the lane's batch size, wait this long before the
    # next read, so a steady trickle (many small orders) arrives in batches: the
    # read, the duplicate check, the emit and the fsync are paid per batch, not
    # per ticket. An idle renderer still answers a new order at once (its read
    # blocks, then returns the first entry); a full batch never waits.
    linger_ms: int = Field(default=10, ge=0)
    # An entry idle this long in a peer's pending list is presumed abandoned and
    # claimed. Must exceed the worst-case render (bounded by render_timeout_s).
    claim_idle_ms: int = Field(default=30_000, ge=100)
    claim_interval_s: float = Field(default=1.0, gt=0)
    retry_base_s: float = Field(default=0.5, gt=0)
    retry_cap_s: float = Field(default=30.0, gt=0)
    # The PDF store down: its errors are retried (backoff up to retry_cap_s) while
    # the request is younger than this, however many attempts; then counted like
    # a render error (TICKETRY_RENDER_MAX_ATTEMPTS) and dead-lettered.
    storage_patience_s: float = Field(default=900.0, ge=0)
    drain_timeout_s: float = Field(default=20.0, gt=0)
    # A /metrics of this process's own (a Kubernetes pod); 0 = none. Under the
    # scaler's local backend the scaler serves every renderer's (see metrics.py).
    metrics_port: int = Field(default=0, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    # Recycle the process after this many tickets (0 = never); the scaler restarts it.
    max_jobs: int = Field(default=0, ge=0)
