"""Settings shared by every service (environment, prefix ``TICKETRY_``).

Each service's ``config.py`` subclasses :class:`CommonSettings` and adds its own
fields, so one environment configures the whole stack.
"""

from __future__ import annotations

import logging
import types
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ticketry.auth import ConfigurationError, JwtSettings, is_loopback_url
from ticketry.ids import MAX_TICKETS_PER_ORDER
from ticketry.redis_ha import DEFAULT_MASTER, RedisTarget, parse_sentinels

__all__ = [
    "DEV_JWT_SECRET",
    "CommonSettings",
    "ConfigurationError",
    "ServingSettings",
    "is_loopback_host",
    "load_settings",
    "refusal",
]

log = logging.getLogger(__name__)
S = TypeVar("S", bound=BaseSettings)


class CommonSettings(JwtSettings):
    """Connection, auth and storage settings every service reads (the JWT
    fields come from :class:`ticketry.auth.JwtSettings`)."""

    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="the Redis every service shares (streams, progress, limits); with TICKETRY_REDIS_SENTINELS "
        "only its database and password are used",
    )
    redis_sentinels: str = Field(
        default="",
        description="`host:port,host:port,…` of Redis Sentinels that name the Redis primary (Redis's own failover); "
        "empty: the one Redis at TICKETRY_REDIS_URL. Either way the URL's database and password apply",
    )
    redis_sentinel_master: str = Field(
        default=DEFAULT_MASTER, min_length=1,
        description="the name the sentinels monitor the primary under (`sentinel monitor <name> …`)",
    )  # fmt: skip
    mongo_url: str = Field(
        default="mongodb://127.0.0.1:27017/ticketry",
        description="the MongoDB-compatible store (FerretDB locally); its path names the database",
    )
    mongo_pool: int = Field(
        default=16, ge=1, le=1000, json_schema_extra={"unit": "connections"},
        description="connections to the store one api or notifier process keeps at most",
    )  # fmt: skip
    dev_mode: bool = Field(
        default=False,
        description="a local stack: the public dev JWT secret may serve loopback, a first code-signing key is made, "
        "ticketryctl mints tokens, public URLs may stay at their loopback defaults. Never in production",
    )
    storage_backend: Literal["local", "s3"] = Field(
        default="local",
        description="where PDFs are kept (ticketry.storage): `local` files under TICKETRY_STORAGE_DIR, or `s3`: "
        "objects `<order id>/<ticket id>.pdf` in TICKETRY_S3_BUCKET of an S3-compatible store",
    )
    storage_dir: Path = Field(
        default=Path(".data/tickets"), description="where the `local` PDF store keeps its files (made when missing)"
    )
    s3_endpoint_url: str | None = Field(default=None, description="the S3-compatible store; none: AWS S3")
    s3_public_endpoint_url: str | None = Field(
        default=None, description="where buyers reach the store, if not at TICKETRY_S3_ENDPOINT_URL (presigned links)"
    )
    s3_bucket: str = Field(default="ticketry-pdfs", min_length=3, description="created at first use when missing")
    s3_region: str = Field(default="us-east-1", description="the S3 store's region (requests are signed for it)")
    s3_access_key_id: SecretStr | None = Field(default=None, description="none: botocore's credential chain")
    s3_secret_access_key: SecretStr | None = Field(
        default=None, description="the secret of TICKETRY_S3_ACCESS_KEY_ID; none: botocore's credential chain"
    )
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
    keys_dir: Path = Field(
        default=Path(".data/keys"),
        description="the Ed25519 keys that sign ticket codes (`<kid>.pem`; `<kid>.pub` verifies only); "
        "the newest private key signs (`ticketryctl keys rotate`)",
    )
    log_level: str = Field(
        default="INFO",
        pattern=r"(?i)^\s*(debug|info|warning|error|critical)\s*$",
        description="the lowest level logged: DEBUG, INFO, WARNING, ERROR or CRITICAL (any case)",
    )
    # Read from the environment before the settings (so a refused start logs in it too).
    log_format: Literal["json", "console"] = Field(
        default="json", description="`json`: one JSON object per line; `console`: one readable line, for people"
    )
    trace_file: Path | None = Field(
        default=None,
        description="a file finished trace spans are appended to as JSON lines (ticketry.tracing); "
        "none: not written. OTLP export is set by the OTEL_* variables",
    )
    render_max_attempts: int = Field(
        default=5, ge=1, le=1_000_000, json_schema_extra={"unit": "attempts"},
        description="renders of one ticket before it is dead-lettered (the PDF store's outages count only "
        "past TICKETRY_STORAGE_PATIENCE_S)",
    )  # fmt: skip
    max_tickets_per_order: int = Field(
        default=10_000, ge=1, le=MAX_TICKETS_PER_ORDER, json_schema_extra={"unit": "tickets"},
        description="the most tickets one order may ask for; a larger order is refused (422)",
    )  # fmt: skip

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


def load_settings(cls: type[S]) -> S:
    """``cls`` read from the environment at a process's start. A value it
    refuses stops the process (exit code 1) after one ``critical`` line naming
    the variable and what it must be (``stopped: TICKETRY_STD_BATCH=-1: must be
    greater than or equal to 1``), without a traceback: the setting is wrong,
    not the code."""
    try:
        return cls()
    except ValidationError as exc:
        reason = refusal(cls, exc)
    except ConfigurationError as exc:
        reason = str(exc)
    log.critical("stopped: %s", reason)
    raise SystemExit(1) from None


def refusal(cls: type[BaseSettings], exc: ValidationError) -> str:
    """Each refused value of ``exc`` as ``VARIABLE[=value]: what it must be``,
    on one line. The value is shown only for numbers, flags and choices: a URL
    or a text may hold a password."""
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    parts = []
    for e in exc.errors(include_url=False):
        msg = e["msg"].removeprefix("Value error, ").replace("Input should be", "must be")
        if not e["loc"]:  # a check across settings: its message names them
            parts.append(msg)
            continue
        name = str(e["loc"][0])
        field = cls.model_fields.get(name)
        value = e.get("input")
        shown = field is not None and _plain(field.annotation) and isinstance(value, str | int | float)
        parts.append(f"{prefix}{name.upper()}{f'={value}' if shown else ''}: {msg}")
    return "; ".join(parts)


def _plain(annotation: Any) -> bool:
    """A number, a flag or a choice (optionally none): nothing secret in it."""
    if get_origin(annotation) in (Union, types.UnionType):
        return all(_plain(a) for a in get_args(annotation) if a is not type(None))
    return annotation in (int, float, bool) or get_origin(annotation) is Literal


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); a
    wildcard bind (``0.0.0.0``, ``::``) is not."""
    return is_loopback_url(f"http://{host}/") if ":" not in host else is_loopback_url(f"http://[{host}]/")


_SECRET_REQUIRED = "TICKETRY_JWT_SECRET is required outside dev mode (set TICKETRY_DEV_MODE=1 for a local stack)"  # noqa: S105 - a message, not a secret


# Only ever used with TICKETRY_DEV_MODE=1 and on loopback; ServingSettings refuses
# to start with it otherwise.
DEV_JWT_SECRET = "ticketry-dev-secret-not-for-production"  # noqa: S105
