"""Wallet passes on the session stack (its throw-away wallet credentials):
the ``.pkpass`` of a rendered ticket holds the code its PDF's QR holds, that
code checks in, the pass verifies against the dev CA; a ticket not yet
rendered has none; another buyer gets nothing; a re-issued ticket's pass
carries its new code even where the old pass was left kept; a cancelled
order's pass is gone; and the buyer's page links both wallets."""

from __future__ import annotations

import io
import signal
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import httpx
import jwt
import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from ticketry.storage import pass_key, write_atomic
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory
from tests.e2e.pages_support import browser, expect
from tests.helpers import (
    bearer,
    checkin_list,
    create_event,
    decode_qr,
    eventually,
    place_order,
    scan,
    wait_rendered,
)

pytestmark = pytest.mark.e2e

PKPASS = "application/vnd.apple.pkpass"
SAVE = "https://pay.google.com/gp/v/save/"


def credentials(stack: Stack) -> Path:
    """The folder of the stack's dev wallet credentials (its CA, the Google public key)."""
    return Path(stack.env["TICKETRY_WALLET_APPLE_CERTIFICATE"]).parent


def pass_files(pkpass: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(pkpass)) as z:
        return {n: z.read(n) for n in z.namelist()}


def google_object(stack: Stack, url: str) -> dict[str, Any]:
    """The eventTicketObject of a Save to Google Wallet link, whose JWT verifies with the dev public key."""
    assert url.startswith(SAVE), url
    public: Any = serialization.load_pem_public_key((credentials(stack) / "google.pub").read_bytes())
    claims = jwt.decode(url.removeprefix(SAVE), public, algorithms=["RS256"], audience="google")
    assert claims["typ"] == "savetowallet"
    (obj,) = claims["payload"]["eventTicketObjects"]
    out: dict[str, Any] = obj
    return out


@pytest.fixture
async def rendered(api: httpx.AsyncClient, token: TokenFactory) -> dict[str, Any]:
    """A rendered one-ticket order: its event, ticket id, tokens and the code its PDF's QR holds."""
    org, buyer = token("wallet-org", "organizer"), token("wallet-buyer", "buyer")
    event = await create_event(api, org, timezone="Europe/Berlin", starts_at="2027-06-01T20:00:00+02:00")
    placed = await place_order(api, buyer, event["id"], 1, holder_name="Zoë Ångström")
    assert placed.status_code == 202, placed.text
    order = placed.json()
    await wait_rendered(api, order["id"], buyer)
    (tid,) = order["tickets"]
    pdf = await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(buyer))
    assert pdf.status_code == 200, pdf.text
    return {"event": event, "order": order, "ticket": tid, "org": org, "buyer": buyer, "code": decode_qr(pdf.content)}


async def test_a_rendered_tickets_pass_holds_its_pdfs_code_which_checks_in(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, rendered: dict[str, Any], tmp_path: Path
) -> None:
    tid, buyer, code = rendered["ticket"], rendered["buyer"], rendered["code"]
    # Given the rendered ticket, its read names both wallets
    got = (await api.get(f"/v1/tickets/{tid}", headers=bearer(buyer))).json()
    assert got["wallet"]["apple"] == f"/v1/tickets/{tid}/pkpass", got
    obj = google_object(stack, got["wallet"]["google"])
    assert obj["barcode"] == {"type": "QR_CODE", "value": code, "alternateText": tid}
    assert obj["ticketHolderName"] == "Zoë Ångström"

    # When the buyer fetches the pass
    r = await api.get(got["wallet"]["apple"], headers=bearer(buyer))
    # Then it is a pass whose QR is the PDF's code, at the venue's time
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == PKPASS
    files = pass_files(r.content)
    doc = orjson.loads(files["pass.json"])
    assert doc["barcodes"][0]["message"] == code and doc["barcodes"][0]["format"] == "PKBarcodeFormatQR"
    assert doc["relevantDate"] == "2027-06-01T20:00:00+02:00"
    # ...signed as the dev CA's openssl verification accepts
    (tmp_path / "manifest.json").write_bytes(files["manifest.json"])
    (tmp_path / "signature").write_bytes(files["signature"])
    verify = subprocess.run(
        ["openssl", "smime", "-verify", "-inform", "DER", "-binary", "-in", str(tmp_path / "signature"),
         "-content", str(tmp_path / "manifest.json"), "-CAfile", str(credentials(stack) / "ca.pem"),
         "-purpose", "any", "-out", "/dev/null"],
        capture_output=True, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stderr
    # ...kept: the next request gets the same pass, and so does the event's organiser
    assert (await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(buyer))).content == r.content
    assert (await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(rendered["org"]))).content == r.content
    # ...and its code checks in at the door, once
    lst = await checkin_list(api, rendered["org"], rendered["event"]["id"])
    door = token("wallet-door", "staff", events=[rendered["event"]["id"]])
    first = await scan(api, door, doc["barcodes"][0]["message"], lst)
    assert first.status_code in (200, 201), first.text
    assert (await scan(api, door, code, lst)).status_code == 409


