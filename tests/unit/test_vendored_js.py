"""The pages' vendored JavaScript comes with its licence: each library under
``static/vendor/`` has its ``LICENSE`` beside it, and the api's asset table
(what ``GET /assets/{name}`` serves) holds both. tests/e2e/test_pages.py
fetches them from a running api."""

from __future__ import annotations

from ticketry_api.web.assets import STATIC, load_assets

VENDOR = STATIC / "vendor"


def test_each_vendored_library_has_its_licence_beside_it() -> None:
    libraries = sorted(p for p in VENDOR.iterdir() if p.is_dir())
    assert [p.name for p in libraries] == ["jsqr", "uplot"]
    for lib in libraries:
        assert list(lib.glob("*.js")), lib
        licence = lib / "LICENSE"
        assert licence.is_file() and licence.stat().st_size > 0, lib
    assert "Apache License" in (VENDOR / "jsqr" / "LICENSE").read_text()
    assert "MIT License" in (VENDOR / "uplot" / "LICENSE").read_text()
    assert (VENDOR / "jsqr" / "jsQR.js").is_file()


def test_the_api_serves_the_library_and_its_licence() -> None:
    assets = load_assets()
    js, licence = assets["vendor/jsqr/jsQR.js"], assets["vendor/jsqr/LICENSE"]
    assert js.media_type.startswith("text/javascript") and js.body == (VENDOR / "jsqr" / "jsQR.js").read_bytes()
    assert licence.media_type.startswith("text/plain") and licence.body == (VENDOR / "jsqr" / "LICENSE").read_bytes()
    # ...and the scanner loads the library from there
    assert '<script src="/assets/vendor/jsqr/jsQR.js"' in assets["scan.html"].body.decode()
