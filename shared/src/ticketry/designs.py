"""Designs built before they are needed.

A renderer stamps each ticket into its event look's *design* (the page laid
out once by WeasyPrint, ~0.4 s). Without help, the first ticket of every new
event and tier waits for that, in every renderer process. Here:

* the api asks for the designs of a new event's tiers when the event is
  created (:func:`request_designs`): one entry per sample request on
  ``streams.DESIGN_REQUESTS``; a renderer of group ``designers`` builds each
  one and stores it;
* the api answers an event's creation once its designs are built
  (:func:`wait_built`, bounded; at once when no renderer is live), so even an
  order placed the moment the event exists finds them;
* a design is stored in Redis under its digest (``streams.design``), so every
  renderer process on every host loads it (a GET) instead of building it
  (:func:`load`, :func:`store`); a process that must build one takes
  ``streams.design_lock`` first, so two processes never build the same design
  at once: the other waits for it to be stored.

What a design *is* (its bytes) is the renderer's business; this module only
moves bytes and samples.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from ticketry import db, streams
from ticketry.events import RenderRequest
from ticketry.replies import as_text


async def ensure_group(redis: Redis) -> None:
    """The ``designers`` group on the request stream, from its first entry
    (idempotent; requests appended before any renderer started are kept)."""
    await db.ensure_group(redis, streams.DESIGN_REQUESTS, streams.DESIGNERS_GROUP)


async def request_designs(redis: Redis, samples: Sequence[RenderRequest]) -> list[str]:
    """Ask the renderers to build the designs of ``samples`` ahead of the first
    ticket; returns the stream entry ids.

    A sample is what a ticket of the event and tier will be: the event's name,
    venue, times and time zone, the tier's id, name and lane, its price and
    currency, a ``code`` signed with the active key (the design prints its key
    id), and a ticket and order id of the real shape (ids are fixed-width: any
    will do). The holder name is not part of a design. One sample per tier is
    enough; a design already stored is not built again.
    """
    if not samples:
        return []
    await ensure_group(redis)
    async with redis.pipeline(transaction=False) as pipe:
        for sample in samples:
            pipe.xadd(
                streams.DESIGN_REQUESTS, sample.to_fields(),  # type: ignore[arg-type]
                maxlen=streams.DESIGN_REQUESTS_MAXLEN, approximate=True,
            )  # fmt: skip
        ids = await pipe.execute()
    return [as_text(i) for i in ids]


# A renderer blocks on the request stream between reads (its poll, 1 s by
# default), which counts as seen: a designer seen within this long is live.
DESIGNER_LIVE_MS: Final = 5_000
# How often :func:`wait_built` looks.
_WAIT_POLL_S: Final = 0.02


async def designers_live(redis: Redis) -> int:
    """Renderers reading design requests now (group ``designers``)."""
    try:
        consumers: Any = await redis.xinfo_consumers(streams.DESIGN_REQUESTS, streams.DESIGNERS_GROUP)
    except ResponseError:  # no stream or group yet: no renderer ever started
        return 0
    return sum(1 for c in consumers if int(c["idle"]) < DESIGNER_LIVE_MS)


async def handled(redis: Redis, ids: Sequence[str]) -> bool:
    """Every request of ``ids`` was read by a designer and acknowledged (built,
    or given up as unbuildable)."""
    keys = [streams.stream_key(i) for i in ids]
    lo, hi = streams.format_stream_id(min(keys)), streams.format_stream_id(max(keys))
    async with redis.pipeline(transaction=False) as pipe:
        pipe.xinfo_groups(streams.DESIGN_REQUESTS)
        pipe.xpending_range(streams.DESIGN_REQUESTS, streams.DESIGNERS_GROUP, lo, hi, len(keys))
        groups, pending = await pipe.execute()
    group = next((g for g in groups if as_text(g["name"]) == streams.DESIGNERS_GROUP), None)
    if group is None or streams.stream_key(group["last-delivered-id"]) < max(keys):
        return False
    return not {streams.stream_key(p["message_id"]) for p in pending} & set(keys)


async def wait_built(redis: Redis, ids: Sequence[str], timeout_s: float) -> bool:
    """Wait until the design requests ``ids`` are handled (:func:`handled`), at
    most ``timeout_s``; False at once when no renderer is live to build them, or
    when Redis fails (the designs are then built by the first tickets)."""
    if not ids or timeout_s <= 0:
        return not ids
    deadline = time.monotonic() + timeout_s
    try:
        if not await designers_live(redis):
            return False
        while not await handled(redis, ids):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_WAIT_POLL_S)
    except RedisError:
        return False
    return True


async def load(redis: Redis, digest: str) -> bytes | None:
    """A stored design, or None; its TTL is refreshed (a design in use stays)."""
    key = streams.design(digest)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.get(key)
        pipe.expire(key, streams.DESIGN_TTL_S)
        blob, _ = await pipe.execute()
    return bytes(blob) if blob is not None else None


async def store(redis: Redis, digest: str, blob: bytes) -> None:
    """Store a design (the first stored wins: the same digest is the same design)
    and release the build lock."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(streams.design(digest), blob, ex=streams.DESIGN_TTL_S, nx=True)
        pipe.delete(streams.design_lock(digest))
        await pipe.execute()


async def claim_build(redis: Redis, digest: str, builder: str) -> bool:
    """Take the build lock of a design: True when this process should build it."""
    return bool(await redis.set(streams.design_lock(digest), builder, px=streams.DESIGN_LOCK_MS, nx=True))


async def release_build(redis: Redis, digest: str) -> None:
    """Give up the build lock (the build failed; another may try)."""
    await redis.delete(streams.design_lock(digest))
