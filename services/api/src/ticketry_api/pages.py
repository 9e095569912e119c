"""Opaque cursors for lists (``?cursor=``): what the last page ended at,
base64url-encoded so clients do not build them."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

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


async def by_id(
    col: AsyncCollection[dict[str, Any]],
    query: dict[str, Any],
    cursor: str | None,
    limit: int,
    projection: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of ``col``'s documents matching ``query``, in ``_id`` order
    after the cursor's position; and the next page's cursor (None: the last)."""
    if (after := decode(cursor)) is not None:
        query = {**query, "_id": {"$gt": after}}
    found = await col.find(query, projection).sort("_id", 1).limit(limit + 1).to_list()
    return found[:limit], encode(found[limit - 1]["_id"]) if len(found) > limit else None
