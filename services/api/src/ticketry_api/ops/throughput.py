"""The console's throughput over the last 15 minutes, kept in Redis
(``streams.OPS_THROUGHPUT``) so that a console opened mid-sale draws it at
once, not only from when it opened.

Every api calls :func:`sample` each interval (its lifespan's loop); the
first to take the interval's tick (``SET NX``, living 0.9 of the interval)
appends the counters (``status.counters``), so the stream has about one
entry per interval however many apis there are, and goes on when any of
them dies. :func:`recent` turns the
entries of the last window into rates (``core.ops.history``)."""

from __future__ import annotations

import time
from typing import Any

from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import entries_of
from ticketry.replies import as_text

from ticketry_api.core.ops import WINDOW_S, Sample, history
from ticketry_api.ops.status import counters


async def sample(redis: Redis, interval_s: float) -> bool:
    """Append the counters if no api has this interval yet; True if this one did."""
    if not await redis.set(streams.OPS_THROUGHPUT_TICK, "1", nx=True, px=max(1, int(interval_s * 1000 * 0.9))):
        return False
    now = await counters(redis)
    fields: dict[Any, Any] = {k: str(v) for k, v in now.items()}
    await redis.xadd(streams.OPS_THROUGHPUT, fields, maxlen=streams.OPS_THROUGHPUT_MAXLEN, approximate=True)
    return True


async def recent(redis: Redis, window_s: float = WINDOW_S) -> list[dict[str, float]]:
    """The rates between the entries of the last ``window_s`` (oldest first;
    ``at`` in Unix seconds, the entry's Redis time)."""
    since = int((time.time() - window_s) * 1000)
    found = entries_of(await redis.xrange(streams.OPS_THROUGHPUT, min=f"{since}-0", max="+"))
    samples = [
        Sample(int(as_text(i).split("-")[0]) / 1000, {as_text(k): int(as_text(v)) for k, v in f.items()})
        for i, f in found
    ]
    return history(samples)
