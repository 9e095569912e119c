"""An order's stamped tickets joined into one PDF whose pages share their event's
page (``ticketry.orderpdf``): every page as its own ticket's PDF draws
it (same pixels, same text, a QR that decodes), a fraction of the bytes of the
tickets' files, and no join at all for what is not one template's stamps."""

from __future__ import annotations

import io
from typing import Any

import pypdf
import pypdfium2
from fontTools.misc.timeTools import timestampNow  # type: ignore[import-untyped]
from fontTools.ttLib import TTFont  # type: ignore[import-untyped]
from PIL import ImageChops
from ticketry import orderpdf
from ticketry_renderer import fastpath
from ticketry_renderer.render import Design, render_ticket, render_ticket_full

from tests.helpers import decode_qr
from tests.unit.test_render_fidelity import WORLD_NAMES, request, text_of


def _page(pdf: bytes, i: int) -> Any:
    doc = pypdfium2.PdfDocument(pdf)
    try:
        return doc[i].render(scale=100 / 72).to_pil().convert("L")
    finally:
        doc.close()


def _one_page(pdf: bytes, i: int) -> bytes:
    """Page ``i`` of ``pdf`` as a PDF of its own (for the QR reader and text)."""
    writer = pypdf.PdfWriter()
    writer.add_page(pypdf.PdfReader(io.BytesIO(pdf)).pages[i])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_an_orders_pages_share_the_template_and_draw_each_ticket(design: Design, signer: Any) -> None:
    # Given an order's tickets on the fast path, names in every script
    names = ["Ada Lovelace", *WORLD_NAMES, "Ada Lovelace"]
    reqs = [request(signer, name) for name in names]
    pdfs = [render_ticket(r, design) for r in reqs]

    # When they are joined
    joined = orderpdf.join(pdfs)

    # Then it is one PDF of as many pages, a strict reader agrees, and it is far
    # smaller than the tickets' files (the event's page, fonts and images once)
    assert joined is not None
    assert len(pypdf.PdfReader(io.BytesIO(joined), strict=True).pages) == len(reqs)
    assert len(joined) < sum(map(len, pdfs)) / 4
    # And each page draws exactly what its ticket's own PDF draws, text included
    for i in (0, 5, 13, len(reqs) - 1):
        assert ImageChops.difference(_page(joined, i), _page(pdfs[i], 0)).getbbox() is None
        page = _one_page(joined, i)
        assert decode_qr(page) == reqs[i].code
        assert text_of(page) == text_of(pdfs[i])


def test_tickets_of_two_templates_or_a_full_render_are_not_joined(design: Design, signer: Any) -> None:
    a = render_ticket(request(signer, "Ada Lovelace"), design)
    other_event = render_ticket(request(signer, "Ada Lovelace", event_name="Another Night"), design)
    full = render_ticket_full(request(signer, "Ada Lovelace"), design)
    assert orderpdf.join([a, other_event]) is None
    assert orderpdf.join([a, full]) is None
    assert orderpdf.join([full]) is None
    assert orderpdf.join([]) is None


def _font_programs(pdf: bytes) -> list[bytes]:
    """Every TrueType program embedded in ``pdf`` (its font descriptors' FontFile2)."""
    reader = pypdf.PdfReader(io.BytesIO(pdf), strict=True)
    out = []
    for num in range(1, int(reader.trailer["/Size"])):
        obj = reader.get_object(num)
        if isinstance(obj, pypdf.generic.DictionaryObject) and "/FontFile2" in obj:
            out.append(obj["/FontFile2"].get_object().get_data())
    return out


def test_a_stamps_template_does_not_depend_on_when_it_was_built(design: Design, signer: Any) -> None:
    """Each renderer process builds its events' templates; stamps of one order
    from several processes (or from before a restart) join only when their
    templates are the same bytes: no embedded font carries the time it was
    subset (fontTools writes it unless told not to)."""
    # Given a ticket stamped in a design built now (no subset kept from before)
    fastpath._subset_font.cache_clear()
    built = timestampNow()
    pdf = render_ticket(request(signer, "Ada Lovelace", event_name="A Night Built Now"), Design.default())

    # Then every font it embeds carries its face's own time (long before), not the build's
    programs = _font_programs(pdf)
    assert programs
    for program in programs:
        assert TTFont(io.BytesIO(program))["head"].modified < built, "a font subset stamped with its build time"
