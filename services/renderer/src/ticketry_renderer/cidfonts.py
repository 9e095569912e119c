"""The glyphs of one stamped text run, embedded as a PDF CID font (pure).

Per ticket, each font of the chain the holder name uses becomes a ``Type0``
font (``CIDFontType2`` for TrueType outlines, ``CIDFontType0`` with an
OpenType/CFF ``FontFile3`` for Noto Sans CJK) holding only the glyphs the name
draws, subset by HarfBuzz: 0.05-0.1 ms for TrueType faces, preprocessed once
per process (``hb_subset_preprocess``); ~2.4 ms for the 65,535-glyph CFF face of
Noto Sans CJK, which is not preprocessed (that would cost 126 MB per process).

Text extraction keys on the CID: a glyph can stand for different text in one
name (Devanagari ``म`` alone and inside the conjunct ``र्मा``), so for TrueType
outlines, in such a name, each distinct (glyph, text) pair gets a CID of its
own, and a ``CIDToGIDMap`` maps them back to the glyphs (several CIDs to one
glyph is allowed); in the others (most names) the CID is the subset's glyph id
(``/CIDToGIDMap /Identity``, one stream less). The ``ToUnicode`` CMap gives each
CID its text. Glyphs are drawn in
visual order, as WeasyPrint draws them, so extractors put right-to-left text in
logical order the way they do for the full render. CFF outlines (CJK) cannot
map several CIDs to one glyph (CID = glyph id): there the first text of a glyph
wins, which CJK names, one glyph per character, never notice.
"""

from __future__ import annotations

import functools
import hashlib
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import uharfbuzz as hb  # type: ignore[import-untyped]
from ticketry import fonts

# Tables a PDF viewer never reads from an embedded CID font (shaping is done).
_DROP = ("GSUB", "GPOS", "GDEF", "BASE", "JSTF", "DSIG", "kern", "vhea", "vmtx", "VORG", "name", "LTSH", "PCLT", "gasp")
# TrueType outlines drawn by CID (CIDToGIDMap): no character map is read either.
_DROP_TRUETYPE = ("cmap", "post", "OS/2")


class Subsetter:
    """One face of the chain, ready to subset (preprocessed lazily, once)."""

    def __init__(self, face: fonts.Face) -> None:
        self.face = face
        self.cff = face.is_cff  # a look through the face's tables each time it is asked
        self._pre: Any = None

    def subset(self, gids: tuple[int, ...]) -> tuple[bytes, dict[int, int]]:
        """The font program with ``gids`` only, and old → new glyph ids."""
        program = self.program(gids)
        return program.data, program.old_to_new

    @functools.lru_cache(maxsize=512)  # noqa: B019 - one Subsetter per face per process
    def program(self, gids: tuple[int, ...]) -> Program:
        """The subset with what its PDF objects need, compressed once per glyph set."""
        data, mapping = self._subset(gids)
        # A subset tag from the glyphs (PDF 9.6.4): same glyphs, same name.
        tag = "".join(chr(65 + b % 26) for b in hashlib.sha256(data).digest()[:6])
        extra = b" /Subtype /OpenType" if self.cff else b" /Length1 %d" % len(data)
        return Program(data, mapping, _stream(extra, data, 9), tag)  # packed once per glyph set: the best level

    def _subset(self, gids: tuple[int, ...]) -> tuple[bytes, dict[int, int]]:
        if self._pre is None:
            # Preprocessing makes a subset ~0.05 ms, but of Noto Sans CJK it costs
            # 126 MB and 0.47 s per process (measured): CFF faces are subset as they
            # are (2.4 ms per new glyph set; repeated sets come from the cache).
            self._pre = self.face.hb_face if self.cff else hb.subset_preprocess(self.face.hb_face)
        inp = hb.SubsetInput()
        for gid in gids:
            inp.glyph_set.add(gid)
        inp.flags = hb.SubsetFlags.NO_HINTING | hb.SubsetFlags.CFF_IDENTITY_CHARSET
        drop = inp.sets(hb.SubsetInputSets.DROP_TABLE_TAG)
        for tag in _DROP if self.cff else _DROP + _DROP_TRUETYPE:
            drop.add(int.from_bytes(tag.encode(), "big"))
        plan = hb.SubsetPlan(self._pre, inp)
        mapping = dict(plan.old_to_new_glyph_mapping)
        data: bytes = plan.execute().blob.data
        return data, mapping


@dataclass(frozen=True)
class Program:
    """A subset font program: its bytes, old → new glyph ids, its PDF stream object, its tag."""

    data: bytes
    old_to_new: dict[int, int]
    stream: bytes
    tag: str


@dataclass(frozen=True)
class Embedded:
    """What the content stream needs: the 2-byte code (Identity-H: the CID) of each (glyph, text)."""

    codes: dict[tuple[int, str], int]
    advances: dict[int, int]  # glyph id → its width in /W (1/1000 em)
    objects: list[tuple[int, bytes]]  # (object number, body): the Type0 first, then new ones


