"""Shop webhooks against the real stack and a real HTTP receiver.

The receiver (``Shop``) is what a shop should run: it checks the Standard
Webhooks signature with its own code (not ours), refuses a timestamp more than
five minutes off, and processes each ``webhook-id`` once. It can fail on
purpose: answer 500, hang past the sender's timeout, or be down altogether.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import shutil
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ticketry import streams
from ticketry_devstack.procs import Stack, tool

from tests.chaos.support import redis_of, wait_until
from tests.conftest import TokenFactory, stack_of_its_own
from tests.helpers import bearer, create_event, metric_sum, place_order, wait_rendered

pytestmark = pytest.mark.e2e

MAX_ATTEMPTS = 6
TIMEOUT_S = 3
ENV = {
    "TICKETRY_WEBHOOKS_ALLOW_PRIVATE": "1",  # the shop is on loopback
    "TICKETRY_WEBHOOKS_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
    "TICKETRY_WEBHOOKS_BACKOFF_BASE_S": "0.2",
    "TICKETRY_WEBHOOKS_BACKOFF_CAP_S": "1",
    "TICKETRY_WEBHOOKS_TIMEOUT_S": str(TIMEOUT_S),
    # a poisoned ticket fails fast (order.partially_failed)
    "TICKETRY_RENDER_MAX_ATTEMPTS": "2",
    "TICKETRY_RETRY_BASE_S": "0.1",
    "TICKETRY_RETRY_CAP_S": "0.5",
}
WAIT_S = 120  # a bound on a hang, far above need
TOLERANCE_S = 300


@dataclass
class Request:
    path: str
    msg_id: str
    timestamp: int
    signature: str
    body: bytes
    answer: int | str = 0  # HTTP status, or "hung"


@dataclass
class Shop:
    """A webhook receiver on 127.0.0.1 with one endpoint per path."""

    url: str = ""
    secrets: dict[str, str] = field(default_factory=dict)
    plans: dict[str, list[str]] = field(default_factory=dict)  # per path: "500" / "hang" for the next requests
    down: set[str] = field(default_factory=set)  # paths that answer 500 to everything
    requests: list[Request] = field(default_factory=list)
    processed: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)

    def endpoint(self, path: str) -> str:
        return self.url + path

    def verify(self, path: str, hdrs: dict[str, str], body: bytes) -> int | None:
        """The shop's own check; the refusal's status, or None when it verifies."""
        try:
            msg_id, ts = hdrs["webhook-id"], int(hdrs["webhook-timestamp"])
            given = hdrs["webhook-signature"].split(" ")
        except (KeyError, ValueError):
            return 400
        if abs(time.time() - ts) > TOLERANCE_S:
            return 400  # replayed (or a clock far off)
        key = base64.b64decode(self.secrets[path].removeprefix("whsec_"))
        mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
        expected = "v1," + base64.b64encode(mac).decode()
        return None if any(hmac.compare_digest(expected, g) for g in given) else 401

    def handle(self, path: str, hdrs: dict[str, str], body: bytes) -> int | None:
        """The answer to one request (None: hang)."""
        with self.lock:
            req = Request(path, hdrs.get("webhook-id", ""), int(hdrs.get("webhook-timestamp", "0") or 0),
                          hdrs.get("webhook-signature", ""), body)  # fmt: skip
            self.requests.append(req)
            refused = self.verify(path, hdrs, body)
            plan = self.plans.get(path) or []
            action = plan.pop(0) if refused is None and plan else ""
            if refused is not None:
                req.answer = refused
            elif path in self.down or action == "500":
                req.answer = 500
            elif action == "hang":
                req.answer = "hung"
                return None
            else:
                seen = self.processed.setdefault(path, [])
                if req.msg_id not in {m for m, _ in seen}:  # each webhook-id once
                    seen.append((req.msg_id, orjson.loads(body)))
                req.answer = 200
            return req.answer

    def of(self, path: str, msg_id: str | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path == path and (msg_id is None or r.msg_id == msg_id)]

    def got(self, path: str, type_: str, order_id: str) -> list[tuple[str, dict[str, Any]]]:
        """What the shop processed at ``path`` of this type and order."""
        with self.lock:
            return [(m, b) for m, b in self.processed.get(path, [])
                    if b["type"] == type_ and b["data"]["order_id"] == order_id]  # fmt: skip


def _handler(shop: Shop) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            hdrs = {k.lower(): v for k, v in self.headers.items()}
            answer = shop.handle(self.path, hdrs, body)
            if answer is None:
                shop.release.wait(WAIT_S)  # until the sender gave up (or the test ends)
                self.close_connection = True
                return
            with contextlib.suppress(OSError):
                self.send_response(answer)
                self.send_header("content-length", "0")
                self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def shop() -> Iterator[Shop]:
    s = Shop()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(s))
    server.daemon_threads = True
    s.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield s
    s.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def hooks_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_of_its_own(tmp_path_factory, "webhooks", 1, ENV) as stack:
        yield stack


@pytest.fixture
async def hapi(hooks_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=hooks_stack.api_url, timeout=60) as client:
        yield client


async def register(api: httpx.AsyncClient, organizer: str, event_id: str, url: str, **over: Any) -> dict[str, Any]:
    r = await api.post(f"/v1/events/{event_id}/webhooks", json={"url": url, **over}, headers=bearer(organizer))
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def ctl(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("ticketryctl"), *args], env=stack.service_env(), capture_output=True, text=True, timeout=120, check=False
    )


async def test_endpoints_are_the_organisers_and_secrets_are_shown_once(
    hapi: httpx.AsyncClient, token: TokenFactory, shop: Shop
) -> None:
    organizer, other, buyer = token("wh-org", "organizer"), token("wh-other", "organizer"), token("wh-b", "buyer")
    event = await create_event(hapi, organizer)
    path = f"/v1/events/{event['id']}/webhooks"

    # Registered: the secret is Standard Webhooks' whsec_ + base64, shown in this answer only
    hook = await register(hapi, organizer, event["id"], shop.endpoint("/reg"), types=["order.cancelled"])
    assert hook["secret"].startswith("whsec_") and len(base64.b64decode(hook["secret"][6:])) == 24
    assert (hook["event_id"], hook["types"]) == (event["id"], ["order.cancelled"])
    listed = (await hapi.get(path, headers=bearer(organizer))).json()["items"]
    assert [h["id"] for h in listed] == [hook["id"]] and "secret" not in listed[0]
    # ... every type by default
    default = await register(hapi, organizer, event["id"], shop.endpoint("/reg2"))
    assert default["types"] == ["order.completed", "order.partially_failed", "order.cancelled", "ticket.reissued"]

    # Not the organiser: 404 (existence does not leak); not an organiser: 403
    assert (await hapi.get(path, headers=bearer(other))).status_code == 404
    r = await hapi.post(path, json={"url": shop.endpoint("/x")}, headers=bearer(other))
    assert r.status_code == 404
    assert (await hapi.post(path, json={"url": shop.endpoint("/x")}, headers=bearer(buyer))).status_code == 403
    assert (await hapi.delete(f"{path}/{hook['id']}", headers=bearer(other))).status_code == 404
    assert (await hapi.get("/v1/events/ev_00000000000000000000/webhooks", headers=bearer(organizer))).status_code == 404

    # Bad bodies: 422 problem+json
    for body in (
        {"url": "ftp://127.0.0.1/x"},
        {"url": "file:///etc/passwd"},
        {"url": "http://user:pw@127.0.0.1/x"},
        {"url": shop.endpoint("/x"), "types": ["order.exploded"]},
        {"url": shop.endpoint("/x"), "types": []},
        {"url": shop.endpoint("/x"), "secret": "mine"},
    ):
        r = await hapi.post(path, json=body, headers=bearer(organizer))
        assert r.status_code == 422, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")

    # Deleted: gone from the list; deleting again is 404
    assert (await hapi.delete(f"{path}/{hook['id']}", headers=bearer(organizer))).status_code == 204
    assert [h["id"] for h in (await hapi.get(path, headers=bearer(organizer))).json()["items"]] == [default["id"]]
    assert (await hapi.delete(f"{path}/{hook['id']}", headers=bearer(organizer))).status_code == 404


async def test_private_destinations_are_refused_by_default(api: httpx.AsyncClient, token: TokenFactory) -> None:
    # The session stack runs without TICKETRY_WEBHOOKS_ALLOW_PRIVATE; nothing is ever sent here.
    organizer = token("wh-ssrf-org", "organizer")
    event = await create_event(api, organizer)
    path = f"/v1/events/{event['id']}/webhooks"
    for url in (
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://10.0.0.1/hook",
        "http://192.168.1.10/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0/hook",
        # IPv6 forms of internal addresses: IPv4-compatible, NAT64, site-local, 6to4, Teredo
        "http://[::7f00:1]/",
        "http://[::a9fe:a9fe]/",
        "http://[64:ff9b::a00:5]/",
        "http://[fec0::1]/",
        "http://[64:ff9b:1::a00:5]/",
        "http://[2002:a9fe:a9fe::1]/",
        "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
    ):
        r = await api.post(path, json={"url": url}, headers=bearer(organizer))
        assert r.status_code == 422, (url, r.text)
        assert "non-public" in r.json()["detail"] and r.json()["type"].endswith("/webhook-url")
    assert (await api.get(path, headers=bearer(organizer))).json()["items"] == []


async def dispatcher_counts(api: httpx.AsyncClient) -> tuple[float, float]:
    """``(orders read from the store, order events skipped)`` by the api's webhook dispatcher."""
    text = (await api.get("/metrics")).text
    return metric_sum(text, "ticketry_webhook_order_reads_total"), metric_sum(
        text, "ticketry_webhook_orders_skipped_total"
    )


