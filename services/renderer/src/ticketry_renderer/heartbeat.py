"""The renderer's heartbeat: every second, its capacity (tickets per busy
second, ``rate.RateMeter``), how busy it was and its resident memory, in a
hash with a TTL that the scaler and the console read
(``streams.renderer_heartbeat``); deleted when it stops."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from dataclasses import dataclass, field

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from ticketry import streams
from ticketry.tasks import pause

from ticketry_renderer.handlers import BatchPipeline
from ticketry_renderer.rate import RateMeter, utilisation

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident set size (``/proc/self/statm``); 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class Heartbeat:
    batches: BatchPipeline
    started: float = field(default_factory=time.time)
    meter: RateMeter = field(default_factory=RateMeter)
    busy: float = 0.0  # share of the last interval spent handling batches

    async def run(self, stop: asyncio.Event) -> None:
        """Beat until ``stop``, then delete the hash."""
        redis, consumer, clock = self.batches.redis, self.batches.consumer, self.batches.clock
        key = streams.renderer_heartbeat(consumer)
        last_busy, last_t = clock.seconds(), time.monotonic()
        while not stop.is_set():
            now, busy, rendered = time.monotonic(), clock.seconds(), self.batches.rendered
            self.meter = self.meter.update(rendered, busy)
            self.busy = utilisation(busy - last_busy, now - last_t)
            last_busy, last_t = busy, now
            try:
                async with redis.pipeline(transaction=True) as pipe:
                    pipe.hset(
                        key,
                        mapping={
                            streams.HEARTBEAT_PID: os.getpid(), streams.HEARTBEAT_HOST: socket.gethostname(),
                            streams.HEARTBEAT_CONSUMER: consumer, streams.HEARTBEAT_RATE: f"{self.meter.rate:.2f}",
                            streams.HEARTBEAT_BUSY: f"{self.busy:.3f}", streams.HEARTBEAT_RENDERED: rendered,
                            streams.HEARTBEAT_STARTED: f"{self.started:.0f}", streams.HEARTBEAT_RSS: rss_bytes(),
                        },
                    )  # fmt: skip
                    pipe.expire(key, streams.HEARTBEAT_TTL_S)
                    await pipe.execute()
            except (RedisConnectionError, RedisTimeoutError):
                pass
            await pause(stop, 1.0)
        await redis.delete(key)
