"""Shop webhooks: signed ``order.*`` messages to an event's endpoints.

``router`` serves ``/v1/events/{id}/webhooks``; :func:`run` is the api
lifespan's background work: the dispatcher (ticket events → deliveries) and
the sender (deliveries → HTTP, retries, dead letters). See docs/webhooks.md.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

from ticketry_api.store import Store
from ticketry_api.webhooks.config import WebhookSettings
from ticketry_api.webhooks.dispatcher import run_dispatcher
from ticketry_api.webhooks.sender import Sender

if TYPE_CHECKING:
    from ticketry_api.webhooks.routes import router

__all__ = ["WebhookSettings", "router", "run"]


def __getattr__(name: str) -> Any:
    # The routes (FastAPI and the event routes) load only where they are served:
    # ticketryctl imports this package for its dead letters and starts faster.
    if name == "router":
        from ticketry_api.webhooks.routes import router

        return router
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
