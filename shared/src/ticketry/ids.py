"""Identifiers. Every id that reaches a file path or a Redis key passes ``is_valid_id``."""

from __future__ import annotations

import re
import secrets

_ID_RE = re.compile(r"^(ev|or|tk)_[0-9a-f]{20}$")


def new_id(prefix: str) -> str:
    """A random id such as ``tk_9f2c…`` (80 bits of randomness)."""
    return f"{prefix}_{secrets.token_hex(10)}"


def is_valid_id(value: str, prefix: str | None = None) -> bool:
    """True for ids made by :func:`new_id` (optionally with the given prefix)."""
    m = _ID_RE.match(value)
    return m is not None and (prefix is None or m.group(1) == prefix)