async def test_orders_of_events_without_endpoints_cost_no_store_read(
    hooks_stack: Stack, hapi: httpx.AsyncClient, token: TokenFactory, shop: Shop
) -> None:
    # (the first test of this stack with orders: nothing else is dispatched meanwhile)
    # Given an event with an endpoint, one without, and one whose endpoint was deleted
    organizer, buyer = token("wh-idx-org", "organizer"), token("wh-idx-buyer", "buyer")
    hooked, plain, dropped = [await create_event(hapi, organizer) for _ in range(3)]
    shop.secrets["/idx"] = (await register(hapi, organizer, hooked["id"], shop.endpoint("/idx")))["secret"]
    gone = await register(hapi, organizer, dropped["id"], shop.endpoint("/idx-gone"))
    r = await hapi.delete(f"/v1/events/{dropped['id']}/webhooks/{gone['id']}", headers=bearer(organizer))
    assert r.status_code == 204
    reads, skipped = await dispatcher_counts(hapi)

    async def complete(event_id: str) -> str:
        r = await place_order(hapi, buyer, event_id, 1)
        assert r.status_code == 202, r.text
        order_id: str = r.json()["id"]
        await wait_rendered(hapi, order_id, buyer)
        return order_id

    async def delivered(order_id: str) -> None:
        async def got() -> bool:
            return bool(shop.got("/idx", "order.completed", order_id))

        await wait_until(got, WAIT_S)

    # When an order of each endpoint-less event completes, and then one of the hooked event
    for e in (plain, dropped):
        await complete(e["id"])
    await delivered(await complete(hooked["id"]))

    # Then the hooked one was delivered (after the others in the stream: they were dispatched),
    # read from the store alone; the other two were skipped without a read
    now_reads, now_skipped = await dispatcher_counts(hapi)
    assert (now_reads - reads, now_skipped - skipped) == (1, 2)
    assert not shop.of("/idx-gone")

    # When Redis forgets which events have endpoints (a first deploy, a flushed Redis)
    redis = redis_of(hooks_stack)
    try:
        await redis.delete(streams.WEBHOOK_EVENTS)
        # Then the next order of the hooked event is still delivered: the set is rebuilt from the store
        await delivered(await complete(hooked["id"]))
        members = {m.decode() for m in await redis.smembers(streams.WEBHOOK_EVENTS)}
    finally:
        await redis.aclose()
    assert {streams.WEBHOOK_EVENTS_BUILT, hooked["id"]} <= members
    assert not {plain["id"], dropped["id"]} & members


