"""``/v1/events/{id}/queue``: a buyer's place in an event's waiting room, and
``…/queue/pause`` / ``…/queue/resume``: its organiser stops and restarts
admission; ``…/queue/close``: ends it for good."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel
from ticketry.auth import Principal
from ticketry.documents import Event
from ticketry.ids import is_valid_id, new_id

from ticketry_api.core import waitingroom
from ticketry_api.core.problem import Problem
from ticketry_api.deps import AppState, State, require
from ticketry_api.errors import problems
from ticketry_api.waitingroom import store
from ticketry_api.waitingroom.admitter import on_sale_ms_of
from ticketry_api.web.links import queue_page_url

router = APIRouter(prefix="/v1/events", tags=["waiting room"])
Buyer = Annotated[Principal, Depends(require("buyer"))]
Organizer = Annotated[Principal, Depends(require("organizer"))]


class QueuePlace(BaseModel):
    """A place in line. ``position`` is 1 for the next buyer to be admitted,
    0 once admitted, and null for an early arrival until ``on_sale_at`` (the
    early arrivals' order is drawn then). Once admitted, ``permission`` is the
    ``Queue-Permission`` header for one order, until ``expires_at``.
    ``status_page_url``: the buyer's page of this place (position and wait,
    live), with a link of its own in the fragment: send the buyer there."""

    queue_id: str
    event_id: str
    position: int | None
    eta_s: float | None
    early: bool
    progress_url: str
    status_page_url: str
    admitted: bool = False
    permission: str | None = None
    expires_at: datetime | None = None
    sold_out: bool = False
    paused: bool = False
    closed: bool = False


class RoomAdmission(BaseModel):
    """A room's admission as a pause, a resume or a close left it: ``waiting``
    places keep their order and positions while ``paused``; once ``closed``
    nobody joins or is admitted again."""

    event_id: str
    paused: bool
    waiting: int
    admitted: int
    closed: bool = False


def _closed_problem() -> Problem:
    return Problem(409, "queue closed", "this on-sale's waiting room is closed for good", kind="queue-closed")


def queue_progress_url(notifier_url: str, queue_id: str) -> str:
    return f"{notifier_url.rstrip('/')}/v1/queue/{queue_id}/progress"


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
    return await place_of(state, event, who.sub)


async def place_of(state: AppState, event: Event, buyer: str) -> QueuePlace:
    """The buyer's place in the event's room: the one they hold, or a new one."""
    on_sale_ms = on_sale_ms_of(event)
    max_queue = state.settings.room_max_queue
    j = await store.join(
        state.redis, event.id, buyer, on_sale_ms=on_sale_ms, early=waitingroom.early_score(), new_id=new_id("qu"),
        max_waiting=max_queue,
    )  # fmt: skip
    if isinstance(j, store.Closed):
        raise _closed_problem()
    if isinstance(j, store.Full):
        raise Problem(
            503, "queue full", f"{j.waiting} buyers are waiting for this event, its room's bound: try again later",
            {"Retry-After": str(waitingroom.full_retry_after_s(max_queue, j.rate))}, kind="queue-full",
        )  # fmt: skip
    admitted = j.drawn and j.rank < j.admitted
    pos = waitingroom.position(j.rank, j.admitted, drawn=j.drawn)
    permit = j.permit if admitted else None
    return QueuePlace(
        queue_id=j.queue_id,
        event_id=event.id,
        position=pos,
        eta_s=None
        if j.paused or j.closed
        else waitingroom.eta_s(pos, j.rate, until_on_sale_s=(on_sale_ms - j.now_ms) / 1000),
        early=waitingroom.is_early(j.score),
        progress_url=queue_progress_url(state.settings.notifier_public_url, j.queue_id),
        status_page_url=queue_page_url(state.links, j.queue_id, buyer, secret=state.settings.jwt_key),
        admitted=admitted,
        permission=permit[0] if permit else None,
        expires_at=datetime.fromtimestamp(permit[1] / 1000, UTC) if permit else None,
        sold_out=j.sold_out and not admitted,
        paused=j.paused,
        closed=j.closed and not admitted,
    )


@router.post("/{event_id}/queue/pause", response_model=RoomAdmission, responses=problems(401, 403, 404, 409))
async def pause_queue(event_id: str, who: Organizer, state: State) -> RoomAdmission:
    """Stop admitting buyers (the event's organiser, or an admin): every place
    keeps its order and position, buyers may still join, nobody is admitted
    until ``…/queue/resume``; permissions already given stay valid until they
    expire. The buyers' queue sockets show ``paused: true``. Again: no change."""
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
    got = await store.close_for_good(state.redis, event.id)
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
    got = await store.set_paused(state.redis, event.id, paused)
    if got.closed:
        raise _closed_problem()
    return RoomAdmission(event_id=event.id, paused=got.paused, waiting=got.waiting, admitted=got.admitted)
