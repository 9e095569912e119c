"""The pages' static files, read once at start-up and served by name only
(a fixed table: no path from a request ever reaches the file system), and the
Content-Security-Policy each page is served with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

STATIC = Path(__file__).parent / "static"
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


def load_assets(root: Path = STATIC) -> dict[str, Asset]:
    """Every file under ``root`` by its relative path (``vendor/jsqr/jsQR.js``)."""
    out: dict[str, Asset] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in _TYPES:
            out[path.relative_to(root).as_posix()] = Asset(path.read_bytes(), _TYPES[path.suffix])
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
