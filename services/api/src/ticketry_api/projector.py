"""Folds ticket events into the MongoDB read models (group ``projector``).

Idempotent per event: ticket updates are conditional on the state they move
from, order counters only ever move up (``$max``) to the counts carried by the
event, which Redis computed exactly once. Replaying any part of the stream
leaves the same documents.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pymongo import UpdateOne
from redis.asyncio import Redis
from redis.exceptions import ConnectionError, ResponseError, TimeoutError
from ticketry import streams
from ticketry.db import ensure_group, entries_of
from ticketry.documents import Order, Ticket, utcnow
from ticketry.events import DecodeError, TicketEvent, decode_ticket_event

log = logging.getLogger(__name__)


@dataclass
class Fold:
    """The writes one batch of events turns into (pure; easy to test)."""

    tickets: list[UpdateOne] = field(default_factory=list)
    orders: dict[str, dict[str, object]] = field(default_factory=dict)

    def add(self, ev: TicketEvent) -> None:
        if ev.type == "ticket.rendered" and ev.ticket_id:
            self.tickets.append(
                UpdateOne(
                    {"_id": ev.ticket_id, "status": "queued"},
                    {"$set": {"status": "rendered", "rendered_at": ev.occurred_at}},
                )
            )
        elif ev.type == "ticket.failed" and ev.ticket_id:
            self.tickets.append(
                UpdateOne(
                    {"_id": ev.ticket_id, "status": "queued"},
                    {"$set": {"status": "failed", "failure_reason": ev.reason}},
                )
            )
        upd = self.orders.setdefault(ev.order_id, {"rendered": 0, "failed": 0})
        upd["rendered"] = max(int(str(upd["rendered"])), ev.rendered)
        upd["failed"] = max(int(str(upd["failed"])), ev.failed)
        if ev.type == "order.completed":
            upd["status"] = completed_status(ev.total, ev.rendered, ev.failed)

    def order_updates(self) -> list[UpdateOne]:
        ops = []
        for order_id, upd in self.orders.items():
            ops.append(
                UpdateOne(
                    {"_id": order_id},
                    {"$max": {"rendered": upd["rendered"], "failed": upd["failed"]}},
                )
            )
            if "status" in upd:
                ops.append(
                    UpdateOne(
                        {"_id": order_id, "status": "processing"},
                        {"$set": {"status": upd["status"], "completed_at": utcnow()}},
                    )
                )
        return ops


def completed_status(total: int, rendered: int, failed: int) -> str:
    if failed == 0:
        return "completed"
    return "failed" if rendered == 0 else "partially_failed"


async def apply(events: Iterable[TicketEvent]) -> None:
    fold = Fold()
    for ev in events:
        fold.add(ev)
    if fold.tickets:
        await Ticket.get_pymongo_collection().bulk_write(fold.tickets, ordered=False)
    ops = fold.order_updates()
    if ops:
        # Ordered: the counters land before the status that depends on them.
        await Order.get_pymongo_collection().bulk_write(ops, ordered=True)


async def run_projector(redis: Redis, consumer: str, batch: int, stop: asyncio.Event) -> None:
    """Consume ticket events until ``stop``; never dies on a bad entry or a Redis restart."""
    await ensure_group(redis, streams.TICKET_EVENTS, streams.PROJECTOR_GROUP)
    # First our own pending entries (a previous life of this consumer), then new ones.
    cursor = "0"
    while not stop.is_set():
        try:
            resp: Any = await redis.xreadgroup(
                streams.PROJECTOR_GROUP, consumer, {streams.TICKET_EVENTS: cursor},
                count=batch, block=1000,
            )  # fmt: skip
            entries = entries_of(resp)
            if cursor == "0" and not entries:
                cursor = ">"
                continue
            if not entries:
                continue
            good: list[TicketEvent] = []
            ids: list[bytes] = []
            for entry_id, fields in entries:
                ids.append(entry_id)
                try:
                    good.append(decode_ticket_event(entry_id, fields))
                except DecodeError:
                    log.error("projector: undecodable event skipped", extra={"entry": entry_id})
            await apply(good)
            await redis.xack(streams.TICKET_EVENTS, streams.PROJECTOR_GROUP, *ids)
            if cursor != ">":
                cursor = entries[-1][0].decode()
        except (ConnectionError, TimeoutError) as exc:
            log.warning("projector: redis unavailable, retrying", extra={"error": str(exc)})
            await asyncio.sleep(0.5)
        except ResponseError as exc:
            if "NOGROUP" in str(exc):
                await ensure_group(redis, streams.TICKET_EVENTS, streams.PROJECTOR_GROUP)
            else:
                log.exception("projector: redis error")
                await asyncio.sleep(0.5)
        except Exception:
            log.exception("projector: batch failed, will retry")
            await asyncio.sleep(1.0)
            cursor = "0"
