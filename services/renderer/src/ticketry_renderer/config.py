"""Renderer settings."""

from __future__ import annotations

from pydantic import Field
from ticketry.settings import CommonSettings


class RendererSettings(CommonSettings):
    renderer_name: str = Field(
        default="",
        description="this process's consumer name in the group `renderers`, unique per process (the scaler "
        "sets it); empty: `<host>-<pid>`",
    )
    vip_batch: int = Field(
        default=16, ge=1, le=10_000, json_schema_extra={"unit": "tickets"},
        description="render requests read at once from the vip lane",
    )  # fmt: skip
    # Bounded on purpose: a vip entry waits at most one standard batch
    # (128 fast-path tickets ≈ 80-150 ms). Each batch pays a read, the duplicate
    # and cancel checks, one syncfs and one MULTI: 128 rendered 1.14x the
    # tickets/s of 32 (docs/decisions.md).
    std_batch: int = Field(
        default=128, ge=1, le=10_000, json_schema_extra={"unit": "tickets"},
        description="render requests read at once from the standard lane (a vip one waits at most one such batch)",
    )  # fmt: skip
    render_timeout_s: float = Field(
        default=10.0, gt=0,
        description="one render's wall-clock limit; past it the render fails (retried, then dead-lettered). "
        "Keep it well below TICKETRY_CLAIM_IDLE_MS",
    )  # fmt: skip
    poll_ms: int = Field(
        default=1000, ge=10, le=60_000, description="how long one read of an empty lane blocks (XREADGROUP BLOCK)"
    )
    # The read, the duplicate check, the emit and the fsync are then paid per
    # batch, not per ticket. An idle renderer still answers a new order at once
    # (its read blocks, then returns the first entry); a full batch never waits.
    linger_ms: int = Field(
        default=10, ge=0, le=10_000,
        description="after a batch shorter than the lane's batch size, the wait before the next read, so a "
        "steady trickle of small orders arrives in batches",
    )  # fmt: skip
    claim_idle_ms: int = Field(
        default=30_000, ge=100,
        description="a render request idle this long in a peer's pending list is presumed abandoned and claimed; "
        "must exceed the worst render (TICKETRY_RENDER_TIMEOUT_S)",
    )  # fmt: skip
    claim_interval_s: float = Field(
        default=1.0, gt=0, description="how often the claim loop takes due retries and abandoned requests"
    )
    retry_base_s: float = Field(
        default=0.5, gt=0, description="a failed render's first retry delay; each further one doubles it (jittered)"
    )
    retry_cap_s: float = Field(default=30.0, gt=0, description="the longest delay before a failed render's retry")
    storage_patience_s: float = Field(
        default=900.0, ge=0,
        description="while a request is younger than this, the PDF store's errors are retried however many times; "
        "then they count like a render error (TICKETRY_RENDER_MAX_ATTEMPTS)",
    )  # fmt: skip
    drain_timeout_s: float = Field(
        default=20.0, gt=0,
        description="at SIGTERM, how long the renderer may take to finish its work in hand before it exits anyway",
    )  # fmt: skip
    # Under the scaler's local backend the scaler serves every renderer's (see metrics.py).
    metrics_port: int = Field(
        default=0, ge=0, le=65535, description="a /metrics of this process's own (a Kubernetes pod); 0: none"
    )
    metrics_host: str = Field(default="127.0.0.1", description="the address of that /metrics")
    # Measured at 0 and 10 on 2 shared cores (docs/decisions.md): a nicer
    # renderer did not lower POST p99, so by default every process is equal.
    renderer_nice: int = Field(
        default=0, ge=0, le=19, json_schema_extra={"unit": "nice"},
        description="the renderer's CPU niceness (`setpriority`): above 0, on cores it shares with the api, the "
        "store and Redis, those go first and renders take what is left; 0: the same priority as every other process",
    )  # fmt: skip
    max_jobs: int = Field(
        default=0, ge=0, json_schema_extra={"unit": "tickets"},
        description="the process exits after rendering this many (the scaler starts a fresh one); 0: never",
    )  # fmt: skip
