"""Wallet settings (environment, prefix ``TICKETRY_WALLET_``): the Apple
pass-type certificate and the Google Wallet issuer (docs/wallet.md). Either
half may be left unset: its passes or links are then not offered."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

APPLE = ("apple_certificate", "apple_key", "apple_wwdr", "apple_pass_type_id", "apple_team_id")
GOOGLE = ("google_issuer_id", "google_service_account_email", "google_key")


class WalletSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKETRY_WALLET_", extra="ignore")

    apple_certificate: Path | None = Field(
        default=None, description="PEM file of the Apple pass-type certificate that signs passes; "
        "none: no Apple Wallet passes (GET /v1/tickets/{id}/pkpass answers 503)",
    )  # fmt: skip
    apple_key: Path | None = Field(
        default=None, description="PEM file (PKCS#8 or traditional, unencrypted) of that certificate's private key"
    )
    apple_wwdr: Path | None = Field(
        default=None, description="PEM file of Apple's WWDR intermediate certificate that issued the pass-type "
        "certificate; every signature carries it",
    )  # fmt: skip
    apple_pass_type_id: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^pass\.[A-Za-z0-9.-]+$",
        description="the pass type identifier of the certificate (pass.com.example.tickets)",
    )  # fmt: skip
    apple_team_id: str | None = Field(
        default=None, min_length=1, max_length=32, pattern=r"^[A-Z0-9]+$",
        description="the Apple developer team identifier the pass type belongs to",
    )  # fmt: skip
    organization_name: str = Field(
        default="Ticketry", min_length=1, max_length=64,
        description="the issuer's name a wallet shows on the pass (Apple organizationName, Google issuerName)",
    )  # fmt: skip
    google_issuer_id: str | None = Field(
        default=None, pattern=r"^[0-9]{1,32}$",
        description="the Google Wallet issuer id (a number); none: no Save to Google Wallet links",
    )  # fmt: skip
    google_service_account_email: str | None = Field(
        default=None, max_length=254, pattern=r"^[^@\s]+@[^@\s]+$",
        description="the Google service account that signs the links (the JWT's iss)",
    )  # fmt: skip
    google_key: Path | None = Field(
        default=None, description="PEM file of that service account's RSA private key (its JSON key's private_key)"
    )

    @model_validator(mode="after")
    def _whole_halves(self) -> WalletSettings:
        # Half a configuration would answer 500 on the first pass; say so at start-up instead.
        for half, names in (("Apple", APPLE), ("Google", GOOGLE)):
            given = [n for n in names if getattr(self, n) is not None]
            if given and len(given) != len(names):
                missing = ", ".join(f"TICKETRY_WALLET_{n.upper()}" for n in names if n not in given)
                raise ValueError(f"{half} Wallet is half configured: set {missing} too (or none of them)")
        return self

    @property
    def apple(self) -> bool:
        return self.apple_certificate is not None

    @property
    def google(self) -> bool:
        return self.google_issuer_id is not None
