"""Re-issue to another holder (docs/reissue.md) against the session's real
stack: the old code answers 409 ``revoked`` online and from an offline
upload, the new one admits once, the downloaded PDF names the new holder, the
event's revocations list carries the old code, and 50 racing re-issues of one
ticket leave at most ``TICKETRY_MAX_REISSUES`` successes and one current code.

The racing test makes each version's code with the stack's own signing key
(Ed25519 is deterministic: the same string the renderer prints)."""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pypdf
import pytest
import websockets
from playwright.async_api import expect
from ticketry import streams
from ticketry.auth import issue_token
from ticketry.codes import load_keyring
from ticketry.settings import DEV_JWT_SECRET
from ticketry_devstack.procs import Stack

from tests.chaos.support import db_of, mongo_of, redis_of
from tests.conftest import TokenFactory
from tests.e2e.pages_support import browser
from tests.helpers import (
    bearer,
    checkin_list,
    codes_of,
    create_event,
    decode_qr,
    eventually,
    place_order,
    scan,
    wait_rendered,
)

pytestmark = pytest.mark.e2e


def staff_token(sub: str, events: list[str]) -> str:
    return issue_token(sub, "staff", key=DEV_JWT_SECRET, events=events)


async def reissue(api: httpx.AsyncClient, tok: str, ticket_id: str, holder: Any = "Ada Lovelace") -> httpx.Response:
    body = {} if holder is None else {"holder_name": holder}
    return await api.post(f"/v1/tickets/{ticket_id}/reissue", json=body, headers=bearer(tok))


async def test_a_reissued_ticket_revokes_its_old_code_and_its_new_pdf_admits_once(
    api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("reissue-org-1", "organizer"), token("reissue-buyer-1", "buyer")
    event = await create_event(api, org, capacity=10)
    door = await checkin_list(api, org, event["id"])
    order = (await place_order(api, buyer, event["id"], 1, holder_name="Grace Hopper")).json()
    tid = order["tickets"][0]
    [old] = await codes_of(api, order, buyer)
    staff = staff_token("reissue-door-1", [event["id"]])

    r = await reissue(api, buyer, tid)
    assert r.status_code == 202, r.text
    assert r.json() == {"id": tid, "version": 1, "holder_name": "Ada Lovelace"}

    # The old code: revoked online, and from an offline scanner's upload (a nonce)
    for extra in ({}, {"nonce": "offline-upload-0001"}):
        refused = await scan(api, staff, old, door, **extra)
        assert refused.status_code == 409 and refused.json()["type"].endswith("/revoked"), refused.text

    # The new PDF replaces the old download: it names the new holder, and its QR is the new code
    async def new_pdf() -> tuple[str, str] | None:
        pdf = await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(buyer))
        text = pypdf.PdfReader(io.BytesIO(pdf.content)).pages[0].extract_text() if pdf.status_code == 200 else ""
        return (text, decode_qr(pdf.content)) if "Ada Lovelace" in text else None

    text, new = await eventually(new_pdf, "the re-issued ticket's PDF")
    assert "Grace Hopper" not in text and new != old
    # The order's progress socket carries the re-issue (after the order's completion)
    url = f"{order['progress_url']}?token={buyer}&after=0-0"
    async with asyncio.timeout(120), websockets.connect(url) as ws:
        seen = [orjson.loads(await ws.recv())]
        while seen[-1]["type"] != "ticket.reissued":
            seen.append(orjson.loads(await ws.recv()))
    assert seen[-1]["ticket_id"] == tid and "order.completed" in [m["type"] for m in seen], seen
    assert (await api.get(f"/v1/tickets/{tid}", headers=bearer(buyer))).json()["holder_name"] == "Ada Lovelace"
    # The new code admits once; after check-in the ticket can no longer be re-issued
    assert (await scan(api, staff, new, door)).status_code == 200
    again = await scan(api, staff, new, door)
    assert again.status_code == 409 and again.json()["type"].endswith("/already-checked-in"), again.text
    late = await reissue(api, buyer, tid, "Someone Else")
    assert late.status_code == 409 and late.json()["type"].endswith("/checked-in"), late.text

    # Offline scanners learn the old code from the event's revocations (cached up to 10 s)
    async def revoked() -> list[str] | None:
        got = await api.get(f"/v1/events/{event['id']}/revocations", headers=bearer(staff))
        assert got.status_code == 200, got.text
        codes = [c["code"] for c in got.json()["codes"]]
        return codes if codes else None

    assert await eventually(revoked, "the old code in the revocations") == [old]
    # Asked with that answer's as_of the code comes again (a cursor repeats the five minutes
    # before it: a re-issue written late is not missed for good); the scanner keeps the union
    since = (await api.get(f"/v1/events/{event['id']}/revocations", headers=bearer(staff))).json()["as_of"]
    later = await api.get(f"/v1/events/{event['id']}/revocations", params={"since": since}, headers=bearer(staff))
    assert later.status_code == 200 and [c["code"] for c in later.json()["codes"]] == [old], later.text
    # A cursor is any ISO 8601 instant: one before every record (even year 1, an
    # offset past datetime's range) lists them all, one far ahead none; a number is refused
    url = f"/v1/events/{event['id']}/revocations"
    for since, codes in [
        ("1061-01-29T21:37:11Z", [old]),
        ("0001-01-01T00:00:00+02:00", [old]),
        ("9999-12-31T23:59:59-05:00", []),
    ]:
        got = await api.get(url, params={"since": since}, headers=bearer(staff))
        assert got.status_code == 200 and [c["code"] for c in got.json()["codes"]] == codes, (since, got.text)
    for since in ["0.5", "1700000000", "yesterday"]:
        got = await api.get(url, params={"since": since}, headers=bearer(staff))
        assert got.status_code == 422 and got.headers["content-type"].startswith("application/problem+json"), got.text


