"""MongoDB documents (beanie). Read models and the records the API owns.

Kept to what FerretDB v1 supports: string ids, no links/$lookup, no
transactions, no TTL/text/partial indexes, money as integer minor units.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

import pymongo
from beanie import Document
from pydantic import BaseModel, Field

from ticketry.device_documents import DevicePairing, ScanDevice
from ticketry.events import Lane
from ticketry.webhook_documents import WebhookEndpoint

TicketStatus = Literal["queued", "rendered", "failed", "checked_in", "cancelled"]
# What buyers see (docs/contract.md, plus ``cancelled``).
PublicOrderStatus = Literal["processing", "completed", "partially_failed", "failed", "cancelled"]
# ``abandoned``: a tombstone the outbox sweep writes for a reservation whose order
# never got recorded (see ``ticketry_api.service_layer.orders``); no owner, no tickets, never shown.
OrderStatus = Literal[PublicOrderStatus, "abandoned"]
# A waiting room's default for what one queue permission may order (an event's
# ``max_tickets_per_permission``): enough for a family or a group of friends,
# far from the whole event for the first buyer admitted.
PERMISSION_TICKETS = 10


def is_placed(status: str | None) -> bool:
    """True for the status of an order somebody placed: None (no order) and an
    ``abandoned`` tombstone are no order, whoever asks (404, no tickets)."""
    return status is not None and status != "abandoned"


def utcnow() -> datetime:
    return datetime.now(UTC)


class Tier(BaseModel):
    """What an event sells: a price, an optional capacity within the event's, a
    limit per buyer and the render lane. Chosen by the organiser; a buyer only
    names a tier's id."""

    id: str
    name: str
    price_minor: int
    capacity: int | None = None  # None: only the event's capacity bounds it
    lane: Lane = "standard"
    max_per_buyer: int | None = None


class Event(Document):
    """Something people buy tickets for. Tickets sold: see :class:`Reservation`.

    Times are stored in UTC and shown in ``timezone``. An event created before
    tiers existed has none stored: it sells one ``standard`` tier at its price
    (:meth:`tier_list`)."""

    id: str  # type: ignore[assignment]
    name: str
    venue: str
    starts_at: datetime
    capacity: int
    price_minor: int
    currency: str
    organizer_id: str
    timezone: str = "UTC"
    doors_at: datetime | None = None  # None: at ``starts_at``
    tiers: list[Tier] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=utcnow)
    # The on-sale: orders are taken from ``on_sale_at`` (None: at once);
    # with ``waiting_room`` buyers queue first and order with a queue permission.
    on_sale_at: datetime | None = None
    waiting_room: bool = False
    # With a waiting room: the most tickets one queue permission may order
    # (None: :data:`PERMISSION_TICKETS`, for a room created before it was set).
    max_tickets_per_permission: int | None = None

    class Settings:
        name = "events"
        query_indexes: ClassVar[list[pymongo.IndexModel]] = [pymongo.IndexModel([("organizer_id", 1), ("_id", 1)])]

    def tier_list(self) -> list[Tier]:
        """The event's tiers; the one standard tier at its price for an event without."""
        return self.tiers or [Tier(id="standard", name="Standard", price_minor=self.price_minor)]

    def tier(self, tier_id: str) -> Tier | None:
        return next((t for t in self.tier_list() if t.id == tier_id), None)

    def tickets_per_permission(self) -> int | None:
        """The most tickets one queue permission may order; None without a waiting room."""
        if not self.waiting_room:
            return None
        return self.max_tickets_per_permission or PERMISSION_TICKETS


