"""A ticket's status as buyers see it, from the read models.

The ``tickets`` document carries what the API itself decided (``revoked`` by a
cancel, ``checked_in`` by a scan); ``ticket_states`` carries what the projector
folded in from the render events. The API's decisions win.
"""

from __future__ import annotations

from ticketry.documents import Checkin, Ticket, TicketState, TicketStatus


def effective(own: TicketStatus, rendered: TicketStatus | None) -> TicketStatus:
    if own in ("revoked", "checked_in"):
        return own
    return rendered or own


async def ticket_status(ticket: Ticket) -> TicketStatus:
    if ticket.status not in ("revoked", "checked_in") and await Checkin.get(ticket.id) is not None:
        return "checked_in"  # the Checkin record is the authority
    state = await TicketState.get(ticket.id)
    return effective(ticket.status, state.status if state else None)


async def order_ticket_statuses(order_id: str) -> dict[str, TicketStatus]:
    """Every ticket of an order → its status (two indexed queries)."""
    own = await Ticket.get_pymongo_collection().find({"order_id": order_id}, {"status": 1}).to_list()
    states = await TicketState.get_pymongo_collection().find({"order_id": order_id}, {"status": 1}).to_list()
    rendered = {s["_id"]: s["status"] for s in states}
    return {t["_id"]: effective(t["status"], rendered.get(t["_id"])) for t in own}
