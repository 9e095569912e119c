"""The fast path: the design rendered once per event by WeasyPrint, the per-ticket
fields stamped into a copy of that PDF page.

How it works (pure, no I/O):

1. **Template** (once per event look: design hash + event name, venue, date,
   tier, price, key id, id lengths). The real Jinja template is rendered with the
   per-ticket fields replaced by *hidden* placeholders (``visibility: hidden``
   spans of the same length in a monospace font, an empty ``<svg>`` for the QR), so
   WeasyPrint lays the page out exactly as for a real ticket but draws nothing
   there. We read each placeholder's position, font, size and colour from
   WeasyPrint's layout boxes, embed a small WinAnsi subset of the ids' font
   (the one Pango chose), reserve one font resource per font of the holder's
   chain (``ticketry.fonts``), and save the page with an empty overlay stream.
2. **Per ticket** (≈ 0.3-0.6 ms): the holder name is shaped by HarfBuzz exactly as
   Pango lays it out (same chain, same itemization, bidi, size fitted by
   ``ticketry.fonts``) and its glyphs embedded as per-ticket CID font subsets
   (``cidfonts``); the overlay content stream (glyph codes, the QR from
   zxing-cpp's C++ encoder as an inline 1-bit image mask) and those fonts are
   appended to the template bytes as a PDF incremental update (a trailer with
   ``/Prev``). The template is WeasyPrint's file and its update rewritten as
   one section of live objects (``compact``). No
   markup is parsed: the ticket fields are encoded to glyph codes, nothing else.

Any holder name the chain can draw is stamped, in every script, its white space
collapsed as the design's CSS does. What raises :class:`Unsupported` (the caller
renders in full): ids of another length, a design without stampable slots or
built for another font chain.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import io
import itertools
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

import zxingcpp
from fontTools import subset as ft_subset  # type: ignore[import-untyped]
from fontTools.ttLib import TTFont  # type: ignore[import-untyped]
from markupsafe import Markup
from pypdf import PdfWriter
from pypdf.generic import (
    ArrayObject,
    DecodedStreamObject,
    DictionaryObject,
    FloatObject,
    NameObject,
    NumberObject,
    StreamObject,
    TextStringObject,
)
from ticketry import fonts, orderpdf
from ticketry.events import RenderRequest
from weasyprint.formatting_structure import boxes
from weasyprint.text.fonts import get_hb_object_data, get_pango_font_hb_face

from ticketry_renderer import cidfonts
from ticketry_renderer.compact import compact

PX_TO_PT = 0.75
# The characters of the ids a ticket prints (``or_<hex>``, ``tk_<hex>_<digits>``,
# ``ticketry.ids``): the embedded subset holds these only (~2 kB a face, 6 kB
# for all letters and digits); an id with any other is rendered in full.
ID_CHARSET = frozenset("0123456789abcdef_") | frozenset("or") | frozenset("tk")
SLOT_CHARSETS = {"order": ID_CHARSET, "ticket": ID_CHARSET}
QR_QUIET_MODULES = 2  # the same quiet zone as the full render's segno SVG


class Unsupported(Exception):
    """This ticket cannot be stamped faithfully; render it in full."""


def placeholder(slot: str, text: str) -> Markup:
    # Our own constant markup around our own placeholder text (never ticket data).
    return Markup(f'<span data-slot="{slot}" style="visibility:hidden">{text}</span>')  # noqa: S704


QR_PLACEHOLDER = Markup('<svg data-slot="qr" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"></svg>')


@dataclass(frozen=True)
class EmbeddedFont:
    resource: str  # /TkF0 …
    widths: dict[str, float] = field(repr=False)  # char → advance in 1/1000 em
    cmap: frozenset[str] = field(repr=False)


@dataclass(frozen=True)
class TextSlot:
    field: str  # holder | order | ticket
    x: float  # pt, PDF coordinates (origin bottom left)
    y: float  # baseline
    size: float  # pt
    rgb: tuple[float, float, float]
    font: EmbeddedFont
    placeholder_len: int
    max_width: float  # pt available to the right of x (left-aligned slots)


@dataclass(frozen=True)
class HolderSlot:
    """The holder's line: a fixed line box (``dd.holder``) at any size and fonts."""

    x: float  # pt, left edge of the line
    top: float  # pt, PDF y of the line box's top
    line_height: float  # pt
    rgb: tuple[float, float, float]
    fonts: tuple[int, ...]  # per face of the chain: the reserved Type0 object (/TkH<i>)


