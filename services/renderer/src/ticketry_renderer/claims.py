"""The renderer's claim loop: the entries it takes from the render lanes'
pending lists besides what its subscribers read, each through the shared
claimer (``ticketry.consumer.Claimer``) and handled by the batch pipeline.

Every ``claim_interval_s``, per lane: its own failed entries whose retry is
due (XCLAIM to itself, which counts the delivery, so the attempt count that
``decision.decide`` bounds goes up), then entries a crashed peer left idle
past ``claim_idle_ms`` (XAUTOCLAIM). At a drain (SIGTERM) it finishes what is
still pending under its own name, then leaves the group.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from ticketry.consumer import Claimer
from ticketry.replies import Entry, as_text
from ticketry.tasks import pause

from ticketry_renderer import metrics
from ticketry_renderer.handlers import BatchPipeline

log = logging.getLogger(__name__)


@dataclass
class ClaimLoop:
    batches: BatchPipeline

    async def run(self, stop: asyncio.Event) -> None:
        """Claim until ``stop``; the loop itself never dies."""
        while not stop.is_set():
            try:
                await self.once()
            except (RedisConnectionError, RedisTimeoutError) as exc:
                log.warning("claimer: redis unavailable", extra={"error": str(exc)})
            except ResponseError as exc:
                log.warning("claimer: redis error", extra={"error": str(exc)})
            except Exception:
                log.exception("claimer: unexpected error")
            await pause(stop, self.batches.settings.claim_interval_s)

    async def once(self) -> int:
        """Retry our own due failures, then claim entries abandoned by dead
        peers; how many entries were handled."""
        retries, handled, now = self.batches.retries, 0, time.monotonic()
        for lane, claimer in self.batches.claimers.items():
            due = retries.due(lane, now)
            if due:
                taken = await claimer.take(due)
                got = {as_text(e) for e, _ in taken}
                for entry_id in due:
                    if entry_id not in got:  # acked meanwhile, or trimmed
                        retries.forget(lane, entry_id)
                handled += await self._handle(lane, claimer, taken)
            abandoned = await claimer.abandoned()
            if abandoned:
                log.info("claimed abandoned entries", extra={"lane": lane, "count": len(abandoned)})
                metrics.CLAIMED.inc(len(abandoned))
                handled += await self._handle(lane, claimer, abandoned)
        return handled

    async def _handle(self, lane: str, claimer: Claimer, entries: list[Entry]) -> int:
        if not entries:
            return 0
        counts = await claimer.deliveries([as_text(e) for e, _ in entries])
        await self.batches.process(lane, entries, counts)
        return len(entries)

    async def drain_own_pending(self) -> int:
        """Handle whatever is still pending under our name (at shutdown),
        except the failures waiting for their retry."""
        total = 0
        for lane, claimer in self.batches.claimers.items():
            while True:
                mine = await claimer.own_pending()
                fresh = [e for e in mine if not self.batches.retries.waiting(lane, as_text(e[0]))]
                if not fresh:
                    break
                total += await self._handle(lane, claimer, fresh)
        return total

    async def leave_if_idle(self) -> None:
        """Leave each lane's group where nothing is pending under our name."""
        for claimer in self.batches.claimers.values():
            await claimer.leave_if_idle()
