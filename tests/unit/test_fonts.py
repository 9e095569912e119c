"""ticketry.fonts: the rules the api checks at order time (every character can
be drawn, the holder name fits its line) and the shaping the fast path draws."""

from __future__ import annotations

from importlib import resources

import pytest
from ticketry import fonts

from tests.unit.test_render_fidelity import WORLD_NAMES


@pytest.mark.parametrize("name", [*WORLD_NAMES, "Ada Lovelace", "Zoë O'Brien-Núñez", "Ngô Bảo Châu"])
def test_every_script_of_the_chain_is_drawable_and_fits(name: str) -> None:
    assert fonts.undrawable(name) is None
    assert fonts.fits(name)
    assert fonts.holder_size(name) == fonts.HOLDER_PT
    # And shaping never produces a .notdef glyph
    assert all(g.gid != 0 for run in fonts.shape(name).runs for g in run.glyphs)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Khufu \U00013000", "U+13000 EGYPTIAN HIEROGLYPH A001"),  # no font of the chain
        ("Ada \ue000", "U+E000"),  # private use
    ],
)
def test_an_undrawable_character_is_named(text: str, reason: str) -> None:
    found = fonts.undrawable(text)
    assert found is not None and reason in found
    assert not fonts.fits(text)


def test_long_names_shrink_down_to_the_floor_then_are_refused() -> None:
    # 40 wide letters shrink below 13 pt; 120 do not fit even at the floor
    assert fonts.HOLDER_MIN_PT < (fonts.holder_size("W" * 40) or 0) < fonts.HOLDER_PT
    assert fonts.holder_size("W" * 120) is None and not fonts.fits("W" * 120)
    # The renderer still prints such a name (an older api accepted it), smaller
    assert (fonts.fitted_size("W" * 120) or 0) < fonts.HOLDER_MIN_PT
    # A fitted name is never wider than the line
    for name in ("W" * 40, "李" * 40, "محمد " * 12):
        size = fonts.fitted_size(name)
        assert size is not None and fonts.shape(fonts.collapse(name)).advance * size <= fonts.HOLDER_WIDTH_PT


def test_the_design_uses_the_chain() -> None:
    css = (resources.files("ticketry_renderer") / "templates" / "assets" / "ticket.css").read_text()
    assert " ".join(fonts.CSS_FONT_STACK.split()) in " ".join(css.split())


@pytest.mark.parametrize(
    ("text", "levels"),
    [
        ("Ada", [0, 0, 0]),
        ("דוד כהן", [1] * 7),  # the space between two right-to-left words is right-to-left
        ("محمد Ali", [1, 1, 1, 1, 0, 0, 0, 0]),  # between directions: the paragraph's
        ("علي 12", [1, 1, 1, 1, 2, 2]),  # numbers inside Arabic
        ("דוד 50%", [1, 1, 1, 1, 2, 2, 2]),  # a percent sign belongs to its number
        ("עמית $12", [1, 1, 1, 1, 1, 2, 2, 2]),  # so does a currency sign before it
        ("Ana (אנה)", [0, 0, 0, 0, 0, 1, 1, 1, 0]),  # brackets take the direction around them (UAX #9 N0)
        ("שרה (Sarah) לוי", [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1]),
    ],
)
def test_bidi_levels(text: str, levels: list[int]) -> None:
    assert fonts.bidi_levels(text) == levels


def test_right_to_left_runs_are_in_visual_order() -> None:
    line = fonts.shape("محمد Ali")
    # In a left-to-right paragraph the Arabic word comes first on the page, its
    # glyphs right to left within itself; then the Latin one.
    assert line.runs[0].rtl and line.runs[0].start == 0
    assert line.runs[-1].start == 5 and not line.runs[-1].rtl


def test_spaces_keep_the_font_of_their_word() -> None:
    # Pango's rule: "山田 太郎" is one run of the CJK font, space included
    line = fonts.shape("山田 太郎")
    assert len(line.runs) == 1 and fonts.chain()[line.runs[0].face].family == "Noto Sans CJK JP"


def test_a_mixed_direction_name_is_drawn_in_bidi_order() -> None:
    # "דוד 50%" is one right-to-left run with its number inside: 50% first on the page, left to right
    line = fonts.shape("דוד 50%")
    assert [(r.start, r.end, r.rtl) for r in line.runs] == [(4, 7, False), (0, 4, True)]


@pytest.mark.parametrize(
    ("typed", "printed"),
    [
        ("Ada  Lovelace", "Ada Lovelace"),
        (" Ada\t\n\r Lovelace ", "Ada Lovelace"),
        ("Ada\u00a0 Lovelace", "Ada\u00a0 Lovelace"),
    ],
)
def test_white_space_is_collapsed_as_html_does(typed: str, printed: str) -> None:
    # Runs of spaces, tabs and line breaks are one space, none at the ends; a no-break space stays
    assert fonts.collapse(typed) == printed
    assert fonts.holder_size(typed) == fonts.holder_size(printed)


@pytest.mark.parametrize(
    ("name", "venue", "tiers", "refused"),
    [
        ("Night of Tests", "Loopback Arena", ["Balcony West"], None),
        ("Ｗ" * 40, "Loopback Arena", [], "name"),  # 40 em of title: more than the header holds at 12 pt
        ("Night of Tests", "M" * 80, [], "venue"),
        ("Night of Tests", "Loopback Arena", ["VIP", "Ｗ" * 30], "tier name"),
        ("Night of Tests \U00013000", "Loopback Arena", [], "name"),  # cannot be drawn
    ],
)
def test_an_event_text_too_wide_for_its_line_is_named(
    name: str, venue: str, tiers: list[str], refused: str | None
) -> None:
    why = fonts.event_unfit(name, venue, tiers)
    assert (why is None) if refused is None else (why is not None and why.startswith(refused + " "))


def test_event_lines_shrink_to_their_floor_and_no_further() -> None:
    # A line that fits at its floor is accepted; the renderer prints a wider one smaller, still one line
    for line in (fonts.TITLE, fonts.VENUE, fonts.TIER, fonts.BADGE):
        at_floor = "M" * int(line.width_pt / line.floor / 0.9)
        too_wide = at_floor * 2
        assert line.size >= (line.fitted("Ada") or 0) and not line.fits(too_wide)
        assert (line.fitted(too_wide) or line.floor) < line.floor


def test_the_fingerprint_names_the_fonts_of_this_host() -> None:
    # Stable within a process, and a digest of every installed face of the chain
    assert fonts.fingerprint() == fonts.fingerprint() and len(fonts.fingerprint()) == 16
