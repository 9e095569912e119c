"""A flood of clients that never honour ``Retry-After``, through HAProxy in
front of the api (``infra/haproxy/``, the devstack's settings).

300 connections post orders on kept-alive sockets, each sending its next
request as soon as the last is answered. HAProxy lets at most ``maxconn`` of
them reach the api at once, queues a short line and answers the rest itself
with 503 problem+json and ``Retry-After``. Meanwhile a buyer who honours
``Retry-After`` gets 202 and the order completes, ``/readyz`` answers, every
flood answer is 202, 409 (the flood's small event sold out: the session's
renderers are left no backlog) or 503 with ``Retry-After`` and a problem body,
no connection is dropped, and the api's own gauges never show more orders in
flight than ``maxconn``, nor more queued in the api than ``maxconn`` exceeds its
bound of orders in flight by (16 of 300). What the flood costs in orders per second is
``bench/flood.py``'s figure, not this test's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import orjson
import pytest
from ticketry_devstack.haproxy import LbSettings, start_lb
from ticketry_devstack.procs import Stack, free_port

from tests.conftest import TokenFactory
from tests.helpers import create_event, eventually, metric_one, place_order, wait_rendered

pytestmark = [pytest.mark.e2e]

CONNECTIONS = 300
FLOOD_BUYERS = 30  # the flood's orders spread over buyers, each far below the per-buyer rate limit
API_MAX_INFLIGHT = 32  # TICKETRY_MAX_INFLIGHT_ORDERS's default, which the session stack runs with


@pytest.fixture(scope="module")
def lb(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, LbSettings]]:
    """HAProxy in front of the session stack's api."""
    cfg = LbSettings(port=free_port(), apis=[f"127.0.0.1:{stack.api_port}"])
    proc = start_lb(stack, cfg, tmp_path_factory.mktemp("haproxy"))
    try:
        yield f"http://127.0.0.1:{cfg.port}", cfg
    finally:
        proc.stop()
        stack.procs.pop("haproxy", None)


@dataclass
class Flood:
    """What the flood's connections were answered."""

    answers: collections.Counter[str] = field(default_factory=collections.Counter)
    wrong: list[str] = field(default_factory=list)  # each answer that is not allowed, described
    stop: asyncio.Event = field(default_factory=asyncio.Event)


def _judge(status: int, headers: dict[str, str], body: bytes) -> str | None:
    """What is wrong with one flood answer (None: it is allowed)."""
    if status == 202:
        return None
    if status not in (409, 503):
        return f"status {status}: {body[:200]!r}"
    if not headers.get("content-type", "").startswith("application/problem+json"):
        return f"{status} without problem+json: {headers}"
    problem = orjson.loads(body)
    if problem.get("status") != status or not problem.get("title") or not problem.get("detail"):
        return f"{status} with a bad problem body: {body[:200]!r}"
    if status == 503 and not headers.get("retry-after", "").isdigit():
        return f"503 without Retry-After: {headers}"
    return None


async def _connection(host: str, port: int, request: bytes, flood: Flood) -> None:
    """One client that never backs off: the next request as soon as an answer came."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while not flood.stop.is_set():
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            flood.answers[str(status)] += 1
            if (wrong := _judge(status, headers, body)) is not None:
                flood.wrong.append(wrong)
    except (OSError, asyncio.IncompleteReadError) as exc:
        flood.wrong.append(f"connection broken: {type(exc).__name__}: {exc}")
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _order_request(host: str, port: int, event_id: str, tok: str) -> bytes:
    body = orjson.dumps({"event_id": event_id, "quantity": 1, "holder_name": "Flood Bot", "tier": "standard"})
    head = (f"POST /v1/orders HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {tok}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")  # fmt: skip
    return head.encode() + body


async def _gauges(api: httpx.AsyncClient) -> dict[str, float]:
    """The api's own in-flight and queued order gauges (its /metrics, read on loopback)."""
    text = (await api.get("/metrics")).text
    return {name: metric_one(text, name) for name in ("ticketry_orders_inflight", "ticketry_orders_queued")}


@pytest.mark.timeout(600)
async def test_a_flood_through_haproxy_is_shed_there_and_a_patient_buyer_still_orders(
    stack: Stack, lb: tuple[str, LbSettings], token: TokenFactory
) -> None:
    lb_url, cfg = lb
    host, port = "127.0.0.1", cfg.port
    organizer = token("flood-org", "organizer")
    async with (
        httpx.AsyncClient(base_url=lb_url, timeout=60) as via_lb,
        httpx.AsyncClient(base_url=stack.api_url, timeout=60) as direct,
    ):
        flood_event = await create_event(via_lb, organizer, capacity=300)
        buyer_event = await create_event(via_lb, organizer, capacity=10)
        # Given 300 connections posting orders through HAProxy, never backing off
        flood = Flood()
        requests = [_order_request(host, port, flood_event["id"], token(f"flood-bot-{i % FLOOD_BUYERS}", "buyer"))
                    for i in range(CONNECTIONS)]  # fmt: skip
        bots = [asyncio.create_task(_connection(host, port, r, flood)) for r in requests]
        peaks = {"ticketry_orders_inflight": 0.0, "ticketry_orders_queued": 0.0}
        samples: list[dict[str, float]] = []

        async def sample() -> bool:
            samples.append(got := await _gauges(direct))
            for name, value in got.items():
                peaks[name] = max(peaks[name], value)
            return len(samples) >= 20

        async def shed() -> bool:
            return flood.answers["503"] >= 500 or bool(flood.wrong)

        try:
            # … once the line in front of the api is full (HAProxy answers 503s) …
            await eventually(shed, "the flood shed")

            # When a buyer who honours Retry-After orders through HAProxy
            buyer = token("flood-patient-buyer", "buyer")

            async def ordered() -> str | None:
                await sample()
                r = await place_order(via_lb, buyer, buyer_event["id"], 1)
                if r.status_code == 202:
                    return str(r.json()["id"])
                assert r.status_code == 503 and r.headers["retry-after"].isdigit(), (r.status_code, r.text)
                assert r.headers["content-type"].startswith("application/problem+json"), r.headers
                await asyncio.sleep(int(r.headers["retry-after"]))  # as Retry-After asks
                return None

            try:
                order_id = await eventually(ordered, "the patient buyer's order accepted", timeout_s=300)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; api gauges peaked at {peaks}; flood {dict(flood.answers)}") from None
            # Then /readyz answers, through HAProxy and at the api itself
            assert (await via_lb.get("/readyz")).status_code == 200
            assert (await direct.get("/readyz")).status_code == 200
            # … the order completes (its status read through HAProxy, mid-flood)
            done = await wait_rendered(via_lb, order_id, buyer, timeout_s=300)
            assert done["status"] == "completed", done
            # … and the api's gauges, sampled through the flood, stay within HAProxy's bound
            await eventually(sample, "20 samples of the api's gauges")
            still_flooding = flood.answers["503"]
        finally:
            flood.stop.set()
            await asyncio.gather(*bots, return_exceptions=True)
        assert not flood.wrong, (len(flood.wrong), flood.wrong[:5], dict(flood.answers))
        assert set(flood.answers) <= {"202", "409", "503"}, flood.answers
        assert still_flooding >= 500, flood.answers
        assert peaks["ticketry_orders_inflight"] <= cfg.maxconn, peaks
        assert peaks["ticketry_orders_queued"] <= max(0, cfg.maxconn - API_MAX_INFLIGHT), peaks
        # /metrics is not served through the load balancer (the api takes its peer, HAProxy, for loopback)
        r = await via_lb.get("/metrics")
        assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")
