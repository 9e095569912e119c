"""The pages share one frame (ticketry_api.web.assets.in_layout): each page's
file holds only its own head and body. Plain data, no server."""

from __future__ import annotations

import pytest
from ticketry_api.web.assets import LAYOUT, in_layout, load_assets

PAGES = {
    "order.html": "Your tickets", "queue.html": "Waiting room", "scan.html": "Door scanner",
    "ops.html": "Operator's console",
}  # fmt: skip


@pytest.mark.parametrize(("name", "title"), PAGES.items())
def test_each_page_is_served_in_the_common_frame(name: str, title: str) -> None:
    page = load_assets()[name].body.decode()
    assert page.startswith('<!doctype html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n')
    assert page.count("<head>") == page.count("<body>") == page.count("</html>") == 1
    assert '<meta name="referrer" content="no-referrer">' in page
    assert '<link rel="stylesheet" href="/assets/common.css">' in page
    assert f"<title>{title} · Ticketry</title>" in page
    assert "<!-- page" not in page


def test_a_page_of_another_shape_fails_the_start_naming_its_file() -> None:
    with pytest.raises(ValueError, match=r"^broken\.html: "):
        in_layout(b"<main>no head</main>\n", LAYOUT.read_bytes(), "broken.html")
