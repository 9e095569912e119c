"""Hostile text in every ticket field, through the whole stack: order → PDF.

The PDF must show the text as typed, the renderer must fetch nothing (a local
listener gets no connection) and read no local file (its content never appears).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import TokenFactory
from tests.e2e.test_security import wait_rendered
from tests.helpers import bearer, create_event, place_order
from tests.unit.test_render_safety import SECRET, Listener, payloads, pdf_text, squash

pytestmark = pytest.mark.e2e


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


async def test_hostile_fields_print_literally_through_the_stack(
    api: httpx.AsyncClient, token: TokenFactory, listener: Listener, tmp_path: Path
) -> None:
    secret = tmp_path / "s.txt"
    secret.write_text(SECRET)
    org, buyer = token("org-inj", "organizer"), token("buyer-inj", "buyer")
    cases = payloads(listener.port, secret)

    # Given one event per payload, named and placed with it, and an order held by it
    orders = []
    for payload in cases:
        event = await create_event(api, org, capacity=5, name=payload, venue=payload)
        assert event["name"] == payload and event["venue"] == payload
        r = await place_order(api, buyer, event["id"], 1, holder_name=payload[:120])
        assert r.status_code == 202, (payload, r.text)
        orders.append((payload, r.json()))

    # When every ticket is rendered
    await asyncio.gather(*(wait_rendered(api, o["id"], buyer) for _, o in orders))

    # Then each PDF shows the text as typed, in every field, and nothing leaked in
    for payload, order in orders:
        tid = order["tickets"][0]
        t = (await api.get(f"/v1/tickets/{tid}", headers=bearer(buyer))).json()
        assert t["status"] == "rendered" and t["holder_name"] == payload[:120]
        pdf = await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(buyer))
        assert pdf.status_code == 200
        text = pdf_text(pdf.content)
        assert squash(text).count(squash(payload)) >= 3, (payload, text[:400])
        assert SECRET not in text and SECRET.encode() not in pdf.content
        assert "root:x:0:0" not in text
    # And no renderer ever connected to the listener
    await asyncio.sleep(0.3)
    assert listener.hits == []
