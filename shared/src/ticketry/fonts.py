"""The fonts a ticket is printed with, and the rules the api checks: every
character can be drawn (:func:`undrawable`), a holder name fits its line
(:func:`fits`, at order time), and an event's name, venue and tier names fit
theirs (:func:`event_unfit`, when the event is created). Every field of the
ticket is one line: a text shrinks to fit it, down to a floor the api enforces.

The **chain** is the ticket design's ``font-family`` list (``ticket.css``, kept
equal to :data:`CSS_FONT_STACK` by a test): Liberation Sans for Latin (incl.
Vietnamese), Greek, Cyrillic and Hebrew, then Noto for the rest, DejaVu Sans
last. A character is drawn by the first font of the chain that has it, as Pango
does when WeasyPrint renders the design; white space and other invisible
characters stay in the font of the text before them (Pango's rule too), so
``山田 太郎`` is one run of Noto Sans CJK.

Fonts are found with fontconfig (``fc-match``), once per process and only when
first needed; their files are memory-mapped by HarfBuzz, so a 20 MB CJK
collection costs address space, not memory per process. The api calls
:func:`undrawable` and :func:`fits` per order: after the first call they cost a
set look-up per character and one HarfBuzz shaping of the name (~20-60 µs).

:func:`shape` is what the renderer's fast path draws: the name itemized (bidi
level by FriBidi as Pango does, script, font), shaped by HarfBuzz and put in
visual order. Text is measured as the design prints it, its white space
collapsed (:func:`collapse`). :func:`fingerprint` names the fonts of this host:
a stored design is only valid on hosts with the same.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import logging
import re
import subprocess
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import uharfbuzz as hb  # type: ignore[import-untyped]

log = logging.getLogger(__name__)

# The holder's font chain, in the order of the design's font-family list.
CHAIN: tuple[str, ...] = (
    "Liberation Sans",
    "Noto Sans",
    "Noto Sans Arabic",
    "Noto Sans Hebrew",
    "Noto Sans Thai",
    "Noto Sans Devanagari",
    "Noto Sans CJK JP",
    "DejaVu Sans",
)
CSS_FONT_STACK = ", ".join(f'"{family}"' for family in CHAIN)
# The holder is printed in bold (``dd.holder``); its faces are the bold ones.
HOLDER_WEIGHT = "bold"

# The holder line: its full size, the floor it may shrink to, and the width it
# must fit in. The design's holder cell is 112 mm (≈ 319 pt) wide; the name is
# measured against 300 pt so that a HarfBuzz of another version than Pango's
# (or rounding) can never make it wrap. Tested against the design's cell.
HOLDER_PT = 13.0
HOLDER_MIN_PT = 7.0
HOLDER_WIDTH_PT = 300.0
# The ticket is laid out for English (``<html lang="en">``); Pango shapes with it.
LANGUAGE = "en"


class FontsUnavailable(RuntimeError):
    """The first font of the chain is not installed (run infra/bootstrap.sh)."""


@dataclass(frozen=True, eq=False)
class Face:
    """One font of the chain: its file, HarfBuzz objects and metrics."""

    family: str
    path: str
    index: int
    upem: int
    # Pango's logical extents of a run in this font, in em: above and below the baseline.
    ascent: float
    descent: float
    cmap: frozenset[int] = field(repr=False)
    hb_face: Any = field(repr=False)
    hb_font: Any = field(repr=False)

    @property
    def is_cff(self) -> bool:
        """PostScript outlines (OpenType/CFF, e.g. Noto Sans CJK) rather than TrueType."""
        return b"CFF " in {bytes(t, "ascii") if isinstance(t, str) else t for t in self.hb_face.table_tags}


@dataclass(frozen=True)
class Glyph:
    gid: int
    cluster: int  # index in the text of the first character of its cluster
    advance: float  # in em
    dx: float  # offsets in em
    dy: float


@dataclass(frozen=True)
class Run:
    """Glyphs of one font and direction, in visual order (left to right)."""

    face: int  # index in the chain
    rtl: bool
    start: int  # the run's characters: text[start:end]
    end: int
    glyphs: tuple[Glyph, ...]

    @property
    def advance(self) -> float:
        return sum(g.advance for g in self.glyphs)


@dataclass(frozen=True)
class Line:
    """A shaped line: runs in visual order; widths in em (multiply by the size)."""

    text: str
    runs: tuple[Run, ...]

    @property
    def advance(self) -> float:
        return sum(r.advance for r in self.runs)

    def faces(self) -> set[int]:
        return {r.face for r in self.runs}


# -- the chain ----------------------------------------------------------------------


def _fc_match(family: str, weight: str) -> tuple[str, str, int] | None:
    try:
        out = subprocess.run(
            ["fc-match", "-f", "%{family[0]}|%{file}|%{index}", f"{family}:{weight}"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    found, path, index = out.rsplit("|", 2)
    return found, path, int(index or 0)


def _load(family: str, weight: str) -> Face | None:
    match = _fc_match(family, weight)
    if match is None or match[0].casefold() != family.casefold():
        log.warning("fonts: %s is not installed; its characters fall to the next font", family)
        return None
    _, path, index = match
    hb_face = hb.Face(hb.Blob.from_file_path(path), index)  # mmap'ed by HarfBuzz
    hb_font = hb.Font(hb_face)
    extents = hb_font.get_font_extents("ltr")
    upem = hb_face.upem
    return Face(
        family=family, path=path, index=index, upem=upem,
        ascent=extents.ascender / upem, descent=-extents.descender / upem,
        cmap=frozenset(hb_face.unicodes), hb_face=hb_face, hb_font=hb_font,
    )  # fmt: skip


@functools.cache
def chain(weight: str = HOLDER_WEIGHT) -> tuple[Face, ...]:
    """The installed fonts of :data:`CHAIN`, loaded once per process."""
    faces = tuple(f for f in (_load(family, weight) for family in CHAIN) if f is not None)
    if not faces or faces[0].family != CHAIN[0]:
        raise FontsUnavailable(f"{CHAIN[0]} ({weight}) is not installed")
    return faces


@functools.cache
def fingerprint(weight: str = HOLDER_WEIGHT) -> str:
    """Which fonts of :data:`CHAIN` this host has, and which versions: a digest of
    each installed face's family, index, glyph count and ``head`` table (its
    revision, dates and whole-file checksum). Hosts with equal fingerprints
    draw a name with the same fonts and glyph ids; a design that reserves one
    font per face of the chain is only valid where the fingerprint is equal."""
    digest = hashlib.sha256()
    for face in chain(weight):
        digest.update(f"{face.family}\0{face.index}\0{face.hb_face.glyph_count}\0".encode())
        digest.update(face.hb_face.reference_table("head").data)
    return digest.hexdigest()[:16]


@functools.cache
def _covered(weight: str = HOLDER_WEIGHT) -> frozenset[int]:
    return frozenset().union(*(f.cmap for f in chain(weight)))


def _needs_font(ch: str) -> bool:
    """Pango draws white space and invisible characters with the font in use."""
    return not (ch.isspace() or unicodedata.category(ch) in ("Cf", "Cc", "Zs", "Zl", "Zp"))


def undrawable(text: str, weight: str = HOLDER_WEIGHT) -> str | None:
    """Why ``text`` cannot be printed (the first character no font of the chain
    can draw), or None when it can. Cheap: set look-ups after the first call."""
    covered = _covered(weight)
    for ch in text:
        cp = ord(ch)
        if cp in covered or not _needs_font(ch):
            continue
        name = unicodedata.name(ch, "")
        return f"character U+{cp:04X}{f' {name}' if name else ''} cannot be printed by the ticket's fonts"
    return None


# -- measuring -----------------------------------------------------------------------


# What the design's CSS (``white-space: normal`` or ``nowrap``) collapses: a run of
# spaces, tabs and line breaks is one space, and none is left at either end of the
# line. Other spaces (no-break, ideographic, em…) are printed as they are.
_COLLAPSIBLE = re.compile("[ \t\n\r]+")


def collapse(text: str) -> str:
    """``text`` as the ticket prints it: white space collapsed as HTML does."""
    return _COLLAPSIBLE.sub(" ", text).strip(" ")


def holder_size(name: str, width_pt: float = HOLDER_WIDTH_PT) -> float | None:
    """The size (pt) the holder line is printed at: :data:`HOLDER_PT`, or smaller
    so that it fits ``width_pt`` on one line; None below :data:`HOLDER_MIN_PT`
    (the api refuses such a name) or when it cannot be drawn."""
    size = fitted_size(name, width_pt)
    return None if size is None or size < HOLDER_MIN_PT else size


def fitted_size(name: str, width_pt: float = HOLDER_WIDTH_PT) -> float | None:
    """Like :func:`holder_size` without the floor (the renderer prints a name an
    older api accepted at whatever size fits); None when it cannot be drawn."""
    return fit(name, width_pt, HOLDER_PT)


def fit(text: str, width_pt: float, size: float, weight: str = HOLDER_WEIGHT) -> float | None:
    """The largest size up to ``size`` (pt, rounded down to 1/100: it is printed
    into the design's CSS) at which ``text``, its white space collapsed, is one
    line no wider than ``width_pt``; None when it cannot be drawn."""
    text = collapse(text)
    if undrawable(text, weight) is not None:
        return None
    advance = shape(text, weight).advance
    if advance <= 0:
        return size
    return min(size, int(width_pt / advance * 100) / 100)


def fits(name: str) -> bool:
    """The holder name fits its line at :data:`HOLDER_MIN_PT` or more, and every
    character of it can be drawn: the api's check at order time."""
    return holder_size(name) is not None


# -- the organiser's texts -----------------------------------------------------------

_MM = 72 / 25.4


@dataclass(frozen=True)
class TextLine:
    """A line of the design that prints one of the organiser's texts (``ticket.css``,
    ``white-space: nowrap``): its full size, the floor the api lets it shrink to,
    the width it must fit in (pt, tested against the design's layout), and how
    the design sets it. Measured in the holder's (bold) faces: a regular line is
    narrower, so it fits too."""

    size: float
    floor: float
    width_pt: float
    upper: bool = False  # text-transform: uppercase
    spacing_pt: float = 0.0  # letter-spacing, after each character

    def fitted(self, text: str) -> float | None:
        """The size ``text`` is printed at, below the floor for a text an older
        api accepted (one line, smaller); None when it cannot be drawn."""
        text = collapse(text)
        if self.upper:
            text = text.upper()
        return fit(text, max(self.width_pt - len(text) * self.spacing_pt, 1.0), self.size)

    def fits(self, text: str) -> bool:
        """``text`` is one line at :attr:`floor` or more."""
        size = self.fitted(text)
        return size is not None and size >= self.floor


TITLE = TextLine(size=22.0, floor=12.0, width_pt=160 * _MM)  # h1, in the header's 162.8 mm content box
VENUE = TextLine(size=12.0, floor=8.0, width_pt=160 * _MM)
TIER = TextLine(size=11.5, floor=7.0, width_pt=52 * _MM)  # a field of the two-column grid (53.4 mm)
BADGE = TextLine(size=9.0, floor=5.0, width_pt=104 * _MM, upper=True, spacing_pt=0.5 * _MM)  # 110 mm less padding


def event_unfit(name: str, venue: str, tier_names: Iterable[str] = ()) -> str | None:
    """Why an event's name, venue or a tier name would not be one line of the
    ticket even at its floor size (or cannot be drawn), or None when all fit:
    the api's check when an event is created. A tier name is printed twice, in
    its field and in the header's badge (upper case)."""
    lines: list[tuple[str, str, tuple[TextLine, ...]]] = [("name", name, (TITLE,)), ("venue", venue, (VENUE,))]
    lines += [("tier name", tier, (TIER, BADGE)) for tier in tier_names]
    for label, text, where in lines:
        for line in where:
            if not line.fits(text):
                shown = f"{text[:40]!r}{'…' if len(text) > 40 else ''}"
                return f"{label} {shown} does not fit on one line of the ticket, even at {line.floor:g} pt"
    return None


# -- itemizing and shaping -----------------------------------------------------------

# Unicode blocks of the scripts a name may mix (Pango shapes each script apart).
_SCRIPT_RANGES: tuple[tuple[int, int, str], ...] = (
    (0x0000, 0x02AF, "Latn"), (0x0370, 0x03FF, "Grek"), (0x0400, 0x052F, "Cyrl"), (0x0590, 0x05FF, "Hebr"),
    (0x0600, 0x06FF, "Arab"), (0x0750, 0x077F, "Arab"), (0x08A0, 0x08FF, "Arab"), (0x0900, 0x097F, "Deva"),
    (0x0E00, 0x0E7F, "Thai"), (0x1100, 0x11FF, "Hang"), (0x1C80, 0x1C8F, "Cyrl"), (0x1E00, 0x1EFF, "Latn"),
    (0x1F00, 0x1FFF, "Grek"), (0x2C60, 0x2C7F, "Latn"), (0x2DE0, 0x2DFF, "Cyrl"), (0x3040, 0x309F, "Hira"),
    (0x30A0, 0x30FF, "Kana"), (0x3130, 0x318F, "Hang"), (0x31F0, 0x31FF, "Kana"), (0x3400, 0x4DBF, "Hani"),
    (0x4E00, 0x9FFF, "Hani"), (0xA640, 0xA69F, "Cyrl"), (0xA720, 0xA7FF, "Latn"), (0xA8E0, 0xA8FF, "Deva"),
    (0xAB30, 0xAB6F, "Latn"), (0xAC00, 0xD7AF, "Hang"), (0xF900, 0xFAFF, "Hani"), (0xFB1D, 0xFB4F, "Hebr"),
    (0xFB50, 0xFDFF, "Arab"), (0xFE70, 0xFEFF, "Arab"), (0x20000, 0x3FFFF, "Hani"),
)  # fmt: skip
_INHERITED = ((0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F))


def _script(ch: str) -> str | None:
    """ISO 15924 tag of a letter or mark; None for common (punctuation, digits,
    spaces) and inherited (combining) characters, which join their neighbours."""
    cat = unicodedata.category(ch)
    if cat[0] not in "LM":
        return None
    cp = ord(ch)
    if cat[0] == "M" and any(lo <= cp <= hi for lo, hi in _INHERITED):
        return None
    for lo, hi, tag in _SCRIPT_RANGES:
        if lo <= cp <= hi:
            return tag
    return "Zzzz"


# Paired punctuation (Pango's list, the common part): a closing one belongs to
# the script its opening one was in, so ``(Sara)`` after Arabic closes in Arabic.
_PAIRED = "()<>[]{}«»‘’“”‹›⁅⁆⁽⁾₍₎⟦⟧⟨⟩〈〉《》「」『』【】〔〕〖〗〘〙〚〛﹙﹚﹛﹜﹝﹞（）［］｛｝｟｠｢｣"
_PAIRS = {ch: (i // 2, i % 2 == 0) for i, ch in enumerate(_PAIRED)}  # char: (pair, opens)


def _scripts(text: str) -> list[str]:
    """Each character's script as Pango's script itemizer has it: common
    characters continue the script before them (the first one found, at the
    start), a closing bracket takes its opening bracket's."""
    raw = [_script(c) for c in text]
    first = next((s for s in raw if s is not None), "Zyyy")
    out, current = [], first
    open_pairs: list[tuple[int, str]] = []
    for ch, s in zip(text, raw, strict=True):
        if s is None and (pair := _PAIRS.get(ch)) is not None:
            kind, opens = pair
            if opens:
                open_pairs.append((kind, current))
            else:
                while open_pairs and open_pairs[-1][0] != kind:
                    open_pairs.pop()
                if open_pairs:
                    s = open_pairs.pop()[1]
        current = s or current
        out.append(current)
    return out


# Bidi classes that can give a character of a left-to-right paragraph a level
# other than 0: right-to-left letters, Arabic digits, explicit embeddings and
# isolates. Without one, every level is 0 and the bidi algorithm is skipped.
_NOT_ALL_LTR = frozenset({"R", "AL", "AN", "LRE", "LRO", "RLE", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})
_FRIBIDI_PAR_LTR = 0x110  # FRIBIDI_PAR_LTR: a left-to-right paragraph, as the design's (and Pango's, auto-dir off)


@functools.cache
def _fribidi() -> Any:
    """GNU FriBidi, the Unicode bidi algorithm (UAX #9, brackets included) that
    Pango runs when WeasyPrint lays the design out: the same library, so the
    same levels. It is installed with Pango (``libpango-1.0-0`` depends on it)."""
    try:
        lib = ctypes.CDLL("libfribidi.so.0")
    except OSError:
        found = ctypes.util.find_library("fribidi")
        if found is None:
            raise FontsUnavailable("GNU FriBidi (libfribidi) is not installed (run infra/bootstrap.sh)") from None
        lib = ctypes.CDLL(found)
    u32p, i8p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_int8)
    lib.fribidi_get_bidi_types.argtypes = [u32p, ctypes.c_int, u32p]
    lib.fribidi_get_bidi_types.restype = None
    lib.fribidi_get_bracket_types.argtypes = [u32p, ctypes.c_int, u32p, u32p]
    lib.fribidi_get_bracket_types.restype = None
    lib.fribidi_get_par_embedding_levels_ex.argtypes = [u32p, u32p, ctypes.c_int, u32p, i8p]
    lib.fribidi_get_par_embedding_levels_ex.restype = ctypes.c_int8  # max level + 1; 0 on failure
    return lib


def bidi_levels(text: str) -> list[int]:
    """Embedding levels of ``text`` as one left-to-right paragraph: 0 for
    left-to-right, 1 for right-to-left, 2 for numbers inside right-to-left text
    (the full UAX #9, by FriBidi as Pango). Only text with a right-to-left
    character, an Arabic digit or an explicit embedding pays for it."""
    if not any(unicodedata.bidirectional(ch) in _NOT_ALL_LTR for ch in text):
        return [0] * len(text)
    n = len(text)
    lib = _fribidi()
    chars = (ctypes.c_uint32 * n)(*map(ord, text))
    types, brackets = (ctypes.c_uint32 * n)(), (ctypes.c_uint32 * n)()
    levels = (ctypes.c_int8 * n)()
    base = ctypes.c_uint32(_FRIBIDI_PAR_LTR)
    lib.fribidi_get_bidi_types(chars, n, types)
    lib.fribidi_get_bracket_types(chars, n, types, brackets)
    if lib.fribidi_get_par_embedding_levels_ex(types, brackets, n, ctypes.byref(base), levels) == 0:
        raise MemoryError("fribidi: could not resolve the embedding levels")
    return list(levels)


def _visual_order(levels: Sequence[int]) -> list[int]:
    """Rule L2: indices of the items in display order."""
    order = list(range(len(levels)))
    top = max(levels, default=0)
    lowest_odd = min((lv for lv in levels if lv % 2), default=top + 1)
    for level in range(top, lowest_odd - 1, -1):
        i = 0
        while i < len(order):
            if levels[order[i]] >= level:
                j = i
                while j < len(order) and levels[order[j]] >= level:
                    j += 1
                order[i:j] = order[i:j][::-1]
                i = j
            else:
                i += 1
    return order


def _fonts_for(text: str, faces: Sequence[Face], runs: Sequence[tuple[int, str]]) -> list[int]:
    """Each character's face: the first of the chain that has it. White space and
    invisible characters, as Pango, stay in the font of the character before
    them in the same run (bidi level and script), else of the one after, else
    the font of a space; ``runs`` gives each character's run."""
    space = next((i for i, f in enumerate(faces) if 0x20 in f.cmap), 0)
    out = [space] * len(text)
    current: int | None = None
    pending: list[int] = []  # white space at the start of the run, before its first font
    for i, ch in enumerate(text):
        if i and runs[i] != runs[i - 1]:
            current, pending = None, []
        if not _needs_font(ch):
            if current is None:
                pending.append(i)
            else:
                out[i] = current
            continue
        cp = ord(ch)
        pick = next((k for k, f in enumerate(faces) if cp in f.cmap), None)
        if pick is None:
            pick = current if current is not None else 0  # undrawable: refused before shaping
        current = pick
        for k in pending:
            out[k] = pick
        pending.clear()
        out[i] = pick
    return out


@functools.lru_cache(maxsize=4096)
def shape(text: str, weight: str = HOLDER_WEIGHT) -> Line:
    """``text`` on one line: itemized like Pango (bidi level, script, font),
    each item shaped by HarfBuzz, items in visual order. Advances in em."""
    faces = chain(weight)
    if not text:
        return Line(text, ())
    levels = bidi_levels(text)
    scripts = _scripts(text)
    fonts = _fonts_for(text, faces, list(zip(levels, scripts, strict=True)))
    items: list[tuple[int, int, int, str, int]] = []  # start, end, level, script, font
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or (levels[i], scripts[i], fonts[i]) != (levels[start], scripts[start], fonts[start]):
            items.append((start, i, levels[start], scripts[start], fonts[start]))
            start = i
    runs = []
    for k in _visual_order([it[2] for it in items]):
        s, e, level, script, font = items[k]
        runs.append(_shape_item(text, s, e, level % 2 == 1, script, faces[font], font))
    return Line(text, tuple(runs))


def _shape_item(text: str, start: int, end: int, rtl: bool, script: str, face: Face, index: int) -> Run:
    buf = hb.Buffer()
    buf.add_str(text[start:end])
    buf.direction = "rtl" if rtl else "ltr"
    if script not in ("Zzzz", "Zyyy"):
        buf.script = script
    buf.language = LANGUAGE
    hb.shape(face.hb_font, buf)
    # HarfBuzz clusters are offsets into what was added (UTF-32 for add_str).
    em = 1 / face.upem
    glyphs = tuple(
        Glyph(gid=info.codepoint, cluster=start + info.cluster, advance=pos.x_advance * em,
              dx=pos.x_offset * em, dy=pos.y_offset * em)
        for info, pos in zip(buf.glyph_infos, buf.glyph_positions, strict=True)
    )  # fmt: skip
    return Run(face=index, rtl=rtl, start=start, end=end, glyphs=glyphs)
