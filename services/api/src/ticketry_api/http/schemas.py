"""Request and response bodies of the REST API (docs/contract.md)."""

from __future__ import annotations

import re
import unicodedata
import zoneinfo
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from typing import Annotated, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)
from ticketry.documents import PERMISSION_TICKETS, CheckinList, PublicOrderStatus, TicketStatus
from ticketry.events import TIER_ID_PATTERN, Lane
from ticketry.ids import PLACE_DIGITS

from ticketry_api.core.emails import EMAIL_PATTERN, check_email
from ticketry_api.core.emails import MAX_LENGTH as MAX_EMAIL

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


# What the document says of a text (a name, a venue, a holder): no control,
# format, surrogate or private-use characters, not blank. (Unassigned code
# points and characters the ticket's fonts cannot draw are refused too, and an
# event's texts must fit their line of the ticket: rules no pattern states.)
_NOT_IN_TEXT = (
    r"\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    r"\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\ue000-\uf8ff"
)
TEXT_PATTERN = rf"^\s*[^\s{_NOT_IN_TEXT}][^{_NOT_IN_TEXT}]*$"


# Length is checked again after normalisation (NFC can change it).
Name = Annotated[
    str,
    StringConstraints(min_length=1, max_length=200, pattern=TEXT_PATTERN),
    AfterValidator(_clean_text),
    StringConstraints(max_length=200),
]
Holder = Annotated[
    str,
    StringConstraints(min_length=1, max_length=120, pattern=TEXT_PATTERN),
    AfterValidator(_clean_text),
    StringConstraints(max_length=120),
]
Email = Annotated[str, StringConstraints(max_length=MAX_EMAIL, pattern=EMAIL_PATTERN), AfterValidator(check_email)]
# A hard ceiling for the schema; the configured TICKETRY_MAX_TICKETS_PER_ORDER
# (default 10,000) is checked when the order is placed.
QUANTITY_CEILING = 1_000_000
Currency = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]
# A price is a decimal string, 0 to 1,000,000 with at most two decimals ("25.00").
PRICE_PATTERN = r"^(?:(?:0|[1-9][0-9]{0,5})(?:\.[0-9]{1,2})?|1000000(?:\.00?)?)$"


def _price_text(value: object) -> object:
    if not isinstance(value, str) or re.search(PRICE_PATTERN, value) is None:
        raise ValueError('a decimal string from "0" to "1000000", at most two decimals (such as "25.00")')
    return value


Price = Annotated[
    Decimal,
    BeforeValidator(_price_text),
    WithJsonSchema({"type": "string", "pattern": PRICE_PATTERN, "examples": ["25.00"]}),
    Field(ge=0, le=1_000_000, max_digits=9, decimal_places=2),
]


def id_pattern(kind: str) -> str:
    """The spelling of a ``kind`` id (``ev``, ``or``, ``cl``, ``tk``, ``wh``…) as
    ``ticketry.ids`` makes it. The API answers any other spelling 404 (no such
    thing), so the document states the pattern and the API need not refuse it as 422."""
    if kind == "tk":
        return rf"^tk_[0-9a-f]{{20}}_[0-9]{{{PLACE_DIGITS}}}$"
    return rf"^{kind}_[0-9a-f]{{20}}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _iana_zone(value: str) -> str:
    if value not in _zones():
        raise ValueError("not an IANA time zone name (such as Europe/Berlin)")
    return value


# The instants an event may name (from EARLIEST, before LATEST). Any real date
# fits, and each has a UTC and a venue-local form: a zone is less than a day off
# UTC, and datetime holds nothing before year 1 or after 9999.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
_OUT_OF_RANGE = "must be from 1970-01-01T00:00:00Z and before 9000-01-01T00:00:00Z"


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("needs a UTC offset (ISO 8601, e.g. 2027-06-01T20:00:00+02:00)")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 with an offset that leaves datetime's range
        raise ValueError(_OUT_OF_RANGE) from None
    if not EARLIEST <= utc < LATEST:
        raise ValueError(_OUT_OF_RANGE)
    return value


TimeZone = Annotated[str, StringConstraints(min_length=1, max_length=64), AfterValidator(_iana_zone)]


