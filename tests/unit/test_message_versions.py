"""Tolerant, versioned stream messages (``ticketry.events``, "Versions"): an
older reader reads a newer writer's message of the same major version (unknown
fields ignored), a newer reader an older writer's (missing optional fields take
their defaults), both ways round; a message of a newer major version is refused
with one clear error, and the renderer dead-letters it with that reason (real
Redis)."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import ensure_groups
from ticketry.events import (
    SCHEMA_VERSION,
    DecodeError,
    RenderRequest,
    UnsupportedVersion,
    decode_render_request,
    decode_ticket_event,
    event_fields,
)
from ticketry.ids import new_id, ticket_ids

ORDER = new_id("or")
TICKETS = ticket_ids(ORDER, 2)

V1_REQUEST: dict[str, Any] = {
    "type": "ticket.render_requested", "version": 1, "ticket_id": TICKETS[0],
    "order_id": ORDER, "event_id": new_id("ev"), "event_name": "Night of Tests",
    "venue": "Loopback Arena", "starts_at": "2027-06-01T19:30:00+00:00", "holder_name": "Ada Lovelace",
    "tier": "standard", "price": "25.00", "currency": "EUR", "code": f"TK1.k1.{TICKETS[0]}.sig", "total": 1,
}  # fmt: skip


class RenderRequestV1Next(RenderRequest):
    """A newer writer and reader of major version 1: two optional fields added."""

    seat: str | None = None
    accessible: bool = False


def fields_of(data: dict[str, Any], v: str | None = "1") -> dict[bytes, bytes]:
    """A render-request stream entry as Redis returns it."""
    out = {b"data": orjson.dumps(data)}
    if v is not None:
        out[b"v"] = v.encode()
    return out


def test_an_old_reader_reads_a_newer_writers_request() -> None:
    # Given a newer writer of v1 that added fields
    newer = RenderRequestV1Next.model_validate({**V1_REQUEST, "seat": "B12", "accessible": True})
    wire = {k.encode(): v for k, v in newer.to_fields().items()}
    assert b"seat" in wire[b"data"]
    # When this (older) reader decodes it, then the known fields arrive and the new ones are ignored
    got = decode_render_request(wire)
    assert type(got) is RenderRequest and not hasattr(got, "seat")
    assert got.model_dump() == RenderRequest.model_validate(V1_REQUEST).model_dump()


def test_a_newer_reader_reads_an_old_writers_request_with_defaults() -> None:
    # Given a v1 request written before the optional fields existed (time zone,
    # doors, tier name, lane, correlation, trace) and before entries had a ``v``
    for v in ("1", None):
        got = decode_render_request(fields_of(V1_REQUEST, v=v))
        # Then it decodes with the defaults
        assert (got.timezone, got.doors_at, got.tier_name, got.lane) == ("UTC", None, "", "standard")
        assert (got.correlation_id, got.traceparent, got.version) == ("", "", 1)
        assert got.starts_at == datetime(2027, 6, 1, 19, 30, tzinfo=UTC) and got.price == Decimal("25.00")
        # And a newer reader reads this writer's message too, its new fields at their defaults
        newer = RenderRequestV1Next.model_validate(orjson.loads(got.to_fields()["data"]))
        assert (newer.seat, newer.accessible) == (None, False)
        assert newer.ticket_id == got.ticket_id


def test_a_request_round_trips() -> None:
    req = RenderRequest.model_validate({**V1_REQUEST, "timezone": "Europe/Berlin", "lane": "vip", "tier_name": "VIP"})
    fields = req.to_fields()
    assert fields["v"] == str(SCHEMA_VERSION).encode()
    assert decode_render_request({k.encode(): v for k, v in fields.items()}) == req


@pytest.mark.parametrize(
    ("wire", "version"),
    [
        (fields_of({**V1_REQUEST, "version": 2, "holder": {"given": "Ada"}}, v="2"), 2),
        (fields_of({**V1_REQUEST, "version": 7}, v=None), 7),  # no envelope: the payload's version
    ],
)
def test_a_newer_major_version_is_refused_with_a_clear_reason(wire: dict[bytes, bytes], version: int) -> None:
    with pytest.raises(UnsupportedVersion) as info:
        decode_render_request(wire)
    assert isinstance(info.value, DecodeError)  # what every consumer already handles
    assert info.value.version == version
    assert f"unsupported render request version {version}" in str(info.value)
    assert f"knows versions up to {SCHEMA_VERSION}" in str(info.value)


@pytest.mark.parametrize("v", ["two", "0", "-1", ""])
def test_a_malformed_version_is_a_decode_error(v: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_render_request(fields_of(V1_REQUEST, v=v))
    assert not isinstance(info.value, UnsupportedVersion)
    assert "version" in str(info.value)


def ticket_event_fields(**extra: str) -> dict[bytes, bytes]:
    fields = event_fields(
        type="ticket.rendered", event_uuid=f"rendered:{TICKETS[0]}", order_id=ORDER, ticket_id=TICKETS[0]
    )
    pairs = dict(zip(fields[::2], fields[1::2], strict=True)) | {"total": "2", "rendered": "1", "failed": "0"} | extra
    return {k.encode(): v.encode() for k, v in pairs.items()}


def test_ticket_events_both_ways_and_a_newer_major_refused() -> None:
    # A newer writer's extra fields are ignored; an old writer's missing optional ones default
    written = ticket_event_fields()
    newer = decode_ticket_event(b"1-1", written | {b"seat": b"B12", b"region": b"eu"})
    old_fields = {k: v for k, v in written.items() if k not in (b"correlation_id", b"v")}
    old = decode_ticket_event(b"1-1", old_fields)
    assert newer == old
    assert (old.version, old.correlation_id, old.traceparent, old.reason) == (1, "", "", None)
    # A newer major version: one clear error
    with pytest.raises(UnsupportedVersion, match="unsupported ticket event version 2"):
        decode_ticket_event(b"1-2", ticket_event_fields(v="2"))


# -- the renderer dead-letters a newer major version at once, with the reason -------


@pytest.fixture
async def redis(redis: Redis) -> Redis:
    """The shared client (tests/unit/conftest.py), with this module's groups."""
    await ensure_groups(redis)
    return redis


