"""``/v1/events/{id}/queue``: a buyer's place in an event's waiting room, and
``…/queue/pause`` / ``…/queue/resume``: its organiser stops and restarts
admission; ``…/queue/close``: ends it for good."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel
from ticketry.auth import Principal
from ticketry.documents import Event
from ticketry.ids import is_valid_id

from ticketry_api.core.problem import Problem
from ticketry_api.deps import AppState, State, require
from ticketry_api.http.errors import problems
from ticketry_api.ops import audit, sales
from ticketry_api.waitingroom import rooms
from ticketry_api.waitingroom.places import QueuePlace, closed_problem, place_of

router = APIRouter(prefix="/v1/events", tags=["waiting room"])
Buyer = Annotated[Principal, Depends(require("buyer"))]
Organizer = Annotated[Principal, Depends(require("organizer"))]


class RoomAdmission(BaseModel):
    """A room's admission as a pause, a resume or a close left it: ``waiting``
    places keep their order and positions while ``paused``; once ``closed``
    nobody joins or is admitted again."""

    event_id: str
    paused: bool
    waiting: int
    admitted: int
    closed: bool = False


@router.post(
    "/{event_id}/queue", status_code=201, response_model=QueuePlace, responses=problems(401, 403, 404, 409, 503)
)
async def join_queue(event_id: str, who: Buyer, state: State) -> QueuePlace:
    """Take a place in the event's waiting room (or get the one you hold: one
    place per buyer). Buyers who come before ``on_sale_at`` get a random place
    among the early arrivals, drawn fairly; later ones queue in arrival order.
    A new buyer while ``TICKETRY_ROOM_MAX_QUEUE`` places wait is answered 503
    ``…/queue-full`` with ``Retry-After``, and once the organiser closed the
    room 409 ``…/queue-closed`` (a place held before says ``closed: true``)."""
    event = await state.store.event(event_id) if is_valid_id(event_id, "ev") else None
    if event is None:
        raise Problem(404, "event not found")
    if not event.waiting_room:
        raise Problem(409, "no waiting room", "this event sells without a queue: order directly", kind="no-queue")
    return await place_of(state.redis, state.settings, state.links, event, who.sub)


@router.post("/{event_id}/queue/pause", response_model=RoomAdmission, responses=problems(401, 403, 404, 409))
async def pause_queue(event_id: str, who: Organizer, state: State) -> RoomAdmission:
    """Stop admitting buyers (the event's organiser, or an admin): every place
    keeps its order and position, buyers may still join, nobody is admitted
    until ``…/queue/resume``; permissions already given stay valid until they
    expire. The buyers' queue sockets show ``paused: true``. Again: no change.
    Written to the operators' audit log (``GET /v1/ops/audit``), as a resume and a close are."""
    return await _set_paused(event_id, who, state, paused=True)


@router.post("/{event_id}/queue/resume", response_model=RoomAdmission, responses=problems(401, 403, 404, 409))
async def resume_queue(event_id: str, who: Organizer, state: State) -> RoomAdmission:
    """Admit again, from where the line stopped, at the room's last rate."""
    return await _set_paused(event_id, who, state, paused=False)


@router.post("/{event_id}/queue/close", response_model=RoomAdmission, responses=problems(401, 403, 404, 409))
async def close_queue(event_id: str, who: Organizer, state: State) -> RoomAdmission:
    """End the on-sale's waiting room for good (the event's organiser, or an
    admin): nobody joins (409 ``…/queue-closed``) or is admitted any more, and
    every buyer still waiting hears ``queue.closed``; permissions already
    given stay valid until they expire. It cannot be reopened. Again: no change."""
    event = await _own_room(event_id, who, state)
    got = await rooms.close_for_good(state.redis, event.id)
    await audit.record(state.redis, who.sub, "close", "room", event.id, {event.id: "closed"})
    await sales.keep_in_view(state.redis, event.id)  # the console shows it closed
    return RoomAdmission(event_id=event.id, paused=False, waiting=got.waiting, admitted=got.admitted, closed=True)


async def _own_room(event_id: str, who: Principal, state: AppState) -> Event:
    """The event whose room ``who`` may act on (its organiser, or an admin)."""
    event = await state.store.event(event_id) if is_valid_id(event_id, "ev") else None
    if event is None:
        raise Problem(404, "event not found")
    # Events are readable by anyone signed in (GET /v1/events/{id}): a 403 leaks nothing.
    if not who.owns(event.organizer_id):
        raise Problem(403, "forbidden", "only the event's organiser may pause, resume or close its waiting room")
    if not event.waiting_room:
        raise Problem(409, "no waiting room", "this event sells without a queue", kind="no-queue")
    return event


async def _set_paused(event_id: str, who: Principal, state: AppState, *, paused: bool) -> RoomAdmission:
    event = await _own_room(event_id, who, state)
    got = await rooms.set_paused(state.redis, event.id, paused)
    if got.closed:
        raise closed_problem()
    await audit.record(
        state.redis, who.sub, "pause" if paused else "resume", "room", event.id,
        {event.id: "paused" if paused else "admitting"},
    )  # fmt: skip
    return RoomAdmission(event_id=event.id, paused=got.paused, waiting=got.waiting, admitted=got.admitted)
