"""/v1/tickets"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse
from ticketry.auth import Principal
from ticketry.storage import pdf_path

from ticketry_api.deps import State, rate_limited
from ticketry_api.errors import Problem, problems
from ticketry_api.orders import event_of
from ticketry_api.readmodel import TicketOf, ticket_of, ticket_status
from ticketry_api.schemas import TicketOut

router = APIRouter(prefix="/v1/tickets", tags=["tickets"])
Reader = Annotated[Principal, Depends(rate_limited("reads", "buyer", "organizer", "staff"))]


async def owned_ticket(ticket_id: str, who: Principal) -> TicketOf:
    """The ticket if ``who`` may see it: its buyer, its event's organiser, an admin."""
    ticket = await ticket_of(ticket_id)
    if ticket is not None and not who.owns(ticket.owner_id) and who.role == "organizer":
        event = await event_of(ticket.event_id)
        if event is not None and event.organizer_id == who.sub:
            return ticket
    if ticket is None or not who.owns(ticket.owner_id):
        raise Problem(404, "ticket not found")
    return ticket


@router.get("/{ticket_id}", response_model=TicketOut, responses=problems(401, 404, 422, 429))
async def get_ticket(ticket_id: str, who: Reader) -> TicketOut:
    t = await owned_ticket(ticket_id, who)
    status = await ticket_status(t)
    return TicketOut(
        id=t.id, order_id=t.order_id, event_id=t.event_id, holder_name=t.holder_name,
        tier=t.tier, status=status, pdf_url=f"/v1/tickets/{t.id}/pdf",
    )  # fmt: skip


@router.get(
    "/{ticket_id}/pdf",
    response_class=FileResponse,
    responses={200: {"content": {"application/pdf": {}}}, **problems(401, 404, 409, 410, 422, 429)},
)
async def get_ticket_pdf(ticket_id: str, who: Reader, state: State) -> FileResponse:
    t = await owned_ticket(ticket_id, who)
    path = pdf_path(state.settings.storage_dir, t.order_id, t.id)
    status = await ticket_status(t)
    if status == "cancelled":
        raise Problem(410, "cancelled", "the order was cancelled: its PDFs are no longer served")
    if status in ("queued", "failed") or not path.is_file():
        raise Problem(409, "not rendered", "the ticket's PDF is not ready")
    return FileResponse(
        path, media_type="application/pdf", filename=f"{t.id}.pdf",
        headers={"Cache-Control": "private, no-store"},
    )  # fmt: skip