def _hex16(text: str) -> bytes:
    return text.encode("utf-16-be").hex().upper().encode()


def _to_unicode(pairs: Sequence[tuple[int, bytes]]) -> bytes:
    out = [
        b"/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap",
        b"/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def",
        b"/CMapName /Adobe-Identity-UCS def\n/CMapType 2 def",
        b"1 begincodespacerange\n<0000> <FFFF>\nendcodespacerange",
    ]
    for i in range(0, len(pairs), 100):
        chunk = pairs[i : i + 100]
        out.append(b"%d beginbfchar" % len(chunk))
        out.extend(b"<%04X> <%s>" % (cid, text) for cid, text in chunk)
        out.append(b"endbfchar")
    out.append(b"endcmap\nCMapName currentdict /CMap defineresource pop\nend\nend")
    return b"\n".join(out)


def _stream(extra: bytes, data: bytes, level: int = 1) -> bytes:
    packed = zlib.compress(data, level)
    return b"<<%s /Length %d /Filter /FlateDecode>>\nstream\n%s\nendstream" % (extra, len(packed), packed)


def embed(sub: Subsetter, uses: Sequence[tuple[int, str]], type0_obj: int, first_obj: int) -> Embedded:
    """Objects of one Type0 font drawing ``uses`` ((glyph id, text) pairs): the
    Type0 dictionary replaces ``type0_obj`` (reserved in the template's
    resources), the others are numbered from ``first_obj``."""
    face = sub.face
    cff = sub.cff
    gids = sorted({g for g, _ in uses})
    subset = sub.program(tuple(gids))
    old_to_new = subset.old_to_new
    pairs = dict.fromkeys(uses)
    # CID = glyph id of the subset (CIDToGIDMap /Identity, no stream) where each
    # glyph stands for one text (most names), and always for CFF outlines.
    identity = cff or len(pairs) == len(gids)
    if identity:  # for CFF, the first text of a glyph wins
        codes = {pair: old_to_new[pair[0]] for pair in pairs}
        text_of: dict[int, str] = {}
        for (_, text), cid in codes.items():
            text_of.setdefault(cid, text)
    else:  # a CID per (glyph, text), mapped to its glyph by CIDToGIDMap
        codes = {pair: i + 1 for i, pair in enumerate(pairs)}
        text_of = {cid: text for (_, text), cid in codes.items()}
    scale = 1000 / face.upem
    advance = {g: round(face.hb_font.get_glyph_h_advance(g) * scale) for g in gids}
    widths = b" ".join(b"%d [%d]" % (cid, advance[g]) for (g, _), cid in sorted(codes.items(), key=lambda kv: kv[1]))
    to_unicode = _to_unicode([(cid, _hex16(text)) for cid, text in sorted(text_of.items()) if text])
    base = f"{subset.tag}+{face.family.replace(' ', '')}-Bold".encode()
    n_cid, n_desc, n_file, n_uni, n_map = range(first_obj, first_obj + 5)
    ident = b"<< /Registry (Adobe) /Ordering (Identity) /Supplement 0 >>"
    asc, desc = round(face.ascent * 1000), round(-face.descent * 1000)
    objects = [
        (type0_obj, b"<< /Type /Font /Subtype /Type0 /BaseFont /%s /Encoding /Identity-H /DescendantFonts [%d 0 R] "
                    b"/ToUnicode %d 0 R >>" % (base, n_cid, n_uni)),
        (n_cid, b"<< /Type /Font /Subtype /CIDFontType%d /BaseFont /%s /CIDSystemInfo %s /FontDescriptor %d 0 R "
                b"/DW 0 /W [%s]%s >>" % (0 if cff else 2, base, ident, n_desc, widths,
                                         b"" if cff else b" /CIDToGIDMap /Identity" if identity
                                         else b" /CIDToGIDMap %d 0 R" % n_map)),
        (n_desc, b"<< /Type /FontDescriptor /FontName /%s /Flags 4 /FontBBox [0 %d 1000 %d] /ItalicAngle 0 "
                 b"/Ascent %d /Descent %d /CapHeight %d /StemV 80 /%s %d 0 R >>" % (
                     base, desc, asc, asc, desc, round(face.ascent * 700),
                     b"FontFile3" if cff else b"FontFile2", n_file)),
        (n_file, subset.stream),
        (n_uni, _stream(b"", to_unicode)),
    ]  # fmt: skip
    if not identity:
        cid_to_gid = bytearray(2 * (max(codes.values()) + 1))
        for (g, _), cid in codes.items():
            cid_to_gid[2 * cid : 2 * cid + 2] = old_to_new[g].to_bytes(2, "big")
        objects.append((n_map, _stream(b"", bytes(cid_to_gid))))
    return Embedded(codes=codes, advances=advance, objects=objects)