@dataclass(frozen=True)
class QrSlot:
    x: float  # pt, bottom-left of the QR box
    y: float
    size: float  # pt (square)


@dataclass(frozen=True)
class Template:
    """The event's page with an empty overlay, ready to stamp."""

    base: bytes  # a complete PDF
    overlay_obj: int  # object number replaced per ticket
    trailer_tail: bytes  # "/Root 1 0 R /Info 2 0 R /ID [...]"
    size: int  # /Size of the xref
    prev_xref: int
    texts: tuple[TextSlot, ...]
    qr: QrSlot
    holder: HolderSlot

    def stamp(self, req: RenderRequest) -> bytes:
        ops = [b"Q q"]  # WeasyPrint's graphics state restored (see _assemble), then ours
        for slot in self.texts:
            ops.append(_text_op(slot, _value(req, slot)))
        holder_ops, objects = _holder(self.holder, req.holder_name, self.size)
        ops.append(holder_ops)
        ops.append(_qr_ops(self.qr, req.code))
        ops.append(b"Q")
        content = zlib.compress(b"\n".join(ops), 1)
        objects.append((self.overlay_obj, b"<</Length %d /Filter /FlateDecode>>\nstream\n%s\nendstream" % (
            len(content), content)))  # fmt: skip
        return self.base + increment(objects, len(self.base), self.size, self.trailer_tail, self.prev_xref)


def increment(objects: list[tuple[int, bytes]], offset: int, size: int, trailer_tail: bytes, prev_xref: int) -> bytes:
    """``objects`` ((number, body)) as an incremental update of a file of
    ``offset`` bytes: streams as they are, the dictionaries in one object stream,
    a cross-reference stream (as WeasyPrint's file ends with one); ~0.4 kB less
    than plain objects and an xref table per ticket."""
    streams = sorted((n, b) for n, b in objects if b.endswith(b"endstream"))
    plain = sorted((n, b) for n, b in objects if not b.endswith(b"endstream"))
    size = max(size, max(n for n, _ in objects) + 1)
    return orderpdf.update(plain, streams, offset, size, trailer_tail, prev_xref, level=1)


@functools.cache
def _subsetters() -> tuple[cidfonts.Subsetter, ...]:
    return tuple(cidfonts.Subsetter(face) for face in fonts.chain())


def fitted_size(line: fonts.Line) -> float:
    """``fonts.fitted_size`` of the shaped name, without its second pass over the name
    (collapse, drawability, the shaping cache), which the stamp has just made."""
    advance = line.advance
    if advance <= 0:
        return fonts.HOLDER_PT
    return min(fonts.HOLDER_PT, int(fonts.HOLDER_WIDTH_PT / advance * 100) / 100)


