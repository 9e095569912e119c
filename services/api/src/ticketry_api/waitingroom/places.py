"""A buyer's place in an event's waiting room, as the queue's route and the
buyer's queue page show it: the one they hold, or a new one."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel
from redis.asyncio import Redis
from ticketry.documents import Event
from ticketry.ids import new_id

from ticketry_api.config import ApiSettings
from ticketry_api.core import waitingroom
from ticketry_api.core.problem import Problem
from ticketry_api.waitingroom import rooms
from ticketry_api.waitingroom.admitter import on_sale_ms_of
from ticketry_api.web.links import LinkSettings, queue_page_url


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


def closed_problem() -> Problem:
    return Problem(409, "queue closed", "this on-sale's waiting room is closed for good", kind="queue-closed")


def queue_progress_url(notifier_url: str, queue_id: str) -> str:
    return f"{notifier_url.rstrip('/')}/v1/queue/{queue_id}/progress"


async def place_of(redis: Redis, settings: ApiSettings, links: LinkSettings, event: Event, buyer: str) -> QueuePlace:
    """The buyer's place in the event's room: the one they hold, or a new one."""
    on_sale_ms = on_sale_ms_of(event)
    max_queue = settings.room_max_queue
    j = await rooms.join(
        redis, event.id, buyer, on_sale_ms=on_sale_ms, early=waitingroom.early_score(), new_id=new_id("qu"),
        max_waiting=max_queue,
    )  # fmt: skip
    if isinstance(j, rooms.Closed):
        raise closed_problem()
    if isinstance(j, rooms.Full):
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
        progress_url=queue_progress_url(settings.notifier_public_url, j.queue_id),
        status_page_url=queue_page_url(links, j.queue_id, buyer, secret=settings.jwt_key),
        admitted=admitted,
        permission=permit[0] if permit else None,
        expires_at=datetime.fromtimestamp(permit[1] / 1000, UTC) if permit else None,
        sold_out=j.sold_out and not admitted,
        paused=j.paused,
        closed=j.closed and not admitted,
    )
