"""The fast path (event page rendered once, ticket fields stamped) against the
full WeasyPrint render of the same ticket: same pixels outside the QR, a QR that
decodes to the same code, names in every script on the fast path with no
.notdef glyph and text that extracts as typed, venue time and tier names, and a
layout that holds every field at its maximum length."""

from __future__ import annotations

import base64
import dataclasses
import io
import secrets
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pymupdf
import pypdf
import pypdfium2
import pytest
from PIL import Image, ImageChops
from ticketry import fonts
from ticketry.events import RenderRequest
from ticketry.ids import MAX_TICKETS_PER_ORDER, new_id, ticket_id, ticket_ids
from ticketry_renderer.render import (
    Design,
    Undrawable,
    event_context,
    event_template,
    render_ticket,
    render_ticket_full,
)

from bench.pdfcheck import faults, glyphs_drawn, mixed_direction, mupdf_text, notdef
from tests.helpers import decode_qr

DPI = 100
PIXEL_TOLERANCE = 48  # grey levels: anti-aliasing noise, not a missing or moved glyph
# Pixels of the holder's line that may differ: the anti-aliasing of the same glyphs
# at the same places (up to ~50), not one glyph of the name drawn elsewhere
# (a 13 pt "%" or "$" on the wrong side of its number: ~200-300).
HOLDER_TOLERANCE_PX = 100


class Signer:
    """Codes of the real shape (``TK1.<kid>.<ticket id>.<64-byte signature>``);
    the renderer only prints them, so any signature bytes will do."""

    def sign(self, ticket_id: str) -> str:
        return f"TK1.k1.{ticket_id}." + base64.urlsafe_b64encode(secrets.token_bytes(64)).rstrip(b"=").decode()


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


def holder_diff(design: Design, req: RenderRequest, a: Image.Image, b: Image.Image) -> int:
    """Pixels of the holder's line (its cell, as wide as names are fitted) that differ."""
    template = event_template(req, design)
    assert template is not None
    k, h, height = DPI / 72, template.holder, a.size[1]
    box = (int(h.x * k) - 3, int(height - h.top * k) - 3, int((h.x + fonts.HOLDER_WIDTH_PT) * k) + 3,
           int(height - (h.top - h.line_height) * k) + 3)  # fmt: skip
    mask = ImageChops.difference(a, b).point(lambda v: 255 if v > PIXEL_TOLERANCE else 0).crop(box)
    return sum(mask.histogram()[255:])


def holder_line(text: str, holder: str) -> str | None:
    """The extracted line made of exactly the holder's characters (in whatever order)."""
    want = sorted(holder.replace(" ", ""))
    return next((line for line in text.splitlines() if sorted(line.replace(" ", "")) == want), None)


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


# Every script the fonts cover, as buyers type them.
WORLD_NAMES = [
    "Łukasz Żółć",  # Polish (outside Windows-1252)
    "Дмитрий Шостакович",  # Cyrillic
    "Γιώργος Παπαδόπουλος",  # Greek
    "Nguyễn Văn An",  # Vietnamese
    "محمد علي",  # Arabic, right to left, joined
    "李小龙",  # Chinese
    "山田 太郎",  # Japanese
    "김민준",  # Hangul
    "Ωmega",  # Greek and Latin in one word
    "דוד כהן",  # Hebrew, right to left
    "สมชาย ใจดี",  # Thai
    "अमित शर्मा",  # Devanagari: a vowel sign before its consonant, a conjunct
    # Mixed directions: numbers and their signs, Latin words, brackets in right-to-left names
    "דוד 50%",  # a percent sign stays after its number
    "עמית $12",  # a currency sign stays before its number
    "محمد علي 2024",  # European digits after Arabic
    "שרה (Sarah) לוי",  # a bracketed Latin word between Hebrew ones
    "سارة (Sara) 7",  # the closing bracket in the opening one's script
    "Ana (אנה)",  # a bracketed Hebrew word after Latin
]


@pytest.mark.parametrize("holder", WORLD_NAMES)
def test_every_script_is_stamped_like_the_full_render(design: Design, signer: Any, holder: str) -> None:
    # Given a ticket whose holder writes their name in any script of the chain
    req = request(signer, holder)
    fast_before, full_before = design.fast_rendered, design.full_rendered

    # When it is rendered by the worker (fast path) and in full (the reference)
    fast = render_ticket(req, design)
    full = render_ticket_full(req, design)

    # Then the fast path drew it, and the pages match outside the QR
    assert design.fast_rendered == fast_before + 1 and design.full_rendered == full_before + 1
    a, b = raster(fast), raster(full)
    assert diff_outside(a, b, qr_box(design, req, a.size[1])) <= 0.001
    # And the holder's line matches glyph for glyph (each in its place, in bidi order)
    assert holder_diff(design, req, a, b) <= HOLDER_TOLERANCE_PX
    # And the QR decodes to the ticket's code
    assert decode_qr(fast) == req.code
    # And no glyph is a .notdef box, on either path; every glyph of the fast path maps to text
    assert notdef(fast) == [] and notdef(full) == []
    assert [g for g in glyphs_drawn(fast) if g[0] == 0xFFFD] == []
    # And the name extracts as typed (right-to-left in logical order), with both extractors;
    # a mixed-direction name, as extractors order its runs, as the full render's does
    if mixed_direction(holder):
        for extract in (text_of, mupdf_text):
            line = holder_line(extract(full), holder)
            assert line is not None and holder_line(extract(fast), holder) == line
    else:
        assert holder in text_of(fast).splitlines()
        assert holder in mupdf_text(fast).splitlines()


