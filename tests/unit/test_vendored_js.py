"""The pages' vendored JavaScript comes with its licence: each library under
``static/vendor/`` has its ``LICENSE`` beside it, and the api's asset table
(what ``GET /assets/{name}`` serves) holds both. tests/e2e/test_pages.py
fetches them from a running api; the door scanner's Ed25519 fallback
(@noble/ed25519) is checked byte for byte against its README."""

from __future__ import annotations

import hashlib
import re

from ticketry_api.web.assets import STATIC, load_assets

VENDOR = STATIC / "vendor"


def test_each_vendored_library_has_its_licence_beside_it() -> None:
    libraries = sorted(p for p in VENDOR.iterdir() if p.is_dir())
    assert [p.name for p in libraries] == ["jsqr", "noble-ed25519", "uplot"]
    for lib in libraries:
        assert list(lib.glob("*.js")), lib
        licence = lib / "LICENSE"
        assert licence.is_file() and licence.stat().st_size > 0, lib
    assert "Apache License" in (VENDOR / "jsqr" / "LICENSE").read_text()
    assert "MIT License" in (VENDOR / "uplot" / "LICENSE").read_text()
    assert "The MIT License" in (VENDOR / "noble-ed25519" / "LICENSE").read_text()
    assert (VENDOR / "jsqr" / "jsQR.js").is_file()


def test_the_api_serves_the_library_and_its_licence() -> None:
    assets = load_assets()
    js, licence = assets["vendor/jsqr/jsQR.js"], assets["vendor/jsqr/LICENSE"]
    assert js.media_type.startswith("text/javascript") and js.body == (VENDOR / "jsqr" / "jsQR.js").read_bytes()
    assert licence.media_type.startswith("text/plain") and licence.body == (VENDOR / "jsqr" / "LICENSE").read_bytes()
    # ...and the scanner loads the library from there
    assert '<script src="/assets/vendor/jsqr/jsQR.js"' in assets["scan.html"].body.decode()


def test_the_scanners_ed25519_fallback_is_served_as_an_unmodified_es_module() -> None:
    """@noble/ed25519: the scanner's signature check where WebCrypto has no
    Ed25519. One ES module with no imports (import() under the page's CSP),
    the file npm ships (its sha256 in README.txt), preloaded with the page."""
    assets = load_assets()
    lib = VENDOR / "noble-ed25519"
    js = assets["vendor/noble-ed25519/index.js"]
    assert js.media_type.startswith("text/javascript") and js.body == (lib / "index.js").read_bytes()
    assert assets["vendor/noble-ed25519/LICENSE"].media_type.startswith("text/plain")
    text = js.body.decode()
    assert "export {" in text and "verifyAsync" in text
    code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # (its doc comments show an import)
    assert not re.search(r"^\s*import\b|\bimport\(", code, re.M)  # nothing else to fetch
    digest = hashlib.sha256(js.body).hexdigest()
    assert f"sha256 index.js {digest}" in (lib / "README.txt").read_text()
    page = assets["scan.html"].body.decode()
    assert '<link rel="modulepreload" href="/assets/vendor/noble-ed25519/index.js">' in page
    assert '"/assets/vendor/noble-ed25519/index.js"' in assets["scan.js"].body.decode()
