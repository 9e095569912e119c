"""The walking skeleton as one flow, run on every storage backend: order →
stream → PDFs → WebSocket → check-in (``test_order_flow`` on the local
directory, ``test_s3_storage`` on a real S3-compatible server)."""

from __future__ import annotations

import io

import httpx
import pypdf

from tests.conftest import TokenFactory
from tests.helpers import (
    bearer,
    checkin_list,
    collect_progress,
    create_event,
    decode_qr,
    place_order,
    scan,
    wait_rendered,
)


async def pdf_of(api: httpx.AsyncClient, ticket_id: str, buyer: str, *, presigned: bool) -> bytes:
    """A ticket's PDF as its buyer downloads it: from the api, or (``presigned``)
    through the api's redirect to a presigned URL of the store, which needs no token."""
    r = await api.get(f"/v1/tickets/{ticket_id}/pdf", headers=bearer(buyer))
    if presigned:
        assert r.status_code == 307, r.text
        async with httpx.AsyncClient(timeout=60) as anyone:
            r = await anyone.get(r.headers["location"])
    assert r.status_code == 200 and r.headers["content-type"] == "application/pdf", r.text
    return r.content


async def order_renders_and_checks_in_once(
    api: httpx.AsyncClient, token: TokenFactory, who: str, *, presigned: bool = False, quantity: int = 20
) -> None:
    # Given an event and a buyer
    organizer, buyer = token(f"{who}-org", "organizer"), token(f"{who}-buyer", "buyer")
    staff = token(f"{who}-staff", "staff", org=f"{who}-org")
    event = await create_event(api, organizer, capacity=100)
    door = await checkin_list(api, organizer, event["id"])

    # When the buyer orders the tickets
    r = await place_order(api, buyer, event["id"], quantity)
    assert r.status_code == 202, r.text
    order = r.json()
    assert order["status"] == "processing" and len(order["tickets"]) == quantity

    # Then the WebSocket shows a snapshot, every rendered ticket and the completion
    msgs = await collect_progress(order["progress_url"], buyer)
    assert msgs[0]["type"] == "snapshot" and msgs[0]["total"] == quantity
    rendered = [m for m in msgs if m["type"] == "ticket.rendered"]
    assert sorted(m["ticket_id"] for m in rendered) == sorted(order["tickets"])
    assert msgs[-1]["type"] == "order.completed"
    assert (msgs[-1]["rendered"], msgs[-1]["failed"], msgs[-1]["total"]) == (quantity, 0, quantity)
    assert [m["rendered"] for m in rendered] == sorted(m["rendered"] for m in rendered)

    # And the read model catches up
    got = await wait_rendered(api, order["id"], buyer)
    assert got["status"] == "completed" and got["rendered"] == quantity
    assert {t["status"] for t in got["tickets"]} == {"rendered"}

    # And every PDF parses and carries a QR that checks in exactly once
    codes = []
    for tid in order["tickets"]:
        pdf = await pdf_of(api, tid, buyer, presigned=presigned)
        reader = pypdf.PdfReader(io.BytesIO(pdf))
        assert len(reader.pages) == 1
        assert tid in reader.pages[0].extract_text()
        codes.append(decode_qr(pdf))
    assert len(set(codes)) == quantity

    async def statuses() -> list[str]:
        got = (await api.get(f"/v1/orders/{order['id']}", headers=bearer(buyer))).json()
        assert got["status"] == "completed", got
        return [t["status"] for t in got["tickets"]]

    assert await statuses() == ["rendered"] * quantity
    for tid, code in zip(order["tickets"], codes, strict=True):
        first = await scan(api, staff, code, door)
        assert first.status_code == 200, first.text
        assert first.json()["ticket_id"] == tid
        again = await scan(api, staff, code, door)
        assert again.status_code == 409
        assert again.headers["content-type"] == "application/problem+json"
        if tid == order["tickets"][0]:
            # The completed order lists the admitted ticket as such, the rest as rendered
            assert await statuses() == ["checked_in"] + ["rendered"] * (quantity - 1)
    assert await statuses() == ["checked_in"] * quantity
    ticket = (await api.get(f"/v1/tickets/{order['tickets'][0]}", headers=bearer(buyer))).json()
    assert ticket["status"] == "checked_in"
