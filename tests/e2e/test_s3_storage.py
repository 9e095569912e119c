"""PDFs in an S3-compatible store (TICKETRY_STORAGE_BACKEND=s3) on a real
server (versitygw, started by the stack), with the renderer on a second
"host": a network namespace that reaches Redis and the store only through its
link (tests/netns.py), while the api in the first serves what it wrote.

One stack for the module: the order flow through a presigned URL, download
all, cancel, retention. Without root (no namespaces) the renderer runs beside
the api and only the second-host test is skipped."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pypdf
import pytest
import redis.asyncio as aioredis
from pymongo import MongoClient
from ticketry import streams
from ticketry.documents import utcnow
from ticketry.s3store import S3Store
from ticketry.settings import CommonSettings
from ticketry_devstack.procs import Stack, running

from tests.conftest import TokenFactory
from tests.e2e.flows import order_renders_and_checks_in_once
from tests.helpers import bearer, checkin_list, create_event, decode_qr, eventually, place_order, scan, wait_rendered
from tests.netns import Host, can_make_hosts

pytestmark = pytest.mark.timeout(600)

why_not = can_make_hosts()
RETENTION_DAYS = 30


@pytest.fixture(scope="module")
def host() -> Iterator[Host | None]:
    if why_not is not None:
        yield None
        return
    made = Host(f"tkt-s3-{os.getpid()}", 9).create()
    try:
        yield made
    finally:
        made.destroy()


@pytest.fixture(scope="module")
def s3_stack(tmp_path_factory: pytest.TempPathFactory, host: Host | None) -> Iterator[Stack]:
    """Redis, FerretDB, versitygw, api and notifier here; one renderer on ``host``."""
    binds = ("127.0.0.1", host.gateway) if host is not None else ("127.0.0.1",)
    stack = Stack(
        tmp_path_factory.mktemp("s3-stack"),
        env={
            "TICKETRY_DEV_MODE": "1", "TICKETRY_LOG_LEVEL": "WARNING", "TICKETRY_STORAGE_BACKEND": "s3",
            "TICKETRY_PDF_RETENTION_DAYS": str(RETENTION_DAYS), "TICKETRY_PDF_RETENTION_INTERVAL_S": "0.5",
        },
        redis_bind=binds,
        s3_bind=binds,
    )  # fmt: skip
    with running(stack):
        stack.start_infra()
        stack.start_api()
        stack.start_notifier()
        if host is None:
            stack.start_renderer()
        else:
            stack.start_renderer(
                {
                    "TICKETRY_REDIS_URL": f"redis://{host.gateway}:{stack.redis_port}/0",
                    "TICKETRY_S3_ENDPOINT_URL": f"http://{host.gateway}:{stack.s3_port}",
                },
                netns=host.ns,
            )
        yield stack


@pytest.fixture
async def api(s3_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=s3_stack.api_url, timeout=60) as client:
        yield client


@pytest.fixture
async def bucket(s3_stack: Stack) -> AsyncIterator[S3Store]:
    """The stack's bucket, as the services see it."""
    env = {k: v for k, v in s3_stack.env.items() if k.startswith("TICKETRY_S3_")}
    store = S3Store.from_settings(CommonSettings(**{k.removeprefix("TICKETRY_").lower(): v for k, v in env.items()}))
    try:
        yield store
    finally:
        await store.aclose()


async def rendered_order(api: httpx.AsyncClient, token: TokenFactory, who: str, quantity: int) -> dict[str, str]:
    """A new event and an order of ``quantity`` tickets of it, once rendered."""
    event = await create_event(api, token(f"{who}-org", "organizer"))
    buyer = token(f"{who}-buyer", "buyer")
    r = await place_order(api, buyer, event["id"], quantity)
    assert r.status_code == 202, r.text
    order = r.json()
    got = await wait_rendered(api, order["id"], buyer)
    assert got["status"] == "completed", got
    return {"id": order["id"], "event": event["id"], "buyer": buyer, "tickets": order["tickets"]}


async def test_pdf_is_downloaded_through_a_presigned_url(
    s3_stack: Stack, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given an order rendered into the bucket
    order = await rendered_order(api, token, "s3-flow", 3)
    buyer, organizer = order["buyer"], token("s3-flow-org", "organizer")
    door = await checkin_list(api, organizer, order["event"])
    async with httpx.AsyncClient(timeout=60) as anyone:
        for tid in order["tickets"]:
            # When its buyer asks the api for a ticket's PDF
            r = await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(buyer))
            # Then the api redirects to a presigned URL of the store (no token needed there)
            assert r.status_code == 307, r.text
            location = r.headers["location"]
            assert location.startswith(s3_stack.env["TICKETRY_S3_ENDPOINT_URL"] + "/"), location
            pdf = await anyone.get(location)
            assert pdf.status_code == 200 and pdf.headers["content-type"] == "application/pdf"
            # ... which is the ticket's PDF, its QR code the ticket's check-in code
            page = pypdf.PdfReader(io.BytesIO(pdf.content)).pages
            assert len(page) == 1 and tid in page[0].extract_text()
            checked = await scan(api, token("s3-flow-staff", "staff", org="s3-flow-org"), decode_qr(pdf.content), door)
            assert checked.status_code == 200 and checked.json()["ticket_id"] == tid, checked.text
    # And another buyer gets no redirect
    r = await api.get(f"/v1/tickets/{order['tickets'][0]}/pdf", headers=bearer(token("s3-other", "buyer")))
    assert r.status_code == 404