async def test_orders_are_signed_retried_and_received_once_per_webhook_id(
    hooks_stack: Stack, hapi: httpx.AsyncClient, token: TokenFactory, shop: Shop
) -> None:
    # Given an event with two endpoints: one that answers 500, then hangs past the
    # sender's timeout, then accepts; and one that accepts at once
    organizer, buyer = token("wh-org-2", "organizer"), token("wh-buyer-2", "buyer")
    event = await create_event(hapi, organizer)
    for p in ("/flaky", "/ok"):
        shop.secrets[p] = (await register(hapi, organizer, event["id"], shop.endpoint(p)))["secret"]
    shop.plans["/flaky"] = ["500", "hang"]

    # When an order completes
    r = await place_order(hapi, buyer, event["id"], 2)
    assert r.status_code == 202, r.text
    order = r.json()

    async def both_got(type_: str, order_id: str) -> bool:
        return bool(shop.got("/ok", type_, order_id) and shop.got("/flaky", type_, order_id))

    await wait_until(lambda: both_got("order.completed", order["id"]), WAIT_S)

    # Then each endpoint processed it once, with the order's counters
    (ok_id, ok_body), = shop.got("/ok", "order.completed", order["id"])  # fmt: skip
    (flaky_id, flaky_body), = shop.got("/flaky", "order.completed", order["id"])  # fmt: skip
    assert ok_id == flaky_id and ok_id.startswith("msg_")  # one id per (event, order, type)
    assert ok_body == flaky_body
    assert ok_body["type"] == "order.completed" and ok_body["timestamp"]
    assert ok_body["data"] | {"stream_id": None} == {
        "order_id": order["id"], "event_id": event["id"], "tier": "standard", "quantity": 2,
        "status": "completed", "total": 2, "rendered": 2, "failed": 0, "stream_id": None,
    }  # fmt: skip
    # ... the flaky one after a 500 and a timeout: same webhook-id, each attempt signed anew
    attempts = shop.of("/flaky", flaky_id)
    assert [a.answer for a in attempts][:3] == [500, "hung", 200], attempts
    assert len({a.body for a in attempts}) == 1
    assert all(abs(a.timestamp - time.time()) < TOLERANCE_S for a in attempts)
    assert len(shop.of("/ok", ok_id)) >= 1

    # When the same fact comes again (at-least-once: a re-dispatched event)
    redis = redis_of(hooks_stack)
    try:
        done_id = (await redis.hget(streams.order_progress(order["id"]), "completed")).decode()
        (_, fields), = await redis.xrange(streams.TICKET_EVENTS, done_id, done_id)  # fmt: skip
        await redis.xadd(streams.TICKET_EVENTS, fields)
    finally:
        await redis.aclose()

    async def delivered_twice() -> bool:
        return len([a for a in shop.of("/ok", ok_id) if a.answer == 200]) >= 2

    await wait_until(delivered_twice, WAIT_S)
    # Then it arrives with the same webhook-id and the shop still processed it once
    assert len(shop.got("/ok", "order.completed", order["id"])) == 1

    # When an order is cancelled
    r = await place_order(hapi, buyer, event["id"], 2)
    assert r.status_code == 202, r.text
    cancelled = r.json()
    assert (await hapi.post(f"/v1/orders/{cancelled['id']}/cancel", headers=bearer(buyer))).status_code == 200
    await wait_until(lambda: both_got("order.cancelled", cancelled["id"]), WAIT_S)
    # Then both endpoints hear order.cancelled once
    for p in ("/ok", "/flaky"):
        ((_, body),) = shop.got(p, "order.cancelled", cancelled["id"])
        assert body["data"]["status"] == "cancelled" and body["data"]["total"] == 2

    # And a shop refuses what it must: a replay from more than 5 minutes ago, a changed body
    sent = shop.of("/ok", ok_id)[0]
    old = int(time.time()) - 10 * 60
    key = base64.b64decode(shop.secrets["/ok"].removeprefix("whsec_"))
    fresh_id = "msg_replayed"
    old_sig = base64.b64encode(hmac.new(key, f"{fresh_id}.{old}.".encode() + sent.body, hashlib.sha256).digest())
    async with httpx.AsyncClient(timeout=30) as client:
        replayed = await client.post(
            shop.endpoint("/ok"), content=sent.body,
            headers={"webhook-id": fresh_id, "webhook-timestamp": str(old),
                     "webhook-signature": f"v1,{old_sig.decode()}"},
        )  # fmt: skip
        changed = await client.post(
            shop.endpoint("/ok"), content=sent.body.replace(b'"rendered":2', b'"rendered":3'),
            headers={"webhook-id": sent.msg_id, "webhook-timestamp": str(int(time.time())),
                     "webhook-signature": sent.signature},
        )  # fmt: skip
    assert (replayed.status_code, changed.status_code) == (400, 401)
    assert fresh_id not in {m for m, _ in shop.processed["/ok"]}
    # Every webhook-id was processed once per endpoint
    for p in ("/ok", "/flaky"):
        ids = [m for m, _ in shop.processed[p]]
        assert len(ids) == len(set(ids))