def test_the_name_is_drawn_with_the_chain_fonts(design: Design, signer: Any) -> None:
    # The fast path uses the font Pango picks: the first of the chain that has the character
    pdf = render_ticket(request(signer, "山田 太郎"), design)
    used = {font for ch, _, font in glyphs_drawn(pdf) if ch in {ord(c) for c in "山田太郎"}}
    assert used and all("CJK" in f for f in used), used


def test_a_misplaced_name_is_caught(design: Design, signer: Any) -> None:
    # The comparison can fail: the same name, one font size off, differs from the reference
    req = request(signer, "李小龙")
    template = event_template(req, design)
    assert template is not None
    moved = dataclasses.replace(template, holder=dataclasses.replace(template.holder, top=template.holder.top - 2))
    a, b = raster(moved.stamp(req)), raster(render_ticket_full(req, design))
    assert diff_outside(a, b, qr_box(design, req, a.size[1])) > 0.0001


@pytest.mark.parametrize("holder", ["\U00013000 Khufu", "Ada \ue000"])  # hieroglyph, private use
def test_an_undrawable_name_is_refused_not_printed_as_boxes(design: Design, signer: Any, holder: str) -> None:
    assert fonts.undrawable(holder) is not None
    with pytest.raises(Undrawable):
        render_ticket(request(signer, holder), design)
    with pytest.raises(Undrawable):
        render_ticket_full(request(signer, holder), design)


@pytest.mark.parametrize(
    ("holder", "printed"),
    [("Ada  Lovelace", "Ada Lovelace"), ("Ada \t\n Lovelace", "Ada Lovelace"), ("דוד   50%", "דוד 50%")],
)
def test_white_space_html_collapses_stays_on_the_fast_path(
    design: Design, signer: Any, holder: str, printed: str
) -> None:
    # Given a name with a run of white space (one buyer could type it for a whole order)
    req = request(signer, holder)
    fast_before, full_before = design.fast_rendered, design.full_rendered

    # When it is rendered by the worker, and in full
    fast = render_ticket(req, design)
    assert design.fast_rendered == fast_before + 1 and design.full_rendered == full_before
    full = render_ticket_full(req, design)

    # Then the fast path drew it as the design's CSS collapses it, like the full render
    a, b = raster(fast), raster(full)
    assert diff_outside(a, b, qr_box(design, req, a.size[1])) <= 0.001
    assert holder_diff(design, req, a, b) <= HOLDER_TOLERANCE_PX
    assert decode_qr(fast) == req.code
    assert faults(fast, printed) == [] and faults(full, printed) == []


def test_venue_time_and_tier_name_are_printed(design: Design, signer: Any) -> None:
    # Given an event at 18:00 UTC in Berlin (20:00 CEST), doors an hour earlier, tier "Balcony West"
    req = request(
        signer, "Ada Lovelace", starts_at=datetime(2027, 6, 1, 18, 0, tzinfo=UTC), timezone="Europe/Berlin",
        doors_at=datetime(2027, 6, 1, 17, 0, tzinfo=UTC), tier="balcony", tier_name="Balcony West",
    )  # fmt: skip
    for pdf in (render_ticket(req, design), render_ticket_full(req, design)):
        text = text_of(pdf)
        # Then both paths print the venue's times with its zone, and the tier's name
        assert "20:00 CEST" in text and "19:00 CEST" in text and "Tue 01 Jun 2027" in text
        assert "18:00" not in text
        assert "Balcony West" in text and "BALCONY WEST" in text
        assert "VIP" not in text and "Standard" not in text


def test_an_unnamed_tier_prints_its_id_capitalised(design: Design, signer: Any) -> None:
    text = text_of(render_ticket(request(signer, tier="balcony"), design))
    assert "Balcony" in text


MM = 72 / 25.4


def card_right_pt(pdf: bytes) -> float:
    """The card's right edge: page width less the 14 mm margin and its 0.6 mm border."""
    reader = pypdf.PdfReader(io.BytesIO(pdf))
    return float(reader.pages[0].mediabox.width) - 14.6 * MM


