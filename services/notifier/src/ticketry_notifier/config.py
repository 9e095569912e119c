"""Notifier settings."""

from __future__ import annotations

from pydantic import Field
from ticketry.settings import ServingSettings


class NotifierSettings(ServingSettings):
    notifier_host: str = Field(
        default="127.0.0.1",
        description="the address the notifier listens on; beyond loopback it needs a JWT secret of its own",
    )
    notifier_port: int = Field(default=8001, ge=1, le=65535, description="the port the notifier listens on")
    # Messages are shared by the sockets of an order, so this bounds what a slow
    # consumer holds; it must exceed one XREAD's worth (500).
    notifier_socket_queue: int = Field(
        default=1000, ge=600, le=1_000_000, json_schema_extra={"unit": "messages"},
        description="messages a socket may fall behind before it is closed (4008, with the id to resume after)",
    )  # fmt: skip
    notifier_max_sockets: int = Field(
        default=20_000, ge=0, json_schema_extra={"unit": "sockets"},
        description="open sockets per process (0: up to the open-files limit); past it close 1013",
    )  # fmt: skip
    notifier_max_sockets_per_user: int = Field(
        default=16, ge=0, json_schema_extra={"unit": "sockets"},
        description="open sockets per buyer (the token's `sub`; 0: unbounded); past it close 4429",
    )  # fmt: skip
    notifier_redis_pool: int = Field(
        default=32, ge=4, le=10_000, json_schema_extra={"unit": "connections"},
        description="Redis connections of the process; a handshake waits for a free one",
    )  # fmt: skip
    notifier_redis_wait_s: float = Field(
        default=10.0, gt=0, description="how long a handshake waits for a Redis connection, then close 1013"
    )
    notifier_handshake_batch: int = Field(
        default=1000, ge=1, le=100_000, json_schema_extra={"unit": "orders"},
        description="orders whose state one coalesced handshake read fetches (one MULTI/EXEC)",
    )  # fmt: skip
    notifier_backlog: int = Field(
        default=4096, ge=128, le=1_000_000, json_schema_extra={"unit": "connections"},
        description="the listen backlog: a burst of opens waits in the kernel instead of being refused",
    )  # fmt: skip

    @property
    def bind_host(self) -> str:
        return self.notifier_host
