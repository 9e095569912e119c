"""The message catalogue: which message travels on which stream, who writes it
and who reads it (``streams.py`` names the streams; this says what is on them).

:data:`CHANNELS` is the one table the AsyncAPI document (``ticketry.asyncapi``,
served as ``GET /asyncapi.json`` by the api) is built from. Each message's
payload schema is its model's own JSON schema: :class:`ticketry.events.RenderRequest`
and :class:`ticketry.events.TicketEvent` for the versioned messages, and the
``*Entry`` models below for the entries that are written as flat field maps
(their field names are the ones the writers use; ``tests/unit/test_asyncapi.py``
checks them against the writers' constants and ``to_fields``). A new stream needs
an entry here: the test fails for any stream ``streams.py`` describes and this
table does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from ticketry import streams
from ticketry.events import SCHEMA_VERSION, RenderRequest, TicketEvent
from ticketry.webhook_documents import WebhookType

Service = Literal["api", "renderer", "projector", "notifier", "scaler", "webhooks", "mailer", "ticketryctl"]

# What each producer/consumer name means (the AsyncAPI document's tags).
SERVICES: Final[dict[Service, str]] = {
    "api": "The api (ticketry_api): orders, the outbox sweep, event routes, the waiting room's admitter.",
    "renderer": "The renderer (ticketry_renderer): FastStream subscribers on the render lanes and design requests.",
    "projector": "The api's projector (ticketry_api.loops.projector): folds ticket events into the read models.",
    "notifier": "The notifier (ticketry_notifier): WebSocket pushes of order progress and waiting-room places.",
    "scaler": "The scaler (ticketry_scaler): the leader's replica decisions.",
    "webhooks": "The api's webhook dispatcher and sender (ticketry_api.webhooks).",
    "mailer": "The api's mailer (ticketry_api.mail): one email per completed order with an address.",
    "ticketryctl": "The operator's CLI: dead-letter inspection, re-drive and delete, status.",
}


class _Entry(BaseModel):
    """A stream entry written as a flat map of strings."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class RenderDeadLetterEntry(_Entry):
    """A parked render request: the request's own fields (``v``, ``data``) plus
    the ``dlq_*`` ones (``streams.DLQ_*``); re-driving drops the ``dlq_*`` ones."""

    v: str = Field(default=str(SCHEMA_VERSION), description="The request's major version (absent: 1).")
    data: str = Field(description="The render request as JSON (RenderRequest); may be undecodable.")
    dlq_reason: str = Field(description="Why it was parked.")
    dlq_history: str = Field(description='JSON list of "attempt n: reason".')
    dlq_source: str = Field(description="The render lane it came from.")
    dlq_entry: str = Field(description="Its stream id there.")
    dlq_consumer: str = Field(description="The renderer that parked it.")
    dlq_at: str = Field(description="Unix seconds when it was parked.")


class WebhookDeliveryEntry(_Entry):
    """One attempt to deliver one webhook message to one endpoint
    (``ticketry_api.webhooks.models.Delivery.to_fields``)."""

    endpoint: str = Field(description="The webhook endpoint's id.")
    msg: str = Field(description="The stable webhook-id of the message (same for every copy of one fact).")
    type: WebhookType
    order_id: str
    event_id: str
    body: str = Field(description='The Standard Webhooks body every attempt sends: {"type", "timestamp", "data"}.')
    attempt: str = Field(description="Attempt number, from 1.")
    history: str = Field(description="JSON list of what came of the earlier attempts.")
    created_at: str = Field(description="ISO 8601 time the delivery was created.")


class WebhookDeadLetterEntry(WebhookDeliveryEntry):
    """A delivery that failed its last attempt or was refused for good."""

    dlq_reason: str
    dlq_at: str = Field(description="ISO 8601 time it died.")
    dlq_entry: str = Field(description="Its stream id on the deliveries stream.")


class MailDeadLetterEntry(_Entry):
    """An order's email that failed its last try (``ticketryctl mail redrive`` tries again)."""

    order: str = Field(description="The order whose tickets were to be mailed.")
    attempt: str = Field(description="Tries made.")
    history: str = Field(description="JSON list: one line per try, what the server answered.")
    dlq_reason: str
    dlq_at: str = Field(description="ISO 8601 time it died.")
    dlq_entry: str = Field(description="The ticket event (stream id) that asked for the email.")


class ScalerDecisionEntry(_Entry):
    """One scaling decision of the scaler's leader (``ticketry_scaler.controller``)."""

    reason: str
    lag: str = Field(description="Render requests not yet delivered to a renderer.")
    pending: str = Field(description="Delivered and not yet acknowledged.")
    rate: str = Field(description="Measured render capacity, tickets per second.")
    running: str = Field(description="Renderer replicas the backend runs.")
    live: str = Field(description="Renderers with a fresh heartbeat.")
    from_: str = Field(alias="from", description="Replicas before.")
    to: str = Field(description="Replicas decided.")
    recommended: str
    drain_s: str = Field(description='Seconds to drain the backlog at the current rate ("inf": no capacity).')
    backend: str
    instance: str = Field(description="The scaler instance that decided (the leader).")
    ts: str = Field(description="Unix seconds.")