async def test_an_order_with_a_failed_ticket_is_partially_failed(
    hooks_stack: Stack, hapi: httpx.AsyncClient, token: TokenFactory, shop: Shop
) -> None:
    # Given an endpoint for partial failures only, and no renderer running
    organizer, buyer = token("wh-org-3", "organizer"), token("wh-buyer-3", "buyer")
    event = await create_event(hapi, organizer)
    hook = await register(hapi, organizer, event["id"], shop.endpoint("/partial"), types=["order.partially_failed"])
    shop.secrets["/partial"] = hook["secret"]
    await asyncio.to_thread(hooks_stack.renderers[-1].stop)

    # When an order's first ticket cannot be written (a directory squats on its PDF path)
    r = await place_order(hapi, buyer, event["id"], 3)
    assert r.status_code == 202, r.text
    order = r.json()
    squat = Path(hooks_stack.env["TICKETRY_STORAGE_DIR"]) / order["id"] / f"{order['tickets'][0]}.pdf"
    (squat / "x").mkdir(parents=True)
    try:
        await asyncio.to_thread(hooks_stack.start_renderer)
        await wait_until(lambda: _true(shop.got("/partial", "order.partially_failed", order["id"])), WAIT_S)
    finally:
        shutil.rmtree(squat, ignore_errors=True)

    # Then the shop hears order.partially_failed once, with the counters
    ((_, body),) = shop.got("/partial", "order.partially_failed", order["id"])
    data = body["data"]
    assert (data["status"], data["total"], data["rendered"], data["failed"]) == ("partially_failed", 3, 2, 1)


