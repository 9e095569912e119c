"""Versioned messages that travel through the streams.

A stream entry is a flat map of byte strings. Each message type knows how to turn
itself into such a map (``to_fields``) and back (``decode_*``); decoding failures
raise :class:`DecodeError` and nothing else, so a consumer can dead-letter them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

SCHEMA_VERSION = 1

# The render lane of a tier: ``vip`` is read first. Organisers choose it per tier.
Lane = Literal["standard", "vip"]
# A tier id: a short slug chosen by the organiser (``standard``, ``vip``, ``balcony``).
TIER_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
EventType = Literal["ticket.rendered", "ticket.failed", "order.completed", "order.cancelled"]


class DecodeError(ValueError):
    """A stream entry is not a valid message of the expected type."""


class _Message(BaseModel):
    # Readers ignore fields they do not know: during a rolling deploy an older
    # reader meets messages of a newer writer that added fields.
    model_config = ConfigDict(frozen=True, extra="ignore")


class RenderRequest(_Message):
    """One ticket to render. Carries everything the renderer prints, so the
    renderer never reads the database."""

    type: Literal["ticket.render_requested"] = "ticket.render_requested"
    version: int = SCHEMA_VERSION
    ticket_id: str = Field(min_length=1, max_length=64)
    order_id: str = Field(min_length=1, max_length=64)
    event_id: str = Field(min_length=1, max_length=64)
    event_name: str
    venue: str
    starts_at: datetime
    # Venue time: the ticket prints its times in this IANA zone (``Europe/Berlin``).
    timezone: str = "UTC"
    doors_at: datetime | None = None  # None: the doors open at ``starts_at``
    holder_name: str
    tier: str = Field(pattern=TIER_ID_PATTERN)  # the tier's id
    tier_name: str = ""  # what the ticket prints; empty: the id, capitalised
    lane: Lane = "standard"
    price: Decimal
    currency: str
    code: str = Field(min_length=1, max_length=256)
    total: int = Field(ge=1)
    correlation_id: str = ""
    traceparent: str = ""

    def to_fields(self) -> dict[str, bytes]:
        return {"v": str(self.version).encode(), "data": orjson.dumps(self.model_dump(mode="json"))}


def decode_render_request(fields: Mapping[bytes, bytes]) -> RenderRequest:
    """Decode one render-request stream entry."""
    try:
        raw = fields[b"data"]
        return RenderRequest.model_validate(orjson.loads(raw))
    except (KeyError, orjson.JSONDecodeError, ValidationError, TypeError) as exc:
        raise DecodeError(f"malformed render request: {_short(exc)}") from exc


class TicketEvent(_Message):
    """A ticket or order event as read back from ``ticketry:ticket-events``.

    ``id`` is the entry's stream id, which is also the event's identity: the
    projector and the notifier de-duplicate on it.
    """

    id: str
    type: EventType
    version: int = SCHEMA_VERSION
    event_uuid: str
    order_id: str
    ticket_id: str | None = None
    total: int
    rendered: int
    failed: int
    occurred_at: datetime
    reason: str | None = None
    correlation_id: str = ""
    traceparent: str = ""

    def to_ws(self) -> dict[str, object]:
        """The WebSocket message of CONTRACT.md."""
        msg: dict[str, object] = {
            "type": self.type,
            "id": self.id,
            "order_id": self.order_id,
            "total": self.total,
            "rendered": self.rendered,
            "failed": self.failed,
        }
        if self.ticket_id is not None:
            msg["ticket_id"] = self.ticket_id
        if self.reason is not None:
            msg["reason"] = self.reason
        return msg


def event_fields(
    *,
    type: EventType,
    event_uuid: str,
    order_id: str,
    ticket_id: str,
    reason: str | None = None,
    correlation_id: str = "",
    traceparent: str = "",
) -> list[str]:
    """Field/value list of a ticket event, without the counters.

    The counters (total, rendered, failed) are appended inside Redis by the
    emit script, atomically with the exactly-once check (see ``emit.lua``).
    """
    fields = [
        "type", type,
        "v", str(SCHEMA_VERSION),
        "event_uuid", event_uuid,
        "order_id", order_id,
        "ticket_id", ticket_id,
        "occurred_at", datetime.now(UTC).isoformat(),
        "correlation_id", correlation_id,
    ]  # fmt: skip
    if reason is not None:
        fields += ["reason", reason[:500]]
    if traceparent:
        fields += ["traceparent", traceparent]
    return fields


def decode_ticket_event(entry_id: bytes | str, fields: Mapping[bytes, bytes]) -> TicketEvent:
    """Decode one entry of the ticket-event stream."""
    try:
        data = {k.decode(): v.decode() for k, v in fields.items()}
        return TicketEvent.model_validate(
            {
                "id": entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
                "type": data["type"],
                "version": int(data.get("v", SCHEMA_VERSION)),
                "event_uuid": data["event_uuid"],
                "order_id": data["order_id"],
                "ticket_id": data.get("ticket_id") or None,
                "total": int(data["total"]),
                "rendered": int(data["rendered"]),
                "failed": int(data["failed"]),
                "occurred_at": data["occurred_at"],
                "reason": data.get("reason"),
                "correlation_id": data.get("correlation_id", ""),
                "traceparent": data.get("traceparent", ""),
            }
        )
    except (KeyError, ValueError, UnicodeDecodeError, ValidationError) as exc:
        raise DecodeError(f"malformed ticket event: {_short(exc)}") from exc


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]