def _holder(slot: HolderSlot, name: str, next_obj: int) -> tuple[bytes, list[tuple[int, bytes]]]:
    """The holder's text operators and the CID fonts they use (objects from ``next_obj``)."""
    # The name as the design's CSS prints it: white space collapsed and stripped.
    name = fonts.collapse(name)
    if not name:
        raise Unsupported("holder: no text")
    if fonts.undrawable(name) is not None:
        raise Unsupported("holder: a character no font of the chain has")
    line = fonts.shape(name)
    size = fitted_size(line)
    faces = fonts.chain()
    if len(faces) != len(slot.fonts):  # a design of a host with other fonts (its key says which)
        raise Unsupported("holder: the design reserved fonts for another chain")
    used = [faces[i] for i in line.faces()] or [faces[0]]
    # WeasyPrint's line box: the strut (first font) and the text's run both
    # centred in the line height by their ascent - descent; the lower baseline wins.
    strut = faces[0].ascent - faces[0].descent
    run_box = max(f.ascent for f in used) - max(f.descent for f in used)
    baseline = slot.top - (slot.line_height + max(strut, run_box) * size) / 2
    # Glyphs in visual order (as WeasyPrint draws them), each with the text it
    # stands for, handed out in logical order within its cluster: one character
    # per glyph, the rest to the last one.
    placed: list[tuple[int, int, float, float, str]] = []  # face, gid, x, y, text
    pen = slot.x
    for run in line.runs:
        bounds = [*sorted({gl.cluster for gl in run.glyphs}), run.end]
        end_of = dict(itertools.pairwise(bounds))
        texts: list[str] = []
        seen: dict[int, int] = {}
        members = collections.Counter(gl.cluster for gl in run.glyphs)
        for gl in reversed(run.glyphs) if run.rtl else run.glyphs:
            k = seen[gl.cluster] = seen.get(gl.cluster, -1) + 1
            chars = name[gl.cluster : end_of[gl.cluster]]
            texts.append(chars[k:] if k == members[gl.cluster] - 1 else chars[k : k + 1])
        if run.rtl:
            texts.reverse()
        for gl, text in zip(run.glyphs, texts, strict=True):
            if gl.gid == 0:
                raise Unsupported("holder: .notdef")  # never drawn: undrawable names are refused first
            placed.append((run.face, gl.gid, pen + gl.dx * size, baseline + gl.dy * size, text))
            pen += gl.advance * size
    objects: list[tuple[int, bytes]] = []
    codes: dict[int, dict[tuple[int, str], int]] = {}
    widths: dict[int, dict[int, int]] = {}
    for face in sorted({p[0] for p in placed}):
        uses = [(p[1], p[4]) for p in placed if p[0] == face]
        # Each font: its reserved Type0 object, then new ones.
        embedded = cidfonts.embed(_subsetters()[face], uses, slot.fonts[face], next_obj + len(objects) - len(codes))
        codes[face] = embedded.codes
        widths[face] = embedded.advances
        objects.extend(embedded.objects)
    r, g, b = slot.rgb
    ops = [b"BT %.4f %.4f %.4f rg" % (r, g, b)]
    # One TJ per run of glyphs on one font and baseline: a glyph's place is where
    # the last one's /W width left the pen, corrected by HarfBuzz's (kerning, marks).
    current: tuple[int, float] | None = None
    pen_x = 0.0
    shown: list[bytes] = []
    for face, gid, x, y, piece in placed:
        if current != (face, y):
            if shown:
                ops.append(b"[%s] TJ" % b" ".join(shown))
                shown = []
            if current is None or current[0] != face:
                ops.append(b"/TkH%d %.3f Tf" % (face, size))
            ops.append(b"1 0 0 1 %.3f %.3f Tm" % (x, y))
            current, pen_x = (face, y), x
        adjust = (pen_x - x) / size * 1000
        if abs(adjust) >= 0.005:
            shown.append(b"%.2f" % adjust)
        shown.append(b"<%04X>" % codes[face][(gid, piece)])
        pen_x = x + widths[face][gid] * size / 1000
    if shown:
        ops.append(b"[%s] TJ" % b" ".join(shown))
    ops.append(b"ET")
    return b"\n".join(ops), objects


def _value(req: RenderRequest, slot: TextSlot) -> str:
    value: str = {"order": req.order_id, "ticket": req.ticket_id}[slot.field]
    if not set(value) <= slot.font.cmap:
        raise Unsupported(f"{slot.field}: characters outside the embedded font")
    if len(value) != slot.placeholder_len:
        raise Unsupported(f"{slot.field}: length differs from the template's")
    return value


def _text_op(slot: TextSlot, value: str) -> bytes:
    r, g, b = slot.rgb
    # Hex string of WinAnsi codes: no PDF string syntax to escape, no markup.
    hexstr = value.encode("cp1252").hex()
    return b"BT /%s %.3f Tf %.4f %.4f %.4f rg 1 0 0 1 %.3f %.3f Tm <%s> Tj ET" % (
        slot.font.resource.encode(),
        slot.size,
        r,
        g,
        b,
        slot.x,
        slot.y,
        hexstr.encode(),
    )


