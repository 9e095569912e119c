"""Cursors for lists (``?cursor=``): what the last page ended at. Clients do
not build them (they pass a page's ``next``), but each list documents the
pattern of its cursors, and every cursor matching it is served: one past
the end gives an empty page, never a 422 the document did not announce."""

from __future__ import annotations

from ticketry_api.core.problem import Problem

# The patterns of each list's cursors (the id of the last item, or a place).
EVENT_CURSOR = r"^ev_[0-9a-f]{20}$"
ORDER_CURSOR = r"^or_[0-9a-f]{20}$"
PLACE_CURSOR = r"^[0-9]{1,6}$"
DOOR_CURSOR = r"^or_[0-9a-f]{20}/[0-9]{1,5}$"

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def encode(position: str) -> str:
    return position


def decode(cursor: str | None) -> str | None:
    """The position a cursor names (None: from the start). The route's pattern
    has checked its form; this refuses what slipped past one."""
    if not cursor:
        return None
    if len(cursor) > 128 or not cursor.isprintable():
        raise Problem(422, "invalid cursor", "use the `next` of the previous page")
    return cursor


def decode_index(cursor: str | None, end: int) -> int:
    """A cursor over positions ``0..end``: where the page starts (at ``end``: an empty page)."""
    raw = decode(cursor)
    if raw is None:
        return 0
    if not raw.isdigit():
        raise Problem(422, "invalid cursor", "use the `next` of the previous page")
    return min(int(raw), end)