def widest(text: str, accepted: Callable[[str], bool]) -> str:
    """The longest start of ``text`` that is ``accepted``."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if accepted(text[:mid]) else (lo, mid - 1)
    return text[:lo]


def longest_holder() -> str:
    """A name of the api's maximum length (120) that fits at the floor, as wide as can be."""
    wide = widest("W" * 120, lambda w: fonts.fits(w + "i" * (120 - len(w))))
    return wide + "i" * (120 - len(wide))


def accepted_event() -> dict[str, str]:
    """The widest title, venue and tier name the api accepts (one more letter is refused)."""
    fields = {
        "event_name": widest("Ｗ" * 200, lambda t: fonts.event_unfit(t, "V") is None),
        "venue": widest("M" * 200, lambda t: fonts.event_unfit("E", t) is None),
        "tier_name": widest("Ｘ" * 40, lambda t: fonts.event_unfit("E", "V", [t]) is None),
    }
    assert fonts.event_unfit(fields["event_name"] + "Ｗ", "V") is not None
    assert fonts.event_unfit("E", fields["venue"] + "M") is not None
    assert fonts.event_unfit("E", "V", [fields["tier_name"] + "Ｘ"]) is not None
    return fields


@pytest.mark.parametrize("older", [False, True], ids=["longest-accepted", "too-long-for-this-api"])
def test_every_field_at_its_maximum_length_is_one_line_inside_the_card(
    design: Design, signer: Any, older: bool
) -> None:
    # Given the widest texts the api accepts (or longer ones, of an event an older api accepted)
    holder = longest_holder()
    fields = accepted_event()
    if older:
        fields = {"event_name": "Ｗ" * 100 + "W" * 100, "venue": "M" * 200, "tier_name": "Ｘ" * 40}
        assert fonts.event_unfit(fields["event_name"], fields["venue"], [fields["tier_name"]]) is not None
    req = request(signer, holder, tier="vip", lane="vip", **fields)
    sizes = event_context(req)["sizes"]
    lines = {  # each field: its text as printed, its size
        "title": (fields["event_name"], sizes["title"]),
        "venue": (fields["venue"], sizes["venue"]),
        "tier": (fields["tier_name"], sizes["tier"]),
        "badge": (fields["tier_name"].upper(), sizes["badge"]),
        "holder": (holder, fonts.fitted_size(holder)),
    }
    assert len(holder) == 120 and fonts.fits(holder) and not fonts.fits("W" + holder[:-1])
    for pdf in (render_ticket(req, design), render_ticket_full(req, design)):
        # Then the ticket is one page, and no glyph reaches past the card's right edge
        assert len(pypdf.PdfReader(io.BytesIO(pdf)).pages) == 1
        right = card_right_pt(pdf)
        doc = pymupdf.open(stream=pdf, filetype="pdf")
        try:
            terms = min(w[1] for w in doc[0].get_text("words") if w[4] == "Conditions")
            chars = [(c, s["size"]) for s in doc[0].get_texttrace() for c in s["chars"] if c[3][3] < terms]
        finally:
            doc.close()
        assert max(c[3][2] for c, _ in chars) <= right
        # And each field is printed whole on one line: every copy on a baseline of its own
        for name, (text, size) in lines.items():
            assert size is not None
            baselines = Counter(round(c[2][1], 1) for c, at in chars if chr(c[0]) in text and abs(at - size) < 0.01)
            assert baselines and set(baselines.values()) == {len(text)}, (name, baselines)
        assert notdef(pdf) == []


def test_the_ticket_id_under_the_qr_fits_its_column(design: Design, signer: Any) -> None:
    req = request(signer)
    template = event_template(req, design)
    assert template is not None
    q = template.qr
    for pdf in (render_ticket(req, design), render_ticket_full(req, design)):
        doc = pymupdf.open(stream=pdf, filetype="pdf")
        try:
            words = doc[0].get_text("words")
        finally:
            doc.close()
        page_h = 842
        under = [w for w in words if w[4] == req.ticket_id and w[1] > page_h - q.y - 1 and w[1] < page_h - q.y + 30]
        assert len(under) == 1, words
        x0, _, x1 = under[0][0], under[0][1], under[0][2]
        # The QR column is 42 mm wide around the 38 mm code
        assert x0 >= q.x - 2 * MM - 0.5 and x1 <= q.x + q.size + 2 * MM + 0.5


def test_the_holder_cell_is_as_wide_as_fonts_measures(design: Design, signer: Any) -> None:
    # ticketry.fonts fits names to HOLDER_WIDTH_PT: the design's cell must hold that much
    template = event_template(request(signer), design)
    assert template is not None
    # (the holder's cell ends where the 8 mm gap before the 42 mm QR column, around the 38 mm code, begins)
    cell_right = template.qr.x - 2 * MM - 8 * MM
    assert template.holder.x + fonts.HOLDER_WIDTH_PT <= cell_right - 5
    assert fonts.fits("W" * 40) and not fonts.fits("W" * 120)


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
