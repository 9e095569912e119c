"""Opaque cursors for lists (``?cursor=``): what the last page ended at,
base64url-encoded so clients do not build them."""

from __future__ import annotations

import base64
import binascii

from ticketry_api.errors import Problem

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def encode(position: str) -> str:
    return base64.urlsafe_b64encode(position.encode()).rstrip(b"=").decode()


def decode(cursor: str | None) -> str | None:
    """The position a cursor names (None: from the start); 422 for one we did not make."""
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise Problem(422, "invalid cursor", "use the `next` of the previous page") from None
    if not raw or len(raw) > 128 or not raw.isprintable():
        raise Problem(422, "invalid cursor", "use the `next` of the previous page")
    return raw


def decode_index(cursor: str | None, end: int) -> int:
    """A cursor over positions ``0..end``: where the page starts."""
    raw = decode(cursor)
    if raw is None:
        return 0
    if not raw.isdigit() or not 0 < int(raw) < end:
        raise Problem(422, "invalid cursor", "use the `next` of the previous page")
    return int(raw)
