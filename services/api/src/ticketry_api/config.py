"""API settings."""

from __future__ import annotations

from pydantic import Field
from ticketry.settings import CommonSettings


class ApiSettings(CommonSettings):
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    # Where buyers reach the notifier; used to build each order's progress_url.
    notifier_public_url: str = "ws://127.0.0.1:8001"
    # Orders not enqueued after this long are re-enqueued by the outbox sweep.
    outbox_grace_s: float = Field(default=10.0, gt=0)
    outbox_interval_s: float = Field(default=5.0, gt=0)
    projector_batch: int = Field(default=500, ge=1)
    run_projector: bool = True
    # Room for one name per ticket (`holders`) of a big order.
    max_body_bytes: int = 2 * 1024 * 1024