_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _iso_text(value: object) -> object:
    # The document says an ISO 8601 string: not a Unix timestamp, which pydantic
    # would otherwise take (0, or "0.5" in a query, is 1970-01-01T00:00:00Z).
    if isinstance(value, (int, float)) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError("an ISO 8601 date-time string, e.g. 2027-06-01T20:00:00+02:00")
    return value


Instant = Annotated[datetime, BeforeValidator(_iso_text), AfterValidator(_aware)]


def _utc_cursor(value: datetime) -> datetime:
    # A cursor may name any instant datetime holds: one before every record
    # means all of them, one after every record none.
    if value.tzinfo is None or value.utcoffset() is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 with an offset that leaves datetime's range
        return datetime.min.replace(tzinfo=UTC) if value.year == 1 else datetime.max.replace(tzinfo=UTC)


Since = Annotated[datetime, BeforeValidator(_iso_text), AfterValidator(_utc_cursor)]
TierId = Annotated[str, StringConstraints(pattern=TIER_ID_PATTERN)]
TierName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=40, pattern=TEXT_PATTERN),
    AfterValidator(_clean_text),
    StringConstraints(max_length=40),
]
MAX_TIERS = 20


class TierIn(_In):
    id: TierId
    name: TierName
    price: Price
    capacity: int | None = Field(default=None, gt=0, le=10_000_000, strict=True)
    lane: Lane = "standard"
    max_per_buyer: int | None = Field(default=None, gt=0, le=QUANTITY_CEILING, strict=True)


class EventIn(_In):
    name: Name
    venue: Name
    starts_at: Instant
    capacity: int = Field(gt=0, le=10_000_000, strict=True)
    price: Price
    currency: Currency
    timezone: TimeZone = "UTC"
    doors_at: Instant | None = None
    tiers: list[TierIn] | None = Field(default=None, min_length=1, max_length=MAX_TIERS)
    # Orders are taken from on_sale_at; with waiting_room, through the queue (waitingroom/).
    on_sale_at: Instant | None = None
    waiting_room: bool = Field(default=False, strict=True)  # true or false, not "yes" or 1
    # The most tickets one queue permission may order: default PERMISSION_TICKETS,
    # filled in here so the event stores its room's terms as they were when it
    # was made. Without a waiting room there are no permissions: it is ignored.
    max_tickets_per_permission: int | None = Field(
        default=None, ge=1, le=QUANTITY_CEILING, strict=True,
        description="with waiting_room: the most tickets one queue permission may order (default 10); else ignored",
    )  # fmt: skip

    @model_validator(mode="after")
    def _consistent(self) -> EventIn:
        if self.doors_at is not None and self.doors_at > self.starts_at:
            raise ValueError("doors_at must not be after starts_at")
        if not self.waiting_room:
            self.max_tickets_per_permission = None
        elif self.max_tickets_per_permission is None:
            self.max_tickets_per_permission = PERMISSION_TICKETS
        if self.tiers is not None:
            ids = [t.id for t in self.tiers]
            if len(set(ids)) != len(ids):
                raise ValueError("tier ids must be unique")
            if any(t.capacity is not None and t.capacity > self.capacity for t in self.tiers):
                raise ValueError("a tier's capacity must fit in the event's")
        return self


class TierOut(BaseModel):
    id: str
    name: str
    price: str
    capacity: int | None
    lane: Lane
    max_per_buyer: int | None
    sold: int


class EventOut(BaseModel):
    id: str
    name: str
    venue: str
    timezone: str
    starts_at: datetime
    doors_at: datetime
    capacity: int
    sold: int
    price: str
    currency: str
    tiers: list[TierOut]
    on_sale_at: datetime | None = None
    waiting_room: bool = False
    # With a waiting room: the most tickets one queue permission may order (else null).
    max_tickets_per_permission: int | None = None


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """One page of a list; ``next`` is the opaque cursor of the next page (None: the last)."""

    items: list[T]
    next: str | None = None


