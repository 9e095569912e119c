"""Webhook settings (environment, prefix ``TICKETRY_WEBHOOKS_``)."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class WebhookSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKETRY_WEBHOOKS_", extra="ignore")

    # Run the dispatcher and sender in this api process. Every api runs them
    # (they share the work through consumer groups); turning them off everywhere
    # for good means ``XGROUP DESTROY ticketry:ticket-events webhooks``, or the
    # group holds the stream's trimming back.
    enabled: bool = True
    # Endpoints on loopback, private, link-local and other non-global addresses
    # are refused (SSRF) unless this is set (tests, a shop on the same network).
    allow_private: bool = False
    max_attempts: int = Field(default=8, ge=1, le=50)
    backoff_base_s: float = Field(default=10.0, gt=0)
    backoff_cap_s: float = Field(default=3600.0, gt=0)
    # One attempt's whole budget (connect, send, the status line).
    timeout_s: float = Field(default=10.0, gt=0, le=120)
    # Attempts in flight per api process.
    concurrency: int = Field(default=32, ge=1, le=1000)
    # A delivery pending this long under another consumer (a killed api) is taken over.
    claim_idle_ms: int = Field(default=60_000, ge=1000)
    max_endpoints_per_event: int = Field(default=10, ge=1, le=100)
    # An egress proxy for every attempt (``http://proxy:3128``); none: direct.
    # The process environment's HTTP(S)_PROXY is not used.
    proxy: str | None = None

    @model_validator(mode="after")
    def _claim_after_timeout(self) -> WebhookSettings:
        # A live attempt must never look abandoned (it would be sent twice at once).
        if self.claim_idle_ms < self.timeout_s * 2000:
            raise ValueError("TICKETRY_WEBHOOKS_CLAIM_IDLE_MS must be at least twice the attempt timeout")
        return self
