"""The pages people use, in a real headless Chromium against the real stack:
the buyer's page at an order's ``status_page_url`` and the door scanner at
``/scan`` (docs/contract.md, Pages), and the order link that opens the first.

Every wait is for something to happen, bounded far above need (``WAIT_MS``);
nothing is timed. The pages run under their real Content-Security-Policy, so
the tests read them through Playwright's locators only.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import orjson
import pypdfium2
import pytest
import websockets
from playwright.async_api import Page, WebSocket, expect
from ticketry.auth import issue_token
from ticketry.settings import DEV_JWT_SECRET
from ticketry.storage import pdf_path, write_atomic
from ticketry_api.web.assets import STATIC
from ticketry_devstack.procs import Stack
from websockets.typing import Subprotocol

from tests.conftest import TokenFactory, stack_of_its_own
from tests.e2e.pages_support import (
    AUDIO_STAND_IN,
    BARCODE_DETECTOR_STAND_IN,
    QUEUED,
    WAIT_MS,
    browser,
    qr_picture,
    write_y4m,
)
from tests.helpers import bearer, checkin_list, create_event, decode_qr, eventually, place_order, scan

pytestmark = pytest.mark.e2e

TIERS = [
    {"id": "standard", "name": "Standard", "price": "39.00"},
    {"id": "vip", "name": "VIP Lounge", "price": "120.00", "lane": "vip"},
]


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own that starts with no renderer: an order waits until a test starts one."""
    with stack_of_its_own(tmp_path_factory, "pages-stack", renderers=0) as s:
        yield s


def staff_token(sub: str, events: list[str]) -> str:
    return issue_token(sub, "staff", key=DEV_JWT_SECRET, events=events)


async def until_rendered(api: httpx.AsyncClient, order_id: str, tok: str) -> dict[str, Any]:
    """Wait (bounded) for the order to have no ticket left to render."""

    async def done() -> dict[str, Any] | None:
        got: dict[str, Any] = (await api.get(f"/v1/orders/{order_id}", headers=bearer(tok))).json()
        return got if got["status"] != "processing" else None

    got: dict[str, Any] = await eventually(done, f"order {order_id} rendered", WAIT_MS / 1000, interval_s=0.1)
    return got


async def ticket_codes(api: httpx.AsyncClient, order: dict[str, Any], tok: str) -> list[tuple[bytes, str]]:
    """Each ticket's PDF and the code its QR carries."""
    await until_rendered(api, order["id"], tok)
    out = []
    for tid in order["tickets"]:
        pdf = await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(tok))
        assert pdf.status_code == 200, pdf.text
        out.append((pdf.content, decode_qr(pdf.content)))
    return out