class Order(Document):
    """An order as placed: who, what, which tickets (immutable but ``status``).

    Its tickets have no documents of their own: a ticket is its order's
    (``ids.ticket_ids``), its render outcome a ``TicketState``, its admission a
    ``Checkin``, and a cancelled order's tickets are revoked. So placing an
    order writes the order, not one document per ticket.
    """

    id: str  # type: ignore[assignment]
    owner_id: str
    event_id: str
    quantity: int
    tier: str  # the event's tier id
    holder_name: str
    # One name per ticket when the buyer gave them (else every ticket prints ``holder_name``).
    holders: list[str] | None = None
    email: str | None = None  # where its tickets are mailed once it completes (None: not mailed)
    # The tier's price when sold (minor units) and currency; None: an order from
    # before tiers, sold at its event's price.
    unit_price_minor: int | None = None
    # ``processing`` from creation; the API sets ``cancelled`` (and the sweep
    # writes ``abandoned`` tombstones). Render outcomes: ``OrderState``.
    status: OrderStatus = "processing"
    ticket_ids: list[str]  # ids.ticket_ids(id, quantity); [] for a tombstone
    key_id: str | None = None  # the signing key of its tickets' codes (the codes name it too)
    idempotency_key: str | None = None
    # ``<owner>:<Idempotency-Key>`` or ``auto:<order id>``; unique, so a duplicate
    # POST cannot create a second order even when both race past every check.
    idem: str
    request_hash: str
    created_at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "orders"
        indexes: ClassVar[list[pymongo.IndexModel]] = [
            pymongo.IndexModel([("idem", 1)], unique=True),
        ]
        # For the lists (``GET /v1/orders``, an event's orders). Only where the
        # store uses them: FerretDB v1 pushes down no filter but ``_id``, so
        # there they would only slow every order's insert.
        query_indexes: ClassVar[list[pymongo.IndexModel]] = [
            pymongo.IndexModel([("owner_id", 1), ("_id", 1)]),
            pymongo.IndexModel([("event_id", 1), ("_id", 1)]),
        ]

    def holder_of(self, n: int) -> str:
        """The name printed on the ``n``-th ticket."""
        return self.holders[n] if self.holders else self.holder_name


# Projection that leaves out an order's per-ticket lists (10,000 entries in a big order).
ORDER_SUMMARY: dict[str, Any] = {"ticket_ids": 0, "holders": 0}


class TicketState(Document):
    """A ticket's render outcome, written by the projector.

    Inserted, never updated in the hot path: on FerretDB's SQLite backend every
    update is its own transaction (and fsync), ~15 ms each, while a batch of
    500 inserts is one transaction (~15-40 ms in all). The unique ``_id`` (the
    ticket id) makes a replayed event a no-op.
    """

    id: str  # type: ignore[assignment]  # ticket id
    order_id: str
    status: Literal["rendered", "failed"]
    reason: str | None = None
    at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "ticket_states"
        indexes: ClassVar[list[pymongo.IndexModel]] = [pymongo.IndexModel([("order_id", 1)])]


class OrderState(Document):
    """An order's outcome, folded in by the projector from ``order.completed``.

    Inserted, like ``TicketState``: the outcomes of a whole batch of orders are
    one insert (one transaction on FerretDB), where an update per order was the
    store's heaviest load. Updated only when a re-driven dead letter completes
    the order again (newer ``last_event``; rare). While an order renders, its
    live counters are in Redis (``streams.order_progress``).
    """

    id: str  # type: ignore[assignment]  # order id
    status: PublicOrderStatus
    total: int
    rendered: int
    failed: int
    last_event: str  # the completion's stream id, sortable (streams.sortable_stream_id)
    completed_at: datetime  # when the completion happened (its ticket event), not when it was folded

    class Settings:
        name = "order_states"


class Reservation(Document):
    """One entry of an event's capacity ledger.

    FerretDB v1 does not apply ``$inc``/``findAndModify`` atomically under
    concurrency (measured: 60 concurrent conditional ``$inc`` on one document
    left ``sold`` at 10 and let all 60 through). Unique keys *are* atomic, so
    capacity is an append-only ledger: entry ``seq`` n+1 can be inserted by one
    writer only (unique ``_id``), and ``tag`` (``reserve:<order>`` /
    ``release:<order>``, unique) makes each entry happen at most once. ``sold``
    is the newest entry's ``sold_after``.

    One entry may reserve for several orders at once (``orders``; group commit,
    see ``ticketry_api.capacity``): its tag is its first order's. A release is
    always an entry of its own, so ``release:<order>`` keeps each release
    once-only.

    The ledger is the event's, and it counts each tier too (``tier_sold``, sold
    per tier after this entry): one insert checks the event's capacity and the
    tier's together, so neither can be oversold. Entries written before tiers
    have no ``tier_sold`` (their events have no tier capacities).
    """

    id: str  # type: ignore[assignment]  # "<event id>:<seq, zero-padded>"
    event_id: str
    seq: int
    delta: int
    sold_after: int
    tier_sold: dict[str, int] = Field(default_factory=dict)
    tag: str
    orders: list[str] = Field(default_factory=list)  # the orders this entry reserved for
    at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "reservations"
        indexes: ClassVar[list[pymongo.IndexModel]] = [
            pymongo.IndexModel([("tag", 1)], unique=True),
            pymongo.IndexModel([("orders", 1)]),
        ]
        # The head by one query where the store serves it by index (not FerretDB v1).
        query_indexes: ClassVar[list[pymongo.IndexModel]] = [pymongo.IndexModel([("event_id", 1), ("seq", -1)])]


