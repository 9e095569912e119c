"""Folds ticket events into the MongoDB read models (group ``projector``).

Idempotent per event, and order-insensitive across replays:

* a ticket's outcome is an inserted ``TicketState`` (unique per ticket; a
  batch is one insert, because FerretDB makes every update a transaction of
  its own); ``failed → rendered`` (a dead letter re-driven by ``ticketryctl dlq
  redrive`` and rendered after all) is the only update, never back, so a
  replayed or late event cannot undo a newer state;
* an order's outcome is an inserted ``OrderState``, from its ``order.completed``
  event (counters computed inside Redis exactly once per ticket,
  ``ticketry.emit``). A re-drive re-opens the order and completes it again
  with a newer event: the one update, taken only when the event is newer
  (``last_event``). Live counters of an order still rendering are read from
  Redis, not folded here.

Every write filters by ``_id`` alone: FerretDB v1 answers any other filter by
decoding the whole collection. Replaying any part of the stream leaves the
same documents.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from ticketry import streams
from ticketry.consumer import CLAIM_IDLE_MS, CLAIM_INTERVAL_S, GroupConsumer
from ticketry.documents import OrderState, TicketState
from ticketry.events import DecodeError, TicketEvent, decode_ticket_event
from ticketry.replies import Entry

from ticketry_api.adapters.readmodel import completed_status
from ticketry_api.adapters.trim import trim_all
from ticketry_api.store.tickets import Tickets

log = logging.getLogger(__name__)

# Stream trimming piggybacks on the projector loop (one place in the api that
# already runs forever); see ``adapters/trim.py``.
TRIM_INTERVAL_S = 60.0


@dataclass
class Fold:
    """The writes one batch of events turns into (pure; easy to test)."""

    # ticket id → its TicketState document (newest event of the batch wins)
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    # order id → its OrderState document, from the batch's newest order.completed
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, ev: TicketEvent) -> None:
        if ev.type in ("ticket.rendered", "ticket.failed") and ev.ticket_id:
            # model_construct: no beanie initialisation needed, so the fold stays pure.
            self.states[ev.ticket_id] = TicketState.model_construct(
                id=ev.ticket_id,
                order_id=ev.order_id,
                status="rendered" if ev.type == "ticket.rendered" else "failed",
                reason=ev.reason,
                at=ev.occurred_at,
            ).model_dump(by_alias=True)
        elif ev.type == "order.completed":
            key = streams.sortable_stream_id(ev.id)
            cur = self.outcomes.get(ev.order_id)
            if cur is None or key > cur["last_event"]:
                self.outcomes[ev.order_id] = OrderState.model_construct(
                    id=ev.order_id, status=completed_status(ev.rendered, ev.failed),
                    total=ev.total, rendered=ev.rendered, failed=ev.failed, last_event=key,
                    completed_at=ev.occurred_at,
                ).model_dump(by_alias=True)  # fmt: skip


async def apply(tickets: Tickets, events: Iterable[TicketEvent]) -> None:
    fold = Fold()
    for ev in events:
        fold.add(ev)
    if fold.states:
        await tickets.insert_states(list(fold.states.values()))
    if fold.outcomes:
        await tickets.insert_outcomes(list(fold.outcomes.values()))


async def fold_and_ack(redis: Redis, tickets: Tickets, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
    """Apply a batch to MongoDB, then ack it (a crash in between re-applies: harmless)."""
    good: list[TicketEvent] = []
    ids: list[bytes] = []
    for entry_id, fields in entries:
        ids.append(entry_id)
        try:
            good.append(decode_ticket_event(entry_id, fields))
        except DecodeError:
            log.error("projector: undecodable event skipped", extra={"entry": entry_id})
    await apply(tickets, good)
    if ids:
        await redis.xack(streams.TICKET_EVENTS, streams.PROJECTOR_GROUP, *ids)


async def run_projector(
    redis: Redis,
    tickets: Tickets,
    consumer: str,
    batch: int,
    stop: asyncio.Event,
    *,
    claim_idle_ms: int = CLAIM_IDLE_MS,
) -> None:
    """Consume ticket events until ``stop``; never dies on a bad entry or a Redis
    restart (``ticketry.consumer``). Every ``TRIM_INTERVAL_S`` it also trims the
    streams (``adapters/trim.py``)."""
    next_trim = time.monotonic() + 5.0

    async def trim() -> None:
        nonlocal next_trim
        if time.monotonic() >= next_trim:
            next_trim = time.monotonic() + TRIM_INTERVAL_S
            try:
                await trim_all(redis)
            except Exception:
                log.exception("projector: stream trim failed; next time")

    async def fold(entries: list[Entry]) -> None:
        await fold_and_ack(redis, tickets, entries)

    await GroupConsumer(
        redis, streams.TICKET_EVENTS, streams.PROJECTOR_GROUP, consumer, fold, "projector", log,
        batch=batch, claim_idle_ms=claim_idle_ms, claim_interval_s=CLAIM_INTERVAL_S, chores=trim,
    ).run(stop)  # fmt: skip
