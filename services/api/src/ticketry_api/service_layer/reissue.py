"""Re-issuing a ticket to another holder (docs/reissue.md).

The ticket's next version is won by a unique insert (``TicketIssue``,
``_id`` ``<ticket>/<version>``): of any number of re-issues racing, one wins
each version, and the others get 409. Then, each step safe to lose to a
crash only in the way said:

1. the kept wallet pass is deleted (the next request builds it with the new
   code; a pass is built from the ticket's current version either way);
2. the ticket's render request, at its new version and holder, goes on the
   fast (vip) lane: the renderer replaces the PDF and announces
   ``ticket.reissued`` once, without touching its order's counters.

An outbox guards step 2 as ``ticketry_api.service_layer.orders``'s guards an order's: the
member ``<ticket>@<version>`` is added to ``REISSUES_IN_FLIGHT`` before the
insert and removed once the request is on the stream. An api that dies in
between leaves it there, and the outbox sweep (``sweep_reissues``, every api)
sends the request again past the grace if that version was inserted and is
still the ticket's newest, else drops it. A request sent twice renders once
(the renderer's ``done`` member is ``<ticket>@<version>``).

From the insert on, only the new version's code admits: the door reads the
ticket's current version with the ticket (``readmodel.ticket_of``), and a
code of an older one answers 409 ``revoked``.
"""

from __future__ import annotations

import logging
from typing import Protocol

from redis.asyncio import Redis
from ticketry import streams
from ticketry.auth import Principal
from ticketry.codes import Keyring
from ticketry.documents import Event, Order, TicketIssue
from ticketry.events import RenderRequest
from ticketry.ids import order_of_ticket
from ticketry.replies import as_text
from ticketry.storage import PdfStore, StorageUnavailable
from ticketry.streams import done_member

from ticketry_api.adapters.readmodel import TicketOf, ticket_of
from ticketry_api.adapters.renders import ticket_request
from ticketry_api.config import ApiSettings
from ticketry_api.core.names import NameLimits
from ticketry_api.core.pricing import unit_price_of
from ticketry_api.core.problem import Problem
from ticketry_api.core.reissue import lost_race, next_version
from ticketry_api.service_layer.orders import SWEEP_BATCH, check_names_within, now_ms
from ticketry_api.store import Store
from ticketry_api.store.tickets import issue_id

log = logging.getLogger(__name__)


class ReissueState(Protocol):
    """What a re-issue uses of the process's state (``ticketry_api.deps.AppState`` is one)."""

    @property
    def settings(self) -> ApiSettings: ...
    @property
    def redis(self) -> Redis: ...
    @property
    def keyring(self) -> Keyring: ...
    @property
    def store(self) -> Store: ...
    def pdf_store(self) -> PdfStore: ...


def _key_retired() -> Problem:
    return Problem(409, "re-issue unavailable", "the key this ticket was issued under no longer signs")


def _request(
    state: ReissueState, t: TicketOf, order: Order, event: Event, holder_name: str, version: int
) -> RenderRequest:
    where = order_of_ticket(t.id)
    if where is None:
        raise Problem(404, "ticket not found")
    price = unit_price_of(order, event)
    try:
        return ticket_request(
            state.keyring, event, t.tier, t.order_id, where[1], order.quantity, holder_name, price,
            kid=t.key_id, version=version,
        )  # fmt: skip
    except KeyError:
        raise _key_retired() from None


async def reissue(state: ReissueState, t: TicketOf, holder_name: str, who: Principal) -> int:
    """Re-issue ``t`` to ``holder_name``; its new version (see the module's steps)."""
    store, s = state.store, state.settings
    checked_in = await store.tickets.status(t.id) == "checked_in"
    version = next_version(cancelled=t.cancelled, checked_in=checked_in, version=t.version, max_reissues=s.max_reissues)
    await check_names_within({holder_name}, NameLimits(s.max_distinct_names, s.name_check_budget_s))
    order, event = await store.orders.with_holders(t.order_id), await store.event(t.event_id)
    if order is None or event is None:
        raise Problem(404, "ticket not found")
    req = _request(state, t, order, event, holder_name, version)
    try:
        old_code = state.keyring.sign(t.id, t.event_id, t.tier, kid=t.key_id, version=t.version)
    except KeyError:
        raise _key_retired() from None
    issue = TicketIssue(
        id=issue_id(t.id, version), ticket_id=t.id, order_id=t.order_id, event_id=t.event_id, version=version,
        holder_name=holder_name, revoked_code=old_code, by=who.sub,
    )  # fmt: skip
    member = done_member(t.id, version)
    await state.redis.zadd(streams.REISSUES_IN_FLIGHT, {member: now_ms()})
    if not await store.tickets.reissue(issue):
        await state.redis.zrem(streams.REISSUES_IN_FLIGHT, member)
        raise lost_race()
    try:
        await state.pdf_store().delete_pass(t.order_id, t.id)
    except StorageUnavailable as exc:
        log.warning("reissue: the old wallet pass stays", extra={"ticket_id": t.id, "error": str(exc)[:300]})
    await _send(state.redis, req, member)
    log.info("reissue: ticket re-issued", extra={"ticket_id": t.id, "version": version})
    return version


async def _send(redis: Redis, req: RenderRequest, member: str) -> None:
    async with redis.pipeline(transaction=True) as pipe:
        pipe.xadd(streams.RENDER_VIP, req.to_fields())  # type: ignore[arg-type]
        pipe.zrem(streams.REISSUES_IN_FLIGHT, member)
        await pipe.execute()


async def sweep_reissues(state: ReissueState, grace_s: float) -> int:
    """Send again the render of each re-issue whose api died before it did
    (its member older than ``grace_s``), if that version is still its ticket's
    newest; drop the others. How many members were handled."""
    cutoff = now_ms() - int(grace_s * 1000)
    stale = await state.redis.zrangebyscore(streams.REISSUES_IN_FLIGHT, "-inf", cutoff, start=0, num=SWEEP_BATCH)
    for raw in stale:
        member = as_text(raw)
        ticket_id, _, version = member.rpartition("@")
        t = await ticket_of(state.store, ticket_id)  # its holder and version are its newest re-issue's
        if t is None or t.cancelled or t.version != int(version):
            await state.redis.zrem(streams.REISSUES_IN_FLIGHT, member)  # lost its race, or a newer one came
            continue
        order, event = await state.store.orders.with_holders(t.order_id), await state.store.event(t.event_id)
        if order is None or event is None:
            await state.redis.zrem(streams.REISSUES_IN_FLIGHT, member)
            continue
        try:
            req = _request(state, t, order, event, t.holder_name, t.version)
        except Problem:
            await state.redis.zrem(streams.REISSUES_IN_FLIGHT, member)  # its key retired: nothing can be signed
            continue
        await _send(state.redis, req, member)
        log.warning("outbox: re-issue render sent again", extra={"ticket_id": ticket_id, "version": t.version})
    return len(stale)
