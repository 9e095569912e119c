"""Helpers for the services' background loops."""

from __future__ import annotations

import asyncio
import contextlib


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile.

    ``asyncio.TimeoutError`` on purpose: several modules import redis-py's
    ``TimeoutError``, which once shadowed the builtin here and silently ended a
    renderer's claim and heartbeat loops.
    """
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