class OrderIn(_In):
    event_id: str = Field(min_length=1, max_length=64, json_schema_extra={"pattern": id_pattern("ev")})
    quantity: int = Field(gt=0, le=QUANTITY_CEILING, strict=True)
    holder_name: Holder
    tier: TierId = "standard"
    holders: list[Holder] | None = Field(default=None, min_length=1, max_length=QUANTITY_CEILING)
    # The tickets are mailed here once the order completes (docs/email.md).
    email: Email | None = Field(default=None, examples=["ada@example.com"])

    @model_validator(mode="after")
    def _one_name_per_ticket(self) -> OrderIn:
        if self.holders is not None and len(self.holders) != self.quantity:
            raise ValueError("holders must name each ticket: one name per ticket (as many as quantity)")
        return self


class OrderAccepted(BaseModel):
    id: str
    event_id: str
    quantity: int
    tier: str
    unit_price: str
    currency: str
    status: Literal["processing"] = "processing"
    tickets: list[str]
    progress_url: str
    # The buyer's page (``/o/<id>#t=<order link>``): no login needed while the link lives (>= 24 h).
    status_page_url: str


class TicketRef(BaseModel):
    id: str
    status: TicketStatus
    pdf_url: str


class OrderOut(BaseModel):
    id: str
    event_id: str
    tier: str
    unit_price: str
    currency: str
    status: PublicOrderStatus
    total: int
    rendered: int
    failed: int
    # The first tickets (all of a small order); the rest page by page from
    # ``GET /v1/orders/{id}/tickets?cursor=<tickets_next>``.
    tickets: list[TicketRef]
    tickets_next: str | None = None
    progress_url: str


class OrderSummary(BaseModel):
    """An order in a list."""

    id: str
    event_id: str
    tier: str
    quantity: int
    unit_price: str
    currency: str
    status: PublicOrderStatus
    created_at: datetime


class WalletLinks(BaseModel):
    """Where a rendered ticket goes into a phone's wallet (None: that wallet is not configured)."""

    apple: str | None = Field(default=None, description="the ticket's Apple Wallet pass (.pkpass), on this api")
    google: str | None = Field(default=None, description="the ticket's Save to Google Wallet link")


class TicketOut(BaseModel):
    id: str
    order_id: str
    event_id: str
    holder_name: str
    tier: str
    status: TicketStatus
    pdf_url: str
    # Once rendered, where a wallet is configured; absent before.
    wallet: WalletLinks | None = None


class CheckinListIn(_In):
    name: Name
    tiers: list[TierId] | None = Field(default=None, max_length=MAX_TIERS)
    allow_reentry: bool = Field(
        default=False, strict=True, description="scans say entry or exit; a ticket may leave and come back"
    )


class CheckinListOut(BaseModel):
    id: str
    event_id: str
    name: str
    tiers: list[str]
    allow_reentry: bool = False

    @classmethod
    def of(cls, lst: CheckinList) -> CheckinListOut:
        return cls(id=lst.id, event_id=lst.event_id, name=lst.name, tiers=lst.tiers, allow_reentry=lst.allow_reentry)


class CheckinListStatusOut(BaseModel):
    """Who is on a check-in list's side of the door: ``inside``, the tickets
    whose last accepted scan was an entry; ``admitted``, the tickets ever admitted."""

    list_id: str
    inside: int
    admitted: int


class CheckinIn(_In):
    code: str = Field(min_length=1, max_length=256, pattern=r"^[\x21-\x7e]+$")
    list_id: str = Field(min_length=1, max_length=64, pattern=r"^cl_[0-9a-f]{20}$")
    nonce: str | None = Field(default=None, min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    direction: Literal["entry", "exit"] = Field(
        default="entry", description="exit: only on a list that allows re-entry"
    )


class CheckinOut(BaseModel):
    ticket_id: str
    event_id: str
    tier: str
    holder_name: str
    list_id: str
    checked_in_at: datetime
    # On a list that allows re-entry: which way this scan let the ticket pass (``checked_in_at``: when).
    direction: Literal["entry", "exit"] | None = None


class ReissueIn(_In):
    holder_name: Holder


class ReissueOut(BaseModel):
    """A re-issue accepted: the ticket's new version and holder (its PDF follows)."""

    id: str
    version: int
    holder_name: str


class CancelOut(BaseModel):
    id: str
    status: Literal["cancelled"]
    revoked: int


class SigningKeysOut(BaseModel):
    """What a door scanner needs to verify codes offline: every public key by id."""

    active_kid: str
    keys: dict[str, str]
