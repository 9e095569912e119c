"""Settings shared by every service (environment, prefix ``TICKETRY_``).

Each service's ``config.py`` subclasses :class:`CommonSettings` and adds its own
fields, so one environment configures the whole stack.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from ticketry.auth import ConfigurationError, JwtSettings, is_loopback_url
from ticketry.ids import MAX_TICKETS_PER_ORDER

__all__ = ["DEV_JWT_SECRET", "CommonSettings", "ConfigurationError", "ServingSettings", "is_loopback_host"]


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

    @property
    def jwt_key(self) -> str:
        """The HS256 secret; dev mode falls back to a fixed, clearly-not-secret value."""
        if self.jwt_secret is not None:
            return self.jwt_secret.get_secret_value()
        if not self.dev_mode:
            raise ConfigurationError(_SECRET_REQUIRED)
        return DEV_JWT_SECRET


class ServingSettings(CommonSettings):
    """Settings of a service that verifies tokens on a listening socket (the api
    and the notifier): only these need ``TICKETRY_JWT_SECRET``; renderers and
    the scaler start without it.

    At start: the secret is required outside dev mode, and the dev secret (the
    built-in one, or the same value set by hand) never serves anything but a
    loopback address, dev mode or not — it is in this repository for all to
    read. (Its length and the JWKS URL are checked by ``JwtSettings``.)"""

    @property
    def bind_host(self) -> str:
        """The address this service listens on (each service names its own setting)."""
        return "127.0.0.1"

    @model_validator(mode="after")
    def _secret_fit_to_serve(self) -> ServingSettings:
        if self.jwt_secret is None and not self.dev_mode:
            raise ConfigurationError(_SECRET_REQUIRED)
        if self.jwt_key == DEV_JWT_SECRET:
            if not self.dev_mode:
                raise ConfigurationError("TICKETRY_JWT_SECRET is the public dev secret; set a secret of your own")
            if not is_loopback_host(self.bind_host):
                raise ConfigurationError(
                    f"the dev secret serves loopback only, not {self.bind_host!r}: set TICKETRY_JWT_SECRET "
                    "(openssl rand -hex 32) to listen on other addresses"
                )
        return self


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); a
    wildcard bind (``0.0.0.0``, ``::``) is not."""
    return is_loopback_url(f"http://{host}/") if ":" not in host else is_loopback_url(f"http://[{host}]/")


_SECRET_REQUIRED = "TICKETRY_JWT_SECRET is required outside dev mode (set TICKETRY_DEV_MODE=1 for a local stack)"  # noqa: S105 - a message, not a secret


# Only ever used with TICKETRY_DEV_MODE=1 and on loopback; ServingSettings refuses
# to start with it otherwise.
DEV_JWT_SECRET = "ticketry-dev-secret-not-for-production"  # noqa: S105
