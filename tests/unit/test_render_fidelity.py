"""The fast path (event page rendered once, ticket fields stamped) against the
full WeasyPrint render of the same ticket: same pixels outside the QR, a QR that
decodes to the same code, and a full-render fallback for what it cannot draw."""

from __future__ import annotations

import base64
import io
import secrets
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pypdf
import pypdfium2
import pytest
from PIL import Image, ImageChops
from ticketry.events import RenderRequest
from ticketry.ids import MAX_TICKETS_PER_ORDER, new_id, ticket_id, ticket_ids
from ticketry_renderer import fastpath
from ticketry_renderer.render import Design, event_template, render_ticket, render_ticket_full

from tests.helpers import decode_qr

DPI = 100
PIXEL_TOLERANCE = 48  # grey levels: anti-aliasing noise, not a missing or moved glyph


@pytest.fixture(scope="module")
def design() -> Design:
    return Design.default()


class Signer:
    """Codes of the real shape (``TK1.<kid>.<ticket id>.<64-byte signature>``);
    the renderer only prints them, so any signature bytes will do."""

    def sign(self, ticket_id: str) -> str:
        return f"TK1.k1.{ticket_id}." + base64.urlsafe_b64encode(secrets.token_bytes(64)).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer()


def request(signer: Any, holder: str = "Ada Lovelace", **over: Any) -> RenderRequest:
    oid = new_id("or")
    tid = ticket_ids(oid, 1)[0]
    fields: dict[str, Any] = {
        "ticket_id": tid, "order_id": oid, "event_id": "ev_1", "event_name": "Night of Tests",
        "venue": "Loopback Arena", "starts_at": datetime(2027, 6, 1, 19, 30, tzinfo=UTC), "holder_name": holder,
        "tier": "standard", "price": Decimal("25.00"), "currency": "EUR", "code": signer.sign(tid), "total": 1,
    }  # fmt: skip
    fields.update(over)
    return RenderRequest(**fields)


def raster(pdf: bytes) -> Image.Image:
    doc = pypdfium2.PdfDocument(io.BytesIO(pdf))
    try:
        image: Image.Image = doc[0].render(scale=DPI / 72).to_pil().convert("L")
    finally:
        doc.close()
    return image


def diff_outside(a: Image.Image, b: Image.Image, box: tuple[int, int, int, int]) -> float:
    """Share of pixels that differ by more than the tolerance, the QR box blanked."""
    assert a.size == b.size
    mask = ImageChops.difference(a, b).point(lambda v: 255 if v > PIXEL_TOLERANCE else 0)
    mask.paste(0, box)
    return sum(mask.histogram()[255:]) / (a.size[0] * a.size[1])


def qr_box(design: Design, req: RenderRequest, height_px: int) -> tuple[int, int, int, int]:
    template = event_template(req, design)
    assert template is not None
    k, q = DPI / 72, template.qr
    return (int(q.x * k) - 2, int(height_px - (q.y + q.size) * k) - 2, int((q.x + q.size) * k) + 3,
            int(height_px - q.y * k) + 3)  # fmt: skip


def text_of(pdf: bytes) -> str:
    reader = pypdf.PdfReader(io.BytesIO(pdf), strict=True)
    assert len(reader.pages) == 1
    return reader.pages[0].extract_text()


@pytest.mark.parametrize(
    ("holder", "tier"),
    [
        ("Ada Lovelace", "standard"),
        ("Zoë O'Brien-Núñez", "vip"),
        ("A (b) \\c) ¿€", "standard"),  # PDF string syntax is data, not syntax
        ("</span><b>x</b>", "vip"),  # markup is data, not markup
    ],
)
def test_fast_path_matches_the_full_render(design: Design, signer: Any, holder: str, tier: str) -> None:
    # Given a ticket the fast path can draw
    req = request(signer, holder, tier=tier)
    fast_before = design.fast_rendered

    # When it is rendered both ways
    fast, full = render_ticket(req, design), render_ticket_full(req, design)

    # Then the fast path was used, and the pages match outside the QR
    assert design.fast_rendered == fast_before + 1
    a, b = raster(fast), raster(full)
    assert diff_outside(a, b, qr_box(design, req, a.size[1])) <= 0.01
    # And without the mask the QR area is what differs (so the check can fail)
    assert diff_outside(a, b, (0, 0, 0, 0)) > 0 or decode_qr(fast) == decode_qr(full)
    # And both QRs decode to the ticket's code; the fields are there as text
    assert decode_qr(fast) == decode_qr(full) == req.code
    text = text_of(fast)
    assert holder in text and req.ticket_id in text and req.order_id in text


def test_a_wrong_stamp_is_caught(design: Design, signer: Any) -> None:
    # The comparison fails when the stamped fields are not the ticket's
    req, other = request(signer, "Ada Lovelace"), request(signer, "Grace Hopper")
    a, b = raster(render_ticket(other, design)), raster(render_ticket_full(req, design))
    assert diff_outside(a, b, qr_box(design, req, a.size[1])) > 0.0005


@pytest.mark.parametrize(
    "holder",
    [
        "Łukasz Żółć",  # outside Windows-1252
        "李小龍",  # not in the fonts the fast path embeds
        "Ada  Lovelace",  # HTML collapses the double space
        "Maximiliana Wolfeschlegelsteinhausenbergerdorff of Somewhere",  # wraps in its cell
    ],
)
def test_undrawable_names_fall_back_to_the_full_render(design: Design, signer: Any, holder: str) -> None:
    # Given a holder name the fast path cannot draw faithfully
    req = request(signer, holder)
    template = event_template(req, design)
    assert template is not None
    with pytest.raises(fastpath.Unsupported):
        template.stamp(req)

    # When the worker renders it
    full_before = design.full_rendered
    pdf = render_ticket(req, design)

    # Then WeasyPrint rendered it in full, and it is a correct ticket
    assert design.full_rendered == full_before + 1
    assert decode_qr(pdf) == req.code
    assert req.ticket_id in text_of(pdf)


def test_one_template_per_event_look(signer: Any) -> None:
    design = Design.default()
    render_ticket(request(signer), design)
    render_ticket(request(signer, "Grace Hopper"), design)
    # (the last ticket of the biggest order too: every ticket id is as long)
    last = request(signer, "Grace Hopper")
    render_ticket(last.model_copy(update={"ticket_id": ticket_id(last.order_id, MAX_TICKETS_PER_ORDER - 1)}), design)
    assert len(design.templates) == 1
    render_ticket(request(signer, tier="vip"), design)
    render_ticket(request(signer, event_name="Another Night"), design)
    assert len(design.templates) == 3
    assert design.fast_rendered == 5 and design.full_rendered == 0


def test_fast_path_can_be_switched_off(signer: Any) -> None:
    design = Design.default(fast=False)
    pdf = render_ticket(request(signer), design)
    assert design.full_rendered == 1 and not design.templates
    assert pdf.count(b"%%EOF") == 1
