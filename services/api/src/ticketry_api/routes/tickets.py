"""/v1/tickets"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from ticketry.auth import Principal

from ticketry_api.adapters.readmodel import TicketOf, ticket_of
from ticketry_api.core.pkpass import MEDIA_TYPE
from ticketry_api.core.problem import Problem
from ticketry_api.deps import State, rate_limited
from ticketry_api.edge.pdf_answers import live_ticket_status, pdf_answer
from ticketry_api.edge.wallet_answers import pkpass_answer, wallet_links
from ticketry_api.http.errors import problems
from ticketry_api.http.schemas import ReissueIn, ReissueOut, TicketOut
from ticketry_api.service_layer import reissue
from ticketry_api.store import Store

router = APIRouter(prefix="/v1/tickets", tags=["tickets"])
Reader = Annotated[Principal, Depends(rate_limited("reads", "buyer", "organizer", "staff"))]
# A re-issue counts as a cancel does: a change to an order's tickets.
Reissuer = Annotated[Principal, Depends(rate_limited("cancels", "buyer", "organizer"))]


async def owned_ticket(ticket_id: str, who: Principal, store: Store) -> TicketOf:
    """The ticket if ``who`` may see it: its buyer, its event's organiser, an admin."""
    ticket = await ticket_of(store, ticket_id)
    if ticket is not None and not who.owns(ticket.owner_id) and who.role == "organizer":
        event = await store.event(ticket.event_id)
        if event is not None and event.organizer_id == who.sub:
            return ticket
    if ticket is None or not who.owns(ticket.owner_id):
        raise Problem(404, "ticket not found")
    return ticket


# 403: a staff token bound to no organizer or events (refused wherever it goes).
@router.get(
    "/{ticket_id}",
    response_model=TicketOut,
    response_model_exclude_none=True,
    responses=problems(401, 403, 404, 422, 429),
)
async def get_ticket(ticket_id: str, who: Reader, state: State) -> TicketOut:
    t = await owned_ticket(ticket_id, who, state.store)
    status = await live_ticket_status(state, t)
    return TicketOut(
        id=t.id, order_id=t.order_id, event_id=t.event_id, holder_name=t.holder_name,
        tier=t.tier, status=status, pdf_url=f"/v1/tickets/{t.id}/pdf", wallet=await wallet_links(state, t, status),
    )  # fmt: skip


# What a ticket's PDF answers: the PDF (local storage) or a redirect to a
# presigned URL of the object store (S3); either way 409 before it is rendered
# and 410 once its order is cancelled.
PDF_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {"content": {"application/pdf": {}}},
    307: {"description": "the PDF is at the presigned URL in `Location` (S3 storage)"},
    **problems(401, 403, 404, 409, 410, 422, 429),
}


@router.get("/{ticket_id}/pdf", response_class=Response, responses=PDF_RESPONSES)
async def get_ticket_pdf(ticket_id: str, who: Reader, state: State) -> Response:
    return await pdf_answer(state, await owned_ticket(ticket_id, who, state.store))


# A ticket's Apple Wallet pass: built on its first request and kept beside its
# PDF (docs/wallet.md); 409 before the ticket is rendered, 503 where no pass
# certificate is configured.
@router.get(
    "/{ticket_id}/pkpass",
    response_class=Response,
    responses={200: {"content": {MEDIA_TYPE: {}}}, **problems(401, 403, 404, 409, 410, 422, 429, 503)},
)
async def get_ticket_pkpass(ticket_id: str, who: Reader, state: State) -> Response:
    return await pkpass_answer(state, await owned_ticket(ticket_id, who, state.store))


# A re-issue to another holder (docs/reissue.md): a new code and version, the
# old code revoked, a new PDF on the fast lane. 409 on a cancelled order, after
# check-in, past TICKETRY_MAX_REISSUES, or when another re-issue came first.
@router.post(
    "/{ticket_id}/reissue", status_code=202, response_model=ReissueOut, responses=problems(401, 403, 404, 409, 422, 429)
)
async def reissue_ticket(ticket_id: str, body: ReissueIn, who: Reissuer, state: State) -> ReissueOut:
    t = await owned_ticket(ticket_id, who, state.store)
    version = await reissue.reissue(state, t, body.holder_name, who)
    return ReissueOut(id=t.id, version=version, holder_name=body.holder_name)