class OpsAuditEntry(_Entry):
    """One operator's action on dead letters or a waiting room (``ticketry_api.ops.audit``)."""

    who: str = Field(description="The token's sub (an admin's, or a room's organiser), or ticketryctl:<user>.")
    action: str = Field(description="redrive or delete (dead letters); pause, resume or close (a room).")
    kind: str = Field(description="render or webhooks: whose dead letters; room: a waiting room.")
    target: str = Field(
        description="The dead letter's id, reason:<reason> for all of a reason, or the room's event id."
    )
    outcome: str = Field(description="What happened, per id (JSON object id → outcome).")
    at: str = Field(description="Unix ms.")


class FirstTicketEntry(_Entry):
    """One order's first ticket rendered (``streams.FIRST_TICKET``; written by ``ticketry.emit``)."""

    ms: str = Field(description="Milliseconds from the order's render request (its acceptance) to its first ticket.")


class ThroughputEntry(_Entry):
    """The console's counters at one moment (``streams.OPS_THROUGHPUT``; written by an api)."""

    orders_accepted: str = Field(description="Orders enqueued so far (``ticketry:orders:accepted``).")
    tickets_ordered: str = Field(description="Render requests ever appended to the render lanes.")
    tickets_rendered: str = Field(description="Tickets the live renderers have rendered (their heartbeats).")


class RoomUpdateEntry(_Entry):
    """One admission tick of a waiting room, or a pause, resume or close
    (``streams.ROOM_*`` field names)."""

    admitted: str = Field(description="How many of the line have been admitted (only grows).")
    rate: str = Field(description="Buyers admitted per second.")
    at: str = Field(description="Redis time of the tick, ms.")
    sold_out: str = Field(description='"1" while nothing is left to sell.')
    drawn: str = Field(description='"1" once the early arrivals\' draw is final.')
    permits: str = Field(description="JSON: buyer → [permission, expires ms] of the buyers this tick admitted.")
    paused: str | None = Field(default=None, description='A pause\'s or resume\'s only: "1" or "0".')
    closed: str | None = Field(default=None, description='"1" for a close, "0" otherwise; absent on a tick.')


@dataclass(frozen=True)
class Message:
    """One message type: its payload model and major version (None: unversioned)."""

    name: str
    model: type[BaseModel]
    summary: str
    version: int | None = None


@dataclass(frozen=True)
class Channel:
    """One stream (``address``: the Redis key; ``{name}`` parts are parameters)."""

    id: str
    address: str
    description: str
    messages: tuple[Message, ...]
    producers: tuple[Service, ...]
    consumers: tuple[Service, ...]
    parameters: tuple[tuple[str, str], ...] = ()


RENDER_REQUEST: Final = Message(
    "RenderRequest",
    RenderRequest,
    "One ticket to render (entry fields: v = major version, data = this payload as JSON).",
    SCHEMA_VERSION,
)
TICKET_EVENT: Final = Message(
    "TicketEvent",
    TicketEvent,
    "ticket.rendered, ticket.failed, ticket.reissued, order.completed or order.cancelled (flat fields,"
    " v = major version; id is the entry's stream id). ticket.reissued: a re-issued ticket's new PDF is"
    " stored (its order's counters unchanged).",
    SCHEMA_VERSION,
)
RENDER_DEAD_LETTER: Final = Message(
    "RenderDeadLetter", RenderDeadLetterEntry, "A render request parked with its reason.", SCHEMA_VERSION
)
WEBHOOK_DELIVERY: Final = Message("WebhookDelivery", WebhookDeliveryEntry, "One webhook delivery attempt.")
WEBHOOK_DEAD_LETTER: Final = Message("WebhookDeadLetter", WebhookDeadLetterEntry, "A webhook delivery that died.")
MAIL_DEAD_LETTER: Final = Message("MailDeadLetter", MailDeadLetterEntry, "An order's email that died.")
SCALER_DECISION: Final = Message("ScalerDecision", ScalerDecisionEntry, "One scaling decision.")
OPS_AUDIT: Final = Message(
    "OpsAudit", OpsAuditEntry, "An operator's redrive or delete of dead letters, or a room's pause, resume or close."
)
FIRST_TICKET: Final = Message("FirstTicket", FirstTicketEntry, "How long an order waited for its first ticket.")
THROUGHPUT: Final = Message("Throughput", ThroughputEntry, "The console's counters at one moment.")
ROOM_UPDATE: Final = Message("RoomUpdate", RoomUpdateEntry, "A waiting room's admission tick, pause, resume or close.")

