"""Designs built before they are needed.

A renderer stamps each ticket into its event look's *design* (the page laid
out once by WeasyPrint, ~0.4 s). Without help, the first ticket of every new
event and tier waits for that, in every renderer process. Here:

* the api asks for the designs of a new event's tiers when the event is
  created (:func:`request_designs`): one entry per sample request on
  ``streams.DESIGN_REQUESTS``; a renderer of group ``designers`` builds each
  one and stores it;
* a design is stored in Redis under its digest (``streams.design``), so every
  renderer process on every host loads it (a GET) instead of building it
  (:func:`load`, :func:`store`); a process that must build one takes
  ``streams.design_lock`` first, so two processes never build the same design
  at once: the other waits for it to be stored.

What a design *is* (its bytes) is the renderer's business; this module only
moves bytes and samples.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ticketry import streams
from ticketry.events import RenderRequest


async def ensure_group(redis: Redis) -> None:
    """The ``designers`` group on the request stream, from its first entry
    (idempotent; requests appended before any renderer started are kept)."""
    try:
        await redis.xgroup_create(streams.DESIGN_REQUESTS, streams.DESIGNERS_GROUP, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


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
    return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]


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
