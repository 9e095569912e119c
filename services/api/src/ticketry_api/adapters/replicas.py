"""Answers that outlive the Redis primary: wait for replicas before promising.

Redis replicates asynchronously: an EXEC the primary answered may be on no
replica yet, and a failover right then promotes a replica without it. So an
answer that promises work (``202`` for an order, a cancel, a re-drive) is
given only once ``TICKETRY_REDIS_MIN_REPLICAS`` replicas acknowledged the
writes behind it, with Redis's own ``WAIT numreplicas timeout``
(https://redis.io/docs/latest/commands/wait/); if fewer do within
``TICKETRY_REDIS_REPLICA_WAIT_MS``, :func:`replicated` raises ``503`` with
Retry-After. The writes stay on the primary: every caller makes its retry
find them (an order's Idempotency-Key, a cancel's fate, a re-drive that finds
its dead letter gone) and wait again. 0 replicas (the default): no WAIT, no
extra round trip, one host as before.

Why a fence key: ``WAIT`` waits for the replication offset *its own
connection* reached (at its last command). The api writes through a pool, so
the connection that WAITs need not be the one that wrote, and one whose last
command came before those writes is answered at once with every replica that
had reached that older offset, a stalled one included. :func:`replicated` therefore sends ``INCR`` of
``streams.REPLICA_FENCE`` and ``WAIT`` on one connection (one pipeline). The
replication stream is one ordered log, so a replica that acknowledged the
fence holds everything the primary applied before it: the caller's writes
(answered before the fence was sent, on whichever connection) included. A
retry calls it again and so fences writes made by an earlier request too.

Which writes wait, and why the others need not: docs/operations.md,
"What each write waits for".
"""

from __future__ import annotations

import math
from typing import Protocol

from redis.asyncio import Redis
from ticketry import streams

from ticketry_api.core.problem import Problem


class ReplicaSettings(Protocol):
    """What :func:`replicated` reads (``ApiSettings``, ``CtlSettings``)."""

    @property
    def redis_min_replicas(self) -> int: ...

    @property
    def redis_replica_wait_ms(self) -> int: ...


def retry_after_s(wait_ms: int) -> int:
    """Seconds a client should wait before retrying after a WAIT that fell short."""
    return max(1, math.ceil(wait_ms / 1000))


def shortfall(settings: ReplicaSettings, acked: int) -> Problem | None:
    """The answer when only ``acked`` replicas confirmed (None: enough did)."""
    wanted = settings.redis_min_replicas
    if acked >= wanted:
        return None
    return Problem(
        503,
        "not replicated",
        f"{acked} of {wanted} Redis replicas confirmed within {settings.redis_replica_wait_ms} ms; "
        "the request was applied on the primary: retry it (the same Idempotency-Key for an order)",
        {"Retry-After": str(retry_after_s(settings.redis_replica_wait_ms))},
        kind="not-replicated",
    )


async def acknowledged(redis: Redis, settings: ReplicaSettings) -> int:
    """How many replicas acknowledged every write the primary applied before
    this call (waiting up to the setting's timeout for ``redis_min_replicas``)."""
    async with redis.pipeline(transaction=False) as pipe:  # one connection: WAIT covers the INCR
        pipe.incr(streams.REPLICA_FENCE)
        pipe.wait(settings.redis_min_replicas, settings.redis_replica_wait_ms)
        replies = await pipe.execute()
    return int(replies[1])


async def replicated(redis: Redis, settings: ReplicaSettings) -> None:
    """Return once ``redis_min_replicas`` replicas hold every write applied on
    the primary before this call; else raise ``503`` with Retry-After. At once
    when ``redis_min_replicas`` is 0."""
    if settings.redis_min_replicas <= 0:
        return
    if (problem := shortfall(settings, await acknowledged(redis, settings))) is not None:
        raise problem
