"""Redis replies as redis-py gives them without ``decode_responses``: plain
data, read by the services' cores as well as their adapters."""

from __future__ import annotations

from typing import Any

# A stream entry: its id and its field map.
Entry = tuple[bytes, dict[bytes, bytes]]


def as_text(value: Any) -> str:
    """A Redis reply value (bytes without ``decode_responses``) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)
