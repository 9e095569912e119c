"""Waiting rooms for on-sales: their pure rules (places, positions, the
admission rate, permissions) are ``ticketry_api.core.waitingroom``; here
``rooms`` (Redis), ``admitter``
(the admission loop every api runs), ``gate`` (what ``POST /v1/orders`` asks
of an on-sale) and ``routes`` (``POST /v1/events/{id}/queue``). The buyer's
live position comes from the notifier (``ticketry_notifier.queue``), fed by the
room's update stream. See docs/waiting-room.md.
"""

from __future__ import annotations

import asyncio
import os
import socket

from redis.asyncio import Redis

from ticketry_api.config import ApiSettings
from ticketry_api.core.waitingroom import permission_key
from ticketry_api.middleware.shedding import Shedding
from ticketry_api.store import Store
from ticketry_api.waitingroom.admitter import Admitter


async def run(redis: Redis, store: Store, shedding: Shedding, settings: ApiSettings, stop: asyncio.Event) -> None:
    """The admission loop of this api process, until ``stop``."""
    admitter = Admitter(
        redis,
        store,
        shedding,
        consumer=f"api-{socket.gethostname()}-{os.getpid()}",
        key=permission_key(settings.jwt_key),
        tick_s=settings.room_tick_s,
        permission_ttl_s=settings.room_permission_ttl_s,
        replicas=settings,
    )
    await admitter.run(stop)
