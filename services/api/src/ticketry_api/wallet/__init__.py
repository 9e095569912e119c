"""Wallet passes of rendered tickets (docs/wallet.md): the credentials loaded
once at start-up (a bad file fails the start, not the first pass), a ticket
made into what a wallet shows, and its Apple pass built on first request and
kept beside its PDF in the PDF store, noting the ticket version it was built
from (a re-issued ticket's kept pass is stale, and built again). The passes themselves are built by the
pure ``core.pkpass`` and ``core.google_wallet``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from ticketry.codes import Keyring
from ticketry.documents import Event
from ticketry.storage import PdfStore

from ticketry_api.adapters.readmodel import TicketOf
from ticketry_api.core.google_wallet import GoogleIssuer
from ticketry_api.core.pkpass import PassIssuer, build_pkpass, pass_version
from ticketry_api.core.problem import Problem
from ticketry_api.core.wallet import WalletTicket
from ticketry_api.wallet.config import WalletSettings

__all__ = ["Wallet", "WalletSettings"]


def _private_key(pem: bytes, what: str) -> rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise ValueError(f"{what}: an RSA or EC private key is needed")
    return key


@dataclass(frozen=True)
class Wallet:
    """The issuers this api signs passes and links as (None: not configured)."""

    apple: PassIssuer | None = None
    google: GoogleIssuer | None = None

    @classmethod
    def from_settings(cls, s: WalletSettings) -> Wallet:
        """Load the files the settings name (raises on a missing or bad one)."""
        apple = google = None
        if s.apple_certificate and s.apple_key and s.apple_wwdr and s.apple_pass_type_id and s.apple_team_id:
            apple = PassIssuer(
                pass_type_id=s.apple_pass_type_id, team_id=s.apple_team_id, organization_name=s.organization_name,
                certificate=x509.load_pem_x509_certificate(s.apple_certificate.read_bytes()),
                key=_private_key(s.apple_key.read_bytes(), "TICKETRY_WALLET_APPLE_KEY"),
                intermediates=tuple(x509.load_pem_x509_certificates(s.apple_wwdr.read_bytes())),
            )  # fmt: skip
        if s.google_issuer_id and s.google_service_account_email and s.google_key:
            key = _private_key(s.google_key.read_bytes(), "TICKETRY_WALLET_GOOGLE_KEY")
            if not isinstance(key, rsa.RSAPrivateKey):
                raise ValueError("TICKETRY_WALLET_GOOGLE_KEY: Google signs links with RS256, an RSA key")
            google = GoogleIssuer(s.google_issuer_id, s.google_service_account_email, key, s.organization_name)
        return cls(apple, google)


def wallet_ticket(t: TicketOf, event: Event, keyring: Keyring) -> WalletTicket:
    """``t`` as a wallet shows it, with the code its PDF's QR holds: signed
    again with the key its order was issued under (the same string)."""
    tier = event.tier(t.tier)
    try:
        code = keyring.sign(t.id, t.event_id, t.tier, kid=t.key_id, version=t.version)
    except KeyError:
        raise Problem(
            409, "wallet unavailable", "the key this ticket was issued under no longer signs", kind="wallet-unavailable"
        ) from None
    return WalletTicket(
        ticket_id=t.id, order_id=t.order_id, event_id=t.event_id, event_name=event.name, venue=event.venue,
        starts_at=event.starts_at, doors_at=event.doors_at, timezone=event.timezone, holder_name=t.holder_name,
        tier_name=tier.name if tier is not None else t.tier.capitalize(), code=code,
    )  # fmt: skip


async def kept_pass(pdfs: PdfStore, t: TicketOf) -> bytes | None:
    """The pass kept beside the ticket's PDF if it was built from the ticket's
    current version (None: none kept, or a re-issue made it stale). One file
    read: a pass is only kept once its ticket was seen rendered."""
    kept = await pdfs.read_pass(t.order_id, t.id)
    return kept if kept is not None and pass_version(kept) == t.version else None


async def build_pass(pdfs: PdfStore, issuer: PassIssuer, t: WalletTicket, version: int) -> bytes:
    """The ticket's ``.pkpass`` built now (a few milliseconds, off the event
    loop) and kept, replacing a stale one. Two first requests at once both
    build and both keep one; either is a whole, valid pass. A request that
    read the ticket before a re-issue keeps a pass of the old version, which
    ``kept_pass`` refuses: the next request builds the new one."""
    pkpass = await asyncio.to_thread(build_pkpass, t, issuer, version)
    await pdfs.put_pass(t.order_id, t.ticket_id, pkpass)
    return pkpass