def screenshot_dir(tmp_path: Path) -> Path:
    """Where the 360 px screenshots go: ``TICKETRY_SCREENSHOT_DIR`` (e.g.
    bench/results) or the test's own temporary directory."""
    where = Path(os.environ.get("TICKETRY_SCREENSHOT_DIR") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def pdf_pages(data: bytes) -> int:
    doc = pypdfium2.PdfDocument(io.BytesIO(data))
    try:
        return len(doc)
    finally:
        doc.close()


def one_page_pdf() -> bytes:
    """A valid one-page PDF, as a renderer would store it."""
    doc = pypdfium2.PdfDocument.new()
    try:
        doc.new_page(595, 842)
        buf = io.BytesIO()
        doc.save(buf)
        return buf.getvalue()
    finally:
        doc.close()


async def download(page: Page, link: Any) -> bytes:
    """Click a download link as a person would; the file's bytes."""
    async with page.expect_download() as info:
        await link.click()
    path = await (await info.value).path()
    return Path(path).read_bytes()


async def refused_with(progress_url: str, link: str) -> int | None:
    """The close code of a socket opened with ``link`` that must be refused."""
    with pytest.raises(websockets.ConnectionClosed) as closed:
        async with (
            asyncio.timeout(60),
            websockets.connect(progress_url, subprotocols=[Subprotocol(f"bearer.{link}")]) as ws,
        ):
            await ws.recv()
    return closed.value.rcvd.code if closed.value.rcvd is not None else None


class Sockets:
    """The page's progress sockets: their URLs and the messages each received."""

    def __init__(self, page: Page) -> None:
        self.urls: list[str] = []
        self.messages: list[list[dict[str, Any]]] = []
        page.on("websocket", self._opened)

    def _opened(self, ws: WebSocket) -> None:
        self.urls.append(ws.url)
        got: list[dict[str, Any]] = []
        self.messages.append(got)
        ws.on("framereceived", lambda payload: got.append(orjson.loads(payload)))

    def summary(self) -> list[tuple[str, list[str]]]:
        """Each socket's query and the types it received (for a failure's message)."""
        pairs = zip(self.urls, self.messages, strict=True)
        return [(url.partition("?")[2], [m["type"] for m in msgs]) for url, msgs in pairs]

    async def wait_for(self, kind: str) -> None:
        async def seen() -> bool:
            return any(m["type"] == kind for msgs in self.messages for m in msgs)

        await eventually(seen, f"a {kind!r} message on a socket", WAIT_MS / 1000, interval_s=0.05)


# --- the buyer's page ----------------------------------------------------------


async def test_buyers_page_follows_50_tickets_through_a_notifier_restart(
    held: Stack, token: TokenFactory, tmp_path: Path
) -> None:
    org, buyer = token("pages-org-1", "organizer"), token("pages-buyer-1", "buyer")
    async with httpx.AsyncClient(base_url=held.api_url, timeout=60) as api:
        # Given a 50-ticket order that waits (no renderer yet)
        event = await create_event(
            api, org, capacity=500, name="Summer Night", venue="Columbiahalle", tiers=TIERS,
            timezone="Europe/Berlin", starts_at="2027-06-01T20:00:00+02:00",
        )  # fmt: skip
        for r in held.renderers:
            await asyncio.to_thread(r.stop)
        holders = [f"Guest {n + 1}" for n in range(49)] + ["Zoë Ångström"]
        placed = await place_order(api, buyer, event["id"], 50, tier="vip", holders=holders)
        assert placed.status_code == 202, placed.text
        order = placed.json()
        url = order["status_page_url"]
        assert url.startswith(f"{held.api_url}/o/{order['id']}#t="), url
        link = url.partition("#t=")[2]

        async with browser(tmp_path / "profile") as context:
            page = await context.new_page()
            sockets = Sockets(page)
            requested: list[str] = []
            page.on("request", lambda req: requested.append(req.url))
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))

            # When the buyer opens the link
            await page.goto(url)
            status, progress = page.get_by_test_id("order-status"), page.get_by_test_id("order-progress")
            await expect(progress).to_have_text("0 / 50")
            await expect(status).to_have_text("processing")
            await expect(page.get_by_role("heading", level=1)).to_have_text("Summer Night")
            await expect(page.locator("#tier-name")).to_have_text("VIP Lounge")
            # (in venue time, as the ticket prints it: 20:00 CEST in Berlin in June)
            await expect(page.locator("#event-when")).to_contain_text(", 20:00 CEST · Columbiahalle")
            await sockets.wait_for("snapshot")
            # Then the link left the address bar at once
            assert "#" not in page.url and link not in page.url
            # ...and the progress bar has a name and says how far the order is
            bar = page.get_by_role("progressbar")
            await expect(bar).to_have_accessible_name("Preparing your tickets")
            await expect(bar).to_have_attribute("aria-valuenow", "0")
            await expect(bar).to_have_attribute("aria-valuetext", "0 / 50 tickets ready")

            # When a renderer makes part of the order and goes (it exits after its first tickets)
            part = await asyncio.to_thread(held.start_renderer, {"TICKETRY_MAX_JOBS": "5", "TICKETRY_VIP_BATCH": "5"})
            assert part.popen is not None
            assert await asyncio.to_thread(part.popen.wait, WAIT_MS / 1000) == 0
            links = page.locator("a[data-testid=ticket-link]")

            def pushed() -> set[str]:
                return {m["ticket_id"] for msgs in sockets.messages for m in msgs if m["type"] == "ticket.rendered"}

            async def shown_as_made() -> int | None:
                made: int = (await api.get(f"/v1/orders/{order['id']}", headers=bearer(buyer))).json()["rendered"]
                shown = (len(pushed()), await links.count(), await progress.text_content())
                return made if made and shown == (made, made, f"{made} / 50") else None

            # Then each ticket made so far has its link and is counted, as its message comes
            made = await eventually(shown_as_made, "the page shows each ticket made so far")
            early = pushed()
            hrefs = {await a.get_attribute("href") for a in await links.all()}
            assert hrefs == {f"/o/{order['id']}/tickets/{t}.pdf" for t in early}
            # ...before the order is complete (no renderer is left: it stays incomplete)
            assert made < 50 and not [m for msgs in sockets.messages for m in msgs if m["type"] == "order.completed"]
            await expect(status).to_have_text("processing")
            await expect(bar).to_have_attribute("aria-valuenow", str(made))
            await expect(bar).to_have_attribute("aria-valuetext", f"{made} / 50 tickets ready")

            # When the notifier goes away, the whole order renders meanwhile, and it comes back
            await asyncio.to_thread(held.procs["notifier"].stop)
            await asyncio.to_thread(held.start_renderer)
            done = await until_rendered(api, order["id"], buyer)
            assert (done["status"], done["rendered"]) == ("completed", 50)
            await asyncio.to_thread(held.start_notifier)

            # Then the page resumes where its socket stopped and misses no ticket
            await expect(status).to_have_text("completed")
            await expect(progress).to_have_text("50 / 50")
            await expect(links).to_have_count(50)
            hrefs = {await a.get_attribute("href") for a in await links.all()}
            assert hrefs == {f"/o/{order['id']}/tickets/{t}.pdf" for t in order["tickets"]}
            resumed = [n for n, u in enumerate(sockets.urls) if "after=" in u]
            assert resumed, sockets.urls
            delivered = {m["ticket_id"] for n in resumed for m in sockets.messages[n] if m["type"] == "ticket.rendered"}
            assert delivered >= set(order["tickets"]) - early, sockets.summary()
            await expect(bar).to_have_accessible_name("Your tickets are ready")
            await expect(bar).to_have_attribute("aria-valuenow", "50")
            await expect(bar).to_have_attribute("aria-valuetext", "50 / 50 tickets ready")
            # ...and the link was never in a URL (the socket took it as a subprotocol)
            assert not [u for u in requested + sockets.urls if link in u]

            # A ticket downloads through its link, as a PDF with its own code
            first = page.locator("a[data-testid=ticket-link]").first
            pdf = await download(page, first)
            assert pdf.startswith(b"%PDF-")
            assert decode_qr(pdf).startswith("TK2.")
            fetched = await page.request.get(urljoin(page.url, await first.get_attribute("href") or ""))
            assert fetched.status == 200 and fetched.headers["content-type"] == "application/pdf"
            # ...and all of them as one PDF of 50 pages
            everything = await download(page, page.get_by_test_id("download-all"))
            assert pdf_pages(everything) == 50

            # Readable on a phone: nothing wider than its 360 px
            assert await page.evaluate("document.scrollingElement.scrollWidth") <= 360
            await page.screenshot(path=screenshot_dir(tmp_path) / "order-page-360.png")
            assert not errors, errors

            # Opened again without the link (a reload: the fragment is gone), it still shows the order
            await page.reload()
            await expect(status).to_have_text("completed")
            await expect(page.locator("a[data-testid=ticket-link]")).to_have_count(50)