# A fixed mask instead of the encoder's choice: zxing-cpp scores all eight by the
# spec's penalty rules, ~80 % of its time (measured 0.5 ms of 0.6 ms per code).
# Mask 2 scored best on average over 150 ticket codes (mean penalty within 3 %
# of the best of the eight); any mask decodes, the penalty only avoids patterns
# that look like finders.
QR_MASK = 2


def qr_matrix(code: str) -> list[bytes]:
    """Rows of the QR (error correction M, mask :data:`QR_MASK`), one byte per module, 0 = dark."""
    raw, n = _qr_modules(code)
    return [raw[i : i + n] for i in range(0, len(raw), n)]


def _qr_modules(code: str) -> tuple[bytes, int]:
    barcode = zxingcpp.create_barcode(code, zxingcpp.BarcodeFormat.QRCode, ec_level="M", data_mask=QR_MASK)
    image = barcode.to_image(scale=1, add_quiet_zones=False)
    # zxingcpp.Image has the buffer protocol
    return bytes(memoryview(image).cast("B")), image.shape[1]  # type: ignore[arg-type]


# Module bytes (0 dark, 255 light) → the image mask's bit characters (0 paints).
_MASK_BITS = bytes.maketrans(b"\x00\xff", b"01")


def _qr_ops(slot: QrSlot, code: str) -> bytes:
    """The QR as an inline 1-bit image mask: one sample per module, painted
    black, never interpolated (viewers scale it with sharp edges). Packing the
    bits is ~10 µs; a rectangle per dark run cost ~0.9 ms per ticket in Python."""
    raw, n = _qr_modules(code)
    bits = raw.translate(_MASK_BITS)
    stride = -(-n // 8) * 8  # rows start on a byte
    pad = b"1" * (stride - n)
    rows = pad.join(bits[i : i + n] for i in range(0, n * n, n)) + pad
    packed = int(rows, 2).to_bytes(stride // 8 * n, "big")
    module = slot.size / (n + 2 * QR_QUIET_MODULES)
    x0 = slot.x + QR_QUIET_MODULES * module
    y0 = slot.y + QR_QUIET_MODULES * module
    # ASCIIHex keeps the image's bytes out of content-stream syntax (no stray "EI");
    # the stream's Flate packs the hex digits back to about the bits' size.
    return b"0 0 0 rg q %.5f 0 0 %.5f %.3f %.3f cm BI /W %d /H %d /IM true /BPC 1 /F /AHx ID %s> EI Q" % (
        module * n, module * n, x0, y0, n, n, packed.hex().encode())  # fmt: skip


# -- building a template ---------------------------------------------------------


def placeholder_request(req: RenderRequest) -> RenderRequest:
    """The request as the template sees it: per-ticket fields hidden, same size."""
    return req.model_copy(
        update={
            "holder_name": placeholder("holder", "X"),
            "ticket_id": placeholder("ticket", "0" * len(req.ticket_id)),
            "order_id": placeholder("order", "0" * len(req.order_id)),
        }
    )


def build_template(document: Any, event_title: str) -> Template:
    """Turn WeasyPrint's rendered placeholder document into a stamping template."""
    if len(document.pages) != 1:
        raise Unsupported("design is not a single page")
    page = document.pages[0]
    page_h = page.height * PX_TO_PT
    found: list[tuple[str, Any, Any]] = []
    qr: QrSlot | None = None
    holder: tuple[Any, Any] | None = None
    for box, block in _walk(page._page_box, None):
        element = getattr(box, "element", None)
        slot = element.get("data-slot") if element is not None else None
        if slot is None:
            continue
        if isinstance(box, boxes.TextBox):
            if slot == "holder":
                if holder is not None:
                    raise Unsupported("holder: more than one slot")
                holder = (box, block)
            else:
                found.append((slot, box, block))
        elif slot == "qr" and isinstance(box, boxes.ReplacedBox):
            qr = QrSlot(
                x=box.content_box_x() * PX_TO_PT,
                y=page_h - (box.content_box_y() + box.height) * PX_TO_PT,
                size=min(box.width, box.height) * PX_TO_PT,
            )
    if qr is None or holder is None or not found:
        raise Unsupported("design has no stampable slots")
    font_set = _FontSet()
    specs = []
    for slot, box, block in found:
        font_bytes, index = _pango_font_file(box)
        color = box.style["color"].to("srgb")
        if color.alpha != 1:
            raise Unsupported("translucent text")
        specs.append(
            _SlotSpec(
                field=slot,
                x=box.position_x * PX_TO_PT,
                y=page_h - (box.position_y + box.baseline) * PX_TO_PT,
                size=box.style["font_size"] * PX_TO_PT,
                rgb=(float(color.coordinates[0]), float(color.coordinates[1]), float(color.coordinates[2])),
                font_key=font_set.add(font_bytes, index, SLOT_CHARSETS[slot]),
                placeholder_len=len(box.text),
                max_width=(block.content_box_x() + block.width - box.position_x) * PX_TO_PT,
            )
        )
    # A placeholder split over two lines means the real value would wrap: not stampable.
    for slot in ("order", "ticket"):
        if sum(1 for s in specs if s.field == slot) != len({(s.x, s.y) for s in specs if s.field == slot}):
            raise Unsupported(f"{slot}: duplicate slot")  # pragma: no cover - defensive
        if len({s.placeholder_len for s in specs if s.field == slot}) > 1:
            raise Unsupported(f"{slot} wraps in this design")
    return _assemble(document.write_pdf(), specs, qr, _holder_spec(*holder, page_h), font_set, event_title)


def _holder_spec(box: Any, block: Any, page_h: float) -> HolderSlot:
    """The holder's line box from the placeholder's layout (fonts reserved in ``_assemble``)."""
    line_height = block.style["line_height"]
    if not (hasattr(line_height, "unit") and line_height.unit == "px") or block.style["white_space"] != "nowrap":
        raise Unsupported("holder: the design does not give it one line of a fixed height")
    if abs(box.position_x - block.content_box_x()) > 0.01:
        raise Unsupported("holder: not left-aligned")
    color = box.style["color"].to("srgb")
    if color.alpha != 1:
        raise Unsupported("translucent text")
    return HolderSlot(
        x=box.position_x * PX_TO_PT,
        top=page_h - block.content_box_y() * PX_TO_PT,
        line_height=line_height.value * PX_TO_PT,
        rgb=(float(color.coordinates[0]), float(color.coordinates[1]), float(color.coordinates[2])),
        fonts=(),
    )


@dataclass(frozen=True)
class _SlotSpec:
    field: str
    x: float
    y: float
    size: float
    rgb: tuple[float, float, float]
    font_key: str
    placeholder_len: int
    max_width: float


def _walk(box: Any, block: Any) -> Any:
    if isinstance(box, boxes.BlockBox):
        block = box
    yield box, block
    for child in getattr(box, "children", ()):
        yield from _walk(child, block)


def _pango_font_file(textbox: Any) -> tuple[bytes, int]:
    """The font file Pango shaped this text box with (what WeasyPrint embeds)."""
    from weasyprint.text.ffi import ffi, harfbuzz

    textbox.pango_layout.reactivate(textbox.style)
    try:
        first_line, _ = textbox.pango_layout.get_first_line()
        run = first_line.runs[0]
        if run == ffi.NULL:
            raise Unsupported("empty placeholder")
        hb_face = get_pango_font_hb_face(run.data.item.analysis.font)
        return get_hb_object_data(hb_face), int(harfbuzz.hb_face_get_index(hb_face))
    finally:
        textbox.pango_layout.deactivate()


@dataclass(frozen=True, slots=True)
class _FontFile:
    """A font face, compared and hashed by its digest (``key``), not its bytes."""

    key: str
    index: int
    data: bytes = field(compare=False, repr=False)


class _FontSet:
    """Fonts to embed, keyed by file; each gets the union of its slots' charsets."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[_FontFile, set[str], str]] = {}

    def add(self, data: bytes, index: int, charset: frozenset[str]) -> str:
        key = hashlib.sha256(data).hexdigest()[:16] + f"-{index}"
        if key not in self.files:
            self.files[key] = (_FontFile(key, index, data), set(), f"TkF{len(self.files)}")
        self.files[key][1].update(charset)
        return key


_LAYOUT_TABLES = ("GSUB", "GPOS", "GDEF", "BASE", "JSTF", "MATH")


# The slots' charsets are fixed and every event uses the same few faces: a new
# event's design reuses the subsets of the last (a third of its build otherwise).
@functools.lru_cache(maxsize=16)
def _subset_font(face: _FontFile, charset: frozenset[str]) -> tuple[bytes, TTFont]:
    """The subset of ``face`` for ``charset``, and the subset parsed (read only)."""
    # The face's own timestamp kept (fontTools writes the time of saving): every
    # renderer process builds the same template bytes, so an order's stamps
    # from several renderers join into one PDF sharing it (ticketry.orderpdf).
    font = TTFont(io.BytesIO(face.data), fontNumber=face.index, recalcTimestamp=False)
    # Stamped text is drawn glyph by glyph (a one-byte encoding, widths from
    # hmtx), never shaped: the layout tables go before the subsetter would
    # decompile them (measured: an event's template 485-589 → 351-423 ms).
    for tag in _LAYOUT_TABLES:
        if tag in font:
            del font[tag]
    options = ft_subset.Options()
    options.layout_features = []
    options.drop_tables = [*options.drop_tables, "FFTM", "gasp"]
    options.hinting = False
    options.name_IDs = []  # a viewer never reads them; DejaVu's carry its licence text (~2 kB a face)
    options.notdef_outline = False  # never drawn: an id with another character is rendered in full
    options.recalc_bounds = True
    subsetter = ft_subset.Subsetter(options)
    subsetter.populate(unicodes=[ord(c) for c in charset])
    subsetter.subset(font)
    out = io.BytesIO()
    font.save(out)
    parsed = TTFont(io.BytesIO(out.getvalue()))  # read for the PDF's metrics (OS/2, post)
    # The embedded program needs neither: codes reach glyphs by the (3,1) cmap.
    for tag in ("OS/2", "post"):
        del font[tag]
    out = io.BytesIO()
    font.save(out)
    return out.getvalue(), parsed


def _font_objects(writer: PdfWriter, name: str, face: _FontFile, charset: set[str]) -> tuple[Any, EmbeddedFont]:
    sub, tt = _subset_font(face, frozenset(charset))
    cmap = tt.getBestCmap()
    upem = tt["head"].unitsPerEm
    hmtx = tt["hmtx"]
    scale = 1000 / upem
    present = {c for c in charset if ord(c) in cmap}
    widths = {c: hmtx[cmap[ord(c)]][0] * scale for c in present}
    codes = [0] * 256
    for c in present:
        codes[c.encode("cp1252")[0]] = round(widths[c])
    first = min(c.encode("cp1252")[0] for c in present)
    last = max(c.encode("cp1252")[0] for c in present)
    head, os2, post = tt["head"], tt["OS/2"], tt["post"]
    ps_name = f"TKAAAA+{tt['name'].getDebugName(6) or name}".replace(" ", "-")
    file_stream = StreamObject()
    file_stream.set_data(sub)
    file_stream = file_stream.flate_encode(level=6)
    file_stream[NameObject("/Length1")] = NumberObject(len(sub))
    descriptor = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/FontDescriptor"),
            NameObject("/FontName"): NameObject("/" + ps_name),
            NameObject("/Flags"): NumberObject(32),
            NameObject("/FontBBox"): ArrayObject(
                [FloatObject(v * scale) for v in (head.xMin, head.yMin, head.xMax, head.yMax)]
            ),
            NameObject("/ItalicAngle"): FloatObject(post.italicAngle),
            NameObject("/Ascent"): FloatObject(os2.sTypoAscender * scale),
            NameObject("/Descent"): FloatObject(os2.sTypoDescender * scale),
            NameObject("/CapHeight"): FloatObject(getattr(os2, "sCapHeight", os2.sTypoAscender) * scale),
            NameObject("/StemV"): NumberObject(80),
            NameObject("/FontFile2"): writer._add_object(file_stream),
        }
    )
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/TrueType"),
            NameObject("/BaseFont"): NameObject("/" + ps_name),
            NameObject("/FirstChar"): NumberObject(first),
            NameObject("/LastChar"): NumberObject(last),
            NameObject("/Widths"): ArrayObject([NumberObject(w) for w in codes[first : last + 1]]),
            NameObject("/Encoding"): NameObject("/WinAnsiEncoding"),
            NameObject("/FontDescriptor"): writer._add_object(descriptor),
        }
    )
    return writer._add_object(font), EmbeddedFont(name, widths, frozenset(present))


def _stand_in_font() -> DictionaryObject:
    names = {"/Type": "/Font", "/Subtype": "/Type1", "/BaseFont": "/Helvetica"}
    return DictionaryObject({NameObject(k): NameObject(v) for k, v in names.items()})


def _stream(data: bytes) -> Any:
    s = DecodedStreamObject()
    s.set_data(data)
    return s


def _assemble(
    pdf: bytes, specs: list[_SlotSpec], qr: QrSlot, holder: HolderSlot, font_set: _FontSet, title: str
) -> Template:
    # An incremental update of WeasyPrint's file, then rewritten as one section
    # of live objects (``compact``: ~2.5 kB less in every ticket).
    writer = PdfWriter(io.BytesIO(pdf), incremental=True)
    page = writer.pages[0]
    resources: Any = page[NameObject("/Resources")].get_object()
    font_dict: Any = resources.get("/Font")
    font_dict = font_dict.get_object() if font_dict is not None else DictionaryObject()
    embedded: dict[str, EmbeddedFont] = {}
    for key, (face, charset, name) in font_set.files.items():
        ref, embedded[key] = _font_objects(writer, name, face, charset)
        font_dict[NameObject("/" + name)] = ref
    # One font resource per face of the holder's chain; each ticket replaces the
    # ones its name uses (the placeholder is never drawn with).
    reserved = []
    for i in range(len(fonts.chain())):
        # Never drawn with: a ticket's name that uses this face replaces it (a
        # null resource instead is a syntax error to Poppler).
        ref = writer._add_object(_stand_in_font())
        font_dict[NameObject(f"/TkH{i}")] = ref
        reserved.append(ref.idnum)
    holder = dataclasses.replace(holder, fonts=tuple(reserved))
    texts = tuple(
        TextSlot(
            field=s.field, x=s.x, y=s.y, size=s.size, rgb=s.rgb, font=embedded[s.font_key],
            placeholder_len=s.placeholder_len, max_width=s.max_width,
        )
        for s in specs
    )  # fmt: skip
    resources[NameObject("/Font")] = font_dict
    # WeasyPrint's stream may leave its transform in place: wrap it in q … Q, the
    # Q opening the overlay (replaced per ticket; one object less in every file).
    contents: Any = page.get("/Contents")
    original = list(contents.get_object()) if isinstance(contents.get_object(), ArrayObject) else [contents]
    overlay = writer._add_object(_stream(b"Q"))
    page[NameObject("/Contents")] = ArrayObject([writer._add_object(_stream(b"q")), *original, overlay])
    writer.add_metadata({"/Title": TextStringObject(title)})
    out = io.BytesIO()
    writer.write(out)
    base, tail = compact(out.getvalue())
    prev = int(re.findall(rb"startxref\s+(\d+)", base)[-1])
    return Template(
        base=base,
        overlay_obj=overlay.idnum,
        trailer_tail=tail,
        size=int(re.search(rb"/Size (\d+)", base[prev:]).group(1)),  # type: ignore[union-attr]
        prev_xref=prev,
        texts=texts,
        qr=qr,
        holder=holder,
    )