async def test_another_buyer_gets_no_pass(
    api: httpx.AsyncClient, token: TokenFactory, rendered: dict[str, Any]
) -> None:
    tid = rendered["ticket"]
    other = token("wallet-someone-else", "buyer")
    assert (await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(other))).status_code == 404
    stranger_org = token("wallet-other-org", "organizer")
    assert (await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(stranger_org))).status_code == 404
    assert (await api.get(f"/v1/tickets/{tid}/pkpass")).status_code == 401


async def test_a_ticket_not_yet_rendered_has_no_pass(stack: Stack, api: httpx.AsyncClient, token: TokenFactory) -> None:
    org, buyer = token("wallet-org-2", "organizer"), token("wallet-buyer-2", "buyer")
    event = await create_event(api, org)
    # Given the renderers paused (SIGSTOP: they hold their work, render nothing, and go on after)
    for r in stack.renderers:
        r.signal(signal.SIGSTOP)
    try:
        placed = await place_order(api, buyer, event["id"], 1)
        assert placed.status_code == 202, placed.text
        (tid,) = placed.json()["tickets"]
        # Then its pass is refused with a clear 409 and its read names no wallet
        r = await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(buyer))
        assert r.status_code == 409, r.text
        assert r.headers["content-type"] == "application/problem+json" and r.json()["title"] == "not rendered"
        got = (await api.get(f"/v1/tickets/{tid}", headers=bearer(buyer))).json()
        assert got["status"] == "queued" and "wallet" not in got, got
    finally:
        for r in stack.renderers:
            r.signal(signal.SIGCONT)
    # ...and once rendered, it has one
    await wait_rendered(api, placed.json()["id"], buyer)
    assert (await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(buyer))).status_code == 200


def signature_verifies(stack: Stack, files: dict[str, bytes], folder: Path) -> bool:
    """``openssl smime -verify`` of a pass's signature over its manifest, against the dev CA."""
    (folder / "manifest.json").write_bytes(files["manifest.json"])
    (folder / "signature").write_bytes(files["signature"])
    verify = subprocess.run(
        ["openssl", "smime", "-verify", "-inform", "DER", "-binary", "-in", str(folder / "signature"),
         "-content", str(folder / "manifest.json"), "-CAfile", str(credentials(stack) / "ca.pem"),
         "-purpose", "any", "-out", "/dev/null"],
        capture_output=True, check=False,
    )  # fmt: skip
    return verify.returncode == 0