async def waiting_order(held: Stack, api: httpx.AsyncClient, org: str, buyer: str, quantity: int) -> dict[str, Any]:
    """An order of a new event on ``held`` with its renderers stopped: it waits."""
    event = await create_event(api, org, capacity=50)
    for r in held.renderers:
        await asyncio.to_thread(r.stop)
    placed = await place_order(api, buyer, event["id"], quantity)
    assert placed.status_code == 202, placed.text
    order: dict[str, Any] = placed.json()
    return order


async def test_buyers_page_shows_a_cancel_at_once(held: Stack, token: TokenFactory, tmp_path: Path) -> None:
    org, buyer = token("pages-org-7", "organizer"), token("pages-buyer-7", "buyer")
    async with httpx.AsyncClient(base_url=held.api_url, timeout=60) as api:
        # Given an order still waiting for its renderer, its page open
        order = await waiting_order(held, api, org, buyer, 5)
        async with browser(tmp_path / "profile") as context:
            page = await context.new_page()
            sockets = Sockets(page)
            await page.goto(order["status_page_url"])
            await expect(page.get_by_test_id("order-progress")).to_have_text("0 / 5")
            await sockets.wait_for("snapshot")
            # When the buyer cancels it
            assert (await api.post(f"/v1/orders/{order['id']}/cancel", headers=bearer(buyer))).status_code == 200
            # Then the page says so, with no link to download
            await expect(page.get_by_test_id("order-status")).to_have_text("cancelled")
            await expect(page.locator("a[data-testid=ticket-link]")).to_have_count(0)
            await expect(page.get_by_test_id("download-all")).to_have_count(0)


async def test_a_ticket_stored_before_the_projector_folds_it_is_served(held: Stack, token: TokenFactory) -> None:
    """The buyer's page links a ticket as soon as its ``ticket.rendered`` arrives,
    which can be before the api's projector has folded that event into the read
    model (seen in CI: the link answered 409 "not rendered"). A PDF in storage
    is proof enough: a renderer stores it before it announces it."""
    org, buyer = token("pages-org-8", "organizer"), token("pages-buyer-8", "buyer")
    async with httpx.AsyncClient(base_url=held.api_url, timeout=60) as api:
        # Given a 2-ticket order with no renderer, the first ticket's PDF stored
        # as a renderer stores it, and no render event folded
        order = await waiting_order(held, api, org, buyer, 2)
        first, second = order["tickets"]
        pdf = one_page_pdf()
        write_atomic(pdf_path(Path(held.env["TICKETRY_STORAGE_DIR"]), order["id"], first), pdf)
        # Then the first is rendered and its PDF served, alone and in "download
        # all"; the second still waits
        got = (await api.get(f"/v1/tickets/{first}", headers=bearer(buyer))).json()
        assert got["status"] == "rendered", got
        r = await api.get(f"/v1/tickets/{first}/pdf", headers=bearer(buyer))
        assert r.status_code == 200 and r.content == pdf, r.text
        joined = await api.get(f"/v1/orders/{order['id']}/pdf", headers=bearer(buyer))
        assert joined.status_code == 200 and pdf_pages(joined.content) == 1, joined.text
        assert (await api.get(f"/v1/tickets/{second}", headers=bearer(buyer))).json()["status"] == "queued"
        assert (await api.get(f"/v1/tickets/{second}/pdf", headers=bearer(buyer))).status_code == 409


