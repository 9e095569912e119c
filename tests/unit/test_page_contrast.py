"""The pages' text is readable: every colour pair the stylesheets put text in
has a WCAG 2.x contrast ratio of at least 4.5:1 (success criterion 1.4.3,
normal text).

Read from the stylesheets themselves (``common.css``, ``order.css``,
``scan.css``), no browser: a rule that sets both ``color`` and ``background``
is a pair; a rule that sets only one of them names its other side in the
tables below, so a new colour rule fails here until someone says what it sits
on (or that it holds no text).
"""

from __future__ import annotations

import re
from functools import cache

import pytest
from ticketry_api.web.assets import STATIC

SHEETS = ("common.css", "order.css", "scan.css")
AA_TEXT = 4.5

# A rule that sets a text colour only: the backgrounds that text is shown on.
BACKDROPS = {
    ".brand": ["--paper"],  # the pages' headers
    ".muted": ["--paper", "--panel"],  # headers and help lines; the waiting room's wait line in its card
    "a": ["--paper"],  # the tickets' download links (a .button has its own pair)
    ".tickets .num": ["--paper"],
    ".tickets .state": ["--paper"],
    ".tickets .state.failed": ["--paper"],
}
# A rule that sets a background only: its text is the page's ink (``:root``'s colour)...
INK_ON = {".card", ".notice", ".result", ".conflicts li"}
# ...or it holds no text at all.
NO_TEXT = {".bar", ".bar-fill", ".camera video"}

_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")
_VAR = re.compile(r"var\((--[\w-]+)\)")
_HEX = re.compile(r"#([0-9a-fA-F]{6}|[0-9a-fA-F]{3})\b")


@cache
def rules() -> list[tuple[str, dict[str, str]]]:
    """Every rule of the sheets: (one selector, its declarations), a selector list split."""
    out: list[tuple[str, dict[str, str]]] = []
    for sheet in SHEETS:
        text = _COMMENT.sub("", (STATIC / sheet).read_text())
        for selectors, body in _RULE.findall(text):
            decls = {}
            for decl in body.split(";"):
                name, _, value = decl.partition(":")
                if value.strip():
                    decls[name.strip()] = value.strip()
            for selector in selectors.split(","):
                out.append((" ".join(selector.split()), decls))
    return out


@cache
def variables() -> dict[str, str]:
    return {k: v for selector, decls in rules() if selector == ":root" for k, v in decls.items() if k.startswith("--")}


def colour(value: str) -> str:
    """A declaration's colour as ``#rrggbb`` (a ``var(--x)`` resolved)."""
    if m := _VAR.search(value):
        return colour(variables()[m.group(1)])
    m = _HEX.search(value)
    assert m, f"not a colour this test reads: {value!r}"
    digits = m.group(1)
    return "#" + (digits if len(digits) == 6 else "".join(c * 2 for c in digits)).lower()


def luminance(hex_colour: str) -> float:
    """WCAG 2.x relative luminance of an sRGB colour."""

    def linear(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4

    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b)


def contrast(fg: str, bg: str) -> float:
    hi, lo = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def background_of(decls: dict[str, str]) -> str | None:
    value = decls.get("background-color") or decls.get("background")
    return colour(value) if value else None


def text_pairs() -> list[tuple[str, str, str]]:
    """(selector, text colour, background) for every place the sheets put text."""
    ink = colour(variables()["--ink"])
    pairs: list[tuple[str, str, str]] = []
    for selector, decls in rules():
        fg = colour(decls["color"]) if "color" in decls else None
        bg = background_of(decls)
        if fg and bg:
            pairs.append((selector, fg, bg))
        elif fg:
            assert selector in BACKDROPS, f"{selector}: a text colour on what background? (BACKDROPS)"
            pairs += [(selector, fg, colour(f"var({b})")) for b in BACKDROPS[selector]]
        elif bg and selector not in NO_TEXT:
            assert selector in INK_ON, f"{selector}: a background under what text? (INK_ON or NO_TEXT)"
            pairs.append((selector, ink, bg))
    return pairs


@pytest.mark.parametrize(
    ("fg", "bg", "ratio"),
    [
        ("#000000", "#ffffff", 21.0),
        ("#ffffff", "#ffffff", 1.0),
        ("#777777", "#ffffff", 4.48),  # just below AA
        ("#0000ff", "#fff", 8.59),
    ],
)
def test_the_ratio_is_wcags(fg: str, bg: str, ratio: float) -> None:
    assert contrast(colour(fg), colour(bg)) == pytest.approx(ratio, abs=0.01)
    assert contrast(colour(bg), colour(fg)) == pytest.approx(ratio, abs=0.01)


def test_the_sheets_are_read_whole() -> None:
    selectors = {selector for selector, _ in rules()}
    # A rule of each sheet, and a selector list split
    assert {":root", ".status", '.status[data-status="cancelled"]', '.result[data-outcome="unknown"]'} <= selectors
    assert set(BACKDROPS) | INK_ON | NO_TEXT <= selectors  # no table row for a rule that is gone


def test_every_text_colour_pair_meets_aa() -> None:
    pairs = text_pairs()
    # (the answers of the door scanner and the order's status pills are among them)
    assert {'.result[data-outcome="already"]', '.status[data-status="completed"]', ".muted"} <= {s for s, _, _ in pairs}
    low = [(s, fg, bg, round(contrast(fg, bg), 2)) for s, fg, bg in pairs if contrast(fg, bg) < AA_TEXT]
    assert not low, low