async def test_the_renderer_dead_letters_a_newer_major_version(
    redis: Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ticketry_renderer.config import RendererSettings
    from ticketry_renderer.handlers import BatchPipeline

    monkeypatch.setenv("TICKETRY_DEV_MODE", "1")
    settings = RendererSettings(storage_dir=tmp_path / "tickets")
    # Given a v2 request (a newer writer) and a v1 one from an older writer, read by a renderer
    lane = streams.RENDER_STD
    v2 = await redis.xadd(lane, fields_of({**V1_REQUEST, "version": 2}, v="2"))  # type: ignore[arg-type]
    v1 = await redis.xadd(lane, fields_of({**V1_REQUEST, "ticket_id": TICKETS[1]}))  # type: ignore[arg-type]
    read: Any = await redis.xreadgroup(streams.RENDERERS_GROUP, "t1", {lane: ">"})
    entries = read[0][1]
    worker = BatchPipeline(redis=redis, settings=settings, consumer="t1")
    await worker.process(lane, entries)
    # Then the v2 one is dead-lettered at once with the reason and acked; the v1 one is rendered
    dead: Any = await redis.xrange(streams.DEAD_LETTERS)
    assert len(dead) == 1
    reason = dead[0][1][b"dlq_reason"].decode()
    assert reason.startswith("unsupported render request version 2"), reason
    assert dead[0][1][b"dlq_entry"] == v2 and dead[0][1][b"v"] == b"2"
    pending: Any = await redis.xpending(lane, streams.RENDERERS_GROUP)
    assert pending["pending"] == 0
    assert (tmp_path / "tickets" / ORDER / f"{TICKETS[1]}.pdf").is_file(), v1
    shutil.rmtree(tmp_path / "tickets")
