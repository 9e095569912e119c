"""Shop webhooks: signed ``order.*`` messages to an event's endpoints.

The routes are ``ticketry_api.routes.webhooks``; :func:`run` is the api
lifespan's background work: the dispatcher (ticket events → deliveries) and
the sender (deliveries → HTTP, retries, dead letters). See docs/webhooks.md.
"""

from __future__ import annotations

import asyncio
import os
import socket

from redis.asyncio import Redis

from ticketry_api.store import Store
from ticketry_api.webhooks.config import WebhookSettings
from ticketry_api.webhooks.dispatcher import run_dispatcher
from ticketry_api.webhooks.sender import Sender

__all__ = ["WebhookSettings", "run"]


async def run(redis: Redis, store: Store, settings: WebhookSettings, stop: asyncio.Event) -> None:
    """The dispatcher and sender of this api process, until ``stop``."""
    if not settings.enabled:
        return
    consumer = f"api-{socket.gethostname()}-{os.getpid()}"
    sender = Sender(redis, settings, consumer)
    try:
        await asyncio.gather(run_dispatcher(redis, store, consumer, stop), sender.run(stop))
    finally:
        await sender.aclose()