class OrderFate(Document):
    """What happened first to an order: ``cancelled``, or ``used`` (a ticket of
    it was admitted). ``_id`` is the order id, so exactly one of a cancel and a
    first scan wins, on any MongoDB-wire store (FerretDB v1 applies no
    conditional update atomically; a unique insert is atomic everywhere). It
    never changes once written: a used order cannot be cancelled, a cancelled
    one never admits."""

    id: str  # type: ignore[assignment]  # order id
    fate: Literal["cancelled", "used"]
    by: str
    at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "order_fates"


class CheckinList(Document):
    """A door's list (pretix, Tito): admits tickets of its event, of its
    ``tiers`` only when given, each ticket once."""

    id: str  # type: ignore[assignment]  # cl_…
    event_id: str
    name: str
    tiers: list[str] = Field(default_factory=list)  # empty: every tier
    # A ticket may go out and come back in (its moves are :class:`Passage`s).
    allow_reentry: bool = False
    created_at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "checkin_lists"
        indexes: ClassVar[list[pymongo.IndexModel]] = [pymongo.IndexModel([("event_id", 1)])]

    def admits(self, tier: str) -> bool:
        return not self.tiers or tier in self.tiers


class Admission(Document):
    """A ticket admitted on one list; ``_id`` is ``<list id>/<ticket id>``, so
    a ticket admits once per list, whatever the number of concurrent scans."""

    id: str  # type: ignore[assignment]
    list_id: str
    ticket_id: str
    staff_id: str
    at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "admissions"


class Passage(Document):
    """A move through a re-entry list's door after the ticket's first
    admission (its :class:`Admission`, move 1): ``_id`` is
    ``<list id>/<ticket id>/<n>`` (n zero-padded: 2, 3, …), exits even, entries
    odd. The unique ``_id`` lets one scan win each move however many race
    (FerretDB v1 applies no conditional update atomically), and the ticket is
    inside while its last move is odd."""

    id: str  # type: ignore[assignment]
    list_id: str
    ticket_id: str
    n: int
    direction: Literal["entry", "exit"]
    staff_id: str
    at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "passages"
        indexes: ClassVar[list[pymongo.IndexModel]] = [pymongo.IndexModel([("list_id", 1), ("direction", 1)])]


class ScanAnswer(Document):
    """The answer a scanner's ``nonce`` got (``_id``: ``<staff>/<nonce>``): an
    offline scanner that uploads the same scan again gets it again."""

    id: str  # type: ignore[assignment]
    status: int
    body: dict[str, Any]
    at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "scan_answers"
        # The sweep of expired nonces deletes by ``at`` (ticketry_api.service_layer.checkins).
        query_indexes: ClassVar[list[pymongo.IndexModel]] = [pymongo.IndexModel([("at", 1)])]


class Checkin(Document):
    """A ticket's first admission (on any list); ``_id`` is the ticket id. What
    makes the ticket ``checked_in``; per-list admissions are :class:`Admission`."""

    id: str  # type: ignore[assignment]
    order_id: str  # a big order's check-ins are found by it (an ``$in`` of its ids is slower)
    staff_id: str
    list_id: str | None = None
    at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "checkins"
        indexes: ClassVar[list[pymongo.IndexModel]] = [pymongo.IndexModel([("order_id", 1)])]


class CheckinAttempt(Document):
    """Every check-in attempt, accepted or not (audit trail)."""

    ticket_id: str | None
    staff_id: str
    result: Literal["accepted", "already_checked_in", "refused", "wrong_list", "exited"]
    list_id: str | None = None
    at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "checkin_attempts"


class TicketIssue(Document):
    """One re-issue of a ticket to a holder: ``_id`` is ``<ticket id>/<version>``
    (version 1, 2, …), so the unique ``_id`` lets one re-issue win each version
    however many race (FerretDB v1 applies no conditional update atomically).
    The newest is the ticket's current holder and code; ``revoked_code`` is the
    code it replaced (what the event's revocations list carries)."""

    id: str  # type: ignore[assignment]
    ticket_id: str
    order_id: str
    event_id: str
    version: int
    holder_name: str
    revoked_code: str
    by: str
    at: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "ticket_issues"


ALL_DOCUMENTS: list[type[Document]] = [
    Event, Order, OrderState, TicketState, Reservation, Checkin, CheckinAttempt,
    OrderFate, CheckinList, Admission, Passage, ScanAnswer, WebhookEndpoint, TicketIssue, ScanDevice, DevicePairing,
]  # fmt: skip
