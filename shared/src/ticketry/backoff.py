"""The one exponential backoff formula of the code (pure): the ceiling under
every loop's, the renderer's, the webhook sender's and the scaler's restarts'
delays. Each caller puts its own jitter on top (none, full or equal)."""

from __future__ import annotations


def backoff_ceiling(attempt: int, base_s: float, cap_s: float, factor: float = 2.0) -> float:
    """The longest wait after failure ``attempt`` (1: the first) in a row:
    ``min(cap, base · factor^(attempt-1))``; an ``attempt`` below 1 counts as 1."""
    exponent = min(max(attempt - 1, 0), 64)  # past 2^64 every ceiling is the cap (and no float overflows)
    return min(cap_s, base_s * factor**exponent)
