"""One spelling per name (ticketry.streams): stream ids read one way everywhere,
and the Lua scripts take their hash field names from the constants. Plain data."""

from __future__ import annotations

import pytest
from ticketry import emit, streams
from ticketry_api.ctl import dlq

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