_LANE = (
    "Render requests, one entry per ticket; consumer group ``{group}`` (every renderer). Written with the"
    " order's outbox entry, by the outbox sweep and by ``ticketryctl dlq redrive``."
)
CHANNELS: Final[tuple[Channel, ...]] = (
    Channel(
        "renderVip",
        streams.RENDER_VIP,
        _LANE.format(group=streams.RENDERERS_GROUP) + " VIP and small orders: read before the standard lane.",
        (RENDER_REQUEST,),
        ("api", "ticketryctl"),
        ("renderer",),
    ),
    Channel(
        "renderStd",
        streams.RENDER_STD,
        _LANE.format(group=streams.RENDERERS_GROUP),
        (RENDER_REQUEST,),
        ("api", "ticketryctl"),
        ("renderer",),
    ),
    Channel(
        "ticketEvents",
        streams.TICKET_EVENTS,
        f"Ticket and order events. Consumer groups ``{streams.PROJECTOR_GROUP}`` (the projector) and"
        f" ``{streams.WEBHOOKS_GROUP}`` (the webhook dispatcher), ``{streams.MAIL_GROUP}`` (the mailer); read"
        " without a group by every notifier."
        " Written by the renderer (each ticket's final event, ticket.reissued, order.completed) and the api"
        " (order.cancelled).",
        (TICKET_EVENT,),
        ("renderer", "api"),
        ("projector", "webhooks", "mailer", "notifier"),
    ),
    Channel(
        "renderDead",
        streams.DEAD_LETTERS,
        "Dead letters of the render lanes: kept until an operator re-drives or deletes them.",
        (RENDER_DEAD_LETTER,),
        ("renderer",),
        ("ticketryctl",),
    ),
    Channel(
        "designRequests",
        streams.DESIGN_REQUESTS,
        f"Designs to build ahead of an event's first ticket (a sample render request each); consumer group"
        f" ``{streams.DESIGNERS_GROUP}`` (every renderer; one builds each).",
        (RENDER_REQUEST,),
        ("api",),
        ("renderer",),
    ),
    Channel(
        "scalerDecisions",
        streams.SCALER_DECISIONS,
        f"One entry per scaling decision, for operators (XRANGE). MAXLEN ~ {streams.SCALER_DECISIONS_MAXLEN}.",
        (SCALER_DECISION,),
        ("scaler",),
        (),
    ),
    Channel(
        "opsAudit",
        streams.OPS_AUDIT,
        "What operators did to dead letters (the console at /ops and ticketryctl) and to waiting rooms, listed by"
        f" GET /v1/ops/audit. MAXLEN ~ {streams.OPS_AUDIT_MAXLEN}.",
        (OPS_AUDIT,),
        ("api", "ticketryctl"),
        ("api",),
    ),
    Channel(
        "firstTicket",
        streams.FIRST_TICKET,
        "One entry per order whose first final event is ticket.rendered, added with it by the emit script: the"
        " console's first-ticket latency p50/p99 over the last 15 minutes (XRANGE)."
        f" MAXLEN ~ {streams.FIRST_TICKET_MAXLEN}.",
        (FIRST_TICKET,),
        ("renderer",),
        ("api",),
    ),
    Channel(
        "opsThroughput",
        streams.OPS_THROUGHPUT,
        "The console's counters, one entry per TICKETRY_OPS_HISTORY_INTERVAL_S from whichever api takes the"
        " interval's tick: its throughput chart of the last 15 minutes (XRANGE)."
        f" MAXLEN ~ {streams.OPS_THROUGHPUT_MAXLEN}.",
        (THROUGHPUT,),
        ("api",),
        ("api",),
    ),
    Channel(
        "webhookDeliveries",
        streams.WEBHOOK_DELIVERIES,
        f"Webhook delivery attempts; consumer group ``{streams.WEBHOOK_SENDERS_GROUP}`` (every api). Written by"
        " the dispatcher, by the retry mover when a backoff is due and by ``ticketryctl webhooks redrive``.",
        (WEBHOOK_DELIVERY,),
        ("webhooks", "ticketryctl"),
        ("webhooks",),
    ),
    Channel(
        "webhookDead",
        streams.WEBHOOK_DEAD,
        "Dead webhook deliveries; never trimmed: ``ticketryctl webhooks redrive`` / ``delete`` empties it.",
        (WEBHOOK_DEAD_LETTER,),
        ("webhooks",),
        ("ticketryctl",),
    ),
    Channel(
        "mailDead",
        streams.MAIL_DEAD,
        "Emails that failed their last try; never trimmed: ``ticketryctl mail redrive`` / ``delete`` empties it.",
        (MAIL_DEAD_LETTER,),
        ("mailer",),
        ("ticketryctl",),
    ),
    Channel(
        "roomUpdates",
        streams.room_updates("{event}"),
        "A waiting room's admission ticks (and pauses, resumes, closes), read without a group by every"
        f" notifier with a queue socket of the event. MAXLEN ~ {streams.ROOM_UPDATES_MAXLEN}.",
        (ROOM_UPDATE,),
        ("api",),
        ("notifier",),
        (("event", "The event id of a waiting room."),),
    ),
)
