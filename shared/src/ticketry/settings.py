"""Settings shared by every service (environment, prefix ``TICKETRY_``).

Each service's ``config.py`` subclasses :class:`CommonSettings` and adds its own
fields, so one environment configures the whole stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from ticketry.auth import ConfigurationError, JwtSettings, is_loopback_url
from ticketry.ids import MAX_TICKETS_PER_ORDER
from ticketry.redis_ha import DEFAULT_MASTER, RedisTarget, parse_sentinels

__all__ = ["DEV_JWT_SECRET", "CommonSettings", "ConfigurationError", "ServingSettings", "is_loopback_host"]


class CommonSettings(JwtSettings):
    """Connection, auth and storage settings every service reads (the JWT
    fields come from :class:`ticketry.auth.JwtSettings`)."""

    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_sentinels: str = Field(
        default="",
        description="`host:port,host:port,…` of Redis Sentinels that name the Redis primary (Redis's own failover); "
        "empty: the one Redis at TICKETRY_REDIS_URL. Either way the URL's database and password apply",
    )
    redis_sentinel_master: str = Field(
        default=DEFAULT_MASTER, min_length=1,
        description="the name the sentinels monitor the primary under (`sentinel monitor <name> …`)",
    )  # fmt: skip
    mongo_url: str = "mongodb://127.0.0.1:27017/ticketry"
    mongo_pool: int = Field(default=16, ge=1)
    dev_mode: bool = False
    storage_backend: Literal["local", "s3"] = Field(
        default="local",
        description="where PDFs are kept (ticketry.storage): `local` files under TICKETRY_STORAGE_DIR, or `s3`: "
        "objects `<order id>/<ticket id>.pdf` in TICKETRY_S3_BUCKET of an S3-compatible store",
    )
    storage_dir: Path = Path(".data/tickets")
    s3_endpoint_url: str | None = Field(default=None, description="the S3-compatible store; none: AWS S3")
    s3_public_endpoint_url: str | None = Field(
        default=None, description="where buyers reach the store, if not at TICKETRY_S3_ENDPOINT_URL (presigned links)"
    )
    s3_bucket: str = Field(default="ticketry-pdfs", min_length=3, description="created at first use when missing")
    s3_region: str = "us-east-1"
    s3_access_key_id: SecretStr | None = Field(default=None, description="none: botocore's credential chain")
    s3_secret_access_key: SecretStr | None = None
    s3_presign_ttl_s: int = Field(
        default=300, ge=1, le=7 * 24 * 3600, description="lifetime of a presigned download link (the api redirects)"
    )
    pdf_retention_days: float = Field(
        default=0.0, ge=0,
        description="the api deletes the PDFs of events that started more than this many days ago (0: keep)",
    )  # fmt: skip
    pdf_retention_interval_s: float = Field(
        default=3600.0, gt=0, description="how often the api's retention sweep runs"
    )
    keys_dir: Path = Path(".data/keys")
    log_level: str = "INFO"
    # Read from the environment before the settings (so a refused start logs in it too).
    log_format: Literal["json", "console"] = Field(
        default="json", description="`json`: one JSON object per line; `console`: one readable line, for people"
    )
    # Finished trace spans as JSON lines (see ticketry.tracing); OTLP via OTEL_* vars.
    trace_file: Path | None = None
    render_max_attempts: int = Field(default=5, ge=1)
    max_tickets_per_order: int = Field(default=10_000, ge=1, le=MAX_TICKETS_PER_ORDER)

    @field_validator(
        "s3_endpoint_url", "s3_public_endpoint_url", "s3_access_key_id", "s3_secret_access_key", mode="before"
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """``VAR=`` (compose's ``${VAR:-}``) means not set."""
        return None if value == "" else value

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinel_addresses(cls, value: str) -> str:
        parse_sentinels(value)  # a list that is no list of addresses is refused at start
        return value

    @property
    def redis_target(self) -> RedisTarget:
        """Where this service's Redis is (``ticketry.db.connect_redis`` takes it)."""
        return RedisTarget(self.redis_url, parse_sentinels(self.redis_sentinels), self.redis_sentinel_master)

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
