"""Webhook settings (environment, prefix ``TICKETRY_WEBHOOKS_``)."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class WebhookSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKETRY_WEBHOOKS_", extra="ignore")

    # Turning them off everywhere for good means ``XGROUP DESTROY
    # ticketry:ticket-events webhooks``, or the group holds the stream's trimming back.
    enabled: bool = Field(
        default=True,
        description="this api process runs the webhook dispatcher and sender (every api does; they share the "
        "work through consumer groups)",
    )
    allow_private: bool = Field(
        default=False,
        description="endpoints on loopback, private, link-local and other non-global addresses are allowed "
        "(tests, a shop on the same network); off: refused (SSRF)",
    )
    max_attempts: int = Field(
        default=8, ge=1, le=50, json_schema_extra={"unit": "attempts"},
        description="deliveries of one message to one endpoint before it is dead-lettered",
    )  # fmt: skip
    backoff_base_s: float = Field(
        default=10.0, gt=0, description="the first retry's delay; each further one doubles it (jittered)"
    )
    backoff_cap_s: float = Field(default=3600.0, gt=0, description="the longest delay between two attempts")
    timeout_s: float = Field(
        default=10.0, gt=0, le=120, description="one attempt's whole budget: connect, send, read the status line"
    )
    concurrency: int = Field(
        default=32, ge=1, le=1000, json_schema_extra={"unit": "attempts"},
        description="attempts in flight at once in one api process",
    )  # fmt: skip
    claim_idle_ms: int = Field(
        default=60_000, ge=1000,
        description="a delivery pending this long under another consumer (a killed api) is taken over "
        "(at least twice TICKETRY_WEBHOOKS_TIMEOUT_S)",
    )  # fmt: skip
    max_endpoints_per_event: int = Field(
        default=10, ge=1, le=100, json_schema_extra={"unit": "endpoints"},
        description="webhook endpoints one event may have, else 409",
    )  # fmt: skip
    proxy: str | None = Field(
        default=None,
        description="an egress proxy for every attempt (`http://proxy:3128`); none: direct. "
        "The process environment's HTTP(S)_PROXY is not used",
    )

    @model_validator(mode="after")
    def _claim_after_timeout(self) -> WebhookSettings:
        # A live attempt must never look abandoned (it would be sent twice at once).
        if self.claim_idle_ms < self.timeout_s * 2000:
            raise ValueError("TICKETRY_WEBHOOKS_CLAIM_IDLE_MS must be at least twice the attempt timeout")
        return self
