"""The tickets by email: each completed order that carries an ``email`` is
mailed once, over SMTP (docs/email.md).

:func:`run` is the api lifespan's background work, beside the webhook
dispatcher: the mailer (``mailer.Mailer``), a consumer of its own group on the
ticket events. The message itself is built in ``message`` (pure).
"""

from __future__ import annotations

import asyncio
import os
import socket

from redis.asyncio import Redis
from ticketry.storage import PdfStore

from ticketry_api.mail.config import MailSettings
from ticketry_api.mail.mailer import Mailer
from ticketry_api.store import Store
from ticketry_api.web.links import LinkSettings

__all__ = ["MailSettings", "run"]


async def run(
    redis: Redis, store: Store, pdfs: PdfStore, settings: MailSettings, links: LinkSettings, secret: str,
    stop: asyncio.Event,
) -> None:  # fmt: skip
    """This api process's mailer, until ``stop``; nothing while no SMTP server is set."""
    server = settings.server()
    if server is None:
        return
    consumer = f"api-{socket.gethostname()}-{os.getpid()}"
    await Mailer(redis, store, pdfs, settings, server, links, secret, consumer).run(stop)
