"""/v1/tickets"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import RedirectResponse, Response
from ticketry.auth import Principal

from ticketry_api.deps import AppState, State, rate_limited
from ticketry_api.errors import Problem, problems
from ticketry_api.readmodel import TicketOf, ticket_of, ticket_status
from ticketry_api.schemas import TicketOut
from ticketry_api.store import Store

router = APIRouter(prefix="/v1/tickets", tags=["tickets"])
Reader = Annotated[Principal, Depends(rate_limited("reads", "buyer", "organizer", "staff"))]


async def owned_ticket(ticket_id: str, who: Principal, store: Store) -> TicketOf:
    """The ticket if ``who`` may see it: its buyer, its event's organiser, an admin."""
    ticket = await ticket_of(ticket_id)
    if ticket is not None and not who.owns(ticket.owner_id) and who.role == "organizer":
        event = await store.event(ticket.event_id)
        if event is not None and event.organizer_id == who.sub:
            return ticket
    if ticket is None or not who.owns(ticket.owner_id):
        raise Problem(404, "ticket not found")
    return ticket


@router.get("/{ticket_id}", response_model=TicketOut, responses=problems(401, 404, 422, 429))
async def get_ticket(ticket_id: str, who: Reader, state: State) -> TicketOut:
    t = await owned_ticket(ticket_id, who, state.db)
    status = await ticket_status(t)
    return TicketOut(
        id=t.id, order_id=t.order_id, event_id=t.event_id, holder_name=t.holder_name,
        tier=t.tier, status=status, pdf_url=f"/v1/tickets/{t.id}/pdf",
    )  # fmt: skip


# What a ticket's PDF answers: the PDF (local storage) or a redirect to a
# presigned URL of the object store (S3); either way 409 before it is rendered
# and 410 once its order is cancelled.
PDF_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {"content": {"application/pdf": {}}},
    307: {"description": "the PDF is at the presigned URL in `Location` (S3 storage)"},
    **problems(401, 404, 409, 410, 422, 429),
}


async def pdf_answer(state: AppState, t: TicketOf) -> Response:
    """The PDF of ``t``, whose caller was checked: served, or a redirect to a
    presigned URL of the object store."""
    status = await ticket_status(t)
    if status == "cancelled":
        raise Problem(410, "cancelled", "the order was cancelled: its PDFs are no longer served")
    store = state.pdf_store()
    if status in ("queued", "failed") or not await store.exists(t.order_id, t.id):
        raise Problem(409, "not rendered", "the ticket's PDF is not ready")
    no_store = {"Cache-Control": "private, no-store"}
    url = await store.download_url(t.order_id, t.id)
    if url is not None:
        return RedirectResponse(url, status_code=307, headers=no_store)
    pdf = await store.read(t.order_id, t.id)
    if pdf is None:  # deleted since (its order was just cancelled)
        raise Problem(409, "not rendered", "the ticket's PDF is not ready")
    return Response(
        pdf, media_type="application/pdf",
        headers={"Content-Disposition": f'attachment; filename="{t.id}.pdf"', **no_store},
    )  # fmt: skip


@router.get("/{ticket_id}/pdf", response_class=Response, responses=PDF_RESPONSES)
async def get_ticket_pdf(ticket_id: str, who: Reader, state: State) -> Response:
    return await pdf_answer(state, await owned_ticket(ticket_id, who, state.db))
