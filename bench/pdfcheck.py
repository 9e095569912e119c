"""What a rendered ticket draws, read back with PyMuPDF: the glyphs (a
``.notdef`` is glyph 0: a box on paper) and the text a reader extracts. Used by
``bench.intl`` on every PDF it renders and by the fidelity tests."""

from __future__ import annotations

import unicodedata
from typing import Any

import pymupdf

_mupdf: Any = pymupdf  # its calls are untyped


def glyphs_drawn(pdf: bytes) -> list[tuple[int, int, str]]:
    """(character, glyph, font) of every glyph the page draws (PyMuPDF's trace)."""
    doc = _mupdf.open(stream=pdf, filetype="pdf")
    try:
        return [(c[0], c[1], span["font"]) for span in doc[0].get_texttrace() for c in span["chars"]]
    finally:
        doc.close()


def notdef(pdf: bytes) -> list[tuple[int, int, str]]:
    """Glyphs drawn as .notdef (glyph 0)."""
    return [g for g in glyphs_drawn(pdf) if g[1] == 0]


def mupdf_text(pdf: bytes) -> str:
    """The page's text as PyMuPDF extracts it."""
    doc = _mupdf.open(stream=pdf, filetype="pdf")
    try:
        text: str = doc[0].get_text()
    finally:
        doc.close()
    return text


def mixed_direction(text: str) -> bool:
    """Right-to-left letters and left-to-right letters or digits in one string."""
    kinds = {unicodedata.bidirectional(c) for c in text}
    return bool(kinds & {"R", "AL"}) and bool(kinds & {"L", "EN", "AN"})


def faults(pdf: bytes, holder: str) -> list[str]:
    """Why this ticket is not what its holder typed: .notdef glyphs, or a
    holder line that does not extract exactly. Empty when it is.

    A name that mixes directions (``محمد علي 10004``) extracts in the order
    its runs are drawn, from WeasyPrint's own render too (``10004 محمد علي``):
    then the line must hold the same words."""
    out = [f".notdef for U+{c:04X} in {font}" for c, _, font in notdef(pdf)]
    lines = mupdf_text(pdf).splitlines()
    if mixed_direction(holder):
        found = any(sorted(line.split()) == sorted(holder.split()) for line in lines)
    else:
        found = holder in lines
    if not found:
        out.append(f"{holder!r} does not extract as typed")
    return out
