"""Notifier settings."""

from __future__ import annotations

from pydantic import Field
from ticketry.settings import ServingSettings


class NotifierSettings(ServingSettings):
    notifier_host: str = "127.0.0.1"
    notifier_port: int = 8001
    # Messages a socket may fall behind before it is closed (4008, with the id to
    # resume after). Messages are shared by the sockets of an order, so this
    # bounds what a slow consumer holds; it must exceed one XREAD's worth (500).
    notifier_socket_queue: int = Field(default=1000, ge=600)
    # Open sockets per process / per buyer (the token's sub); 0 = unbounded.
    # Over the bound: close 1013 (try again later) / 4429.
    notifier_max_sockets: int = Field(default=20_000, ge=0)
    notifier_max_sockets_per_user: int = Field(default=16, ge=0)
    # Redis connections of the process; a handshake waits up to
    # notifier_redis_wait_s for one (then 1013), never fails on the pool's size.
    notifier_redis_pool: int = Field(default=32, ge=4)
    notifier_redis_wait_s: float = Field(default=10.0, gt=0)
    # Orders per coalesced handshake read (one MULTI/EXEC).
    notifier_handshake_batch: int = Field(default=1000, ge=1)
    # Listen backlog: a burst of opens waits in the kernel, not refused.
    notifier_backlog: int = Field(default=4096, ge=128)

    @property
    def bind_host(self) -> str:
        return self.notifier_host