async def test_reissues_are_refused_on_a_cancelled_order_for_bad_names_and_for_other_buyers(
    api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("reissue-org-2", "organizer"), token("reissue-buyer-2", "buyer")
    stranger = token("reissue-stranger-2", "buyer")
    event = await create_event(api, org, capacity=10)
    order = (await place_order(api, buyer, event["id"], 1)).json()
    tid = order["tickets"][0]

    assert (await reissue(api, stranger, tid)).status_code == 404
    assert (await reissue(api, buyer, "tk_nonsense")).status_code == 404
    for bad in (None, "", "\x00", "x" * 10_000_000):
        r = await reissue(api, buyer, tid, bad)
        assert r.status_code in (413, 422) and r.headers["content-type"] == "application/problem+json", r.text
    # The organiser may re-issue; then the buyer cancels, and no re-issue follows
    assert (await reissue(api, org, tid, "Organiser's Pick")).status_code == 202
    assert (await api.post(f"/v1/orders/{order['id']}/cancel", headers=bearer(buyer))).status_code == 200
    r = await reissue(api, buyer, tid)
    assert r.status_code == 409 and r.json()["type"].endswith("/cancelled"), r.text


async def test_fifty_concurrent_reissues_leave_at_most_the_limit_and_one_current_code(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    org, buyer = token("reissue-org-3", "organizer"), token("reissue-buyer-3", "buyer")
    event = await create_event(api, org, capacity=10)
    door = await checkin_list(api, org, event["id"])
    order = (await place_order(api, buyer, event["id"], 1)).json()
    tid = order["tickets"][0]
    limit = int(stack.env.get("TICKETRY_MAX_REISSUES", "3"))

    async with httpx.AsyncClient(base_url=str(api.base_url), timeout=120) as c:
        answers = await asyncio.gather(*(reissue(c, buyer, tid, f"Holder {i}") for i in range(50)))
    won = [a for a in answers if a.status_code == 202]
    assert 1 <= len(won) <= limit, [a.status_code for a in answers]
    # The rest lost the race (409), or were turned away as too many bodies at once from one address (429)
    assert {a.status_code for a in answers} - {202} <= {409, 429}, [a.text for a in answers]
    assert any(a.status_code == 409 for a in answers)
    assert sorted(a.json()["version"] for a in won) == list(range(1, len(won) + 1))
    current = max(a.json()["version"] for a in won)

    # Of every code the ticket ever had, only the newest admits
    ring = load_keyring(Path(stack.env["TICKETRY_KEYS_DIR"]))
    staff = staff_token("reissue-door-3", [event["id"]])
    codes = [ring.sign(tid, event["id"], "standard", version=v) for v in range(current + 1)]
    answers = [await scan(api, staff, code, door) for code in codes]
    assert [a.status_code for a in answers] == [409] * current + [200], [a.text for a in answers]
    assert all(a.json()["type"].endswith("/revoked") for a in answers[:-1])
    past = await scan(api, staff, ring.sign(tid, event["id"], "standard", version=current + 1), door)
    assert past.status_code == 404, past.text


async def test_a_ticket_is_reissued_at_most_the_limit_then_409_reissue_limit(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    org, buyer = token("reissue-org-5", "organizer"), token("reissue-buyer-5", "buyer")
    event = await create_event(api, org, capacity=10)
    tid = (await place_order(api, buyer, event["id"], 1)).json()["tickets"][0]
    limit = int(stack.env.get("TICKETRY_MAX_REISSUES", "3"))
    for version in range(1, limit + 1):
        r = await reissue(api, buyer, tid, f"Holder {version}")
        assert r.status_code == 202 and r.json()["version"] == version, r.text
    over = await reissue(api, buyer, tid, "One Too Many")
    assert over.status_code == 409 and over.json()["type"].endswith("/reissue-limit"), over.text
    assert over.headers["content-type"].startswith("application/problem+json")
    got = (await api.get(f"/v1/tickets/{tid}", headers=bearer(buyer))).json()
    assert got["holder_name"] == f"Holder {limit}", got


async def test_the_scanner_refuses_a_revoked_code_offline_and_admits_the_new_one(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org, buyer = token("reissue-org-4", "organizer"), token("reissue-buyer-4", "buyer")
    event = await create_event(api, org, capacity=10)
    door = await checkin_list(api, org, event["id"], name="Re-issue door")
    order = (await place_order(api, buyer, event["id"], 1)).json()
    tid = order["tickets"][0]
    ring = load_keyring(Path(stack.env["TICKETRY_KEYS_DIR"]))
    old, new = (ring.sign(tid, event["id"], "standard", version=v) for v in (0, 1))
    staff = staff_token("reissue-door-4", [event["id"]])
    assert (await reissue(api, buyer, tid)).status_code == 202

    async def listed() -> bool:
        got = await api.get(f"/v1/events/{event['id']}/revocations", headers=bearer(staff))
        return old in [c["code"] for c in got.json()["codes"]]

    await eventually(listed, "the old code in the revocations")
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        # The scanner syncs the revocations while online...
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={door}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Re-issue door")
        await expect(page.get_by_test_id("scan-sync")).to_have_attribute("data-state", "kept")
        await context.set_offline(True)
        await expect(page.get_by_test_id("scan-network")).to_have_attribute("data-online", "false")
        result = page.get_by_test_id("scan-result")
        code_box, submit = page.get_by_test_id("scan-input"), page.get_by_test_id("scan-submit")
        # ...and, offline, refuses the old code and admits the new one (a TK3 code)
        await code_box.fill(old)
        await submit.click()
        await expect(result).to_have_attribute("data-outcome", "revoked")
        await code_box.fill(new)
        await submit.click()
        await expect(result).to_have_attribute("data-outcome", "admitted")
        await expect(page.get_by_test_id("scan-queue")).to_have_attribute("data-count", "1")


async def test_a_reissue_whose_api_died_before_sending_its_render_is_rendered_by_the_outbox_sweep(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("reissue-org-4", "organizer"), token("reissue-buyer-4", "buyer")
    event = await create_event(api, org, capacity=10)
    order = (await place_order(api, buyer, event["id"], 3, holder_name="Ada Lovelace")).json()
    await wait_rendered(api, order["id"], buyer)
    crashed, lost, stale = order["tickets"]
    redis, mongo = redis_of(stack), mongo_of(stack)
    issues = db_of(mongo).ticket_issues
    try:
        # Given what an api SIGKILLed between a re-issue's insert and its render request leaves
        # (the issue in the store, its outbox member in Redis, no request on the stream) …
        def issue(ticket: str, version: int, holder: str) -> dict[str, Any]:
            return {
                "_id": f"{ticket}/{version}", "ticket_id": ticket, "order_id": order["id"], "event_id": event["id"],
                "version": version, "holder_name": holder, "revoked_code": f"TK3.revoked-{ticket}-{version}",
                "by": "reissue-buyer-4", "at": datetime.now(UTC),
            }  # fmt: skip

        await issues.insert_one(issue(crashed, 1, "Grace Hopper"))
        # … a member whose insert lost its race (no issue of that version), and one a newer re-issue overtook
        await issues.insert_many([issue(stale, 1, "Old Holder"), issue(stale, 2, "New Holder")])
        members = {f"{crashed}@1": 0, f"{lost}@1": 0, f"{stale}@1": 0}
        await redis.zadd(streams.REISSUES_IN_FLIGHT, members)  # type: ignore[arg-type]

        # When the outbox sweep comes by, then the crashed re-issue renders: its PDF names its holder
        async def swept() -> bool:
            left = [m for m in members if await redis.zscore(streams.REISSUES_IN_FLIGHT, m) is not None]
            pdf = await api.get(f"/v1/tickets/{crashed}/pdf", headers=bearer(buyer))
            text = pypdf.PdfReader(io.BytesIO(pdf.content)).pages[0].extract_text() if pdf.status_code == 200 else ""
            return not left and "Grace Hopper" in text

        await eventually(swept, "the outbox sweep rendering the crashed re-issue", timeout_s=120)
        # … once (one ticket.reissued), and the other two members were dropped without a render
        events = await redis.xrange(streams.TICKET_EVENTS, "-", "+")
        reissued = [f[b"ticket_id"].decode() for _, f in events if f[b"type"] == b"ticket.reissued"]
        assert crashed in reissued and lost not in reissued and stale not in reissued
        assert reissued.count(crashed) == 1
        got = (await api.get(f"/v1/tickets/{lost}", headers=bearer(buyer))).json()
        assert got["holder_name"] == "Ada Lovelace"
    finally:
        await redis.aclose()
        await mongo.close()
