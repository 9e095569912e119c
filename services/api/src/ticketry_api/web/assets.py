"""The pages' static files, read once at start-up and served by name only
(a fixed table: no path from a request ever reaches the file system), and the
Content-Security-Policy each page is served with.

Every page has the same frame (``layout.html``: charset, viewport, no referrer,
no indexing, the common stylesheet); a page's file (``static/*.html``) holds only
what is its own, a ``<head>`` (title, its stylesheets and scripts) and a
``<body>``, and is put into the frame once, here, when the table is built."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

STATIC = Path(__file__).parent / "static"
LAYOUT = Path(__file__).parent / "layout.html"
HEAD_SLOT, BODY_SLOT = b"<!-- page head -->\n", b"<!-- page body -->\n"
_PAGE = re.compile(rb"<head>\n(.*)</head>\n<body>\n(.*)</body>\n", re.DOTALL)
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
    ".json": "application/json",
    "": "text/plain; charset=utf-8",  # LICENSE
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str


def in_layout(page: bytes, layout: bytes, name: str = "page") -> bytes:
    """A page's own ``<head>`` and ``<body>`` put into the common frame; a page
    of any other shape fails the start, naming the file."""
    found = _PAGE.fullmatch(page)
    if found is None or HEAD_SLOT not in layout or BODY_SLOT not in layout:
        raise ValueError(f"{name}: a page is its own <head>…</head> then <body>…</body>, nothing else")
    return layout.replace(HEAD_SLOT, found[1]).replace(BODY_SLOT, found[2])


def load_assets(root: Path = STATIC, layout: Path = LAYOUT) -> dict[str, Asset]:
    """Every file under ``root`` by its relative path (``vendor/jsqr/jsQR.js``),
    the pages (``*.html``) in their layout."""
    frame = layout.read_bytes()
    out: dict[str, Asset] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in _TYPES:
            name, body = path.relative_to(root).as_posix(), path.read_bytes()
            if path.suffix == ".html":
                body = in_layout(body, frame, name)
            out[name] = Asset(body, _TYPES[path.suffix])
    return out


def _origin(url: str) -> str:
    """``ws://host:8001/x`` → ``ws://host:8001`` (a CSP source)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def order_page_csp(notifier_public_url: str) -> str:
    """The buyer's page: our own scripts and styles, our api and the notifier's socket."""
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src 'self' {_origin(notifier_public_url)}; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


# The scanner: the camera's stream in a <video>, frames drawn to a canvas.
SCAN_PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "media-src 'self' blob: mediastream:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
# The scanner's service worker (scan-sw.js) fetches the page's own files, nothing else.
SCAN_WORKER_CSP = "default-src 'none'; connect-src 'self'"
