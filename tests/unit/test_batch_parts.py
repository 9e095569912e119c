"""A renderer's read after its lane was idle is handled in growing parts,
each announced once stored: a new order's first tickets go out before the
rest of the read is rendered (real Redis, real renders, real files)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import ensure_groups
from ticketry.events import RenderRequest
from ticketry.ids import new_id, ticket_ids
from ticketry_renderer.config import RendererSettings
from ticketry_renderer.decision import parts
from ticketry_renderer.handlers import BatchPipeline

READ = 112  # parts of 16, 32, 64 after an idle lane


def request(order_id: str, event_id: str, ticket_id: str) -> RenderRequest:
    return RenderRequest(
        ticket_id=ticket_id, order_id=order_id, event_id=event_id, event_name="Night of Parts",
        venue="Loopback Arena", starts_at="2027-06-01T19:30:00+00:00", holder_name="Ada Lovelace",
        tier="standard", price="25.00", currency="EUR", code=f"TK1.k1.{ticket_id}.sig", total=READ,
    )  # fmt: skip


async def test_a_read_after_an_idle_lane_announces_its_first_part_before_the_rest_is_stored(
    redis: Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_groups(redis)
    monkeypatch.setenv("TICKETRY_DEV_MODE", "1")
    settings = RendererSettings(storage_dir=tmp_path / "tickets")
    lane, order_id = streams.RENDER_STD, new_id("or")
    # Given an order of 112 tickets read at once by a renderer whose lane was idle
    event_id = new_id("ev")
    for tid in ticket_ids(order_id, READ):
        await redis.xadd(lane, request(order_id, event_id, tid).to_fields())  # type: ignore[arg-type]
    read: Any = await redis.xreadgroup(streams.RENDERERS_GROUP, "parts-1", {lane: ">"}, count=READ)
    entries = read[0][1]
    assert len(entries) == READ and parts(READ, busy=False) == [16, 32, 64]
    last: Any = await redis.xrevrange(streams.TICKET_EVENTS, count=1)
    since = last[0][0] if last else b"0-0"
    worker = BatchPipeline(redis=redis, settings=settings, consumer="parts-1")
    handling = asyncio.create_task(worker.handle_read(lane, entries, READ))
    # When its first ticket events appear
    got: Any = await redis.xread({streams.TICKET_EVENTS: since}, count=READ, block=120_000)
    first = [e for e in got[0][1] if e[1].get(b"order_id", b"").decode() == order_id] if got else []
    stored = len(list((tmp_path / "tickets" / order_id).glob("*.pdf")))
    await asyncio.wait_for(handling, 300)
    # Then they came before the read's last part was stored: its first part went out first
    assert first and len(first) < READ, len(first)
    assert stored < READ, stored
    # And in the end every ticket is stored, once, and the lane counts as busy (a full read)
    assert len(list((tmp_path / "tickets" / order_id).glob("*.pdf"))) == READ
    pending: Any = await redis.xpending(lane, streams.RENDERERS_GROUP)
    assert pending["pending"] == 0
    assert worker.busy[lane] is True
