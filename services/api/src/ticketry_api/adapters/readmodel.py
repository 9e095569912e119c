"""A ticket's and an order's status as buyers see them, from the read models.

A ticket has no document of its own: it is its order's (``ids.ticket_ids``).
What the API decided comes first — a cancelled order's tickets are
``cancelled``, a ``Checkin`` makes one ``checked_in`` — then what the projector
folded in from the render events (``ticket_states``), else ``queued``. An
order's counters come live from Redis while it renders, and from its
``OrderState`` after.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from redis.asyncio import Redis
from ticketry import streams
from ticketry.documents import Order, PublicOrderStatus, TicketStatus, is_placed
from ticketry.ids import order_of_ticket
from ticketry.replies import as_text

from ticketry_api.store import Store


@dataclass(frozen=True)
class TicketOf:
    """A ticket: what its order says of it."""

    id: str
    order_id: str
    owner_id: str
    event_id: str
    holder_name: str
    tier: str
    cancelled: bool  # its order's: the ticket is revoked
    key_id: str | None = None  # the key its code was signed with (its order's)
    version: int = 0  # its newest re-issue (0: as first issued); only that version's code admits


async def ticket_of(store: Store, ticket_id: str) -> TicketOf | None:
    """The ticket, from one read of its order by ``_id`` (without the order's
    list of ticket ids: 10,000 of them in a big order, and the id says where
    the ticket is); None for an id that is not a ticket of a real order."""
    if (where := order_of_ticket(ticket_id)) is None:
        return None
    order_id, n = where
    order, issue = await asyncio.gather(store.orders.with_holders(order_id), store.tickets.current_issue(ticket_id))
    # A place past the end is no ticket.
    if order is None or not is_placed(order.status) or n >= order.quantity:
        return None
    return TicketOf(
        id=ticket_id, order_id=order_id, owner_id=order.owner_id, event_id=order.event_id,
        holder_name=issue.holder_name if issue else order.holder_of(n), tier=order.tier,
        cancelled=order.status == "cancelled", key_id=order.key_id, version=issue.version if issue else 0,
    )  # fmt: skip


async def ticket_status(store: Store, ticket: TicketOf) -> TicketStatus:
    if ticket.cancelled:
        return "cancelled"
    return await store.tickets.status(ticket.id) or "queued"


async def order_ticket_statuses(
    store: Store, order: Order, ids: list[str] | None = None, *, all_rendered: bool = False
) -> dict[str, TicketStatus]:
    """Every ticket of an order → its status. ``all_rendered``: the order is
    ``completed`` (every ticket rendered, none failed), so the render outcomes
    need no reading, only the check-ins.

    Read by the tickets' ids (``Reads.by_ids``: on FerretDB a point read or
    two a ticket, side by side, up to ``POINT_READS_UP_TO`` tickets and a scan
    by ``order_id`` above; on MongoDB indexed queries). ``ids``: only these
    tickets of the order (a page of them)."""
    ids = order.ticket_ids if ids is None else ids
    if order.status == "cancelled":
        return dict.fromkeys(ids, "cancelled")
    if all_rendered:
        rendered: dict[str, TicketStatus] = dict.fromkeys(ids, "rendered")
        admitted = await store.tickets.admitted(order.id, ids)
    else:
        admitted, rendered = await asyncio.gather(
            store.tickets.admitted(order.id, ids), store.tickets.outcomes(order.id, ids)
        )
    out: dict[str, TicketStatus] = {t: rendered.get(t, "queued") for t in ids}
    out.update(dict.fromkeys(admitted, "checked_in"))
    return out


async def order_outcome(redis: Redis, store: Store, order: Order) -> tuple[PublicOrderStatus, int, int]:
    """``(status, rendered, failed)`` of an order: its own status once cancelled
    (or still processing), the live Redis counters while its progress hash
    lives, else the projector's ``OrderState``."""
    live = {as_text(k): as_text(v) for k, v in (await redis.hgetall(streams.order_progress(order.id))).items()}
    if live:
        rendered, failed = int(live.get(streams.PROGRESS_RENDERED, 0)), int(live.get(streams.PROGRESS_FAILED, 0))
        status: PublicOrderStatus = "processing"
        if streams.PROGRESS_COMPLETED in live:
            state = await store.tickets.order_state(order.id)
            status = state.status if state is not None else completed_status(rendered, failed)
    else:
        state = await store.tickets.order_state(order.id)
        status, rendered, failed = (state.status, state.rendered, state.failed) if state else ("processing", 0, 0)
    return ("cancelled" if order.status == "cancelled" else status), rendered, failed


def completed_status(rendered: int, failed: int) -> PublicOrderStatus:
    """An order with every ticket final: its status from the counters."""
    if failed == 0:
        return "completed"
    return "failed" if rendered == 0 else "partially_failed"
