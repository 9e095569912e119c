"""What ``POST /v1/orders`` asks of an event with an on-sale: not before
``on_sale_at`` (409), and for a waiting room a ``Queue-Permission`` of the
caller's own (403 without, with another buyer's, expired or used) for at most
the event's ``max_tickets_per_permission`` tickets (409 past it).

A permission is for one accepted order: the gate claims it (one ``ZREM``, so
two orders racing with one permission cannot both pass), and gives it back if
the order is not accepted (sold out, bad body, shed), so the buyer may try
again until it expires. One order, not several up to the ticket limit: a
permission is the buyer's turn at the counter, and a second order is a second
turn (queue again), as it was before the limit; so the limit is simply the
order's size, checked before the permission is claimed (an order too big for
it leaves the permission as it was).
"""

from __future__ import annotations

import time

from redis.asyncio import Redis
from ticketry.auth import Principal
from ticketry.documents import Event

from ticketry_api.core import waitingroom
from ticketry_api.core.problem import Problem
from ticketry_api.waitingroom import rooms


class OrderGate:
    """One order's pass through the gate: :meth:`check` (called by
    ``place_order`` once the event is known, not for an idempotent replay),
    then :meth:`accepted` or :meth:`refused`."""

    def __init__(self, redis: Redis, key: bytes, who: Principal, permission: str | None, quantity: int) -> None:
        self.redis, self.key, self.who, self.permission, self.quantity = redis, key, who, permission, quantity
        self._claimed: tuple[str, int] | None = None  # (event id, expires ms)

    async def check(self, event: Event) -> None:
        now_ms = int(time.time() * 1000)
        if event.on_sale_at is not None and now_ms < int(event.on_sale_at.timestamp() * 1000):
            raise Problem(409, "not on sale yet", f"orders open at {event.on_sale_at.isoformat()}", kind="not-on-sale")
        if not event.waiting_room:
            return
        try:
            granted = waitingroom.verify_permission(self.key, self.permission, event.id, self.who.sub, now_ms)
        except waitingroom.BadPermission as exc:
            raise Problem(403, "queue permission required", str(exc), kind="queue-permission") from None
        limit = event.tickets_per_permission()
        if limit is not None and self.quantity > limit:
            raise Problem(
                409,
                "limit per permission",
                f"a queue permission orders at most {limit} tickets of this event; this order asks for {self.quantity}",
                kind="permission-limit",
            )
        if not await rooms.claim(self.redis, event.id, self.who.sub):
            raise Problem(
                403, "queue permission used", "this permission has already placed an order", kind="queue-permission"
            )
        self._claimed = (event.id, granted.expires_ms)

    async def accepted(self) -> None:
        if self._claimed is not None:
            await rooms.used(self.redis, self._claimed[0])
            self._claimed = None

    async def refused(self) -> None:
        if self._claimed is not None:
            event_id, expires_ms = self._claimed
            self._claimed = None
            await rooms.give_back(self.redis, event_id, self.who.sub, expires_ms)
