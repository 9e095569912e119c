"""Request and response bodies of the REST API (CONTRACT.md)."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from ticketry.documents import PublicOrderStatus, TicketStatus

# Control (incl. newlines, NUL), format (bidi overrides, zero-width), surrogate,
# private-use and unassigned code points: none belongs on a printed ticket.
_REFUSED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _clean_text(value: str) -> str:
    """NFC-normalise and refuse invisible or control characters. Markup is *not*
    refused: it is data, escaped wherever it is shown (the renderer autoescapes)."""
    value = unicodedata.normalize("NFC", value).strip()
    if any(unicodedata.category(ch) in _REFUSED for ch in value):
        raise ValueError("control, format or unassigned characters are not allowed")
    if not value:
        raise ValueError("must not be blank")
    return value


# Length is checked again after normalisation (NFC can change it).
Name = Annotated[
    str, StringConstraints(min_length=1, max_length=200), AfterValidator(_clean_text), StringConstraints(max_length=200)
]
Holder = Annotated[
    str, StringConstraints(min_length=1, max_length=120), AfterValidator(_clean_text), StringConstraints(max_length=120)
]
# A hard ceiling for the schema; the configured TICKETRY_MAX_TICKETS_PER_ORDER
# (default 10,000) is checked when the order is placed.
QUANTITY_CEILING = 1_000_000
Currency = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]
Price = Annotated[Decimal, Field(ge=0, le=1_000_000, max_digits=9, decimal_places=2)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class EventIn(_In):
    name: Name
    venue: Name
    starts_at: datetime
    capacity: int = Field(gt=0, le=10_000_000)
    price: Price
    currency: Currency


class EventOut(BaseModel):
    id: str
    name: str
    venue: str
    starts_at: datetime
    capacity: int
    sold: int
    price: str
    currency: str


class OrderIn(_In):
    event_id: str = Field(min_length=1, max_length=64)
    quantity: int = Field(gt=0, le=QUANTITY_CEILING)
    holder_name: Holder
    tier: Literal["standard", "vip"] = "standard"


class OrderAccepted(BaseModel):
    id: str
    event_id: str
    quantity: int
    status: Literal["processing"] = "processing"
    tickets: list[str]
    progress_url: str


class TicketRef(BaseModel):
    id: str
    status: TicketStatus
    pdf_url: str


class OrderOut(BaseModel):
    id: str
    event_id: str
    status: PublicOrderStatus
    total: int
    rendered: int
    failed: int
    tickets: list[TicketRef]
    progress_url: str


class TicketOut(BaseModel):
    id: str
    order_id: str
    event_id: str
    holder_name: str
    tier: Literal["standard", "vip"]
    status: TicketStatus
    pdf_url: str


class CheckinIn(_In):
    code: str = Field(min_length=1, max_length=256, pattern=r"^[\x21-\x7e]+$")


class CheckinOut(BaseModel):
    ticket_id: str
    checked_in_at: datetime


class ProblemOut(BaseModel):
    """An error (RFC 9457 problem details)."""

    type: str = "about:blank"
    status: int
    title: str
    detail: str = ""


class CancelOut(BaseModel):
    id: str
    status: Literal["cancelled"]
    revoked: int


class SigningKeysOut(BaseModel):
    """What a door scanner needs to verify codes offline: every public key by id."""

    active_kid: str
    keys: dict[str, str]
