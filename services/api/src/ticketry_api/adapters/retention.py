"""PDF retention: the PDFs of events that started more than
``TICKETRY_PDF_RETENTION_DAYS`` ago are deleted, whichever the storage backend.

Every api runs the sweep (no leader): it is idempotent. An event is marked in
``streams.PDFS_PURGED`` only after all of its orders' PDFs are deleted, so a
sweep cut short (a crash, the store down) is finished by the next one, and each
old event is visited once.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from redis.asyncio import Redis
from ticketry import streams
from ticketry.documents import utcnow
from ticketry.storage import PdfStore

from ticketry_api.store import Store

log = logging.getLogger(__name__)


def cutoff(now: datetime, days: float) -> datetime:
    """Events that started before this are past retention."""
    return now - timedelta(days=days)


async def sweep(redis: Redis, store: Store, pdfs: PdfStore, days: float, now: datetime | None = None) -> list[str]:
    """Delete the PDFs of every event past retention not purged yet; the events purged now."""
    old = await store.events.started_before(cutoff(now or utcnow(), days))
    if not old:
        return []
    flags = await redis.smismember(streams.PDFS_PURGED, old)
    purged = []
    for event_id in (e for e, seen in zip(old, flags, strict=True) if not seen):
        n = 0
        async for order_id in store.orders.ids_of_event(event_id):
            await pdfs.delete_order(order_id)
            n += 1
        await redis.sadd(streams.PDFS_PURGED, event_id)
        log.info("retention: PDFs of a past event deleted", extra={"event_id": event_id, "orders": n})
        purged.append(event_id)
    return purged
