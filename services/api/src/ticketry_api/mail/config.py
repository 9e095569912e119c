"""Mail settings (environment, prefix ``TICKETRY_``): where and how the
tickets of an order with an ``email`` are mailed (docs/email.md)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ticketry_api.core.emails import check_email


@dataclass(frozen=True)
class SmtpServer:
    """An ``smtp://`` (STARTTLS when offered) or ``smtps://`` (TLS) URL, taken apart."""

    host: str
    port: int
    tls: bool
    username: str | None
    password: str | None


class MailSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    # Turning mail off for good means ``XGROUP DESTROY ticketry:ticket-events
    # mailer``, or the group holds the stream's trimming back.
    smtp_url: str | None = Field(
        default=None, pattern=r"^smtps?://([^@/\s]+@)?[^:/@\s]+(:[0-9]{1,5})?/?$",
        description="the SMTP server the tickets are mailed through (`smtp://host:port`, `smtps://` for TLS, "
        "`user:password@` for AUTH); none: nothing is mailed",
    )  # fmt: skip
    mail_from: str = Field(
        default="tickets@ticketry.localhost", max_length=254,
        description="the sender address of the mails (envelope and From:), also the domain of their Message-ID",
    )  # fmt: skip
    mail_max_attachment_bytes: int = Field(
        default=5_000_000, ge=0, le=50_000_000,
        description="an order's tickets are attached (one PDF, plus wallet passes) while they total at most this; "
        "past it the mail links to the buyer's page instead",
    )  # fmt: skip
    mail_max_attempts: int = Field(
        default=8, ge=1, le=50, json_schema_extra={"unit": "attempts"},
        description="tries to mail one order (a 4xx, a timeout, a lost connection are retried) before it is "
        "dead-lettered; a 5xx is dead-lettered at once",
    )  # fmt: skip
    mail_backoff_base_s: float = Field(
        default=30.0, gt=0, le=3600, description="the first retry's delay; each further one doubles it (jittered)"
    )
    mail_backoff_cap_s: float = Field(
        default=3600.0, gt=0, le=86_400, description="the longest delay between two tries of one mail"
    )
    mail_timeout_s: float = Field(
        default=30.0, gt=0, le=300, description="one try's whole budget: connect, the SMTP dialogue and the DATA"
    )
    mail_concurrency: int = Field(
        default=8, ge=1, le=200, json_schema_extra={"unit": "mails"},
        description="mails in flight at once in one api process",
    )  # fmt: skip
    mail_claim_idle_ms: int = Field(
        default=60_000, ge=1000, le=3_600_000,
        description="completed orders a killed api was mailing are taken over by another after this, and a "
        "retry a killed api had leased is tried again after this (at least twice TICKETRY_MAIL_TIMEOUT_S)",
    )  # fmt: skip

    @model_validator(mode="after")
    def _checked(self) -> MailSettings:
        check_email(self.mail_from)
        # A live try must never look abandoned (it would be sent twice at once).
        if self.mail_claim_idle_ms < self.mail_timeout_s * 2000:
            raise ValueError("TICKETRY_MAIL_CLAIM_IDLE_MS must be at least twice TICKETRY_MAIL_TIMEOUT_S")
        return self

    def server(self) -> SmtpServer | None:
        """The SMTP server, or None when mail is off."""
        if self.smtp_url is None:
            return None
        u = urlsplit(self.smtp_url)
        tls = u.scheme == "smtps"
        return SmtpServer(
            host=u.hostname or "", port=u.port or (465 if tls else 25), tls=tls,
            username=unquote(u.username) if u.username else None,
            password=unquote(u.password) if u.password else None,
        )  # fmt: skip
