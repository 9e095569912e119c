"""``GET /asyncapi.json`` on the real api answers the document built from the
message catalogue, to anyone, and it covers the streams the running stack
actually has in Redis (every stream key there matches a channel's address)."""

from __future__ import annotations

import re

import httpx
import orjson
import pytest
from redis.asyncio import Redis
from ticketry.asyncapi import build_document
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory
from tests.helpers import create_event, place_order, wait_rendered

pytestmark = pytest.mark.e2e


async def test_the_api_serves_the_asyncapi_document_publicly(api: httpx.AsyncClient) -> None:
    r = await api.get("/asyncapi.json")  # no token: public, like /openapi.json
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == orjson.loads(orjson.dumps(build_document()))


def _pattern(address: str) -> re.Pattern[str]:
    """A channel address as a regex: each ``{parameter}`` one key segment."""
    return re.compile(
        "".join("[^:]+" if p.startswith("{") else re.escape(p) for p in re.split(r"(\{[^}]+\})", address))
    )


async def test_every_stream_in_the_running_stack_is_a_channel(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    # An order through the whole pipeline: render lanes, design requests, ticket events.
    buyer = token("asyncapi-buyer", "buyer")
    event = await create_event(api, token("asyncapi-org", "organizer"), capacity=5)
    r = await place_order(api, buyer, event["id"], 2)
    assert r.status_code == 202, r.text
    await wait_rendered(api, r.json()["id"], buyer)

    doc = (await api.get("/asyncapi.json")).json()
    patterns = [_pattern(ch["address"]) for ch in doc["channels"].values()]
    redis = Redis.from_url(stack.env["TICKETRY_REDIS_URL"])
    try:
        keys = {k.decode() async for k in redis.scan_iter(match="ticketry:*", _type="stream", count=1000)}
    finally:
        await redis.aclose()
    assert {"ticketry:render:vip", "ticketry:ticket-events", "ticketry:designs:requests"} <= keys
    assert {k for k in keys if not any(p.fullmatch(k) for p in patterns)} == set()
