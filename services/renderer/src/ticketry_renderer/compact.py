"""A template's file rewritten as one section, smaller (pure; once per event look).

The fast path's template is WeasyPrint's file plus an incremental update (the
ids' fonts, the reserved holder fonts, the overlay): every object the update
replaced is still in the file, beside two cross-reference streams. Each ticket
carries the whole template, so every byte here is paid once per ticket.
:func:`compact` keeps only the live objects, in one section:

* the page, its resources and its font dictionary as plain objects (the shape
  ``ticketry.orderpdf.join`` reads an order's shared page from), the other
  dictionaries in one object stream, the streams as they are;
* WeasyPrint's CID fonts without the tables a PDF viewer never reads for them
  (the glyphs are reached by CID; names, layout, metrics come from the PDF's
  own dictionaries): ~0.3-0.4 kB compressed a face.

Same objects, same numbers, same drawing: only what no viewer reads is gone.
"""

from __future__ import annotations

import io
import re
import zlib
from typing import Any

from fontTools.ttLib import TTFont  # type: ignore[import-untyped]
from pypdf import PdfReader
from pypdf.generic import DictionaryObject, IndirectObject, NameObject, NumberObject, StreamObject
from ticketry import orderpdf

# What a viewer does not read from a CID-keyed TrueType program: `name`
# (DejaVu's and Liberation's carry their licence text), OpenType layout (already
# applied: the content stream draws glyph ids), `gasp`/`post`/`OS/2` (hints and
# glyph names; the descriptor has the metrics). PDFium draws the same page
# without them (tests/unit/test_render_fidelity.py), Poppler and MuPDF too.
_CID_FONT_TABLES_DROPPED = ("name", "GDEF", "GSUB", "GPOS", "gasp", "post", "OS/2")
_HEADER = re.compile(rb"%PDF-\d\.\d\r?\n(%[^\r\n]*\r?\n)?")


def compact(pdf: bytes) -> tuple[bytes, bytes]:
    """``pdf`` (a file and its incremental updates) as one section of its live
    objects, and that section's trailer entries (``/Root … /Info …``)."""
    reader = PdfReader(io.BytesIO(pdf))
    trailer: Any = reader.trailer
    size = int(trailer["/Size"])
    page: Any = reader.pages[0]
    resources = page.raw_get("/Resources")
    fonts = resources.get_object().raw_get("/Font")
    top = {page.indirect_reference.idnum, resources.idnum}
    if isinstance(fonts, IndirectObject):
        top.add(fonts.idnum)
    cid_programs = _cid_font_programs(reader)
    plain: list[tuple[int, bytes]] = []
    written: list[tuple[int, bytes]] = []  # objects of their own: streams, and ``top``
    for num in range(1, size):
        obj = reader.get_object(num)
        if obj is None or (isinstance(obj, StreamObject) and obj.get("/Type") in ("/ObjStm", "/XRef")):
            plain.append((num, b"null"))  # the old sections' packing: no number left out of the xref
            continue
        if num in cid_programs:
            obj = _slimmed(obj)
        body = _serialised(obj)
        (written if isinstance(obj, StreamObject) or num in top else plain).append((num, body))
    head = _HEADER.match(pdf)
    header = head.group(0) if head else b"%PDF-1.7\n"
    tail = b"/Root %d 0 R" % trailer.raw_get("/Root").idnum
    if "/Info" in trailer:
        tail += b" /Info %d 0 R" % trailer.raw_get("/Info").idnum
    return header + orderpdf.update(plain, written, len(header), size, tail, None, level=9), tail


def _cid_font_programs(reader: PdfReader) -> set[int]:
    """The object numbers of the TrueType programs of the page's CID fonts."""
    out: set[int] = set()
    resources: Any = reader.pages[0]["/Resources"]
    fonts: Any = resources.get("/Font", {})
    for ref in fonts.values():
        font = ref.get_object()
        if not isinstance(font, DictionaryObject) or font.get("/Subtype") != "/Type0":
            continue
        descendants: Any = font["/DescendantFonts"]
        for descendant in descendants:
            descriptor = descendant.get_object()["/FontDescriptor"].get_object()
            program = descriptor.raw_get("/FontFile2") if "/FontFile2" in descriptor else None
            if isinstance(program, IndirectObject):  # a CFF program (FontFile3) is left as it is
                out.add(program.idnum)
    return out


def _slimmed(stream: Any) -> Any:
    """A font program's stream without :data:`_CID_FONT_TABLES_DROPPED`."""
    font = TTFont(io.BytesIO(stream.get_data()), recalcTimestamp=False, lazy=True)
    for tag in _CID_FONT_TABLES_DROPPED:
        if tag in font:
            del font[tag]
    out = io.BytesIO()
    font.save(out)
    data = out.getvalue()
    slim = StreamObject()
    slim._data = zlib.compress(data, 9)
    slim[NameObject("/Filter")] = NameObject("/FlateDecode")
    slim[NameObject("/Length1")] = NumberObject(len(data))
    return slim


def _serialised(obj: Any) -> bytes:
    out = io.BytesIO()
    obj.write_to_stream(out)
    return out.getvalue()
