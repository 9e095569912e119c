"""Settings shared by every service (environment, prefix ``TICKETRY_``).

Each service's ``config.py`` subclasses :class:`CommonSettings` and adds its own
fields, so one environment configures the whole stack.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from ticketry.auth import JwtSettings
from ticketry.ids import MAX_TICKETS_PER_ORDER


class ConfigurationError(RuntimeError):
    """The environment does not describe a runnable service."""


class CommonSettings(JwtSettings):
    """Connection, auth and storage settings every service reads (the JWT
    fields come from :class:`ticketry.auth.JwtSettings`)."""

    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    mongo_url: str = "mongodb://127.0.0.1:27017/ticketry"
    mongo_pool: int = Field(default=16, ge=1)
    dev_mode: bool = False
    storage_dir: Path = Path(".data/tickets")
    keys_dir: Path = Path(".data/keys")
    log_level: str = "INFO"
    # Finished trace spans as JSON lines (see ticketry.tracing); OTLP via OTEL_* vars.
    trace_file: Path | None = None
    render_max_attempts: int = Field(default=5, ge=1)
    max_tickets_per_order: int = Field(default=10_000, ge=1, le=MAX_TICKETS_PER_ORDER)

    @model_validator(mode="after")
    def _secret_outside_dev(self) -> CommonSettings:
        if self.jwt_secret is None and not self.dev_mode:
            raise ConfigurationError(
                "TICKETRY_JWT_SECRET is required outside dev mode (set TICKETRY_DEV_MODE=1 for a local stack)"
            )
        return self

    @property
    def jwt_key(self) -> str:
        """The HS256 secret; dev mode falls back to a fixed, clearly-not-secret value."""
        if self.jwt_secret is not None:
            return self.jwt_secret.get_secret_value()
        return DEV_JWT_SECRET


# Only ever used with TICKETRY_DEV_MODE=1; the validator refuses to start without a
# real secret otherwise.
DEV_JWT_SECRET = "ticketry-dev-secret-not-for-production"  # noqa: S105