async def test_an_order_link_opens_its_own_order_only(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer, other = token("pages-org-2", "organizer"), token("pages-buyer-2", "buyer"), token("pb-3", "buyer")
    event = await create_event(api, org, capacity=50)
    mine = (await place_order(api, buyer, event["id"], 3)).json()
    theirs = (await place_order(api, other, event["id"], 1)).json()
    link = mine["status_page_url"].partition("#t=")[2]
    await until_rendered(api, mine["id"], buyer)

    # The link reads its order, its PDFs and its progress
    assert (await api.get(f"/o/{mine['id']}/state", headers=bearer(link))).json()["rendered"] == 3
    joined = await api.get(f"/v1/orders/{mine['id']}/pdf", headers=bearer(link))
    assert joined.status_code == 200 and joined.headers["content-type"] == "application/pdf"
    assert pdf_pages(joined.content) == 3
    async with (
        asyncio.timeout(60),
        websockets.connect(mine["progress_url"], subprotocols=[Subprotocol(f"bearer.{link}")]) as ws,
    ):
        assert orjson.loads(await ws.recv())["type"] == "snapshot"

    # ...and nothing else: not another order, not the REST api as a buyer
    assert (await api.get(f"/o/{theirs['id']}/state", headers=bearer(link))).status_code == 401
    assert (await api.get(f"/v1/orders/{theirs['id']}/pdf", headers=bearer(link))).status_code == 401
    assert (await api.get(f"/v1/orders/{mine['id']}", headers=bearer(link))).status_code == 401
    assert (await place_order(api, link, event["id"], 1)).status_code == 401
    assert await refused_with(theirs["progress_url"], link) == 4401
    # A ticket of another order through this order's page: 404
    other_ticket = theirs["tickets"][0]
    assert (await api.get(f"/o/{mine['id']}/tickets/{other_ticket}.pdf", headers=bearer(link))).status_code == 404

    # The page's cookie: HttpOnly, SameSite=Strict, only for this order's page, never for a script
    opened = await api.post(f"/o/{mine['id']}/session", headers=bearer(link))
    assert opened.status_code == 204
    cookie = opened.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and f"path=/o/{mine['id']}" in cookie
    # ...and the session cannot be opened with the cookie alone (no cross-site request can)
    cookie_value = opened.cookies["ticketry_order"]
    again = await api.post(f"/o/{mine['id']}/session", headers={"Cookie": f"ticketry_order={cookie_value}"})
    assert again.status_code == 401

    # Download all is its buyer's (or the link's): another buyer gets 404, its buyer the PDF
    assert (await api.get(f"/v1/orders/{mine['id']}/pdf", headers=bearer(other))).status_code == 404
    assert (await api.get(f"/v1/orders/{mine['id']}/pdf", headers=bearer(buyer))).status_code == 200
    # The pages themselves are served under their own CSP
    html = await api.get(f"/o/{mine['id']}")
    assert html.status_code == 200 and "script-src 'self'" in html.headers["content-security-policy"]
    assert stack.notifier_url in html.headers["content-security-policy"]


# --- the buyer's page of a waiting-room place ---------------------------------------


async def test_a_places_page_follows_it_from_the_line_to_its_turn(
    api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    # Given a paused room with alice then bob in line, and bob's page opened from
    # his place's status_page_url (the shop added its checkout address)
    org, alice, bob = token("pages-room-org", "organizer"), token("pr-alice", "buyer"), token("pr-bob", "buyer")
    eid = (await create_event(api, org, capacity=5, waiting_room=True))["id"]
    assert (await api.post(f"/v1/events/{eid}/queue/pause", headers=bearer(org))).status_code == 200
    for who in (alice, bob):
        r = await api.post(f"/v1/events/{eid}/queue", headers=bearer(who))
        assert r.status_code == 201, r.text
    place = r.json()
    checkout = "https://shop.example/checkout?event=" + eid
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        await page.goto(place["status_page_url"] + "&r=" + checkout.replace("?", "%3F").replace("=", "%3D"))
        # Then it shows his place and that admission is paused, the link gone from the address bar
        status = page.get_by_test_id("queue-status")
        await expect(page.get_by_test_id("queue-position")).to_have_text("2")
        await expect(status).to_have_attribute("data-status", "paused")
        await expect(page.locator("#event-when")).to_contain_text(", 19:30 UTC")
        assert "#" not in page.url
        await page.screenshot(path=screenshot_dir(tmp_path) / "queue-page-360.png")
        # When the organiser resumes admission, then the page says it is his turn, with the way back
        assert (await api.post(f"/v1/events/{eid}/queue/resume", headers=bearer(org))).status_code == 200
        await expect(status).to_have_attribute("data-status", "admitted")
        await expect(page.get_by_test_id("queue-continue")).to_have_attribute("href", checkout)
        await page.screenshot(path=screenshot_dir(tmp_path) / "queue-page-admitted-360.png")
        # And opened again without the link (a reload), it still shows the place
        await page.reload()
        await expect(status).to_have_attribute("data-status", "admitted")


async def test_a_places_page_told_sold_out_is_called_back_when_a_ticket_returns(
    api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    # Given a room of one ticket: alice is admitted and buys it, bob's page is open behind her
    org, alice, bob = token("pages-back-org", "organizer"), token("pb-alice", "buyer"), token("pb-bob", "buyer")
    eid = (await create_event(api, org, capacity=1, waiting_room=True))["id"]
    places = []
    for who in (alice, bob):
        r = await api.post(f"/v1/events/{eid}/queue", headers=bearer(who))
        assert r.status_code == 201, r.text
        places.append(r.json())
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        await page.goto(places[1]["status_page_url"])
        status = page.get_by_test_id("queue-status")

        async def admitted() -> dict[str, Any] | None:
            place: dict[str, Any] = (await api.post(f"/v1/events/{eid}/queue", headers=bearer(alice))).json()
            return place if place["admitted"] else None

        place = await eventually(admitted, "alice is admitted")
        body = {"event_id": eid, "quantity": 1, "holder_name": "Alice", "tier": "standard"}
        r = await api.post("/v1/orders", json=body, headers={**bearer(alice), "Queue-Permission": place["permission"]})
        assert r.status_code == 202, r.text
        # Then bob's page says it is sold out, and to keep the page open
        await expect(status).to_have_attribute("data-status", "sold_out", timeout=WAIT_MS)
        await expect(page.locator("#notice")).to_contain_text("Keep this page open")
        await page.screenshot(path=screenshot_dir(tmp_path) / "queue-page-sold-out-360.png")
        # When alice cancels, then the same page says it is bob's turn
        r = await api.post(f"/v1/orders/{r.json()['id']}/cancel", headers=bearer(alice))
        assert r.status_code == 200, r.text
        await expect(status).to_have_attribute("data-status", "admitted", timeout=WAIT_MS)
        await expect(page.locator("#notice")).to_have_text("")


async def test_a_places_link_reads_that_place_only(api: httpx.AsyncClient, token: TokenFactory) -> None:
    org, alice, bob = token("pages-room-org-2", "organizer"), token("pl-alice", "buyer"), token("pl-bob", "buyer")
    eid = (await create_event(api, org, capacity=5, waiting_room=True))["id"]
    assert (await api.post(f"/v1/events/{eid}/queue/pause", headers=bearer(org))).status_code == 200
    mine = (await api.post(f"/v1/events/{eid}/queue", headers=bearer(alice))).json()
    theirs = (await api.post(f"/v1/events/{eid}/queue", headers=bearer(bob))).json()
    link = mine["status_page_url"].partition("#t=")[2]

    # The link reads its place (not its permission) and follows its socket
    got = await api.get(f"/q/{mine['queue_id']}/state", headers=bearer(link))
    assert got.status_code == 200, got.text
    assert (got.json()["place"]["queue_id"], got.json()["place"]["position"]) == (mine["queue_id"], 1)
    async with (
        asyncio.timeout(60),
        websockets.connect(mine["progress_url"], subprotocols=[Subprotocol(f"bearer.{link}")]) as ws,
    ):
        first = orjson.loads(await ws.recv())
        assert (first["type"], first["position"], first["paused"]) == ("queue.position", 1, True)

    # ...and nothing else: not another place, not the REST api as a buyer; a bearer token is no link
    assert (await api.get(f"/q/{theirs['queue_id']}/state", headers=bearer(link))).status_code == 401
    assert (await api.get(f"/q/{mine['queue_id']}/state", headers=bearer(alice))).status_code == 401
    assert (await api.post(f"/v1/events/{eid}/queue", headers=bearer(link))).status_code == 401
    assert (await place_order(api, link, eid, 1)).status_code == 401
    assert await refused_with(theirs["progress_url"], link) == 4401
    # The page is served under its CSP, for a place's id only
    html = await api.get(f"/q/{mine['queue_id']}")
    assert html.status_code == 200 and "script-src 'self'" in html.headers["content-security-policy"]
    assert (await api.get("/q/not-a-place")).status_code == 404


# --- the door scanner ---------------------------------------------------------------


async def test_scanner_camera_admits_then_already_and_refuses_another_events_ticket(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org, buyer = token("pages-org-3", "organizer"), token("pages-buyer-3", "buyer")
    # Given an event with a door, a ticket of it, and a ticket of another event
    event = await create_event(api, org, capacity=50, tiers=TIERS)
    elsewhere = await create_event(api, org, capacity=50, name="Another Night")
    door = await checkin_list(api, org, event["id"], name="Main door")
    order = (await place_order(api, buyer, event["id"], 1, tier="vip", holder_name="Łukasz Żółć")).json()
    foreign = (await place_order(api, buyer, elsewhere["id"], 1)).json()
    [(pdf, code)] = await ticket_codes(api, order, buyer)
    [(_, foreign_code)] = await ticket_codes(api, foreign, buyer)
    staff = staff_token("pages-door-3", [event["id"]])
    # ...and a camera that sees the ticket (Chromium's fake camera playing its QR)
    camera = write_y4m(tmp_path / "ticket.y4m", qr_picture(pdf))

    async with browser(tmp_path / "profile", camera=camera) as context:
        page = await context.new_page()
        await page.add_init_script(AUDIO_STAND_IN)  # what the page plays, recorded
        # When door staff open the scanner link (it keeps the door's tickets: the tiers' names) and turn the camera on
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={door}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Main door")
        assert "#" not in page.url  # token and list went to the device, not the address bar
        await expect(page.get_by_test_id("scan-sync")).to_have_attribute("data-state", "kept")
        await page.get_by_test_id("camera-start").click()
        # Chromium on Linux has no BarcodeDetector: the frames go to the vendored jsQR
        detector = await page.evaluate("'BarcodeDetector' in window")
        await expect(page.locator("#camera-note")).to_contain_text("built-in detector" if detector else "jsQR")
        result, history = page.get_by_test_id("scan-result"), page.locator("[data-testid=scan-history] li")

        # Then the ticket is admitted, with its holder and tier; held in view, it is then already in, named too
        await expect(history.last).to_have_attribute("data-outcome", "admitted")
        await expect(history.last).to_contain_text("Łukasz Żółć")
        await expect(history.last).to_contain_text("VIP Lounge")
        await expect(history.first).to_have_attribute("data-outcome", "already")
        await expect(history.first).to_contain_text("Łukasz Żółć")
        await expect(history.first).to_contain_text("VIP Lounge")
        await expect(result).to_have_attribute("data-outcome", "already")
        await expect(page.locator("#holder")).to_have_text("Łukasz Żółć")
        await expect(page.locator("#detail")).to_contain_text("Tier: VIP Lounge")
        await page.get_by_test_id("camera-start").click()  # the camera off again
        # (the server agrees: one check-in; its answer names the holder and tier)
        again = await scan(api, staff, code, door)
        assert again.status_code == 409 and again.headers["content-type"] == "application/problem+json"
        assert again.json()["type"].endswith("/already-checked-in"), again.text
        assert (again.json()["holder_name"], again.json()["tier"]) == ("Łukasz Żółć", "vip"), again.text

        # When a ticket of another event is typed in, it is the wrong list
        await page.get_by_test_id("scan-input").fill(foreign_code)
        await page.get_by_test_id("scan-submit").click()
        await expect(result).to_have_attribute("data-outcome", "wrong_list")
        # ...and a forged code is unknown
        await page.get_by_label("Ticket code").fill(code[:-4] + ("AAAA" if not code.endswith("AAAA") else "BBBB"))
        await page.get_by_test_id("scan-submit").click()
        await expect(result).to_have_attribute("data-outcome", "unknown")
        # Readable on a phone: nothing wider than its 360 px, the last scans open
        await page.get_by_text("Last scans").click()
        await expect(history.first).to_be_visible()
        assert await page.evaluate("document.scrollingElement.scrollWidth") <= 360
        await page.screenshot(path=screenshot_dir(tmp_path) / "scan-page-360.png")

        # Every answer shown sounded once (the history keeps the last 20), each outcome its own tones
        sounds: list[dict[str, Any]] = await page.evaluate("window.__sounds")
        shown = await history.evaluate_all("rows => rows.map((li) => li.dataset.outcome)")
        heard = [s["outcome"] for s in reversed(sounds)]
        assert heard[: len(shown)] == shown and (len(heard) == len(shown) or len(shown) == 20), (heard, shown)
        patterns: dict[str, set[tuple[tuple[Any, ...], ...]]] = {}
        for s in sounds:
            patterns.setdefault(s["outcome"], set()).add(tuple(tuple(t) for t in s["tones"]))
        assert set(patterns) == {"admitted", "already", "wrong_list", "unknown"}, patterns
        assert all(len(p) == 1 and () not in p for p in patterns.values()), patterns
        assert len({min(p) for p in patterns.values()}) == len(patterns), patterns


async def test_scanner_camera_uses_the_browsers_barcode_detector_where_there_is_one(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    """Where the browser has a ``BarcodeDetector``, the camera's frames go to it,
    not to the vendored jsQR. Chromium on Linux has none, so the page gets a
    stand-in (``pages_support.BARCODE_DETECTOR_STAND_IN``, installed before the
    page's scripts): it replaces a browser API, not our infrastructure; it
    decodes the real fake-camera frame with the page's own jsQR, which it keeps
    aside so the page's own calls to jsQR are counted apart. The scan itself is
    the page's real path: POST /v1/checkins to the real api, the real answer."""
    org, buyer = token("pages-org-8", "organizer"), token("pages-buyer-8", "buyer")
    # Given an event with a door, a rendered ticket of it, and a camera that sees the ticket
    event = await create_event(api, org, capacity=50, tiers=TIERS)
    door = await checkin_list(api, org, event["id"], name="Side door")
    order = (await place_order(api, buyer, event["id"], 1, holder_name="Zoë Ångström")).json()
    [(pdf, code)] = await ticket_codes(api, order, buyer)
    staff = staff_token("pages-door-8", [event["id"]])
    camera = write_y4m(tmp_path / "ticket.y4m", qr_picture(pdf))

    async with browser(tmp_path / "profile", camera=camera) as context:
        page = await context.new_page()
        await page.add_init_script(BARCODE_DETECTOR_STAND_IN)
        # When door staff open the scanner and turn the camera on
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={door}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Side door")
        await page.get_by_test_id("camera-start").click()
        # Then the page takes the detector's branch
        await expect(page.locator("#camera-note")).to_contain_text("built-in detector")
        # ...the ticket is admitted by the server: green, with its holder's name
        result = page.get_by_test_id("scan-result")
        await expect(result).to_have_attribute("data-outcome", "admitted")
        await expect(result).to_have_css("background-color", "rgb(10, 107, 44)")
        await expect(page.locator("#holder")).to_have_text("Zoë Ångström")
        await expect(page.locator("[data-testid=scan-history] li")).to_have_count(1)
        await page.get_by_test_id("camera-start").click()  # the camera off again
        seen = await page.evaluate("window.__barcodeStandIn")
        # ...the detector was asked for QR codes and read the frames; the page never called jsQR
        assert seen["supported"] >= 1 and seen["constructed"] == [["qr_code"]], seen
        assert seen["detect"] >= 1 and seen["found"] == [code] and seen["pageJsqr"] == 0, seen
    # (the server holds the check-in: the same code again is already in)
    again = await scan(api, staff, code, door)
    assert again.status_code == 409 and "checked_in_at" in again.json(), again.text


async def test_scanner_offline_admits_locally_uploads_later_and_reports_a_conflict_once(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org, buyer = token("pages-org-4", "organizer"), token("pages-buyer-4", "buyer")
    event = await create_event(api, org, capacity=50, tiers=TIERS)
    elsewhere = await create_event(api, org, capacity=50)
    door = await checkin_list(api, org, event["id"], name="North door")
    order = (await place_order(api, buyer, event["id"], 2)).json()
    [(_, first), (_, second)] = await ticket_codes(api, order, buyer)
    foreign = (await place_order(api, buyer, elsewhere["id"], 1)).json()
    [(_, foreign_code)] = await ticket_codes(api, foreign, buyer)
    # ...and a ticket whose order was cancelled (the page learns it from the event's revocations)
    gone = (await place_order(api, buyer, event["id"], 1)).json()
    [(_, cancelled_code)] = await ticket_codes(api, gone, buyer)
    assert (await api.post(f"/v1/orders/{gone['id']}/cancel", headers=bearer(buyer))).status_code == 200
    staff = staff_token("pages-door-4", [event["id"]])

    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={door}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("North door")  # keys and list are on the device
        result, queue = page.get_by_test_id("scan-result"), page.get_by_test_id("scan-queue")
        code_box, submit = page.get_by_test_id("scan-input"), page.get_by_test_id("scan-submit")

        # Given the network is gone
        await context.set_offline(True)
        await expect(page.get_by_test_id("scan-network")).to_have_attribute("data-online", "false")
        # When two tickets are scanned, both are admitted on the device and wait to be uploaded
        for n, code in enumerate((first, second)):
            await code_box.fill(code)
            await submit.click()
            await expect(result).to_have_attribute("data-outcome", "admitted")
            await expect(queue).to_have_attribute("data-count", str(n + 1))
        # ...the same ticket again is already in, another event's is the wrong list (judged offline too)
        await code_box.fill(first)
        await submit.click()
        await expect(result).to_have_attribute("data-outcome", "already")
        await code_box.fill(foreign_code)
        await submit.click()
        await expect(result).to_have_attribute("data-outcome", "wrong_list")
        # ...and the cancelled ticket is refused as unknown, and nothing of it waits to be uploaded
        await code_box.fill(cancelled_code)
        await submit.click()
        await expect(result).to_have_attribute("data-outcome", "unknown")
        await expect(page.locator("#detail")).to_have_text("Cancelled.")
        await expect(queue).to_have_attribute("data-count", "2")
        queued = await page.evaluate(QUEUED)  # the device's queue (IndexedDB), in scan order
        assert [q["ticket"] for q in queued] == order["tickets"], queued
        # ...while another door, online, admits the second ticket first
        assert (await scan(api, staff_token("pages-door-5", [event["id"]]), second, door)).status_code == 200

        # When the network is back
        await context.set_offline(False)
        # Then both scans are uploaded, and the second ticket comes back as a conflict, once
        await expect(queue).to_have_attribute("data-count", "0")
        conflicts = page.get_by_test_id("scan-conflict")
        await expect(conflicts).to_have_count(1)
        await expect(conflicts).to_have_attribute("data-ticket", order["tickets"][1])
        await expect(conflicts).to_have_attribute("data-kind", "already")
        # (the server holds the first ticket as checked in by this door's upload)
        again = await scan(api, staff, first, door)
        assert again.status_code == 409 and "checked_in_at" in again.json()
        assert await page.evaluate("document.scrollingElement.scrollWidth") <= 360  # a conflict shown, on a phone

        # When the device uploads both scans once more (as one that lost the answers would,
        # the same nonces: here an older page's queue in localStorage, moved into IndexedDB at start),
        # then the server answers as the first time: still one conflict
        await page.evaluate("q => localStorage.setItem('ticketry.scan.queue', JSON.stringify(q))", queued)
        await page.reload()
        await expect(page.get_by_role("heading", level=1)).to_have_text("North door")

        async def uploaded() -> bool:
            moved = await page.evaluate("localStorage.getItem('ticketry.scan.queue')") is None
            return moved and await page.evaluate(QUEUED) == []

        await eventually(uploaded, "the scans are uploaded once more")
        await expect(queue).to_have_attribute("data-count", "0")
        await expect(page.get_by_test_id("scan-conflict")).to_have_count(1)


async def test_scanner_routes_keep_to_the_staff_tokens_events(api: httpx.AsyncClient, token: TokenFactory) -> None:
    org, buyer = token("pages-org-6", "organizer"), token("pages-buyer-6", "buyer")
    event = await create_event(api, org, capacity=50)
    other = await create_event(api, org, capacity=50)
    door = await checkin_list(api, org, event["id"])
    cancelled = (await place_order(api, buyer, event["id"], 1)).json()
    kept = (await place_order(api, buyer, event["id"], 1)).json()
    assert (await api.post(f"/v1/orders/{cancelled['id']}/cancel", headers=bearer(buyer))).status_code == 200
    staff, stranger = staff_token("pages-door-6", [event["id"]]), staff_token("pages-door-7", [other["id"]])

    got = await api.get(f"/v1/checkin-lists/{door}", headers=bearer(staff))
    assert got.status_code == 200 and got.json()["event_id"] == event["id"]
    assert (await api.get(f"/v1/checkin-lists/{door}", headers=bearer(stranger))).status_code == 403
    assert (await api.get(f"/v1/checkin-lists/{door}", headers=bearer(buyer))).status_code == 403
    revoked = await api.get(f"/v1/events/{event['id']}/revocations", headers=bearer(staff))
    assert revoked.status_code == 200
    assert cancelled["id"] in revoked.json()["orders"] and kept["id"] not in revoked.json()["orders"]
    assert (await api.get(f"/v1/events/{event['id']}/revocations", headers=bearer(stranger))).status_code == 403
    # The scanner's vendored decoder is served with its licence beside it
    for name, media in (("jsQR.js", "text/javascript"), ("LICENSE", "text/plain")):
        got = await api.get(f"/assets/vendor/jsqr/{name}")
        assert got.status_code == 200 and got.headers["content-type"].startswith(media), got.text
        assert got.content == (STATIC / "vendor" / "jsqr" / name).read_bytes()
