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

From the insert on, only the new version's code admits: the door reads the
ticket's current version with the ticket (``readmodel.ticket_of``), and a
code of an older one answers 409 ``revoked``.
"""

from __future__ import annotations

import logging

from ticketry import streams
from ticketry.auth import Principal
from ticketry.documents import TicketIssue
from ticketry.ids import order_of_ticket
from ticketry.storage import StorageUnavailable

from ticketry_api.core.names import NameLimits
from ticketry_api.core.pricing import unit_price_of
from ticketry_api.core.problem import Problem
from ticketry_api.core.reissue import lost_race, next_version
from ticketry_api.deps import AppState
from ticketry_api.orders import check_names_within
from ticketry_api.readmodel import TicketOf
from ticketry_api.renders import ticket_request
from ticketry_api.store.tickets import issue_id

log = logging.getLogger(__name__)


async def reissue(state: AppState, t: TicketOf, holder_name: str, who: Principal) -> int:
    """Re-issue ``t`` to ``holder_name``; its new version (see the module's steps)."""
    store, s = state.store, state.settings
    checked_in = await store.tickets.status(t.id) == "checked_in"
    version = next_version(cancelled=t.cancelled, checked_in=checked_in, version=t.version, max_reissues=s.max_reissues)
    await check_names_within({holder_name}, NameLimits(s.max_distinct_names, s.name_check_budget_s))
    where = order_of_ticket(t.id)
    order, event = await store.orders.with_holders(t.order_id), await store.event(t.event_id)
    if where is None or order is None or event is None:
        raise Problem(404, "ticket not found")
    try:
        old_code = state.keyring.sign(t.id, t.event_id, t.tier, kid=t.key_id, version=t.version)
        price = unit_price_of(order, event)
        req = ticket_request(
            state.keyring, event, t.tier, t.order_id, where[1], order.quantity, holder_name, price,
            kid=t.key_id, version=version,
        )  # fmt: skip
    except KeyError:
        raise Problem(409, "re-issue unavailable", "the key this ticket was issued under no longer signs") from None
    issue = TicketIssue(
        id=issue_id(t.id, version), ticket_id=t.id, order_id=t.order_id, event_id=t.event_id, version=version,
        holder_name=holder_name, revoked_code=old_code, by=who.sub,
    )  # fmt: skip
    if not await store.tickets.reissue(issue):
        raise lost_race()
    try:
        await state.pdf_store().delete_pass(t.order_id, t.id)
    except StorageUnavailable as exc:
        log.warning("reissue: the old wallet pass stays", extra={"ticket_id": t.id, "error": str(exc)[:300]})
    await state.redis.xadd(streams.RENDER_VIP, req.to_fields())  # type: ignore[arg-type]
    log.info("reissue: ticket re-issued", extra={"ticket_id": t.id, "version": version})
    return version
