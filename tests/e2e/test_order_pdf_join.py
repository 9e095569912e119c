"""An order's "download all" through the real api (``GET /v1/orders/{id}/pdf``):
its fast-path stamps, rendered by the stack's two renderer processes, are
joined by ``ticketry.orderpdf`` into one PDF whose pages share the event's
page, fonts and images (a fraction of its tickets' files, every page's text
and QR as its ticket's own); an order with a ticket rendered in full is still
joined, by PDFium's page import, page for page."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import pypdfium2
from ticketry.storage import pdf_path, write_atomic
from ticketry_devstack.procs import Stack
from ticketry_renderer.render import Design, render_ticket_full

from tests.conftest import TokenFactory
from tests.helpers import bearer, create_event, decode_qr, place_order, wait_rendered
from tests.unit.test_render_fidelity import Signer, request

HOLDERS = ["Ada Lovelace", "Zoë Ångström", "Дмитрий Шостакович", "Γιώργος Σεφέρης", "José Ñúñez", "Grace Hopper"] * 2


def _pages(pdf: bytes) -> list[tuple[str, bytes]]:
    """Each page's text (PDFium) and the page as a one-page PDF of its own (for the QR reader)."""
    doc = pypdfium2.PdfDocument(io.BytesIO(pdf))
    try:
        out = []
        for i in range(len(doc)):
            textpage = doc[i].get_textpage()
            text = textpage.get_text_range()
            textpage.close()
            single = pypdfium2.PdfDocument.new()
            single.import_pages(doc, [i])
            buf = io.BytesIO()
            single.save(buf)
            single.close()
            out.append((text, buf.getvalue()))
        return out
    finally:
        doc.close()


async def _tickets(api: httpx.AsyncClient, order: dict[str, Any], buyer: str) -> list[bytes]:
    """Each ticket's own PDF, downloaded alone."""
    pdfs = []
    for tid in order["tickets"]:
        r = await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(buyer))
        assert r.status_code == 200, r.text
        pdfs.append(r.content)
    return pdfs


async def test_download_all_shares_the_events_page_between_its_tickets(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("join-org-1", "organizer"), token("join-buyer-1", "buyer")
    # Given a rendered order of tickets named in several scripts, stamped by two renderers
    event = await create_event(api, org, capacity=50)
    r = await place_order(api, buyer, event["id"], len(HOLDERS), holders=HOLDERS)
    assert r.status_code == 202, r.text
    order = r.json()
    await wait_rendered(api, order["id"], buyer)
    tickets = await _tickets(api, order, buyer)

    # When the buyer downloads them all
    joined = await api.get(f"/v1/orders/{order['id']}/pdf", headers=bearer(buyer))

    # Then it is one PDF of a page per ticket, far smaller than the tickets'
    # files (the event's page, fonts and images written once)
    assert joined.status_code == 200 and joined.headers["content-type"] == "application/pdf", joined.text
    print(f"{len(tickets)} tickets: {sum(map(len, tickets))} bytes apart, {len(joined.content)} joined")
    assert len(joined.content) < sum(map(len, tickets)) / 3
    pages = _pages(joined.content)
    assert len(pages) == len(tickets)
    # And each page holds its ticket's text and QR, in the order's order
    for tid, holder, own, (text, page) in zip(order["tickets"], HOLDERS, tickets, pages, strict=True):
        ((own_text, _),) = _pages(own)
        assert text == own_text and tid in text and holder in text, (text, own_text)
        assert decode_qr(page) == decode_qr(own)


async def test_an_order_with_a_ticket_rendered_in_full_still_downloads_whole(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("join-org-2", "organizer"), token("join-buyer-2", "buyer")
    # Given a rendered 3-ticket order whose middle ticket is stored as a full
    # WeasyPrint render (what a renderer stores for a ticket the fast path declines)
    event = await create_event(api, org, capacity=10)
    r = await place_order(api, buyer, event["id"], 3)
    assert r.status_code == 202, r.text
    order = r.json()
    await wait_rendered(api, order["id"], buyer)
    middle = order["tickets"][1]
    full_req = request(Signer(), "Ada Lovelace", ticket_id=middle, order_id=order["id"])
    full = render_ticket_full(full_req, Design.default())
    write_atomic(pdf_path(Path(stack.env["TICKETRY_STORAGE_DIR"]), order["id"], middle), full)
    tickets = await _tickets(api, order, buyer)
    assert tickets[1] == full

    # When the buyer downloads them all
    joined = await api.get(f"/v1/orders/{order['id']}/pdf", headers=bearer(buyer))

    # Then every ticket is a page of it, each page its own file's text and QR
    # (PDFium's join: each ticket's whole file, no shared page)
    assert joined.status_code == 200 and joined.headers["content-type"] == "application/pdf", joined.text
    pages = _pages(joined.content)
    assert len(pages) == 3
    for own, (text, page) in zip(tickets, pages, strict=True):
        ((own_text, _),) = _pages(own)
        assert text == own_text
        assert decode_qr(page) == decode_qr(own)
    assert decode_qr(pages[1][1]) == full_req.code
    assert len(joined.content) > sum(map(len, tickets)) / 2
