"""What a webhook says and how a delivery travels through Redis.

The message (Standard Webhooks payload ``{type, timestamp, data}``) is built
once, when the dispatcher reads the ticket event, and every attempt sends the
same bytes. Its ``webhook-id`` is derived from (event, order, type), so every
copy of one fact (a re-dispatched event, a retry, a re-drive) carries the same
id and the shop can drop the ones it has seen.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import orjson
from ticketry.events import DecodeError, TicketEvent
from ticketry.replies import as_text
from ticketry.webhook_documents import WebhookType

from ticketry_api.adapters.readmodel import completed_status


def message_id(event_id: str, order_id: str, type: WebhookType, fact: str = "") -> str:
    """The stable ``webhook-id`` of one (event, order, type): an order has one
    of each; ``fact`` tells apart the several of a type an order may have (a
    re-issue: the ticket event's ``event_uuid``)."""
    key = f"{event_id}\x1f{order_id}\x1f{type}" + (f"\x1f{fact}" if fact else "")
    return f"msg_{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def webhook_type(ev: TicketEvent) -> WebhookType | None:
    """The webhook a ticket event means (None: not one)."""
    if ev.type in ("order.cancelled", "ticket.reissued"):
        return ev.type
    if ev.type == "order.completed":
        return "order.completed" if ev.failed == 0 else "order.partially_failed"
    return None


def fact_of(ev: TicketEvent) -> str:
    """What tells this message apart from the others of its order and type (``message_id``)."""
    return ev.event_uuid if ev.type == "ticket.reissued" else ""


def payload(
    ev: TicketEvent, type: WebhookType, order: Mapping[str, Any], issue: Mapping[str, Any] | None = None
) -> bytes:
    """The body every attempt of this message sends; a re-issue's names the
    ticket and its holder and version when the message was built (``issue``)."""
    if type == "ticket.reissued":
        data = {
            "order_id": ev.order_id,
            "event_id": order["event_id"],
            "tier": order.get("tier", "standard"),
            "ticket_id": ev.ticket_id,
            "version": (issue or {}).get("version"),
            "holder_name": (issue or {}).get("holder_name"),
            "stream_id": ev.id,
        }
        return orjson.dumps({"type": type, "timestamp": ev.occurred_at.isoformat(), "data": data})
    status = "cancelled" if type == "order.cancelled" else completed_status(ev.rendered, ev.failed)
    data = {
        "order_id": ev.order_id,
        "event_id": order["event_id"],
        "tier": order.get("tier", "standard"),
        "quantity": order.get("quantity", ev.total),
        "status": status,
        "total": ev.total,
        "rendered": ev.rendered,
        "failed": ev.failed,
        "stream_id": ev.id,
    }
    return orjson.dumps({"type": type, "timestamp": ev.occurred_at.isoformat(), "data": data})


@dataclass(frozen=True)
class Delivery:
    """One attempt to deliver one message to one endpoint (a stream entry)."""

    endpoint_id: str
    msg_id: str
    type: str
    order_id: str
    event_id: str
    body: bytes
    attempt: int = 1
    history: tuple[str, ...] = ()
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def to_fields(self) -> dict[str, str]:
        return {
            "endpoint": self.endpoint_id,
            "msg": self.msg_id,
            "type": self.type,
            "order_id": self.order_id,
            "event_id": self.event_id,
            "body": self.body.decode(),
            "attempt": str(self.attempt),
            "history": orjson.dumps(list(self.history)).decode(),
            "created_at": self.created_at,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes] | Mapping[str, str]) -> Delivery:
        """Decode an entry (raises :class:`ticketry.events.DecodeError` only)."""
        try:
            f = {as_text(k): as_text(v) for k, v in fields.items()}
            history = orjson.loads(f.get("history", "[]"))
            if not isinstance(history, list):
                raise ValueError("history is not a list")
            return cls(
                endpoint_id=f["endpoint"], msg_id=f["msg"], type=f["type"], order_id=f["order_id"],
                event_id=f["event_id"], body=f["body"].encode(), attempt=int(f["attempt"]),
                history=tuple(str(h) for h in history), created_at=f.get("created_at", ""),
            )  # fmt: skip
        except (KeyError, ValueError, UnicodeDecodeError, orjson.JSONDecodeError) as exc:
            raise DecodeError(f"malformed webhook delivery: {type(exc).__name__}: {exc}"[:300]) from exc

    def next_attempt(self, note: str) -> Delivery:
        """The same message's next attempt, with ``note`` on its history."""
        return replace(self, attempt=self.attempt + 1, history=(*self.history, note))

    def redriven(self, note: str) -> Delivery:
        """A fresh run of attempts for a dead letter (same message id)."""
        return replace(self, attempt=1, history=(*self.history, note))
