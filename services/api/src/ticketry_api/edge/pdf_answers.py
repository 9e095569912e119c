"""What a request for PDFs answers, once its caller was checked: one ticket's
PDF (served from local storage, or a redirect to a presigned URL of the object
store) and an order's rendered tickets joined into one PDF, a part at a time
("download all"). 409 before anything is rendered, 410 once the order is
cancelled. Shared by the REST routes and the buyer's page."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi.responses import RedirectResponse, Response, StreamingResponse
from ticketry.documents import Order, TicketStatus
from ticketry.storage import StorageUnavailable

from ticketry_api.adapters.readmodel import TicketOf, order_outcome, order_ticket_statuses, ticket_status
from ticketry_api.core.problem import Problem
from ticketry_api.deps import AppState
from ticketry_api.edge.orders_read import tickets_of
from ticketry_api.web.joins import JoinsBusy, part_key
from ticketry_api.web.pdfs import PART_SIZE, join_pdfs


async def live_ticket_status(state: AppState, t: TicketOf) -> TicketStatus:
    """The status of ``t``, where a PDF already stored counts as rendered: a
    renderer stores the PDF before it announces it, and the buyer hears of it
    (and the order's live counters count it) before the projector folds it
    into the read model, so a link the buyer was just given is never refused.
    While the object store is unreachable, the read model's answer stands."""
    status = await ticket_status(state.store, t)
    if status != "queued":
        return status
    try:
        stored = await state.pdf_store().exists(t.order_id, t.id)
    except StorageUnavailable:
        return status
    return "rendered" if stored else status


async def pdf_answer(state: AppState, t: TicketOf) -> Response:
    """The PDF of ``t``, whose caller was checked: served, or a redirect to a
    presigned URL of the object store."""
    status = await ticket_status(state.store, t)
    if status == "cancelled":
        raise Problem(410, "cancelled", "the order was cancelled: its PDFs are no longer served")
    pdfs = state.pdf_store()
    # A stored PDF is served even while the read model still says queued (live_ticket_status).
    if status == "failed" or not await pdfs.exists(t.order_id, t.id):
        raise Problem(409, "not rendered", "the ticket's PDF is not ready")
    no_store = {"Cache-Control": "private, no-store"}
    url = await pdfs.download_url(t.order_id, t.id)
    if url is not None:
        return RedirectResponse(url, status_code=307, headers=no_store)
    pdf = await pdfs.read(t.order_id, t.id)
    if pdf is None:  # deleted since (its order was just cancelled)
        raise Problem(409, "not rendered", "the ticket's PDF is not ready")
    return Response(
        pdf, media_type="application/pdf",
        headers={"Content-Disposition": f'attachment; filename="{t.id}.pdf"', **no_store},
    )  # fmt: skip


async def joined_pdf(state: AppState, order: Order, part: int) -> Response:
    """The rendered tickets of ``order``'s ``part`` (``PART_SIZE`` tickets each) as one PDF."""
    if part * PART_SIZE >= order.quantity:
        raise Problem(404, "no such part", f"this order has {-(-order.quantity // PART_SIZE)} part(s)")
    status, _, _ = await order_outcome(state.redis, state.store, order)
    if status == "cancelled":
        raise Problem(410, "cancelled", "the order was cancelled: its PDFs are no longer served")
    ids = tickets_of(order, part * PART_SIZE, PART_SIZE)
    statuses = await order_ticket_statuses(state.store, order, ids, all_rendered=status == "completed")
    pdfs = state.pdf_store()
    done = {t for t in ids if statuses.get(t) in ("rendered", "checked_in")}
    queued = [t for t in ids if statuses.get(t) == "queued"]
    if queued:  # stored before the projector folded it, as in live_ticket_status
        done |= await pdfs.stored(order.id, queued)
    rendered = [t for t in ids if t in done]
    if not rendered:
        raise Problem(409, "not rendered", "none of these tickets is rendered yet")
    key = part_key(order.id, part, rendered)

    async def join() -> bytes:
        # A PDF that went missing meanwhile (its order was just cancelled) is left out.
        parts = await asyncio.gather(*(pdfs.read(order.id, t) for t in rendered))
        return await asyncio.to_thread(join_pdfs, [p for p in parts if p is not None])

    try:
        body = await state.part_joins().joined(order.id, key, join)
    except JoinsBusy as exc:
        raise Problem(
            503, "busy", f"{exc}: try again shortly", {"Retry-After": str(exc.retry_after_s)}, kind="busy"
        ) from None
    name = f"{order.id}.pdf" if order.quantity <= PART_SIZE else f"{order.id}-part{part + 1}.pdf"
    # In chunks, each sent once the client took the last: many answers of one
    # kept part share its bytes instead of each copying it into a socket buffer.
    return StreamingResponse(
        _chunks(body), media_type="application/pdf",
        headers={
            "Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "private, no-store",
            "Content-Length": str(len(body)),
        },
    )  # fmt: skip


CHUNK_BYTES = 64 * 1024


async def _chunks(body: bytes) -> AsyncIterator[memoryview]:
    view = memoryview(body)
    for start in range(0, len(view), CHUNK_BYTES):
        yield view[start : start + CHUNK_BYTES]