async def test_the_whole_order_flow_with_its_pdfs_in_s3(api: httpx.AsyncClient, token: TokenFactory) -> None:
    """The walking skeleton of test_order_flow, every PDF through a presigned URL."""
    await order_renders_and_checks_in_once(api, token, "s3-walk", presigned=True)


async def test_download_all_reads_the_objects(api: httpx.AsyncClient, token: TokenFactory) -> None:
    order = await rendered_order(api, token, "s3-all", 4)
    r = await api.get(f"/v1/orders/{order['id']}/pdf", headers=bearer(order["buyer"]))
    assert r.status_code == 200 and r.headers["content-type"] == "application/pdf", r.text
    pages = pypdf.PdfReader(io.BytesIO(r.content)).pages
    assert [tid in p.extract_text() for tid, p in zip(order["tickets"], pages, strict=True)] == [True] * 4


async def test_cancel_deletes_the_objects(api: httpx.AsyncClient, bucket: S3Store, token: TokenFactory) -> None:
    order = await rendered_order(api, token, "s3-cancel", 3)
    assert await bucket.stored(order["id"], order["tickets"]) == set(order["tickets"])
    r = await api.post(f"/v1/orders/{order['id']}/cancel", headers=bearer(order["buyer"]))
    assert r.status_code == 200, r.text
    assert await bucket.stored(order["id"], order["tickets"]) == set()
    r = await api.get(f"/v1/tickets/{order['tickets'][0]}/pdf", headers=bearer(order["buyer"]))
    assert r.status_code == 410


async def test_retention_deletes_past_events_pdfs(
    s3_stack: Stack, api: httpx.AsyncClient, bucket: S3Store, token: TokenFactory
) -> None:
    # Given two rendered orders, one of an event that (as we make it) started past retention
    old = await rendered_order(api, token, "s3-old", 2)
    new = await rendered_order(api, token, "s3-new", 2)
    with MongoClient(s3_stack.env["TICKETRY_MONGO_URL"]) as mongo:
        started = utcnow() - timedelta(days=RETENTION_DAYS + 1)
        mongo.get_default_database()["events"].update_one({"_id": old["event"]}, {"$set": {"starts_at": started}})

    # When the api's sweep comes round (every 0.5 s here)
    async def old_gone() -> bool:
        return not await bucket.stored(old["id"], old["tickets"])

    await eventually(old_gone, "the old event's PDFs deleted", 120)
    # Then the old event's PDFs are gone, marked purged once, and the recent one's stay
    assert await bucket.stored(new["id"], new["tickets"]) == set(new["tickets"])
    r = aioredis.Redis.from_url(s3_stack.env["TICKETRY_REDIS_URL"])
    try:
        assert await r.sismember(streams.PDFS_PURGED, old["event"])
        assert not await r.sismember(streams.PDFS_PURGED, new["event"])
    finally:
        await r.aclose()


@pytest.mark.skipif(why_not is not None, reason=why_not or "")
async def test_a_renderer_on_another_host_writes_where_the_api_reads(
    s3_stack: Stack, host: Host | None, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given the stack's only renderer is on the second host (its heartbeat names it)
    assert host is not None
    r = aioredis.Redis.from_url(s3_stack.env["TICKETRY_REDIS_URL"])
    try:
        live = [k.decode() async for k in r.scan_iter(match=streams.renderer_heartbeat("*"))]
    finally:
        await r.aclose()
    assert live and all(k.removeprefix(streams.RENDERER_PREFIX).startswith(host.ns) for k in live), live
    # When an order is rendered there, the api here serves its PDF from the store
    order = await rendered_order(api, token, "s3-hosts", 2)
    r2 = await api.get(f"/v1/tickets/{order['tickets'][1]}/pdf", headers=bearer(order["buyer"]))
    assert r2.status_code == 307
    async with httpx.AsyncClient(timeout=60) as anyone:
        pdf = await anyone.get(r2.headers["location"])
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
    # (the api's own disk holds none)
    assert not Path(s3_stack.env["TICKETRY_STORAGE_DIR"]).exists() or not any(
        Path(s3_stack.env["TICKETRY_STORAGE_DIR"]).iterdir()
    )
