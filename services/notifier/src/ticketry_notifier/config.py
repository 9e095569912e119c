"""Notifier settings."""

from __future__ import annotations

from ticketry.settings import CommonSettings


class NotifierSettings(CommonSettings):
    notifier_host: str = "127.0.0.1"
    notifier_port: int = 8001
    # Per-socket buffer; a client that falls this far behind is disconnected
    # (it resumes with ?after= and misses nothing).
    socket_queue: int = 10_000
