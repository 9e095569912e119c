"""One spelling per name (ticketry.streams): stream ids read one way everywhere,
and the Lua scripts take their hash field names from the constants. Plain data."""

from __future__ import annotations

import pytest
from ticketry import emit, streams
from ticketry_api.ops import render_dead as dlq
from ticketry_api.waitingroom import rooms
from ticketry_notifier.queue import Update

IDS = ["0-0", "9-0", "10-0", "10-2", "10-10", "100-1", "18446744073709551615-18446744073709551615"]


def test_stream_keys_sort_like_the_ids_and_match_the_strict_reader() -> None:
    keys = [streams.stream_key(i) for i in IDS]
    assert keys == sorted(keys)
    assert keys == [streams.parse_stream_id(i) for i in IDS]
    assert [streams.format_stream_id(k) for k in keys] == IDS
    assert streams.stream_key(b"10-2") == (10, 2) and streams.stream_key("10") == (10, 0)


def test_the_stores_sortable_ids_sort_like_the_ids() -> None:
    assert sorted(streams.sortable_stream_id(i) for i in IDS[:-1]) == [streams.sortable_stream_id(i) for i in IDS[:-1]]
    assert streams.sortable_stream_id("3-1") == "000000000000003-0000000001"


@pytest.mark.parametrize("script", [emit._EMIT_LUA, emit._CANCEL_LUA, dlq._REDRIVE_LUA])
def test_the_lua_scripts_are_filled_in_with_the_field_names(script: str) -> None:
    assert "$" not in script
    assert f"'{streams.PROGRESS_CANCELLED}'" in script or f"'{streams.PROGRESS_COMPLETED}'" in script


def test_dead_letter_fields_share_one_prefix() -> None:
    names = [streams.DLQ_REASON, streams.DLQ_HISTORY, streams.DLQ_SOURCE, streams.DLQ_ENTRY, streams.DLQ_CONSUMER]
    assert all(n.startswith(streams.DLQ_PREFIX) for n in [*names, streams.DLQ_AT])


@pytest.mark.parametrize("script", [rooms._JOIN, rooms._ADMIT, rooms._PAUSE])
def test_the_waiting_room_scripts_are_filled_in_with_the_field_names(script: str) -> None:
    assert "$" not in script
    assert f"'{streams.ROOM_ADMITTED}'" in script and f"'{streams.ROOM_RATE}'" in script


def test_the_notifier_reads_a_room_update_by_the_same_names() -> None:
    fields = {
        streams.ROOM_ADMITTED: b"7", streams.ROOM_RATE: b"2.500", streams.ROOM_AT: b"1700000000000",
        streams.ROOM_SOLD_OUT: b"0", streams.ROOM_DRAWN: b"1", streams.ROOM_PERMITS: b'{"bo": ["p", 9]}',
        streams.ROOM_PAUSED: b"1", streams.ROOM_CLOSED: b"1",
    }  # fmt: skip
    u = Update.from_fields({k.encode(): v for k, v in fields.items()})
    assert u == Update(
        admitted=7, rate=2.5, at=1700000000000, sold_out=False, drawn=True, permits={"bo": ["p", 9]}, paused=True,
        closed=True,
    )  # fmt: skip
