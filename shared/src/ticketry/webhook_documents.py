"""Webhook endpoints an organiser registers per event.

Kept apart from ``documents`` so the webhook feature's schema is in one place;
``documents.ALL_DOCUMENTS`` lists it like every other document.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar, Literal

import pymongo
from beanie import Document
from pydantic import Field

# What a shop can subscribe to. ``order.partially_failed`` covers every order
# that ended with a failed ticket (``data.status`` says ``partially_failed`` or
# ``failed``), so a shop that listens for it misses no order that needs care.
# ``ticket.reissued``: a ticket got a new holder and code, and its new PDF is stored.
WebhookType = Literal["order.completed", "order.partially_failed", "order.cancelled", "ticket.reissued"]
WEBHOOK_TYPES: tuple[WebhookType, ...] = (
    "order.completed", "order.partially_failed", "order.cancelled", "ticket.reissued",
)  # fmt: skip


def _utcnow() -> datetime:
    return datetime.now(UTC)


class WebhookEndpoint(Document):
    """One URL that gets an event's order webhooks, signed with its own secret.

    ``secret`` (``whsec_`` + base64, as Standard Webhooks spells it) is kept in
    the store because every delivery is signed with it; the API shows it once,
    when the endpoint is created. A deleted endpoint's document is gone, and the
    sender drops what was still queued for it.
    """

    id: str  # type: ignore[assignment]  # wh_…
    event_id: str
    url: str
    secret: str
    types: list[WebhookType] = Field(default_factory=lambda: list(WEBHOOK_TYPES))
    description: str = ""
    created_by: str
    created_at: datetime = Field(default_factory=_utcnow)

    class Settings:
        name = "webhook_endpoints"
        # An event's endpoints are looked up by ``event_id`` (a scan on FerretDB v1,
        # which pushes down only ``_id``: the collection is small, a handful per event).
        query_indexes: ClassVar[list[pymongo.IndexModel]] = [pymongo.IndexModel([("event_id", 1), ("_id", 1)])]
