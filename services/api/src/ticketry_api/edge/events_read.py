"""An event as its organiser reaches it: shared by the event routes and the
webhook routes (an endpoint belongs to an event)."""

from __future__ import annotations

from ticketry.auth import Principal
from ticketry.documents import Event
from ticketry.ids import is_valid_id

from ticketry_api.core.problem import Problem
from ticketry_api.store import Store


async def own_event(store: Store, event_id: str, who: Principal) -> Event:
    """The event if ``who`` organises it (admin: any); 404 otherwise."""
    event = await store.event(event_id) if is_valid_id(event_id, "ev") else None
    if event is None or not who.owns(event.organizer_id):
        raise Problem(404, "event not found")
    return event
