"""``ticketryctl replay`` tells a stream that lost entries from one that never did."""

from __future__ import annotations

from typing import Any

import pytest
from ticketry_api.ctl.replay import nothing_removed


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"length": 5, "entries-added": 5, "max-deleted-entry-id": "0-0"}, True),
        # XTRIM MINID (how the stream is kept bounded) leaves max-deleted-entry-id at 0-0
        ({"length": 2, "entries-added": 5, "max-deleted-entry-id": "0-0"}, False),
        ({"length": 4, "entries-added": 5, "max-deleted-entry-id": "3-0"}, False),  # XDEL
        ({"length": 0, "entries-added": 0, "max-deleted-entry-id": "0-0"}, True),
        ({"length": 5}, False),  # Redis before 7.0 cannot say: assume it was trimmed
    ],
)
def test_nothing_removed(info: dict[str, Any], expected: bool) -> None:
    assert nothing_removed(info) is expected
