"""What a stamped ticket is made of (issue 33's renderer work): the QR from a
fixed mask as a 1-bit image that decodes for any code, the holder's size from
one shaping equal to ``ticketry.fonts``', a PDF under 25 kB that strict readers
parse, an event look's template found again from the request's fields, and an
undrawable name still refused on the fast path."""

from __future__ import annotations

import base64
import io
import re
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pypdf
import pypdfium2
import pytest
import zxingcpp
from fontTools.ttLib import TTFont  # type: ignore[import-untyped]
from PIL import Image
from ticketry import fonts
from ticketry_renderer import compact, fastpath
from ticketry_renderer.render import Design, Undrawable, event_template, render_ticket

from tests.helpers import decode_qr
from tests.unit.test_render_fidelity import WORLD_NAMES, request, text_of

MAX_SINGLE_TICKET_BYTES = 25_000


def _code(i: int) -> str:
    sig = base64.urlsafe_b64encode(secrets.token_bytes(64)).rstrip(b"=").decode()
    return f"TK1.k{i % 7}.tk_{secrets.token_hex(10)}_{i:05d}.{sig}"


def test_the_fixed_mask_qr_decodes_for_any_code() -> None:
    # Given many ticket codes of the real shape, encoded with the fixed mask
    for i in range(120):
        code = _code(i)
        rows = fastpath.qr_matrix(code)
        n = len(rows)
        # When the matrix is drawn with its quiet zone at 4 px a module
        quiet = fastpath.QR_QUIET_MODULES
        image = Image.new("L", (n + 2 * quiet, n + 2 * quiet), 255)
        image.paste(Image.frombytes("L", (n, n), b"".join(rows)), (quiet, quiet))
        image = image.resize((image.width * 4, image.height * 4), Image.Resampling.NEAREST)
        # Then a reader decodes it to the code, at error correction M
        found = zxingcpp.read_barcodes(image)
        assert found and found[0].text == code
        assert found[0].ec_level == "M"


@pytest.mark.parametrize("holder", ["Buyer Number 12345", "Zoë O'Brien-Núñez", *WORLD_NAMES])
def test_the_holder_size_from_one_shaping_is_the_fonts_size(holder: str) -> None:
    name = fonts.collapse(holder)
    assert fastpath.fitted_size(fonts.shape(name)) == fonts.fitted_size(name)


def test_a_long_name_is_fitted_like_the_fonts_fit_it() -> None:
    name = "Maximilian Alexander Bartholomew von Hohenzollern-Sigmaringen"
    want = fonts.fitted_size(name)
    assert want is not None and want < fonts.HOLDER_PT
    assert fastpath.fitted_size(fonts.shape(name)) == want


@pytest.mark.parametrize("holder", ["Buyer Number 12345", "Дмитрий Шостакович", "محمد علي", "李小龙", "अमित शर्मा"])
def test_a_stamped_ticket_is_small_and_reads_strictly(design: Design, signer: Any, holder: str) -> None:
    # Given a ticket on the fast path
    req = request(signer, holder)
    before = design.fast_rendered
    pdf = render_ticket(req, design)
    assert design.fast_rendered == before + 1
    # Then it is at most 25 kB, one page that strict pypdf and PDFium open,
    assert len(pdf) <= MAX_SINGLE_TICKET_BYTES, len(pdf)
    assert len(pypdf.PdfReader(io.BytesIO(pdf), strict=True).pages) == 1
    doc = pypdfium2.PdfDocument(pdf)
    assert len(doc) == 1
    doc.close()
    # its QR decodes to the code and its fields extract as text
    assert decode_qr(pdf) == req.code
    text = text_of(pdf)
    assert req.ticket_id in text and req.order_id in text


def test_the_qr_is_an_image_mask_not_interpolated(design: Design, signer: Any) -> None:
    req = request(signer, "Ada Lovelace")
    pdf = render_ticket(req, design)
    overlay = pypdf.PdfReader(io.BytesIO(pdf)).pages[0].get_contents()
    assert overlay is not None
    data = overlay.get_data()
    assert b"/IM true /BPC 1" in data and b"/I true" not in data and b"/Interpolate" not in data


def test_tickets_of_one_look_share_the_template_and_another_tier_does_not(design: Design, signer: Any) -> None:
    a, b = request(signer, "Ada Lovelace"), request(signer, "Grace Hopper")
    vip = request(signer, "Ada Lovelace", tier="vip")
    assert event_template(a, design) is event_template(b, design)
    assert event_template(vip, design) is not event_template(a, design)


def test_an_undrawable_name_is_still_refused_on_the_fast_path(design: Design, signer: Any) -> None:
    # Given a design whose event look is stamped
    assert event_template(request(signer, "Ada Lovelace"), design) is not None
    before = design.fast_rendered
    # When a name no font of the chain draws is rendered (no check before the
    # stamp any more), it is refused, not stamped with .notdef
    with pytest.raises(Undrawable):
        render_ticket(request(signer, "\U00013000 Khufu"), design)
    assert design.fast_rendered == before


def test_the_template_is_one_section_of_live_objects_that_poppler_reads_cleanly(
    design: Design, signer: Any, tmp_path: Path
) -> None:
    # Given an event look's template and a ticket stamped from it
    req = request(signer, "Ada Lovelace", event_name="A Compact Night")
    pdf = render_ticket(req, design)
    template = event_template(req, design)
    assert template is not None and pdf.startswith(template.base)
    base = template.base
    # Then the template is one section (WeasyPrint's and the update's, rewritten),
    # each object defined once
    assert base.count(b"startxref") == 1 and b"/Prev" not in base
    defined = re.findall(rb"(?m)^(\d+) 0 obj", base)
    assert len(defined) == len(set(defined))
    # WeasyPrint's CID fonts keep only what a viewer reads from them
    reader = pypdf.PdfReader(io.BytesIO(pdf), strict=True)
    programs = compact._cid_font_programs(reader)
    assert programs
    for num in programs:
        tables = set(TTFont(io.BytesIO(reader.get_object(num).get_data())).keys())
        assert not tables & set(compact._CID_FONT_TABLES_DROPPED), tables
        assert {"glyf", "loca", "hmtx", "head"} <= tables
    # and Poppler draws the ticket without a complaint (no null font resource)
    path = tmp_path / "ticket.pdf"
    path.write_bytes(pdf)
    drawn = subprocess.run(["pdftoppm", "-r", "20", "-png", str(path), str(tmp_path / "page")], capture_output=True)
    assert drawn.returncode == 0 and drawn.stderr == b"", drawn.stderr[:300]
    assert decode_qr(pdf) == req.code
