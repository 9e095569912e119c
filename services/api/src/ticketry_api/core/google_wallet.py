"""A "Save to Google Wallet" link of a ticket: a JWT (RS256, signed with the
issuer's service-account key) that carries the ticket as an
``eventTicketObject`` and its event as an ``eventTicketClass``; Google creates
both when the buyer opens the link. Nothing here reads a file or a clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from ticketry_api.core.wallet import WalletTicket

SAVE_URL = "https://pay.google.com/gp/v/save/"


@dataclass(frozen=True)
class GoogleIssuer:
    """The Google Wallet issuer and the service account that signs for it."""

    issuer_id: str  # the issuer's number in the Google Pay & Wallet console
    service_account_email: str
    key: rsa.RSAPrivateKey
    issuer_name: str


def _text(value: str) -> dict[str, Any]:
    return {"defaultValue": {"language": "en", "value": value}}


def object_id(issuer_id: str, ticket_id: str) -> str:
    """The ticket's object id: the same for every link of the ticket, so saving twice keeps one pass."""
    return f"{issuer_id}.{ticket_id}"


def class_id(issuer_id: str, event_id: str) -> str:
    """The event's class id: one per event, shared by its tickets."""
    return f"{issuer_id}.{event_id}"


def ticket_object(t: WalletTicket, issuer_id: str) -> dict[str, Any]:
    """The ticket's ``eventTicketObject``: its QR holds the ticket's code."""
    return {
        "id": object_id(issuer_id, t.ticket_id),
        "classId": class_id(issuer_id, t.event_id),
        "state": "ACTIVE",
        "barcode": {"type": "QR_CODE", "value": t.code, "alternateText": t.ticket_id},
        "ticketHolderName": t.holder_name,
        "ticketNumber": t.ticket_id,
        "ticketType": _text(t.tier_name),
        "validTimeInterval": {"start": {"date": t.doors().isoformat()}},
    }


def event_class(t: WalletTicket, issuer: GoogleIssuer) -> dict[str, Any]:
    """The event's ``eventTicketClass``, in venue time."""
    return {
        "id": class_id(issuer.issuer_id, t.event_id),
        "issuerName": issuer.issuer_name,
        "reviewStatus": "UNDER_REVIEW",
        "eventName": _text(t.event_name),
        "venue": {"name": _text(t.venue), "address": _text(t.venue)},
        "dateTime": {"start": t.starts().isoformat(), "doorsOpen": t.doors().isoformat()},
    }


def save_claims(t: WalletTicket, issuer: GoogleIssuer, now: int) -> dict[str, Any]:
    """The JWT's claims at ``now`` (seconds since the epoch)."""
    return {
        "iss": issuer.service_account_email,
        "aud": "google",
        "typ": "savetowallet",
        "iat": now,
        "origins": [],
        "payload": {
            "eventTicketClasses": [event_class(t, issuer)],
            "eventTicketObjects": [ticket_object(t, issuer.issuer_id)],
        },
    }


def save_url(t: WalletTicket, issuer: GoogleIssuer, now: int) -> str:
    """The "Save to Google Wallet" link of ``t``."""
    return SAVE_URL + jwt.encode(save_claims(t, issuer, now), issuer.key, algorithm="RS256")
