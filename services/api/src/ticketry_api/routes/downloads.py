"""``GET /v1/orders/{id}/pdf``: an order's rendered tickets as one PDF ("download
all"), for its buyer (or admin) or the holder of its order link."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response
from ticketry.auth import Principal

from ticketry_api.deps import State
from ticketry_api.edge.order_links import owner_or_link
from ticketry_api.edge.orders_read import order_of_buyer
from ticketry_api.edge.pdf_answers import joined_pdf
from ticketry_api.http.errors import problems
from ticketry_api.web.pdfs import PART_SIZE

router = APIRouter(prefix="/v1/orders", tags=["orders"])

Part = Annotated[int, Query(ge=0, le=1000, description=f"which {PART_SIZE} tickets: 0 for the first")]


@router.get(
    "/{order_id}/pdf",
    response_class=Response,
    responses={200: {"content": {"application/pdf": {}}}, **problems(401, 404, 409, 410, 422, 429, 503)},
)
async def order_pdf(
    order_id: str, who: Annotated[Principal, Depends(owner_or_link)], state: State, part: Part = 0
) -> Response:
    """All of an order's rendered tickets as one multi-page PDF, in order; a
    big order in parts of 250 tickets (``?part=1`` for the second). For its
    buyer (or an admin) or with its order link; 409 while none is rendered,
    410 once cancelled; 503 with ``Retry-After`` while this process's joins
    (or this order's share of them) are all taken."""
    return await joined_pdf(state, await order_of_buyer(order_id, who, state.store), part)
