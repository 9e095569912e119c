"""Hostile text in every ticket field, through the whole stack: order → PDF.

The PDF must show the text as typed, the renderer must fetch nothing (a local
listener gets no connection) and read no local file (its content never appears).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ticketry import fonts

from tests.conftest import TokenFactory
from tests.helpers import bearer, create_event, place_order, wait_rendered
from tests.unit.test_render_safety import SECRET, Listener, payloads, pdf_text, squash

pytestmark = pytest.mark.e2e


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


@pytest.fixture
def secret() -> Iterator[Path]:
    """A local file a payload points at, on a short path, so that each payload
    (path included) fits one line of the ticket and is printed whole."""
    where = Path(tempfile.mkdtemp(prefix="tk-"))
    (where / "s.txt").write_text(SECRET)
    yield where / "s.txt"
    shutil.rmtree(where, ignore_errors=True)


async def test_hostile_fields_print_literally_through_the_stack(
    api: httpx.AsyncClient, token: TokenFactory, listener: Listener, secret: Path
) -> None:
    org, buyer = token("org-inj", "organizer"), token("buyer-inj", "buyer")
    cases = payloads(listener.port, secret)

    # Given one event per payload, named and placed with it, and an order held by it
    # (as much of it as fits the holder's line: a longer name is refused, see below)
    orders = []
    for payload in cases:
        assert fonts.event_unfit(payload, payload) is None, f"{payload!r} no longer fits a title: shorten it"
        event = await create_event(api, org, capacity=5, name=payload, venue=payload)
        assert event["name"] == payload and event["venue"] == payload
        holder = next(payload[:n] for n in (120, 60, 30) if fonts.fits(payload[:n]))
        if holder != payload[:120]:
            refused = await place_order(api, buyer, event["id"], 1, holder_name=payload[:120])
            assert refused.status_code == 422 and "too long" in refused.json()["title"], refused.text
        r = await place_order(api, buyer, event["id"], 1, holder_name=holder)
        assert r.status_code == 202, (payload, r.text)
        orders.append((payload, holder, r.json()))

    # When every ticket is rendered
    await asyncio.gather(*(wait_rendered(api, o["id"], buyer) for _, _, o in orders))

    # Then each PDF shows the text as typed, in every field, and nothing leaked in
    for payload, holder, order in orders:
        tid = order["tickets"][0]
        t = (await api.get(f"/v1/tickets/{tid}", headers=bearer(buyer))).json()
        assert t["status"] == "rendered" and t["holder_name"] == holder
        pdf = await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(buyer))
        assert pdf.status_code == 200
        text = pdf_text(pdf.content)
        # (the event's name and venue print it whole, the holder line what it holds)
        assert squash(text).count(squash(payload)) >= (3 if holder == payload else 2), (payload, text[:400])
        assert squash(holder) in squash(text), (holder, text[:400])
        assert SECRET not in text and SECRET.encode() not in pdf.content
        assert "root:x:0:0" not in text
    # And no renderer ever connected to the listener: a probe of our own, sent
    # last and served in order, is the only connection it recorded
    with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as probe:
        probe.sendall(b"probe")
    deadline = time.monotonic() + 30
    while b"probe" not in listener.hits:
        assert time.monotonic() < deadline, listener.hits
        await asyncio.sleep(0.05)
    assert listener.hits == [b"probe"]
