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
        assert size is not None and fonts.shape(name).advance * size <= fonts.HOLDER_WIDTH_PT


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
