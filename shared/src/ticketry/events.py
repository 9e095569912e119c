"""Versioned messages that travel through the streams.

A stream entry is a flat map of byte strings. Each message type knows how to turn
itself into such a map (``to_fields``) and back (``decode_*``); decoding failures
raise :class:`DecodeError` and nothing else, so a consumer can dead-letter them.

Versions (the ``v`` field of every entry, a major version)
-----------------------------------------------------------
During a rolling deploy old and new processes read each other's messages, so:

* **Within a major version a writer may only add optional fields.** Readers
  ignore fields they do not know, and a field a message lacks takes its
  default: an old reader reads a newer writer's message, a new reader an older
  writer's (``tests/unit/test_message_versions.py``).
* **Anything an older reader would misread bumps the major version**
  (``SCHEMA_VERSION``), and readers dispatch on ``v`` (``_READERS``): each
  major version they know has its own reader, which upgrades it to the current
  model. An entry without ``v`` predates versioning: version 1.
* **A message of a major version newer than the reader knows** raises
  :class:`UnsupportedVersion` (a :class:`DecodeError` saying so), never a
  guess: the renderer dead-letters it at once with that reason, and once every
  renderer runs the new code ``ticketryctl dlq redrive`` renders it (exactly
  once, as any re-drive); the projector and the notifier skip and log it (the
  projector's read models are rebuilt by ``replay``). Deploy readers before
  writers and none of this happens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ticketry.replies import as_text

# The major version this code writes, and the newest it reads (see the module docstring).
SCHEMA_VERSION = 1

# The render lane of a tier: ``vip`` is read first. Organisers choose it per tier.
Lane = Literal["standard", "vip"]
# A tier id: a short slug chosen by the organiser (``standard``, ``vip``, ``balcony``).
TIER_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
EventType = Literal["ticket.rendered", "ticket.failed", "ticket.reissued", "order.completed", "order.cancelled"]


class DecodeError(ValueError):
    """A stream entry is not a valid message of the expected type."""


class UnsupportedVersion(DecodeError):
    """A stream entry of a major version newer than this reader knows."""

    def __init__(self, kind: str, version: int) -> None:
        super().__init__(
            f"unsupported {kind} version {version}: this reader knows versions up to {SCHEMA_VERSION}"
            " (written by a newer Ticketry; upgrade this reader)"
        )
        self.version = version


M = TypeVar("M")


def message_version(fields: Mapping[bytes, bytes], data: Mapping[str, Any] | None = None) -> int:
    """The major version of an entry: its ``v`` field, else its payload's
    ``version``, else 1 (written before versions were)."""
    raw: Any = fields.get(b"v")
    if raw is None and data is not None:
        raw = data.get("version")
    if raw is None:
        return 1
    try:
        version = int(raw.decode() if isinstance(raw, bytes) else raw)
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"malformed message version: {raw!r}"[:300]) from exc
    if version < 1:
        raise DecodeError(f"malformed message version: {version}")
    return version


def _dispatch(kind: str, version: int, readers: Mapping[int, Callable[[Any], M]], payload: Any) -> M:
    """Read ``payload`` with the reader of its major version."""
    reader = readers.get(version)
    if reader is None:
        raise UnsupportedVersion(kind, version)
    return reader(payload)


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
    # The ticket's re-issue this render is for (0: its first issue). A re-issued
    # ticket is rendered again: its PDF replaced, its order's counters untouched.
    ticket_version: int = Field(default=0, ge=0)

    def to_fields(self) -> dict[str, bytes]:
        return {"v": str(self.version).encode(), "data": orjson.dumps(self.model_dump(mode="json"))}


def _render_request_v1(data: Any) -> RenderRequest:
    return RenderRequest.model_validate({**data, "version": 1} if isinstance(data, dict) else data)


# One reader per major version this code knows; each returns the current model.
_RENDER_REQUEST_READERS: Mapping[int, Callable[[Any], RenderRequest]] = {1: _render_request_v1}


def decode_render_request(fields: Mapping[bytes, bytes]) -> RenderRequest:
    """Decode one render-request stream entry, by its version (see the module
    docstring); :class:`UnsupportedVersion` for a newer major version."""
    try:
        data = orjson.loads(fields[b"data"])
        version = message_version(fields, data if isinstance(data, dict) else None)
        return _dispatch("render request", version, _RENDER_REQUEST_READERS, data)
    except DecodeError:
        raise
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
        """The WebSocket message of docs/contract.md."""
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


# The counters every ticket event ends with, in this order: its order's
# progress when the event was appended (``TicketEvent.total``, …).
COUNTERS: tuple[str, str, str] = ("total", "rendered", "failed")


def event_fields(
    *,
    type: EventType,
    event_uuid: str,
    order_id: str,
    ticket_id: str,
    reason: str | None = None,
    correlation_id: str = "",
    traceparent: str = "",
    occurred_at: str | None = None,
) -> list[str]:
    """Field/value list of a ticket event, without the counters: the one
    spelling of the wire format (``occurred_at``: ISO 8601, now unless given).

    The counters (:data:`COUNTERS`) are appended inside Redis by the emit
    scripts, atomically with the exactly-once check; those scripts write the
    order events from this same list (see ``ticketry.emit``).
    """
    fields = [
        "type", type,
        "v", str(SCHEMA_VERSION),
        "event_uuid", event_uuid,
        "order_id", order_id,
        "ticket_id", ticket_id,
        "occurred_at", occurred_at if occurred_at is not None else datetime.now(UTC).isoformat(),
        "correlation_id", correlation_id,
    ]  # fmt: skip
    if reason is not None:
        fields += ["reason", reason[:500]]
    if traceparent:
        fields += ["traceparent", traceparent]
    return fields


def _ticket_event_v1(entry: tuple[bytes | str, dict[str, str]]) -> TicketEvent:
    entry_id, data = entry
    return TicketEvent.model_validate(
        {
            "id": as_text(entry_id),
            "type": data["type"],
            "version": 1,
            "event_uuid": data["event_uuid"],
            "order_id": data["order_id"],
            "ticket_id": data.get("ticket_id") or None,
            **{counter: int(data[counter]) for counter in COUNTERS},
            "occurred_at": data["occurred_at"],
            "reason": data.get("reason"),
            "correlation_id": data.get("correlation_id", ""),
            "traceparent": data.get("traceparent", ""),
        }
    )


_TICKET_EVENT_READERS: Mapping[int, Callable[[tuple[bytes | str, dict[str, str]]], TicketEvent]] = {1: _ticket_event_v1}


def decode_ticket_event(entry_id: bytes | str, fields: Mapping[bytes, bytes]) -> TicketEvent:
    """Decode one entry of the ticket-event stream, by its version (see the
    module docstring); :class:`UnsupportedVersion` for a newer major version."""
    try:
        version = message_version(fields)
        data = {k.decode(): v.decode() for k, v in fields.items()}
        return _dispatch("ticket event", version, _TICKET_EVENT_READERS, (entry_id, data))
    except DecodeError:
        raise
    except (KeyError, ValueError, UnicodeDecodeError, ValidationError) as exc:
        raise DecodeError(f"malformed ticket event: {_short(exc)}") from exc


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]
