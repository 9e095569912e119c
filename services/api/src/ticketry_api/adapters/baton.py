"""An event's ledger baton in Redis (``streams.ledger_baton``): what lets api
processes that sell the same event take turns at its ledger instead of racing
for each entry (``store.ledger``; docs/decisions.md §1).

The baton is a list of at most one element, the head the last writer appended
(``[seq, sold, tier_sold]``). A writer takes it with ``BLPOP`` (waiting at most
a moment while another process holds it), appends after that head, and gives
back the head it wrote (``LPUSH`` + ``LTRIM 0 0``: never two batons). Nothing
depends on it for correctness: the ledger's unique ``_id`` still decides every
entry. A baton lost with its holder (killed, or a Redis failover) costs the
next writer one wait, then it appends as without one and hands a new baton on.
"""

from __future__ import annotations

import orjson
from redis.asyncio import Redis
from ticketry import streams

from ticketry_api.core.ledger import Head


class RedisBaton:
    """:class:`ticketry_api.store.ledger.Baton` on Redis."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def take(self, event_id: str, wait_s: float) -> Head | None:
        got = await self.redis.blpop([streams.ledger_baton(event_id)], timeout=wait_s)
        if got is None:
            return None
        seq, sold, tier_sold = orjson.loads(got[1])
        return Head(int(seq), int(sold), {str(k): int(v) for k, v in tier_sold.items()})

    async def give(self, event_id: str, head: Head) -> None:
        key = streams.ledger_baton(event_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.lpush(key, orjson.dumps([head.seq, head.sold, head.tier_sold]))
            pipe.ltrim(key, 0, 0)
            pipe.pexpire(key, streams.LEDGER_BATON_TTL_MS)
            await pipe.execute()
