"""Scanner devices an organiser pairs with a check-in list, and their
one-time pairing codes (``ticketry_api.service_layer.devices``).

Kept apart from ``documents`` like the webhooks' schema; ``documents.ALL_DOCUMENTS``
lists both. No secret is stored: a device's secret and a pairing code are kept
as their SHA-256 only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import pymongo
from beanie import Document
from pydantic import Field


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ScanDevice(Document):
    """A door scanner: one check-in list of one event. ``secret_digest`` is
    set once it is paired; ``last_seen_at`` is its last token refresh;
    ``revoked_at``, once set, ends it (its refreshes and uploads get 401)."""

    id: str  # type: ignore[assignment]  # dv_…
    event_id: str
    list_id: str
    name: str
    created_by: str
    created_at: datetime = Field(default_factory=_utcnow)
    secret_digest: str | None = None
    paired_at: datetime | None = None
    last_seen_at: datetime | None = None
    revoked_at: datetime | None = None

    class Settings:
        name = "scan_devices"
        # An event's devices are listed by ``event_id`` (a scan on FerretDB v1; a handful per event).
        query_indexes: ClassVar[list[pymongo.IndexModel]] = [pymongo.IndexModel([("event_id", 1), ("_id", 1)])]


class DevicePairing(Document):
    """A pairing code not used yet, by its SHA-256 (``_id``): used once (the
    exchange deletes it, and only the deleter pairs), refused after ``expires_at``."""

    id: str  # type: ignore[assignment]  # sha256 hex of the code
    device_id: str
    expires_at: datetime

    class Settings:
        name = "device_pairings"