async def test_a_dead_letter_is_redriven_once_the_shop_is_back(
    hooks_stack: Stack, hapi: httpx.AsyncClient, token: TokenFactory, shop: Shop
) -> None:
    # Given an endpoint that is down (500 to everything)
    organizer, buyer = token("wh-org-4", "organizer"), token("wh-buyer-4", "buyer")
    event = await create_event(hapi, organizer)
    hook = await register(hapi, organizer, event["id"], shop.endpoint("/down"), types=["order.completed"])
    shop.secrets["/down"] = hook["secret"]
    shop.down.add("/down")

    # When two orders complete
    orders = []
    for _ in range(2):
        r = await place_order(hapi, buyer, event["id"], 1)
        assert r.status_code == 202, r.text
        orders.append(r.json())
    order, dropped = orders

    def dead_of_hook() -> list[dict[str, Any]]:
        listed = ctl(hooks_stack, "webhooks", "dead", "--json")
        assert listed.returncode == 0, listed.stderr
        return [d for d in orjson.loads(listed.stdout) if d.get("endpoint_id") == hook["id"]]

    def endpoints() -> list[dict[str, Any]]:
        listed = ctl(hooks_stack, "webhooks", "list", "--event", event["id"], "--json")
        assert listed.returncode == 0, listed.stderr
        assert hook["secret"] not in listed.stdout
        items: list[dict[str, Any]] = orjson.loads(listed.stdout)
        return items

    redis = redis_of(hooks_stack)
    try:

        async def dead_lettered() -> bool:
            entries = await redis.xrange(streams.WEBHOOK_DEAD)
            return sum(f.get(b"endpoint") == hook["id"].encode() for _, f in entries) == 2

        await wait_until(dead_lettered, WAIT_S)
    finally:
        await redis.aclose()

    # Then after the last attempt each is a dead letter with every attempt's history
    by_order = {d["order_id"]: d for d in await asyncio.to_thread(dead_of_hook)}
    assert set(by_order) == {order["id"], dropped["id"]}
    dead, doomed = by_order[order["id"]], by_order[dropped["id"]]
    assert (dead["type"], dead["attempts"]) == ("order.completed", MAX_ATTEMPTS)
    assert dead["reason"].startswith(f"gave up after {MAX_ATTEMPTS} attempt(s); last: ")
    # (an attempt that a busy machine kept from the shop past the timeout is a timeout, not a 500)
    outcomes = [h.split(" at ")[0] for h in dead["history"]]
    assert len(outcomes) == MAX_ATTEMPTS
    for i, outcome in enumerate(outcomes, 1):
        assert outcome in (f"attempt {i}: HTTP 500", f"attempt {i}: timed out after {TIMEOUT_S} s"), outcomes
    tried = shop.of("/down")
    assert 2 <= len(tried) <= 2 * MAX_ATTEMPTS and {a.answer for a in tried} == {500}
    assert {a.msg_id for a in tried} == {dead["webhook_id"], doomed["webhook_id"]}
    assert shop.got("/down", "order.completed", order["id"]) == []
    status = orjson.loads((await asyncio.to_thread(ctl, hooks_stack, "status", "--json")).stdout)
    assert status["dead_letters"]["webhooks"] >= 2
    # And the operator's list shows the endpoint with its two dead letters, never its secret
    (shown,) = await asyncio.to_thread(endpoints)
    assert (shown["id"], shown["url"], shown["types"]) == (hook["id"], shop.endpoint("/down"), ["order.completed"])
    assert (shown["dead_letters"], shown["retries_waiting"]) == (2, 0) and "secret" not in shown
    plain = await asyncio.to_thread(ctl, hooks_stack, "webhooks", "list", "--event", event["id"])
    assert plain.returncode == 0 and hook["id"] in plain.stdout and "1 endpoint(s)" in plain.stdout, plain.stdout
    assert hook["secret"] not in plain.stdout + plain.stderr

    # When the shop is back, the operator re-drives one (twice) and deletes the other (twice)
    shop.down.discard("/down")
    first = await asyncio.to_thread(ctl, hooks_stack, "webhooks", "redrive", dead["id"])
    second = await asyncio.to_thread(ctl, hooks_stack, "webhooks", "redrive", dead["id"])
    assert first.returncode == 0 and "re-driven" in first.stdout, first.stdout + first.stderr
    assert second.returncode == 1 and "not found" in second.stdout
    every = await asyncio.to_thread(ctl, hooks_stack, "webhooks", "delete", "--all")
    assert every.returncode == 2 and "--yes" in every.stderr, every.stdout + every.stderr
    gone = await asyncio.to_thread(ctl, hooks_stack, "webhooks", "delete", doomed["id"])
    again = await asyncio.to_thread(ctl, hooks_stack, "webhooks", "delete", doomed["id"])
    assert gone.returncode == 0 and f"{doomed['id']}: deleted" in gone.stdout, gone.stdout + gone.stderr
    assert again.returncode == 1 and "not found" in again.stdout

    # Then the shop gets the re-driven one, with the same webhook-id, and processes it once
    await wait_until(lambda: _true(shop.got("/down", "order.completed", order["id"])), WAIT_S)
    ((msg_id, body),) = shop.got("/down", "order.completed", order["id"])
    assert msg_id == dead["webhook_id"] and body["data"]["rendered"] == 1
    # And no dead letter of the endpoint is left; the deleted one was never sent again
    assert await asyncio.to_thread(dead_of_hook) == []
    assert [e["dead_letters"] for e in await asyncio.to_thread(endpoints)] == [0]
    assert shop.got("/down", "order.completed", dropped["id"]) == []
    assert {a.msg_id for a in shop.of("/down")} == {dead["webhook_id"], doomed["webhook_id"]}


