"""The webhook sender connects to the address it checked, found by one lookup:
a real HTTP listener on 127.0.0.1 and a resolver that answers for a name of
ours (``shop.example`` resolves nowhere else), with the sender's real httpx
client and connection pool."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from redis.asyncio import Redis
from ticketry.webhook_documents import WebhookEndpoint
from ticketry_api.core.deliveries import DeadLetter, Failure, decide
from ticketry_api.webhooks.config import WebhookSettings
from ticketry_api.webhooks.destinations import IPAddress
from ticketry_api.webhooks.models import Delivery
from ticketry_api.webhooks.sender import Sender

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@dataclass
class Listener:
    """A real HTTP/1.1 server on loopback that answers 204 and keeps each request's head."""

    port: int = 0
    connections: int = 0
    heads: list[bytes] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            await reader.readexactly(length)
            self.heads.append(head)
            writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            await writer.drain()
        writer.close()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    got = Listener()
    server = await asyncio.start_server(got.serve, "127.0.0.1", 0)
    got.port = server.sockets[0].getsockname()[1]
    async with server:
        yield got


@dataclass
class Answers:
    """A resolver that answers ``shop.example`` with each of ``answers`` in turn (then the last)."""

    answers: list[str]
    asked: list[str] = field(default_factory=list)

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        n = min(len(self.asked), len(self.answers)) - 1
        return [ipaddress.ip_address(self.answers[n])]


def delivery() -> Delivery:
    return Delivery("wh_1", "msg_1", "order.completed", "or_1", "ev_1", b'{"n": 1}', 1, ())


def endpoint(port: int) -> WebhookEndpoint:
    # Built without a store: the sender reads only the URL and the secret.
    hook: WebhookEndpoint = WebhookEndpoint.model_construct(
        id="wh_1", event_id="ev_1", url=f"http://shop.example:{port}/hook", secret=SECRET
    )
    return hook


async def test_a_delivery_goes_to_the_checked_address_with_the_names_host(redis: Redis, listener: Listener) -> None:
    # Given a name that answers the listener's address first and another address after
    resolver = Answers(["127.0.0.1", "10.9.9.9"])
    sender = Sender(redis, WebhookSettings(allow_private=True), "s", resolver=resolver)
    try:
        # When a delivery is attempted
        outcome = await sender.attempt(delivery(), endpoint(listener.port))
    finally:
        await sender.aclose()
    # Then it went, over one lookup, to the address that lookup answered, named by its host
    assert outcome == 204
    assert resolver.asked == ["shop.example"]
    (head,) = listener.heads
    assert f"host: shop.example:{listener.port}".encode() in head.lower()


async def test_a_name_answering_a_private_address_is_dead_lettered_unconnected(
    redis: Redis, listener: Listener
) -> None:
    # Given a name that resolves to loopback, where a real server listens
    resolver = Answers(["127.0.0.1"])
    settings = WebhookSettings()
    sender = Sender(redis, settings, "s", resolver=resolver)
    try:
        outcome = await sender.attempt(delivery(), endpoint(listener.port))
    finally:
        await sender.aclose()
    # Then the attempt fails for good, saying why, and nothing connected
    assert isinstance(outcome, Failure) and outcome.kind == "permanent", outcome
    assert "non-public address (127.0.0.1)" in outcome.reason
    decision = decide(1, settings.max_attempts, outcome, base_s=settings.backoff_base_s, cap_s=settings.backoff_cap_s)
    assert isinstance(decision, DeadLetter) and "127.0.0.1" in decision.reason
    assert listener.connections == 0 and resolver.asked == ["shop.example"]