async def test_a_reissued_tickets_pass_carries_its_new_code_even_where_the_old_pass_stayed(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, rendered: dict[str, Any], tmp_path: Path
) -> None:
    tid, buyer, old_code, order_id = rendered["ticket"], rendered["buyer"], rendered["code"], rendered["order"]["id"]
    # Given the ticket's pass fetched (and kept) at its first version
    old = await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(buyer))
    assert old.status_code == 200, old.text
    assert orjson.loads(pass_files(old.content)["pass.json"])["barcodes"][0]["message"] == old_code
    # When the ticket is re-issued to another holder
    r = await api.post(f"/v1/tickets/{tid}/reissue", json={"holder_name": "Ada Lovelace"}, headers=bearer(buyer))
    assert r.status_code == 202, r.text
    # ...and the old pass is kept again (as a first request that read the ticket
    # before the re-issue would keep it, after the re-issue deleted the old one)
    if stack.env.get("TICKETRY_STORAGE_BACKEND", "local") == "local":
        write_atomic(Path(stack.env["TICKETRY_STORAGE_DIR"]) / pass_key(order_id, tid), old.content)
    # Then the pass served is the new version's: a new code, the new holder, signed
    new = await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(buyer))
    assert new.status_code == 200, new.text
    files = pass_files(new.content)
    doc = orjson.loads(files["pass.json"])
    new_code = doc["barcodes"][0]["message"]
    assert new_code != old_code
    assert doc["eventTicket"]["auxiliaryFields"][0]["value"] == "Ada Lovelace"
    assert signature_verifies(stack, files, tmp_path)
    # ...kept: asked again, the same pass
    assert (await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(buyer))).content == new.content

    # ...the code the new PDF holds once it is rendered
    async def new_pdf_code() -> bool:
        pdf = await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(buyer))
        return pdf.status_code == 200 and decode_qr(pdf.content) == new_code

    await eventually(new_pdf_code, "the re-issued PDF holds the new pass's code")
    # ...which admits, while the old one is revoked
    lst = await checkin_list(api, rendered["org"], rendered["event"]["id"])
    door = token("wallet-door-reissue", "staff", events=[rendered["event"]["id"]])
    assert (await scan(api, door, old_code, lst)).status_code == 409
    admitted = await scan(api, door, new_code, lst)
    assert admitted.status_code in (200, 201), admitted.text


async def test_a_cancelled_orders_kept_pass_is_no_longer_served(
    api: httpx.AsyncClient, rendered: dict[str, Any]
) -> None:
    tid, buyer = rendered["ticket"], rendered["buyer"]
    # Given the ticket's pass fetched and kept
    assert (await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(buyer))).status_code == 200
    # When its order is cancelled
    cancel = await api.post(f"/v1/orders/{rendered['order']['id']}/cancel", headers=bearer(buyer))
    assert cancel.status_code == 200, cancel.text
    # Then the pass answers 410, a problem
    r = await api.get(f"/v1/tickets/{tid}/pkpass", headers=bearer(buyer))
    assert r.status_code == 410, r.text
    assert r.headers["content-type"] == "application/problem+json"


async def test_the_buyers_page_links_both_wallets(
    stack: Stack, api: httpx.AsyncClient, rendered: dict[str, Any], tmp_path: Path
) -> None:
    order, tid = rendered["order"], rendered["ticket"]
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        # When the buyer opens their page
        await page.goto(order["status_page_url"])
        apple, google = page.get_by_test_id("wallet-apple"), page.get_by_test_id("wallet-google")
        # Then the rendered ticket offers both wallets
        await expect(apple).to_have_text("Add to Apple Wallet")
        await expect(google).to_have_text("Save to Google Wallet")
        base = f"{stack.api_url}/o/{order['id']}/tickets/{tid}"
        # ...the Apple link answers the pass (the page's cookie is its credential)
        r = await page.request.get(base + ".pkpass")
        assert (await apple.get_attribute("href")) == f"/o/{order['id']}/tickets/{tid}.pkpass"
        assert r.status == 200 and r.headers["content-type"] == PKPASS
        assert orjson.loads(pass_files(await r.body())["pass.json"])["barcodes"][0]["message"] == rendered["code"]
        # ...and the Google link sends the browser on to Google with the ticket's object (not followed: no internet)
        assert (await google.get_attribute("href")) == f"/o/{order['id']}/tickets/{tid}/google-wallet"
        r = await page.request.get(base + "/google-wallet", max_redirects=0)
        assert r.status == 303, await r.text()
        assert google_object(stack, r.headers["location"])["barcode"]["value"] == rendered["code"]