async def _true(value: object) -> bool:
    return bool(value)


async def test_each_reissue_of_a_ticket_is_one_signed_webhook_naming_its_new_holder(
    hapi: httpx.AsyncClient, token: TokenFactory, shop: Shop
) -> None:
    # Given an endpoint for re-issues only and a rendered one-ticket order
    organizer, buyer = token("wh-org-ri", "organizer"), token("wh-buyer-ri", "buyer")
    event = await create_event(hapi, organizer)
    hook = await register(hapi, organizer, event["id"], shop.endpoint("/reissued"), types=["ticket.reissued"])
    shop.secrets["/reissued"] = hook["secret"]
    order = (await place_order(hapi, buyer, event["id"], 1)).json()
    await wait_rendered(hapi, order["id"], buyer)
    (ticket,) = order["tickets"]

    # When the ticket is re-issued twice, to two holders
    for n, holder in enumerate(["Grace Hopper", "Katherine Johnson"], start=1):
        r = await hapi.post(f"/v1/tickets/{ticket}/reissue", json={"holder_name": holder}, headers=bearer(buyer))
        assert r.status_code == 202, r.text
        # Then the shop hears ticket.reissued once per re-issue, each its own webhook-id
        await wait_until(lambda n=n: _true(len(shop.got("/reissued", "ticket.reissued", order["id"])) == n), WAIT_S)
    got = shop.got("/reissued", "ticket.reissued", order["id"])
    assert len({m for m, _ in got}) == 2
    assert [(b["data"]["ticket_id"], b["data"]["event_id"]) for _, b in got] == [(ticket, event["id"])] * 2
    # … naming the holder and version it knew when built (the second re-issue may be seen by both)
    assert got[-1][1]["data"]["holder_name"] == "Katherine Johnson" and got[-1][1]["data"]["version"] == 2
    assert got[0][1]["data"]["version"] in (1, 2)
    # … and no order webhook went to an endpoint that did not subscribe to one
    assert {b["type"] for _, b in shop.processed.get("/reissued", [])} == {"ticket.reissued"}
